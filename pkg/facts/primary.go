package facts

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/observed"
)

// primary decides the cluster's primary from Patroni's leader record:
// the member named there (leader, "" when the record names none; recorded
// is false when there is no record), whose pod is leaderPod (nil when it
// has none). It returns the primary, or "" and why there is none.
//
// The role label does not decide. Patroni labels its pod after taking the
// lock, and a leader that was killed keeps spilo-role=master until its
// Patroni runs again, so for a while two pods may carry the label while
// another member already holds the lock. The lock is the truth:
//  1. no record yet (Patroni has not bootstrapped): no primary;
//  2. a record that names no member (the leader released the lock, in a
//     switchover or a shutdown): no primary;
//  3. the named member has no pod, or its pod is terminating or not Ready
//     (a killed leader keeps the lock until its ttl runs out and another
//     member takes it): no primary;
//  4. the named pod is not labelled master yet: Patroni takes the lock,
//     then promotes its PostgreSQL, then labels the pod; until the label
//     is there the new leader may still be read-only (seen: a write 20 s
//     into a failover refused as "read-only transaction"): no primary;
//  5. otherwise the named pod, whatever labels the others carry.
//
// Readiness, not the record's renewTime and ttl, tells a dead holder: the
// pod's readiness probe asks its Patroni, and pgloop's clock need not agree
// with Patroni's. The record is in the store the cluster's Patroni keeps
// its state in (cluster.LeaderRecordName): the ConfigMap <cluster>-leader,
// or the Endpoints <cluster>, never both.
func primary(store v1.PatroniStore, clusterName, leader string, recorded bool, leaderPod *corev1.Pod) (string, string) {
	record := cluster.LeaderRecordName(store, clusterName)
	if store == v1.PatroniStoreEndpoints {
		record = "Endpoints " + record
	}
	switch {
	case !recorded:
		return "", "Patroni has not written its leader record " + record + " yet"
	case leader == "":
		return "", "no member holds Patroni's leader lock (" + record + ")"
	case leaderPod == nil:
		return "", "the leader " + leader + " named by " + record + " has no pod"
	case leaderPod.DeletionTimestamp != nil:
		return "", "the leader pod " + leader + " is terminating"
	case !podReady(leaderPod):
		return "", "the leader pod " + leader + " is not Ready"
	case leaderPod.Labels[cluster.LabelRole] != cluster.RoleMaster:
		return "", "the leader pod " + leader + " is not promoted yet (not labelled " + cluster.LabelRole + "=" + cluster.RoleMaster + ")"
	}
	return leader, ""
}

// leaderRecord returns the member that the cluster's leader record in
// store (objs.Leader or objs.LeaderEndpoints, nil when there is none)
// names ("" when none), and whether it is a record. An object of that name
// that Patroni did not label for the cluster is not its record. On
// Endpoints, the Endpoints <cluster> may be there before any member took
// the lock in it (the zalando operator creates it, labelled for the
// cluster): without the leader annotation it is a record that names no
// member (case 2 of primary), as Patroni's is once the lock is released.
func leaderRecord(objs observed.Cluster, store v1.PatroniStore) (string, bool) {
	var record metav1.Object
	switch {
	case store == v1.PatroniStoreEndpoints && objs.LeaderEndpoints != nil:
		record = objs.LeaderEndpoints
	case store != v1.PatroniStoreEndpoints && objs.Leader != nil:
		record = objs.Leader
	default:
		return "", false
	}
	if record.GetLabels()[cluster.LabelClusterName] != objs.Postgresql.Name {
		return "", false
	}
	return record.GetAnnotations()[cluster.AnnotationLeader], true
}

// storeChanged says why the cluster cannot be served when its
// v1.AnnotationPatroniStore names another store than the one its
// StatefulSet (sts, nil when there is none) runs Patroni on, and "" when
// it names the same or the StatefulSet is not the cluster's yet (an
// adoption records the store of the one it takes over). Rolling the pods
// onto the other store would leave the members on two stores, each with
// its own leader lock: the members restarted first would find no leader
// and elect one of their own, a second primary. So the cluster is Invalid
// until the annotation names its store again.
func storeChanged(pg *v1.Postgresql, sts *appsv1.StatefulSet) string {
	if sts == nil {
		return ""
	}
	if ref := metav1.GetControllerOf(sts); ref == nil || ref.UID != pg.UID {
		return ""
	}
	runs, known := cluster.TemplatePatroniStore(sts)
	if !known || runs == pg.PatroniStore() {
		return ""
	}
	return "metadata.annotations[" + v1.AnnotationPatroniStore + "]: the pods run Patroni on " + string(runs) +
		", the annotation asks for " + string(pg.PatroniStore()) + " (unset means " + string(v1.PatroniStoreConfigMaps) +
		"): a running cluster cannot change Patroni's store, its members would elect a leader on each; set the annotation to " +
		string(runs) + " again, then edit the spec, or move the data to a new cluster (docs/migrating.md)"
}
