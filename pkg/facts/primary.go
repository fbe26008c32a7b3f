package facts

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/pgloop/pgloop/pkg/cluster"
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
// with Patroni's. Only the ConfigMap is read: pgloop always runs Patroni
// with KUBERNETES_USE_CONFIGMAPS=true (cluster.spiloEnv), so there is no
// Endpoints-mode lock to fall back to.
func primary(clusterName, leader string, recorded bool, leaderPod *corev1.Pod) (string, string) {
	record := cluster.LeaderConfigMapName(clusterName)
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

// leaderRecord returns the member that cm, the ConfigMap named as Patroni's
// leader record of cluster clusterName (nil when there is none), names (""
// when none), and whether it is a record. A ConfigMap of that name that
// Patroni did not label for the cluster is not its record.
func leaderRecord(cm *corev1.ConfigMap, clusterName string) (string, bool) {
	if cm == nil || cm.Labels[cluster.LabelClusterName] != clusterName {
		return "", false
	}
	return cm.Annotations[cluster.AnnotationLeader], true
}
