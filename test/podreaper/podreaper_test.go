package podreaper

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	listersv1 "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

const ns = "db"

var podsResource = corev1.SchemeGroupVersion.WithResource("pods")

func testConfig() Config {
	return Config{
		Nodes:     labels.SelectorFromSet(labels.Set{"kwok.x-k8s.io/node": "fake"}),
		Disregard: labels.SelectorFromSet(labels.Set{"kwok.x-k8s.io/status": "custom"}),
	}
}

func node(name string, kwok bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if kwok {
		n.Annotations = map[string]string{"kwok.x-k8s.io/node": "fake"}
	}
	return n
}

// pod returns pod db/name of uid bound to nodeName, being deleted.
func pod(name, uid, nodeName string, change ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: types.UID(uid),
			DeletionTimestamp:          ptr.To(metav1.Now()),
			DeletionGracePeriodSeconds: ptr.To[int64](30),
		},
		Spec: corev1.PodSpec{NodeName: nodeName},
	}
	for _, c := range change {
		c(p)
	}
	return p
}

// clientset returns a fake clientset holding objs whose pod deletes honour
// a UID precondition as the apiserver does (the fake tracker ignores it):
// a Conflict when the pod of that name has another UID.
func clientset(objs ...runtime.Object) *fake.Clientset {
	cs := fake.NewClientset(objs...)
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteAction)
		pre := d.GetDeleteOptions().Preconditions
		if pre == nil || pre.UID == nil {
			return false, nil, nil
		}
		obj, err := cs.Tracker().Get(podsResource, d.GetNamespace(), d.GetName())
		if err != nil {
			return true, nil, err
		}
		if got := obj.(*corev1.Pod).UID; got != *pre.UID {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, d.GetName(),
				&precondition{want: *pre.UID, got: got})
		}
		return false, nil, nil
	})
	return cs
}

type precondition struct{ want, got types.UID }

func (p *precondition) Error() string {
	return "Precondition failed: UID in precondition: " + string(p.want) + ", UID in object meta: " + string(p.got)
}

