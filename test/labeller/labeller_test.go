package labeller_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"

	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/test/labeller"
	"github.com/pgloop/pgloop/test/testbed"
)

// deadline bounds each test on the plane: generous, for two busy cores.
const deadline = 2 * time.Minute

var (
	planeOnce sync.Once
	plane     *testbed.Plane
	planeErr  error
)

// sharedPlane starts the plane on first use, so the pure tests run without
// one.
func sharedPlane(t *testing.T) *testbed.Plane {
	t.Helper()
	planeOnce.Do(func() {
		plane, planeErr = testbed.Start(context.Background(), testbed.Options{Log: os.Stderr})
	})
	if planeErr != nil {
		t.Fatalf("starting the control plane: %v", planeErr)
	}
	return plane
}

func TestMain(m *testing.M) {
	code := m.Run()
	if plane != nil {
		if err := plane.Healthy(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: a process of the plane died during the tests: %v\n", err)
			code = 1
		}
		if err := plane.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: stopping the plane: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func pod(name, role string, ready bool, deleting bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if role != "" {
		p.Labels[cluster.LabelRole] = role
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	if deleting {
		p.DeletionTimestamp = ptr.To(metav1.Now())
	}
	return p
}

func TestRoles(t *testing.T) {
	const m, r = cluster.RoleMaster, cluster.RoleReplica
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		want map[string]string
	}{
		{"no pods", nil, map[string]string{}},
		{"none Ready: no master", []*corev1.Pod{pod("db-0", "", false, false), pod("db-1", "", false, false)},
			map[string]string{"db-0": r, "db-1": r}},
		{"lowest Ready ordinal, numerically", []*corev1.Pod{pod("db-10", "", true, false), pod("db-2", "", true, false), pod("db-1", "", false, false)},
			map[string]string{"db-10": r, "db-2": m, "db-1": r}},
		{"Ready master kept over a lower ordinal", []*corev1.Pod{pod("db-0", "", true, false), pod("db-1", m, true, false), pod("db-2", r, true, false)},
			map[string]string{"db-0": r, "db-1": m, "db-2": r}},
		{"not Ready master moves", []*corev1.Pod{pod("db-0", m, false, false), pod("db-1", r, true, false), pod("db-2", r, true, false)},
			map[string]string{"db-0": r, "db-1": m, "db-2": r}},
		{"terminating master moves", []*corev1.Pod{pod("db-0", m, true, true), pod("db-1", r, false, false), pod("db-2", r, true, false)},
			map[string]string{"db-0": r, "db-1": r, "db-2": m}},
		{"two masters by hand: lowest kept", []*corev1.Pod{pod("db-2", m, true, false), pod("db-1", m, true, false)},
			map[string]string{"db-1": m, "db-2": r}},
		{"name without ordinal sorts last", []*corev1.Pod{pod("db-x", "", true, false), pod("db-3", "", true, false)},
			map[string]string{"db-x": r, "db-3": m}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := labeller.Roles(tc.pods); !maps.Equal(got, tc.want) {
				t.Errorf("Roles = %v, want %v", got, tc.want)
			}
		})
	}
}

// spiloStatefulSet is testbed's StatefulSet with the labels of a pgloop
// cluster's pods.
func spiloStatefulSet(ns, name string, replicas int32) *appsv1.StatefulSet {
	sts := testbed.StatefulSet(ns, name, replicas)
	sts.Spec.Selector.MatchLabels = cluster.Selector(name)
	sts.Spec.Template.Labels = cluster.Selector(name)
	return sts
}

// The labeller gives each cluster exactly one master, the lowest-ordinal
// Ready pod; keeps it while replicas come and go; and moves it when the
// master pod is deleted or stops being Ready. Two masters never coexist.
func TestLabelsStatefulSet(t *testing.T) {
	p := sharedPlane(t)
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	ns, cs := p.Namespace(t), p.Client

	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := logrus.New()
	log.SetOutput(t.Output())
	go func() { done <- labeller.Run(runCtx, cs, ns, log) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("labeller.Run: %v", err)
		}
	})

	// The observer records each master it sees, in order, and any moment
	// with two live masters.
	obsCtx, obsStop := context.WithCancel(ctx)
	var (
		mu        sync.Mutex
		masters   []string // pod names with the UID's first 8 characters
		twoAtOnce string
	)
	obsDone := make(chan struct{})
	go func() {
		defer close(obsDone)
		_, _ = waitPods(obsCtx, cs, ns, "db", func(pods []*corev1.Pod) bool {
			live := livingMasters(pods)
			mu.Lock()
			defer mu.Unlock()
			if len(live) > 1 && twoAtOnce == "" {
				twoAtOnce = describe(pods)
			}
			if len(live) == 1 {
				id := live[0].Name + "/" + string(live[0].UID)[:8]
				if len(masters) == 0 || masters[len(masters)-1] != id {
					masters = append(masters, id)
				}
			}
			return false
		})
	}()

	for _, sts := range []*appsv1.StatefulSet{spiloStatefulSet(ns, "db", 3), spiloStatefulSet(ns, "other", 1)} {
		if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// 1. Three Ready pods: db-0 is master, the others replicas.
	pods := mustWaitPods(ctx, t, cs, ns, "db", settled(3))
	first := masterOf(pods)
	if first.Name != "db-0" {
		t.Fatalf("master is %s, want db-0: %s", first.Name, describe(pods))
	}

	// 2. Replicas come and go: the master stays.
	scale(ctx, t, cs, ns, "db", 4)
	mustWaitPods(ctx, t, cs, ns, "db", settled(4))
	if err := cs.CoreV1().Pods(ns).Delete(ctx, "db-2", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	scale(ctx, t, cs, ns, "db", 3)
	pods = mustWaitPods(ctx, t, cs, ns, "db", settled(3))
	if m := masterOf(pods); m.UID != first.UID {
		t.Fatalf("master moved to %s while only replicas changed: %s", m.Name, describe(pods))
	}

	// 3. The master pod is deleted: another Ready pod takes the role, and
	// keeps it once the StatefulSet has replaced the deleted pod.
	if err := cs.CoreV1().Pods(ns).Delete(ctx, first.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	pods = mustWaitPods(ctx, t, cs, ns, "db", func(pods []*corev1.Pod) bool {
		m := masterOf(pods)
		return m != nil && m.UID != first.UID
	})
	second := masterOf(pods)
	pods = mustWaitPods(ctx, t, cs, ns, "db", func(pods []*corev1.Pod) bool {
		return settled(3)(pods) && !slices.ContainsFunc(pods, func(p *corev1.Pod) bool { return p.UID == first.UID })
	})
	if m := masterOf(pods); m.UID != second.UID {
		t.Fatalf("master moved again to %s after %s took over: %s", m.Name, second.Name, describe(pods))
	}

	// 4. The master stops being Ready: the role moves. kwok leaves the
	// status of a pod annotated so alone, and the test writes it.
	annotate := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, testbed.StatusAnnotation, testbed.StatusCustom)
	if _, err := cs.CoreV1().Pods(ns).Patch(ctx, second.Name, types.MergePatchType, []byte(annotate), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	notReady, err := cs.CoreV1().Pods(ns).Get(ctx, second.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range notReady.Status.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			notReady.Status.Conditions[i].Status = corev1.ConditionFalse
			notReady.Status.Conditions[i].LastTransitionTime = metav1.Now()
		}
	}
	if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, notReady, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods = mustWaitPods(ctx, t, cs, ns, "db", func(pods []*corev1.Pod) bool {
		m := masterOf(pods)
		if m == nil || m.UID == second.UID {
			return false
		}
		for _, p := range pods {
			if p.UID == second.UID {
				return p.Labels[cluster.LabelRole] == cluster.RoleReplica
			}
		}
		return false
	})
	third := masterOf(pods)

	// The other cluster had its own master all along.
	other := mustWaitPods(ctx, t, cs, ns, "other", settled(1))
	if m := masterOf(other); m == nil || m.Name != "other-0" {
		t.Errorf("cluster other: %s, want other-0 master", describe(other))
	}

	// Each cluster's leader record names its master, as Patroni's would:
	// written before the label (Patroni takes the lock, then promotes).
	for name, master := range map[string]string{"db": third.Name, "other": "other-0"} {
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, cluster.LeaderConfigMapName(name), metav1.GetOptions{})
		if err != nil {
			t.Errorf("leader record of %s: %v", name, err)
			continue
		}
		if got := cm.Annotations[cluster.AnnotationLeader]; got != master || !maps.Equal(cm.Labels, cluster.Selector(name)) {
			t.Errorf("leader record of %s names %q, labels %v; want %s, %v", name, got, cm.Labels, master, cluster.Selector(name))
		}
	}

	obsStop()
	<-obsDone
	mu.Lock()
	defer mu.Unlock()
	if twoAtOnce != "" {
		t.Errorf("two live masters at once: %s", twoAtOnce)
	}
	id := func(p *corev1.Pod) string { return p.Name + "/" + string(p.UID)[:8] }
	if want := []string{id(first), id(second), id(third)}; !slices.Equal(masters, want) {
		t.Errorf("masters over time: %v, want %v", masters, want)
	}
	t.Logf("masters over time: %v", masters)
}

