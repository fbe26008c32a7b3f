package sim

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/patroni"
	"github.com/pgloop/pgloop/test/labeller"
)

// Fates of a cluster's pods, drawn by the seed when the cluster is made.
const (
	// fateReady: each pod is Ready a seeded delay after it is created.
	fateReady = "ready"
	// fateUnschedulable: no pod is ever scheduled.
	fateUnschedulable = "unschedulable"
	// fateCrashLoop: each pod starts, then its container crash-loops.
	fateCrashLoop = "crashLoop"
)

// fate is how a cluster's pods behave.
type fate struct {
	kind string
	// delay is how long a pod takes from its creation to Ready (or to its
	// first crash).
	delay time.Duration
}

// world plays the parts of Kubernetes and Patroni that pgloop reads: the
// StatefulSet controller (pods from the template, by ordinal; the
// StatefulSet's status), the garbage collector (objects whose controller is
// gone), the kubelet (pods Ready, unschedulable or crash-looping, by their
// cluster's fate) and Patroni (the role labels, the member data, the
// leader record). It writes to the API directly, without faults, and runs
// on the simulator's goroutine, or on a plan's while the simulator waits
// for it (a switchover).
type world struct {
	api   *apiServer
	fates map[string]fate // by cluster key
	// startAt is when a pod (ns/name, by UID) starts: Ready, or crashing.
	startAt map[string]time.Time
	// leader is where a switchover moved a cluster's primary.
	leader map[string]string
}

func newWorld(api *apiServer) *world {
	return &world{api: api, fates: map[string]fate{}, startAt: map[string]time.Time{}, leader: map[string]string{}}
}

// step makes the world act on what the API holds at now, and reports
// whether it wrote anything.
func (w *world) step(now time.Time) bool {
	objs, _ := w.api.snapshot()
	keys := slices.SortedFunc(maps.Keys(objs), func(x, y objKey) int { return strings.Compare(x.String(), y.String()) })
	uids := map[string]bool{}
	for _, k := range keys {
		uids[string(objMeta(objs[k]).GetUID())] = true
	}
	wrote := false
	for _, k := range keys {
		if ref := metav1.GetControllerOf(objMeta(objs[k])); ref != nil && !uids[string(ref.UID)] {
			w.api.write(k, nil)
			wrote = true
		}
	}
	if wrote {
		return true // the rest acts on the world without them
	}
	for _, k := range keys {
		if sts, ok := objs[k].(*appsv1.StatefulSet); ok {
			wrote = w.statefulSet(now, sts, objs) || wrote
		}
	}
	for _, k := range keys {
		if pod, ok := objs[k].(*corev1.Pod); ok {
			wrote = w.kubelet(now, pod) || wrote
		}
	}
	if wrote {
		return true
	}
	for _, k := range keys {
		if k.res == "postgresqls" {
			wrote = w.patroni(k.ns, k.name, objs) || wrote
		}
	}
	return wrote
}

// next returns when a pod starts next after now.
func (w *world) next(now time.Time) (time.Time, bool) {
	var best time.Time
	for _, t := range w.startAt {
		if t.After(now) && (best.IsZero() || t.Before(best)) {
			best = t
		}
	}
	return best, !best.IsZero()
}

// statefulSet makes the pods of the desired ordinals that are missing,
// deletes those beyond, and writes the StatefulSet's status.
func (w *world) statefulSet(now time.Time, sts *appsv1.StatefulSet, objs map[objKey]runtime.Object) bool {
	if sts.DeletionTimestamp != nil {
		return false
	}
	replicas := int(ptr.Deref(sts.Spec.Replicas, 1))
	wrote := false
	ready := int32(0)
	for ord := range replicas {
		key := objKey{"pods", sts.Namespace, fmt.Sprintf("%s-%d", sts.Name, ord)}
		if p, ok := objs[key].(*corev1.Pod); ok {
			if podReady(p) {
				ready++
			}
			continue
		}
		w.api.write(key, w.newPod(now, sts, key.name))
		wrote = true
	}
	for k, obj := range objs {
		if pod, ok := obj.(*corev1.Pod); ok && k.ns == sts.Namespace && strings.HasPrefix(k.name, sts.Name+"-") {
			if ord, err := strconv.Atoi(strings.TrimPrefix(k.name, sts.Name+"-")); err == nil && ord >= replicas && metav1.IsControlledBy(pod, sts) {
				w.api.write(k, nil)
				wrote = true
			}
		}
	}
	st := appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: int32(replicas), ReadyReplicas: ready}
	if sts.Status.ObservedGeneration != st.ObservedGeneration || sts.Status.Replicas != st.Replicas || sts.Status.ReadyReplicas != st.ReadyReplicas {
		sts = sts.DeepCopy()
		sts.Status = st
		w.api.write(objKey{"statefulsets", sts.Namespace, sts.Name}, sts)
		wrote = true
	}
	return wrote
}