// TestSync feeds one pod to sync, its cache and the API set by hand (the
// cache may lag behind the API), and checks the deletes it makes and the
// pods left.
func TestSync(t *testing.T) {
	kwokNode, processNode := node("node-1", true), node("process-1", false)
	tests := []struct {
		name   string
		cached *corev1.Pod   // what the informer shows
		api    []*corev1.Pod // what the apiserver holds
		// deleted is the UID the delete must carry as its precondition, or
		// empty when sync must not delete.
		deleted types.UID
		left    []types.UID // pods still in the API afterwards
	}{{
		name:    "being deleted on a kwok node: deleted at once, with its UID",
		cached:  pod("db-0", "old", "node-1"),
		api:     []*corev1.Pod{pod("db-0", "old", "node-1")},
		deleted: "old",
	}, {
		name:    "a new pod of that name is left alone",
		cached:  pod("db-0", "old", "node-1"),
		api:     []*corev1.Pod{pod("db-0", "new", "node-1", notDeleted)},
		deleted: "old",
		left:    []types.UID{"new"},
	}, {
		name:    "gone already",
		cached:  pod("db-0", "old", "node-1"),
		deleted: "old",
	}, {
		name:   "a process node's pod is its kubelet's",
		cached: pod("db-0", "old", "process-1"),
		api:    []*corev1.Pod{pod("db-0", "old", "process-1")},
		left:   []types.UID{"old"},
	}, {
		name:   "a node not in the cache: left for its event",
		cached: pod("db-0", "old", "node-9"),
		api:    []*corev1.Pod{pod("db-0", "old", "node-9")},
		left:   []types.UID{"old"},
	}, {
		name:   "a pod whose status is a test's",
		cached: pod("db-0", "old", "node-1", custom),
		api:    []*corev1.Pod{pod("db-0", "old", "node-1", custom)},
		left:   []types.UID{"old"},
	}, {
		name:   "not being deleted",
		cached: pod("db-0", "old", "node-1", notDeleted),
		api:    []*corev1.Pod{pod("db-0", "old", "node-1", notDeleted)},
		left:   []types.UID{"old"},
	}, {
		name:   "finalizers pending, grace zero already: the apiserver's",
		cached: pod("db-0", "old", "node-1", finalizer, graceZero),
		api:    []*corev1.Pod{pod("db-0", "old", "node-1", finalizer, graceZero)},
		left:   []types.UID{"old"},
	}, {
		name:    "finalizers pending, grace not zero: deleted with grace zero",
		cached:  pod("db-0", "old", "node-1", finalizer),
		api:     []*corev1.Pod{pod("db-0", "old", "node-1", finalizer)},
		deleted: "old",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objs []runtime.Object
			for _, p := range tt.api {
				objs = append(objs, p)
			}
			cs := clientset(objs...)
			podCache := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			nodeCache := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			for _, obj := range []any{tt.cached, kwokNode, processNode} {
				cacheAdd(t, podCache, nodeCache, obj)
			}
			r := &reaper{kube: cs, pods: listersv1.NewPodLister(podCache), nodes: listersv1.NewNodeLister(nodeCache), cfg: testConfig().withDefaults()}
			if err := r.sync(context.Background(), types.NamespacedName{Namespace: ns, Name: tt.cached.Name}); err != nil {
				t.Fatalf("sync: %v", err)
			}

			var deletes []metav1.DeleteOptions
			for _, a := range cs.Actions() {
				if d, ok := a.(k8stesting.DeleteAction); ok {
					deletes = append(deletes, d.GetDeleteOptions())
				}
			}
			switch {
			case tt.deleted == "" && len(deletes) > 0:
				t.Errorf("deleted %+v, want no delete", deletes)
			case tt.deleted != "" && len(deletes) != 1:
				t.Errorf("%d deletes, want 1", len(deletes))
			case tt.deleted != "":
				d := deletes[0]
				if d.Preconditions == nil || d.Preconditions.UID == nil || *d.Preconditions.UID != tt.deleted {
					t.Errorf("delete preconditions %+v, want UID %s", d.Preconditions, tt.deleted)
				}
				if d.GracePeriodSeconds == nil || *d.GracePeriodSeconds != 0 {
					t.Errorf("delete grace period %v, want 0", d.GracePeriodSeconds)
				}
			}
			list, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var left []types.UID
			for _, p := range list.Items {
				left = append(left, p.UID)
			}
			if len(left) != len(tt.left) || (len(left) == 1 && left[0] != tt.left[0]) {
				t.Errorf("pods left %v, want %v", left, tt.left)
			}
		})
	}
}

func cacheAdd(t *testing.T, pods, nodes cache.Indexer, obj any) {
	t.Helper()
	store := pods
	if _, ok := obj.(*corev1.Node); ok {
		store = nodes
	}
	if err := store.Add(obj); err != nil {
		t.Fatal(err)
	}
}

func notDeleted(p *corev1.Pod) { p.DeletionTimestamp, p.DeletionGracePeriodSeconds = nil, nil }
func custom(p *corev1.Pod)     { p.Annotations = map[string]string{"kwok.x-k8s.io/status": "custom"} }
func finalizer(p *corev1.Pod)  { p.Finalizers = []string{"example.com/hold"} }
func graceZero(p *corev1.Pod)  { p.DeletionGracePeriodSeconds = ptr.To[int64](0) }

// TestRun runs the reaper on a fake clientset: the pod being deleted on
// the kwok node goes, the one on the process node stays, and so does the
// kwok node's pod that is not being deleted.
func TestRun(t *testing.T) {
	cs := clientset(
		node("node-1", true), node("process-1", false),
		pod("db-0", "a", "node-1"),
		pod("db-1", "b", "process-1"),
		pod("db-2", "c", "node-1", notDeleted),
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cs, testConfig()) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("db-0 not deleted within 10s (last: %v)", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, a := range cs.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && d.GetName() != "db-0" {
			t.Errorf("deleted %s/%s, want only db-0 deleted", d.GetNamespace(), d.GetName())
		}
	}
	for _, name := range []string{"db-1", "db-2"} {
		if _, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: %v, want it left", name, err)
		}
	}
}