func scale(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string, replicas int) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := cs.AppsV1().StatefulSets(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// settled holds when there are n pods, all Ready and alive, one master and
// n-1 replicas.
func settled(n int) func([]*corev1.Pod) bool {
	return func(pods []*corev1.Pod) bool {
		if len(pods) != n {
			return false
		}
		masters := 0
		for _, p := range pods {
			if ready, _ := testbed.PodReady(p); !ready || p.DeletionTimestamp != nil {
				return false
			}
			switch p.Labels[cluster.LabelRole] {
			case cluster.RoleMaster:
				masters++
			case cluster.RoleReplica:
			default:
				return false
			}
		}
		return masters == 1
	}
}

func livingMasters(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Labels[cluster.LabelRole] == cluster.RoleMaster {
			out = append(out, p)
		}
	}
	return out
}

// masterOf returns the one living master, or nil.
func masterOf(pods []*corev1.Pod) *corev1.Pod {
	if m := livingMasters(pods); len(m) == 1 {
		return m[0]
	}
	return nil
}

func describe(pods []*corev1.Pod) string {
	var parts []string
	for _, p := range pods {
		ready, _ := testbed.PodReady(p)
		s := fmt.Sprintf("%s(role=%q ready=%v", p.Name, p.Labels[cluster.LabelRole], ready)
		if p.DeletionTimestamp != nil {
			s += " terminating"
		}
		parts = append(parts, s+")")
	}
	slices.Sort(parts)
	return "[" + strings.Join(parts, " ") + "]"
}

func mustWaitPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string, cond func([]*corev1.Pod) bool) []*corev1.Pod {
	t.Helper()
	pods, err := waitPods(ctx, cs, ns, name, cond)
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

// waitPods watches the pods of cluster name until cond holds for all of them
// at once (deletions included), and returns them. testbed.WaitFor judges one
// object at a time; roles are a property of the set.
func waitPods(ctx context.Context, cs kubernetes.Interface, ns, name string, cond func([]*corev1.Pod) bool) ([]*corev1.Pod, error) {
	selector := labels.SelectorFromSet(cluster.Selector(name)).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = selector
			return cs.CoreV1().Pods(ns).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			return cs.CoreV1().Pods(ns).Watch(ctx, opts)
		},
	}
	var store cache.Store
	var last []*corev1.Pod
	check := func() bool {
		last = last[:0]
		for _, obj := range store.List() {
			last = append(last, obj.(*corev1.Pod))
		}
		return cond(last)
	}
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Pod{},
		func(s cache.Store) (bool, error) { store = s; return check(), nil },
		func(watch.Event) (bool, error) { return check(), nil })
	if err != nil {
		return nil, fmt.Errorf("while waiting for the pods of %s/%s: %w; last seen: %s", ns, name, err, describe(last))
	}
	return last, nil
}
