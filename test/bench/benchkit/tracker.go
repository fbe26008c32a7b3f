package benchkit

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
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

// Seen is what a Tracker's watches saw of one cluster, with the local time
// each thing was first seen.
type Seen struct {
	State, Message string
	Gone           bool
	// Current is whether the status is of the spec's generation.
	Current bool
	// Conditions are the status's conditions by type.
	Conditions map[string]Condition
	// Running is when the watch first saw status.state Running for the
	// current generation.
	Running time.Time
	// Want is the number of instances the cluster should have Ready.
	Want int
	// Ready is, by pod name, when the pod was seen Ready (absent while it
	// is not); Images the image of each pod's first container.
	Ready  map[string]time.Time
	Images map[string]string
	// StatefulSet and Pod are when the watches first saw the cluster's
	// StatefulSet and one of its pods.
	StatefulSet, Pod time.Time
	// AllReady is when the watch first saw Want pods Ready at once: the
	// last pod's Ready. Labelled is when, besides, one of them carried the
	// master role label (the labeller's patch seen).
	AllReady, Labelled time.Time
}

// Condition is what a Tracker reads of a status condition.
type Condition struct {
	Status  metav1.ConditionStatus
	Message string
}

// Counts are how many clusters of a namespace reached each mark.
type Counts struct {
	// Running counts Seen.Running, AllReady Seen.AllReady and Labelled
	// Seen.Labelled: each cluster once, from when it first got there.
	Running, AllReady, Labelled int
}

// Tracker records what three informers see: every Postgresql of the plane,
// and the spilo pods and StatefulSets of one namespace or all. Waiting on
// it is waiting on watch events: every change wakes the waiters.
type Tracker struct {
	mu       sync.Mutex
	clusters map[string]*Seen  // by namespace/name
	counts   map[string]Counts // by namespace
	changed  chan struct{}     // closed and replaced on every change
}

// NewTracker returns a Tracker that watches nothing until Start.
func NewTracker() *Tracker {
	return &Tracker{clusters: map[string]*Seen{}, counts: map[string]Counts{}, changed: make(chan struct{})}
}

func (t *Tracker) get(key string) *Seen {
	s := t.clusters[key]
	if s == nil {
		s = &Seen{Ready: map[string]time.Time{}, Images: map[string]string{}}
		t.clusters[key] = s
	}
	return s
}

// Expect records how many Ready pods a cluster needs; call it before
// creating the cluster.
func (t *Tracker) Expect(key string, instances int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.get(key).Want = instances
}

func (t *Tracker) notify() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// count adds one to the mark f of namespace ns.
func (t *Tracker) count(ns string, f func(*Counts)) {
	c := t.counts[ns]
	f(&c)
	t.counts[ns] = c
}

func (t *Tracker) onCluster(obj any, deleted bool) {
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
	s.State, s.Message, s.Gone = pg.Status.State, pg.Status.Message, deleted
	s.Current = pg.Status.ObservedGeneration >= pg.Generation
	s.Conditions = make(map[string]Condition, len(pg.Status.Conditions))
	for _, c := range pg.Status.Conditions {
		s.Conditions[c.Type] = Condition{Status: c.Status, Message: c.Message}
	}
	if s.Running.IsZero() && pg.Status.State == fsm.Running && s.Current {
		s.Running = now
		t.count(pg.Namespace, func(c *Counts) { c.Running++ })
	}
	t.notify()
}

func (t *Tracker) onPod(obj any, deleted bool) {
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
	if s.Pod.IsZero() {
		s.Pod = now
	}
	switch {
	case deleted:
		delete(s.Images, pod.Name)
	case len(pod.Spec.Containers) > 0:
		s.Images[pod.Name] = pod.Spec.Containers[0].Image
	}
	switch {
	case !ready:
		delete(s.Ready, pod.Name)
	case s.Ready[pod.Name].IsZero():
		s.Ready[pod.Name] = now
	}
	if s.Want > 0 && len(s.Ready) >= s.Want && s.AllReady.IsZero() {
		s.AllReady = now
		t.count(pod.Namespace, func(c *Counts) { c.AllReady++ })
	}
	if !s.AllReady.IsZero() && s.Labelled.IsZero() && ready && pod.Labels[cluster.LabelRole] == cluster.RoleMaster {
		s.Labelled = now
		t.count(pod.Namespace, func(c *Counts) { c.Labelled++ })
	}
	t.notify()
}

func (t *Tracker) onStatefulSet(obj any, deleted bool) {
	now := time.Now()
	sts, ok := obj.(*appsv1.StatefulSet)
	if !ok || deleted || sts.Labels[cluster.LabelClusterName] == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(sts.Namespace + "/" + sts.Labels[cluster.LabelClusterName])
	if s.StatefulSet.IsZero() {
		s.StatefulSet = now
		t.notify()
	}
}

// Wait blocks until cond holds for the tracker's records (read under its
// lock, by namespace/name), or ctx ends.
func (t *Tracker) Wait(ctx context.Context, cond func(map[string]*Seen) bool) error {
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

// WaitCounts blocks until cond holds for the counts of namespaces (each
// namespace's, added up), or ctx ends. Unlike Wait, each check costs
// nothing per cluster.
func (t *Tracker) WaitCounts(ctx context.Context, namespaces []string, cond func(Counts) bool) error {
	return t.Wait(ctx, func(map[string]*Seen) bool { return cond(t.sum(namespaces)) })
}

// sum adds up the counts of namespaces; the lock is held.
func (t *Tracker) sum(namespaces []string) Counts {
	var total Counts
	for _, ns := range namespaces {
		c := t.counts[ns]
		total.Running += c.Running
		total.AllReady += c.AllReady
		total.Labelled += c.Labelled
	}
	return total
}

// Count returns the counts of namespaces, added up.
func (t *Tracker) Count(namespaces ...string) Counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sum(namespaces)
}

// Snapshot returns a copy of what was seen of one cluster (its maps
// shared: read them only).
func (t *Tracker) Snapshot(key string) Seen {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.clusters[key]
	if s == nil {
		return Seen{}
	}
	return *s
}

// Each calls f with every cluster of namespace ns seen so far, under the
// tracker's lock.
func (t *Tracker) Each(ns string, f func(name string, s *Seen)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, s := range t.clusters {
		if name, ok := strings.CutPrefix(key, ns+"/"); ok {
			f(name, s)
		}
	}
}

// dropManagedFields is the informers' transform: the bench never reads
// managed fields, which are most of a small object's size.
func dropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// Start runs the informers until ctx ends and returns once all have
// listed, or syncCtx ends first. podNamespace is the namespace of the
// pods and StatefulSets watched, metav1.NamespaceAll for all.
func (t *Tracker) Start(ctx, syncCtx context.Context, kube kubernetes.Interface, pg pgclient.Interface, podNamespace string) error {
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
		if err := h.inf.SetTransform(dropManagedFields); err != nil {
			return err
		}
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
