package operator

import (
	"context"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// apiWrites records the writes fake APIs receive: "verb resource" (with
// the subresource), and the status written at each status write.
type apiWrites struct {
	mu       sync.Mutex
	writes   []string
	statuses []v1.PostgresqlStatus
}

func (w *apiWrites) record(a k8stesting.Action) (bool, runtime.Object, error) {
	switch a.GetVerb() {
	case "get", "list", "watch":
		return false, nil, nil
	}
	what := a.GetVerb() + " " + a.GetResource().Resource
	if sub := a.GetSubresource(); sub != "" {
		what += "/" + sub
	}
	switch act := a.(type) {
	case interface{ GetObject() runtime.Object }:
		if o, err := meta.Accessor(act.GetObject()); err == nil {
			what += " " + o.GetName()
		}
	case interface{ GetName() string }:
		what += " " + act.GetName()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, what)
	if a.GetSubresource() == "status" {
		w.statuses = append(w.statuses, a.(k8stesting.UpdateAction).GetObject().(*v1.Postgresql).Status)
	}
	return false, nil, nil
}

// take returns the writes recorded since the last take.
func (w *apiWrites) take() ([]string, []v1.PostgresqlStatus) {
	w.mu.Lock()
	defer w.mu.Unlock()
	writes, statuses := w.writes, w.statuses
	w.writes, w.statuses = nil, nil
	return writes, statuses
}

// TestCreateWrites counts the writes of a create on fake APIs, the
// StatefulSet controller and Patroni played by the test: each object is
// created once, and the status written three times (accepted, objects
// created, Running). A restart of the operator then writes nothing.
func TestCreateWrites(t *testing.T) {
	cfg := testConfig(t)
	cfg.LeaderElect = false
	kube := fake.NewClientset()
	pg := newPGClient()
	w := &apiWrites{}
	kube.PrependReactor("*", "*", w.record)
	pg.PrependReactor("*", "*", w.record)
	in := start(t, cfg, kube, pg)
	eventually(t, 10*time.Second, "/readyz is 200", func() bool { code, _ := in.get("/readyz"); return code == 200 })

	ctx := context.Background()
	want := newPG("db", "alpha")
	want.Spec.NumberOfInstances = 1
	if _, err := pg.PgloopV1().Postgresqls("db").Create(ctx, want, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var set *appsv1.StatefulSet
	eventually(t, 10*time.Second, "the StatefulSet is created", func() bool {
		var err error
		set, err = kube.AppsV1().StatefulSets("db").Get(ctx, cluster.StatefulSetName("alpha"), metav1.GetOptions{})
		return err == nil
	})
	// Patroni's leader record first, then the pod it names: the pod's
	// event lets the cluster converge.
	leader := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: cluster.LeaderConfigMapName("alpha"),
		Labels: cluster.Selector("alpha"), Annotations: map[string]string{cluster.AnnotationLeader: cluster.PodName("alpha", 0)}}}
	if _, err := kube.CoreV1().ConfigMaps("db").Create(ctx, leader, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: cluster.PodName("alpha", 0), UID: "pod-uid",
			Labels: maps.Clone(set.Spec.Template.Labels), Annotations: set.Spec.Template.Annotations, CreationTimestamp: metav1.Now()},
		Spec: set.Spec.Template.Spec,
	}
	pod.Labels[cluster.LabelRole] = cluster.RoleMaster
	pod.Spec.NodeName = "node"
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.2",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if _, err := kube.CoreV1().Pods("db").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the status says Running", func() bool {
		got, err := pg.PgloopV1().Postgresqls("db").Get(ctx, "alpha", metav1.GetOptions{})
		return err == nil && got.Status.State == fsm.Running
	})
	if err := in.stop(); err != nil {
		t.Fatal(err)
	}
	writes, statuses := w.take()
	var states []string
	for _, st := range statuses {
		states = append(states, st.State)
	}
	t.Logf("writes of the create: %v; states written %v", writes, states)
	counts := map[string]int{}
	for _, what := range writes {
		counts[what]++
	}
	for what, n := range counts {
		verb, rest, _ := strings.Cut(what, " ")
		resource, _, _ := strings.Cut(rest, " ")
		switch {
		case resource == "events" || verb == "create" && (resource == "configmaps" || resource == "pods" || resource == "postgresqls"):
			// Recorded Events, and what the test itself wrote.
		case resource == "postgresqls/status":
			if n > 3 {
				t.Errorf("%d status writes, want at most 3 (accepted, objects created, Running): %v", n, states)
			}
		case n != 1:
			t.Errorf("%d x %s, want each object written once", n, what)
		}
	}
	if counts["create statefulsets alpha"] != 1 {
		t.Errorf("the StatefulSet was not created once: %v", writes)
	}

	// A restart of the idle operator writes nothing.
	in = start(t, cfg, kube, pg)
	eventually(t, 10*time.Second, "/readyz is 200", func() bool { code, _ := in.get("/readyz"); return code == 200 })
	eventually(t, 10*time.Second, "the restarted operator resumed the cluster", func() bool {
		_, body := in.get("/metrics")
		return strings.Contains(body, `pgloop_clusters{state="Running"} 1`) && strings.Contains(body, "\npgloop_loop_plans_running 0\n") &&
			strings.Contains(body, "\npgloop_loop_plans_waiting 0\n") && !strings.Contains(body, "\npgloop_loop_plans_total 0\n")
	})
	if err := in.stop(); err != nil {
		t.Fatal(err)
	}
	if writes, _ := w.take(); len(writes) > 0 {
		t.Errorf("a restart of the idle operator wrote %v, want nothing", writes)
	}
}
