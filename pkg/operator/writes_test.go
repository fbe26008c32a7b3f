package operator

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/internal/fixtures"
)

// apiWrites records the writes fake APIs receive: "verb resource" (with
// the subresource), and the status written at each status write. A
// stopped operator has written its Events (pkg/events flushes them before
// run returns), so none of them reaches the API after the test's next take.
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

// TestCreateWrites counts the writes of creates on fake APIs, the
// StatefulSet controller and Patroni played by the test. A create writes
// its own objects once each (2 Secrets, 3 Services, the PodDisruptionBudget
// and the StatefulSet), the finalizer once (a patch), and the status at
// most three times (accepted, objects created, Running); the first cluster
// of a namespace creates the ServiceAccount, Role and RoleBinding its
// clusters share too, and the second writes none of them. A restart of the
// operator then writes nothing.
func TestCreateWrites(t *testing.T) {
	cfg := testConfig(t)
	cfg.LeaderElect = false
	kube := fake.NewClientset()
	pg := fixtures.NewPGClient()
	w := &apiWrites{}
	kube.PrependReactor("*", "*", w.record)
	pg.PrependReactor("*", "*", w.record)
	in := start(t, cfg, kube, pg)
	eventually(t, 10*time.Second, "/readyz is 200", func() bool { code, _ := in.get("/readyz"); return code == 200 })

	ctx := context.Background()
	create := func(name string) *v1.Postgresql {
		t.Helper()
		want := newPG("db", name)
		want.Spec.NumberOfInstances = 1
		if _, err := pg.PgloopV1().Postgresqls("db").Create(ctx, want, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var set *appsv1.StatefulSet
		eventually(t, 10*time.Second, "the StatefulSet is created", func() bool {
			var err error
			set, err = kube.AppsV1().StatefulSets("db").Get(ctx, cluster.StatefulSetName(name), metav1.GetOptions{})
			return err == nil
		})
		// Patroni's leader record first, then the pod it names: the pod's
		// event lets the cluster converge.
		leader := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: cluster.LeaderConfigMapName(name),
			Labels: cluster.Selector(name), Annotations: map[string]string{cluster.AnnotationLeader: cluster.PodName(name, 0)}}}
		if _, err := kube.CoreV1().ConfigMaps("db").Create(ctx, leader, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: cluster.PodName(name, 0), UID: types.UID(name + "-pod-uid"),
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
			got, err := pg.PgloopV1().Postgresqls("db").Get(ctx, name, metav1.GetOptions{})
			return err == nil && got.Status.State == fsm.Running
		})
		return want
	}
	// check compares the writes of pg's create with what it should write:
	// every write, each exactly once, but the status's.
	check := func(pg *v1.Postgresql, shared bool) {
		t.Helper()
		// The informers may still deliver the last status write: wait
		// for the plans to end.
		eventually(t, 10*time.Second, "no plan runs", func() bool {
			_, body := in.get("/metrics")
			return strings.Contains(body, "\npgloop_loop_plans_running 0\n") && strings.Contains(body, "\npgloop_loop_plans_waiting 0\n")
		})
		writes, statuses := w.take()
		var states []string
		for _, st := range statuses {
			states = append(states, st.State)
		}
		t.Logf("writes of the create of %s: %v; states written %v", pg.Name, writes, states)
		n := cluster.Names(pg)
		want := map[string]int{"patch postgresqls " + pg.Name: 1, "create statefulsets " + n.StatefulSet: 1,
			"create poddisruptionbudgets " + n.PodDisruptionBudget: 1}
		for _, s := range n.Secrets {
			want["create secrets "+s]++
		}
		for _, s := range n.Services {
			want["create services "+s]++
		}
		if shared {
			want["create serviceaccounts "+n.ServiceAccount]++
			want["create roles "+n.Role]++
			want["create rolebindings "+n.RoleBinding]++
		}
		got := map[string]int{}
		objects := 0
		for _, what := range writes {
			verb, rest, _ := strings.Cut(what, " ")
			resource, _, _ := strings.Cut(rest, " ")
			switch {
			case resource == "events" || verb == "create" && (resource == "configmaps" || resource == "pods" || resource == "postgresqls"):
				// Recorded Events, and what the test itself wrote.
			case resource == "postgresqls/status":
				got["status"]++
			default:
				got[what]++
				if verb == "create" {
					objects++
				}
			}
		}
		if n := got["status"]; n < 1 || n > 3 {
			t.Errorf("%s: %d status writes, want 1 to 3 (accepted, objects created, Running): %v", pg.Name, n, states)
		}
		delete(got, "status")
		if !maps.Equal(got, want) {
			t.Errorf("%s: writes\n got %v\nwant %v", pg.Name, got, want)
		}
		if wantObjects := 7 + map[bool]int{true: 3}[shared]; objects != wantObjects {
			t.Errorf("%s: %d objects created, want %d", pg.Name, objects, wantObjects)
		}
	}
	check(create("alpha"), true)
	// The second cluster of the namespace finds the shared objects.
	check(create("beta"), false)
	if err := in.stop(); err != nil {
		t.Fatal(err)
	}
	w.take()
	// Each cluster's transitions were recorded as Events, all written
	// once the operator stopped.
	evs, err := kube.CoreV1().Events("db").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string][]string{}
	for _, ev := range evs.Items {
		reasons[ev.InvolvedObject.Name] = append(reasons[ev.InvolvedObject.Name], ev.Reason)
	}
	for _, name := range []string{"alpha", "beta"} {
		if !slices.Contains(reasons[name], fsm.Creating) || !slices.Contains(reasons[name], fsm.Running) {
			t.Errorf("%s's Events have reasons %v, want the transitions to Creating and Running among them", name, reasons[name])
		}
	}

	// A restart of the idle operator writes nothing.
	in = start(t, cfg, kube, pg)
	eventually(t, 10*time.Second, "/readyz is 200", func() bool { code, _ := in.get("/readyz"); return code == 200 })
	eventually(t, 10*time.Second, "the restarted operator resumed the clusters", func() bool {
		_, body := in.get("/metrics")
		return strings.Contains(body, `pgloop_clusters{state="Running"} 2`) && strings.Contains(body, "\npgloop_loop_plans_running 0\n") &&
			strings.Contains(body, "\npgloop_loop_plans_waiting 0\n") && !strings.Contains(body, "\npgloop_loop_plans_total 0\n")
	})
	if err := in.stop(); err != nil {
		t.Fatal(err)
	}
	if writes, _ := w.take(); len(writes) > 0 {
		t.Errorf("a restart of the idle operator wrote %v, want nothing", writes)
	}
}