// newPod is the pod the StatefulSet controller makes for one ordinal.
func (w *world) newPod(now time.Time, sts *appsv1.StatefulSet, name string) *corev1.Pod {
	t := sts.Spec.Template
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sts.Namespace,
			Labels: maps.Clone(t.Labels), Annotations: maps.Clone(t.Annotations),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}},
		Spec:   *t.Spec.DeepCopy(),
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	key := sts.Namespace + "/" + sts.Labels[cluster.LabelClusterName]
	f := w.fates[key]
	if f.kind == fateUnschedulable {
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available: 3 Insufficient cpu."}}
		return pod
	}
	w.startAt[sts.Namespace+"/"+name] = now.Add(f.delay)
	return pod
}

// kubelet starts a pod once its time has come: Ready, or crash-looping.
func (w *world) kubelet(now time.Time, pod *corev1.Pod) bool {
	id := pod.Namespace + "/" + pod.Name
	at, ok := w.startAt[id]
	if !ok || now.Before(at) {
		return false
	}
	delete(w.startAt, id)
	pod = pod.DeepCopy()
	pod.Spec.NodeName = "node-1"
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = "10.0.0.1"
	ready := corev1.ConditionTrue
	state := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(now)}}
	if w.fates[pod.Namespace+"/"+pod.Labels[cluster.LabelClusterName]].kind == fateCrashLoop {
		ready = corev1.ConditionFalse
		state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: "back-off 5m0s restarting failed container=postgres"}}
	}
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: ready},
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "postgres", State: state, Ready: ready == corev1.ConditionTrue}}
	w.api.write(objKey{"pods", pod.Namespace, pod.Name}, pod)
	return true
}

// patroni labels the roles of a cluster's pods (labeller.Roles, the
// primary a switchover chose first), publishes each Ready pod's member
// data, and holds the leader record.
func (w *world) patroni(ns, name string, objs map[objKey]runtime.Object) bool {
	key := ns + "/" + name
	var pods []*corev1.Pod
	for k, obj := range objs {
		if p, ok := obj.(*corev1.Pod); ok && k.ns == ns && p.Labels[cluster.LabelClusterName] == name {
			p = p.DeepCopy()
			if to := w.leader[key]; to != "" {
				// A switchover hands the role over: the label goes first.
				p.Labels[cluster.LabelRole] = cluster.RoleReplica
				if p.Name == to {
					p.Labels[cluster.LabelRole] = cluster.RoleMaster
				}
			}
			pods = append(pods, p)
		}
	}
	delete(w.leader, key)
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	roles := labeller.Roles(pods)
	wrote := false
	master := ""
	for _, p := range pods {
		role := roles[p.Name]
		if role == cluster.RoleMaster {
			master = p.Name
		}
		cur := objs[objKey{"pods", ns, p.Name}].(*corev1.Pod)
		want := cur.DeepCopy()
		want.Labels[cluster.LabelRole] = role
		if podReady(p) {
			m, _ := json.Marshal(patroni.Member{ConnURL: "postgres://10.0.0.1:5432/postgres",
				APIURL: "http://10.0.0.1:8008/patroni", State: "running", Role: role})
			if want.Annotations == nil {
				want.Annotations = map[string]string{}
			}
			want.Annotations[patroni.StatusAnnotation] = string(m)
		}
		if !maps.Equal(want.Labels, cur.Labels) || !maps.Equal(want.Annotations, cur.Annotations) {
			w.api.write(objKey{"pods", ns, p.Name}, want)
			wrote = true
		}
	}
	if master == "" {
		return wrote
	}
	lk := objKey{"configmaps", ns, cluster.LeaderConfigMapName(name)}
	if cm, ok := objs[lk].(*corev1.ConfigMap); ok && cm.Annotations[cluster.AnnotationLeader] == master {
		return wrote
	}
	w.api.write(lk, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: lk.name, Namespace: ns,
		Labels:      map[string]string{cluster.LabelApplication: cluster.ApplicationSpilo, cluster.LabelClusterName: name},
		Annotations: map[string]string{cluster.AnnotationLeader: master}}})
	return true
}

// kill deletes a Ready pod chosen by rng, the primary more often than
// not, as when its node is lost; it returns its name, "" when no pod is
// Ready. The StatefulSet controller makes it again; Patroni fails over.
func (w *world) kill(rng *rand.Rand) string {
	objs, _ := w.api.snapshot()
	var ready, primaries []objKey
	for k, obj := range objs {
		if p, ok := obj.(*corev1.Pod); ok && podReady(p) {
			ready = append(ready, k)
			if p.Labels[cluster.LabelRole] == cluster.RoleMaster {
				primaries = append(primaries, k)
			}
		}
	}
	if len(primaries) > 0 && rng.IntN(3) > 0 {
		ready = primaries
	}
	if len(ready) == 0 {
		return ""
	}
	slices.SortFunc(ready, func(x, y objKey) int { return strings.Compare(x.String(), y.String()) })
	k := ready[rng.IntN(len(ready))]
	w.api.write(k, nil)
	return k.ns + "/" + k.name
}

// switchover moves a cluster's primary to pod to, as Patroni does when
// asked.
func (w *world) switchover(key, to string) { w.leader[key] = to }

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
