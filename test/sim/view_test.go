package sim

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/informers"
)

// TestRelist checks the cache's rebuild after a watch ended with 410
// Gone, as client-go's informer does it: a pod deleted meanwhile surfaces
// as a delete, first; a pod listed unchanged still notifies its cluster
// (the owned handlers do not compare); a Postgresql whose status alone
// changed does not; the other kinds are left alone.
func TestRelist(t *testing.T) {
	pod := func(name, clusterName, rv string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv,
			Labels: map[string]string{cluster.LabelApplication: cluster.ApplicationSpilo, cluster.LabelClusterName: clusterName}}}
	}
	pg := newPostgresql("ns", "a")
	pg.ResourceVersion = "1"
	v := newView()
	before := map[objKey]runtime.Object{
		{"pods", "ns", "a-0"}:         pod("a-0", "a", "2"),
		{"pods", "ns", "b-0"}:         pod("b-0", "b", "3"),
		{"postgresqls", "ns", "a"}:    pg,
		{"postgresqls", "ns", "gone"}: newPostgresql("ns", "gone"),
	}
	for k, obj := range before {
		v.apply(k, obj)
	}
	pg2 := pg.DeepCopy()
	pg2.ResourceVersion, pg2.Status.State = "5", "Running"
	list := map[objKey]runtime.Object{
		{"pods", "ns", "a-0"}:      pod("a-0", "a", "2"),
		{"postgresqls", "ns", "a"}: pg2,
	}

	got := v.relist("pods", list)
	want := [][2]string{{"ns/b", informers.SignalPods}, {"ns/a", informers.SignalPods}}
	if !slices.Equal(got, want) {
		t.Errorf("relist of pods: signals %v, want %v", got, want)
	}
	if _, ok := lookup[*corev1.Pod](v, "pods", "ns", "b-0"); ok {
		t.Error("relist of pods: the pod deleted meanwhile is still cached")
	}
	if _, ok := v.Postgresql("ns/gone"); !ok {
		t.Error("relist of pods: a Postgresql left the cache")
	}

	got = v.relist("postgresqls", list)
	want = [][2]string{{"ns/gone", informers.SignalSpec}}
	if !slices.Equal(got, want) {
		t.Errorf("relist of postgresqls: signals %v, want %v", got, want)
	}
	if cur, ok := v.Postgresql("ns/a"); !ok || cur.Status.State != "Running" {
		t.Errorf("relist of postgresqls: ns/a cached as %v, want the listed one", cur)
	}
	if _, ok := v.Postgresql("ns/gone"); ok {
		t.Error("relist of postgresqls: the Postgresql deleted meanwhile is still cached")
	}
}
