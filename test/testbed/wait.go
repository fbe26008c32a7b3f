package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// WaitFor lists and watches what lw returns until cond holds for one object,
// and returns that object. It checks the objects already there first, so a
// condition that already holds returns at once, and it survives watch
// restarts. Deletions are not passed to cond. T is a pointer to an API type
// (*corev1.Pod, *unstructured.Unstructured). Bound it with ctx; when ctx ends
// first the error shows the last object seen, which usually says why.
func WaitFor[T runtime.Object](ctx context.Context, lw cache.ListerWatcher, cond func(T) (bool, error)) (T, error) {
	var zero, found, last T
	seen := false
	check := func(obj any) (bool, error) {
		o, ok := obj.(T)
		if !ok {
			return false, nil
		}
		last, seen = o, true
		done, err := cond(o)
		if done && err == nil {
			found = o
		}
		return done, err
	}
	precondition := func(store cache.Store) (bool, error) {
		for _, obj := range store.List() {
			if done, err := check(obj); done || err != nil {
				return done, err
			}
		}
		return false, nil
	}
	objType := reflect.New(reflect.TypeFor[T]().Elem()).Interface().(runtime.Object)
	_, err := watchtools.UntilWithSync(ctx, lw, objType, precondition, func(ev watch.Event) (bool, error) {
		if ev.Type == watch.Deleted {
			return false, nil
		}
		return check(ev.Object)
	})
	if err != nil {
		kind := reflect.TypeFor[T]().Elem().Name()
		if !seen {
			return zero, fmt.Errorf("while waiting for a %s: none seen: %w", kind, err)
		}
		return zero, fmt.Errorf("while waiting for %s %s: %w; last status: %s", kind, objectName(last), err, statusOf(last))
	}
	return found, nil
}

func objectName(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return "?"
	}
	if m.GetNamespace() == "" {
		return m.GetName()
	}
	return m.GetNamespace() + "/" + m.GetName()
}

// statusOf renders an object's status (or, for an Event, its reason and
// message) for an error message.
func statusOf(obj runtime.Object) string {
	const maxLen = 2000
	var u map[string]any
	if un, ok := obj.(runtime.Unstructured); ok {
		u = un.UnstructuredContent()
	} else {
		var err error
		if u, err = runtime.DefaultUnstructuredConverter.ToUnstructured(obj); err != nil {
			return err.Error()
		}
	}
	part := u["status"]
	if ev, ok := obj.(*corev1.Event); ok {
		part = map[string]string{"reason": ev.Reason, "message": ev.Message}
	}
	b, _ := json.Marshal(part)
	if len(b) > maxLen {
		b = append(b[:maxLen], "…"...)
	}
	return string(b)
}

// client is what a typed client offers for one resource.
type client[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// ListWatch narrows a typed client (e.g. cs.CoreV1().Pods(ns)) to the objects
// matching fieldSelector ("" for all), for WaitFor.
func ListWatch[L runtime.Object](c client[L], fieldSelector string) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = fieldSelector
			return c.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = fieldSelector
			return c.Watch(ctx, opts)
		},
	}
}

func byName(name string) string {
	if name == "" {
		return ""
	}
	return fields.OneTermEqualSelector("metadata.name", name).String()
}

// Pods lists the pods of namespace ns, only the one named name unless name is "".
func Pods(cs kubernetes.Interface, ns, name string) *cache.ListWatch {
	return ListWatch(cs.CoreV1().Pods(ns), byName(name))
}

// PersistentVolumeClaims lists the claims of namespace ns, only the one named
// name unless name is "".
func PersistentVolumeClaims(cs kubernetes.Interface, ns, name string) *cache.ListWatch {
	return ListWatch(cs.CoreV1().PersistentVolumeClaims(ns), byName(name))
}

// StatefulSets lists the StatefulSets of namespace ns, only the one named name
// unless name is "".
func StatefulSets(cs kubernetes.Interface, ns, name string) *cache.ListWatch {
	return ListWatch(cs.AppsV1().StatefulSets(ns), byName(name))
}

// ServiceAccounts lists the ServiceAccounts of namespace ns, only the one
// named name unless name is "".
func ServiceAccounts(cs kubernetes.Interface, ns, name string) *cache.ListWatch {
	return ListWatch(cs.CoreV1().ServiceAccounts(ns), byName(name))
}

// ResourceQuotas lists the quotas of namespace ns, only the one named name
// unless name is "".
func ResourceQuotas(cs kubernetes.Interface, ns, name string) *cache.ListWatch {
	return ListWatch(cs.CoreV1().ResourceQuotas(ns), byName(name))
}

// Nodes lists the nodes, only the one named name unless name is "".
func Nodes(cs kubernetes.Interface, name string) *cache.ListWatch {
	return ListWatch(cs.CoreV1().Nodes(), byName(name))
}

// EventsAbout lists the events of namespace ns whose involved object is of
// kind and named name.
func EventsAbout(cs kubernetes.Interface, ns, kind, name string) *cache.ListWatch {
	sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name}.AsSelector().String()
	return ListWatch(cs.CoreV1().Events(ns), sel)
}

// WaitForPod waits until cond holds for pod ns/name.
func WaitForPod(ctx context.Context, cs kubernetes.Interface, ns, name string, cond func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	return WaitFor(ctx, Pods(cs, ns, name), cond)
}

// WaitForStatefulSet waits until cond holds for StatefulSet ns/name.
func WaitForStatefulSet(ctx context.Context, cs kubernetes.Interface, ns, name string, cond func(*appsv1.StatefulSet) (bool, error)) (*appsv1.StatefulSet, error) {
	return WaitFor(ctx, StatefulSets(cs, ns, name), cond)
}

// WaitForEvent waits for an event about the object kind ns/name with this
// reason, and returns it.
func WaitForEvent(ctx context.Context, cs kubernetes.Interface, ns, kind, name, reason string) (*corev1.Event, error) {
	return WaitFor(ctx, EventsAbout(cs, ns, kind, name), func(ev *corev1.Event) (bool, error) {
		return ev.Reason == reason, nil
	})
}

// PodReady holds once the pod is Running and its Ready condition is True.
func PodReady(pod *corev1.Pod) (bool, error) {
	if pod.Status.Phase != corev1.PodRunning {
		return false, nil
	}
	return podCondition(pod, corev1.PodReady) == corev1.ConditionTrue, nil
}

// PodUnschedulable holds once the scheduler has given up on the pod for now:
// PodScheduled is False with reason Unschedulable.
func PodUnschedulable(pod *corev1.Pod) (bool, error) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable, nil
		}
	}
	return false, nil
}

// StatefulSetReady holds once the controller has seen the latest spec and
// every replica is Ready.
func StatefulSetReady(sts *appsv1.StatefulSet) (bool, error) {
	want := int32(1)
	if sts.Spec.Replicas != nil {
		want = *sts.Spec.Replicas
	}
	return sts.Status.ObservedGeneration >= sts.Generation &&
		sts.Status.ReadyReplicas == want && sts.Status.Replicas == want, nil
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}
