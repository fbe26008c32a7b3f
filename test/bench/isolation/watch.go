package isolation

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	pgclient "github.com/pgloop/pgloop/pkg/generated/clientset/versioned"
	"github.com/pgloop/pgloop/test/testbed"
)

// seen is what the bench's watches saw of one cluster, with the local time
// each thing was first seen.
type seen struct {
	state, message string
	gone           bool
	// current is whether the status is of the spec's generation.
	current bool
	// conditions are the status's conditions by type.
	conditions map[string]condition
	// running is when the watch first saw status.state Running for the
	// current generation.
	running time.Time
	// want is the number of instances the cluster should have Ready.
	want int
	// ready is, by pod name, when the pod was seen Ready (zero while it
	// is not).
	ready map[string]time.Time
	// statefulSet and pod are when the watches first saw the cluster's
	// StatefulSet and one of its pods.
	statefulSet, pod time.Time
	// allReady is when the watch first saw want pods Ready at once: the
	// last pod's Ready. labelled is when, besides, one of them carried
	// the master role label (the labeller's patch seen).
	allReady, labelled time.Time
}

// condition is what the bench reads of a status condition.
type condition struct {
	status  metav1.ConditionStatus
	message string
}

// synced reports whether a cluster runs its current spec with its roles
// and databases synced and its configuration applied: what a frozen
// cluster must reach before its PostgreSQL is frozen.
func synced(s *seen) bool {
	return s != nil && !s.gone && s.state == fsm.Running && s.current &&
		s.conditions[v1.ConditionRolesSynced].status == metav1.ConditionTrue &&
		s.conditions[v1.ConditionConfigApplied].status == metav1.ConditionTrue
}

// hungWords is how pkg/pgsql says that PostgreSQL did not answer a
// connection or a statement within its deadline.
const hungWords = "did not answer within"

// hung reports whether a cluster's last sync of roles timed out: RolesSynced
// False, saying the primary did not answer within a deadline.
func hung(s *seen) bool {
	if s == nil || s.gone {
		return false
	}
	c := s.conditions[v1.ConditionRolesSynced]
	return c.status == metav1.ConditionFalse && strings.Contains(c.message, hungWords)
}

// tracker records what three informers see: every Postgresql of the plane,
// and the spilo pods and StatefulSets of the healthy namespace. Waiting on it is waiting on
// watch events: every change wakes the waiters.
type tracker struct {
	mu       sync.Mutex
	clusters map[string]*seen // by namespace/name
	changed  chan struct{}    // closed and replaced on every change
}

func newTracker() *tracker {
	return &tracker{clusters: map[string]*seen{}, changed: make(chan struct{})}
}

func (t *tracker) get(key string) *seen {
	s := t.clusters[key]
	if s == nil {
		s = &seen{ready: map[string]time.Time{}}
		t.clusters[key] = s
	}
	return s
}

// expect records how many Ready pods a cluster needs; call it before
// creating the cluster.
func (t *tracker) expect(key string, instances int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.get(key).want = instances
}

func (t *tracker) notify() {
	close(t.changed)
	t.changed = make(chan struct{})
}

func (t *tracker) onCluster(obj any, deleted bool) {
	now := time.Now()
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pg, ok := obj.(*v1.Postgresql)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(pg.Namespace + "/" + pg.Name)
	s.state, s.message, s.gone = pg.Status.State, pg.Status.Message, deleted
	s.current = pg.Status.ObservedGeneration >= pg.Generation
	s.conditions = make(map[string]condition, len(pg.Status.Conditions))
	for _, c := range pg.Status.Conditions {
		s.conditions[c.Type] = condition{status: c.Status, message: c.Message}
	}
	if s.running.IsZero() && pg.Status.State == fsm.Running && pg.Status.ObservedGeneration >= pg.Generation {
		s.running = now
	}
	t.notify()
}

func (t *tracker) onPod(obj any, deleted bool) {
	now := time.Now()
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Labels[cluster.LabelClusterName] == "" {
		return
	}
	ready, _ := testbed.PodReady(pod)
	ready = ready && !deleted && pod.DeletionTimestamp == nil
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(pod.Namespace + "/" + pod.Labels[cluster.LabelClusterName])
	if s.pod.IsZero() {
		s.pod = now
	}
	switch {
	case !ready:
		delete(s.ready, pod.Name)
	case s.ready[pod.Name].IsZero():
		s.ready[pod.Name] = now
	}
	if s.want > 0 && len(s.ready) >= s.want && s.allReady.IsZero() {
		s.allReady = now
	}
	if !s.allReady.IsZero() && s.labelled.IsZero() && ready && pod.Labels[cluster.LabelRole] == cluster.RoleMaster {
		s.labelled = now
	}
	t.notify()
}

func (t *tracker) onStatefulSet(obj any, deleted bool) {
	now := time.Now()
	sts, ok := obj.(*appsv1.StatefulSet)
	if !ok || deleted || sts.Labels[cluster.LabelClusterName] == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(sts.Namespace + "/" + sts.Labels[cluster.LabelClusterName])
	if s.statefulSet.IsZero() {
		s.statefulSet = now
		t.notify()
	}
}

// wait blocks until cond holds for the tracker's records (read under its
// lock), or ctx ends.
func (t *tracker) wait(ctx context.Context, cond func(map[string]*seen) bool) error {
	for {
		t.mu.Lock()
		ok := cond(t.clusters)
		ch := t.changed
		t.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// snapshot returns a copy of what was seen of one cluster.
func (t *tracker) snapshot(key string) seen {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.clusters[key]
	if s == nil {
		return seen{}
	}
	return *s
}

// start runs the informers until ctx ends and returns once all have
// listed, or syncCtx ends first.
func (t *tracker) start(ctx, syncCtx context.Context, kube kubernetes.Interface, pg pgclient.Interface, podNamespace string) error {
	clusters := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return pg.PgloopV1().Postgresqls(metav1.NamespaceAll).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return pg.PgloopV1().Postgresqls(metav1.NamespaceAll).Watch(ctx, opts)
		},
	}, &v1.Postgresql{}, 0, cache.Indexers{})
	selector := labels.SelectorFromSet(labels.Set{cluster.LabelApplication: cluster.ApplicationSpilo}).String()
	pods := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = selector
			return kube.CoreV1().Pods(podNamespace).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			return kube.CoreV1().Pods(podNamespace).Watch(ctx, opts)
		},
	}, &corev1.Pod{}, 0, cache.Indexers{})
	statefulSets := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = selector
			return kube.AppsV1().StatefulSets(podNamespace).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			return kube.AppsV1().StatefulSets(podNamespace).Watch(ctx, opts)
		},
	}, &appsv1.StatefulSet{}, 0, cache.Indexers{})
	for _, h := range []struct {
		inf cache.SharedIndexInformer
		on  func(any, bool)
	}{{clusters, t.onCluster}, {pods, t.onPod}, {statefulSets, t.onStatefulSet}} {
		on := h.on
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { on(obj, false) },
			UpdateFunc: func(_, obj any) { on(obj, false) },
			DeleteFunc: func(obj any) { on(obj, true) },
		}); err != nil {
			return err
		}
		go h.inf.RunWithContext(ctx)
	}
	if !cache.WaitForCacheSync(syncCtx.Done(), clusters.HasSynced, pods.HasSynced, statefulSets.HasSynced) {
		return fmt.Errorf("the bench's informers did not sync: %w", syncCtx.Err())
	}
	return nil
}
