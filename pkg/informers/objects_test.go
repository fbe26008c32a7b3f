package informers

//lint:file-ignore SA1019 Patroni 3 keeps its state in v1 Endpoints, which EndpointSlices cannot replace: the tests make them as Patroni does.

import (
	"reflect"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// TestObjects checks that Objects reads a cluster's own objects from the
// caches, and only those.
func TestObjects(t *testing.T) {
	pg, other := newPG("c1", 2), newPG("c2", 1)
	sts := statefulSet(pg)
	elsewhere := resourceQuota("q", "3")
	elsewhere.Namespace = "elsewhere"
	backup := func(pg *v1.Postgresql) *batchv1.CronJob {
		pg = pg.DeepCopy()
		pg.Spec.EnableLogicalBackup = true
		return cluster.LogicalBackupCronJob(pg, cluster.Options{})
	}
	inf, _, _ := start(t, Options{}, discard{}, []*v1.Postgresql{pg, other},
		backup(pg), backup(other), sts, lock(pg, "c1-0"), pod(pg, 1), pod(pg, 0, master), pod(pg, 2, terminating),
		claim(pg, 0, corev1.ClaimBound), claim(pg, 1, corev1.ClaimPending),
		claimEvent(pg, 0, "ProvisioningFailed", "a bound claim's old Warning"),
		claimEvent(pg, 1, "ProvisioningFailed", "timeout"),
		event(sts, "e1", corev1.EventTypeWarning, "FailedCreate", "exceeded quota", time.Minute),
		statefulSet(other), lock(other, "c2-0"), pod(other, 0), claim(other, 0, corev1.ClaimPending),
		claimEvent(other, 0, "ProvisioningFailed", "not c1's"),
		event(statefulSet(other), "e2", corev1.EventTypeWarning, "FailedCreate", "not c1's", time.Minute),
		resourceQuota("q", "7"), elsewhere)

	objs, ok := inf.Objects("db/c1")
	if !ok {
		t.Fatal("db/c1 not read")
	}
	cached, _ := inf.Postgresql("db/c1")
	if objs.Postgresql != cached {
		t.Errorf("resource %p, want the cache's %p", objs.Postgresql, cached)
	}
	got := map[string][]string{
		"statefulSet":         names(objs.StatefulSet),
		"leader":              names(objs.Leader),
		"pods":                names(objs.Pods...),
		"claims":              sorted(names(objs.Claims...)),
		"statefulSetWarnings": names(objs.StatefulSetWarnings...),
		"claimWarnings":       names(objs.ClaimWarnings...),
		"quotas":              names(objs.Quotas...),
		"logicalBackup":       names(objs.LogicalBackup),
	}
	want := map[string][]string{
		"statefulSet":         {"db/c1"},
		"leader":              {"db/c1-leader"},
		"pods":                {"db/c1-0", "db/c1-1", "db/c1-2"},
		"claims":              {"db/pgdata-c1-0", "db/pgdata-c1-1"},
		"statefulSetWarnings": {"db/e1"},
		// Only a Pending claim's Warnings are read.
		"claimWarnings": {"db/pgdata-c1-1.ProvisioningFailed"},
		"quotas":        {"db/q"},
		"logicalBackup": {"db/logical-backup-c1"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("objects\n got %v\nwant %v", got, want)
	}

	if cj, ok := inf.CronJob("db", cluster.LogicalBackupJobName("c2")); !ok || cj.Name != "logical-backup-c2" {
		t.Errorf("CronJob of c2: %v %v", cj, ok)
	}
	if _, ok := inf.Objects("db/nope"); ok {
		t.Error("db/nope read")
	}
	// Objects of a cluster whose resource is not cached do not make one.
	inf2, _, _ := start(t, Options{}, discard{}, nil, pod(other, 0))
	if _, ok := inf2.Objects("db/c2"); ok {
		t.Error("db/c2 read without its resource")
	}
}

// names returns "namespace/name" of each object; a nil one has none.
func names[T metav1.Object](objs ...T) []string {
	var out []string
	for _, o := range objs {
		if reflect.ValueOf(o).IsNil() {
			continue
		}
		out = append(out, o.GetNamespace()+"/"+o.GetName())
	}
	return out
}

func sorted(s []string) []string { slices.Sort(s); return s }

// TestObjectsLeaderRecord: the leader record is read from the store the
// cluster's Patroni keeps its state in, never from the other, whatever
// the caches hold of both; and what the Endpoints cache keeps of it.
func TestObjectsLeaderRecord(t *testing.T) {
	onMaps, onEndpoints := newPG("c1", 1), newPG("c2", 1)
	onEndpoints.Annotations = map[string]string{v1.AnnotationPatroniStore: string(v1.PatroniStoreEndpoints)}
	// c1's master Service selects its pods: the endpoints controller
	// keeps an Endpoints c1, labelled as the Service.
	controllers := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c1",
		Labels: cluster.RoleSelector("c1", cluster.RoleMaster)}}
	inf, _, _ := start(t, Options{}, discard{}, []*v1.Postgresql{onMaps, onEndpoints},
		lock(onMaps, "c1-0"), controllers, lock(onEndpoints, "c2-9"), lockEndpoints(onEndpoints, "c2-0"))
	for _, tc := range []struct {
		key                  string
		configMap, endpoints []string
	}{
		{"db/c1", []string{"db/c1-leader"}, nil},
		{"db/c2", nil, []string{"db/c2"}},
	} {
		t.Run(tc.key, func(t *testing.T) {
			objs, ok := inf.Objects(tc.key)
			if !ok {
				t.Fatalf("%s not read", tc.key)
			}
			if got := names(objs.Leader); !slices.Equal(got, tc.configMap) {
				t.Errorf("leader configmap %v, want %v", got, tc.configMap)
			}
			if got := names(objs.LeaderEndpoints); !slices.Equal(got, tc.endpoints) {
				t.Errorf("leader endpoints %v, want %v", got, tc.endpoints)
			}
			if ep := objs.LeaderEndpoints; ep != nil {
				// The cache keeps the holder and the labels, not the
				// renewals nor the leader's address.
				if want := map[string]string{cluster.AnnotationLeader: "c2-0"}; !reflect.DeepEqual(ep.Annotations, want) ||
					ep.Subsets != nil || ep.Labels[cluster.LabelClusterName] != "c2" {
					t.Errorf("cached leader endpoints: annotations %v, subsets %v, labels %v", ep.Annotations, ep.Subsets, ep.Labels)
				}
			}
		})
	}
}
