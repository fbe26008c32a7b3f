package informers

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	pgfake "github.com/pgloop/pgloop/pkg/generated/clientset/versioned/fake"
)

// newPGClient returns a fake clientset holding pgs. Its object tracker gives
// a List a resourceVersion and replays to a Watch what changed since, so no
// event between an informer's list and its watch is lost.
func newPGClient(pgs ...*v1.Postgresql) *pgfake.Clientset {
	objs := make([]runtime.Object, len(pgs))
	for i, pg := range pgs {
		objs[i] = pg
	}
	return pgfake.NewSimpleClientset(objs...)
}

// note is one Notify call.
type note struct{ key, signal string }

// recorder is a Notifier that hands every call to the test, in order.
type recorder struct{ ch chan note }

func newRecorder() *recorder { return &recorder{ch: make(chan note, 1024)} }

func (r *recorder) Notify(key, signal string) { r.ch <- note{key, signal} }

// next waits for the next note; the handlers run on the informers'
// goroutines.
func (r *recorder) next(t *testing.T) note {
	t.Helper()
	select {
	case n := <-r.ch:
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no notification within 10s")
		return note{}
	}
}

// discard is a Notifier for tests that only read the caches.
type discard struct{}

func (discard) Notify(string, string) {}

// now is the fixed time of every test.
var now = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

const ns = "db"

// newPG returns a valid cluster of instances pods at generation 1.
func newPG(name string, instances int32) *v1.Postgresql {
	return &v1.Postgresql{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(name + "-uid"), Generation: 1},
		Spec: v1.PostgresqlSpec{
			TeamID:            "acid",
			NumberOfInstances: instances,
			PostgreSQL:        v1.PostgresqlParam{Version: "17"},
			Volume:            v1.Volume{Size: resource.MustParse("10Gi")},
		},
		Status: v1.PostgresqlStatus{State: "Running", Epoch: 4},
	}
}

// statefulSet returns pg's StatefulSet as the apiserver holds it once the
// StatefulSet controller has seen it.
func statefulSet(pg *v1.Postgresql) *appsv1.StatefulSet {
	sts := cluster.StatefulSet(pg, cluster.Options{})
	sts.UID = types.UID(pg.Name + "-sts-uid")
	sts.Generation = 1
	sts.Status.ObservedGeneration = 1
	return sts
}

// pod returns the Ready, up-to-date replica of ordinal ord of pg; mods
// change it.
func pod(pg *v1.Postgresql, ord int32, mods ...func(*corev1.Pod)) *corev1.Pod {
	name := cluster.PodName(pg.Name, ord)
	labels := cluster.Labels(pg)
	labels[cluster.LabelRole] = cluster.RoleReplica
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pg.Namespace, Name: name, UID: types.UID(name + "-uid"), Labels: labels,
			Annotations:       map[string]string{cluster.AnnotationPodTemplateHash: cluster.PodTemplateHash(statefulSet(pg))},
			CreationTimestamp: ago(time.Hour),
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: cluster.ContainerName, Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
		},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

func master(p *corev1.Pod) { p.Labels[cluster.LabelRole] = cluster.RoleMaster }

// lock returns Patroni's leader record of pg naming leader ("" for a
// record that names none), as Patroni 3 writes it.
func lock(pg *v1.Postgresql, leader string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: pg.Namespace, Name: cluster.LeaderConfigMapName(pg.Name),
			Labels: cluster.Selector(pg.Name),
			Annotations: map[string]string{
				cluster.AnnotationAcquireTime: "2030-01-02T02:04:05.000000+00:00",
				cluster.AnnotationRenewTime:   "2030-01-02T03:04:00.000000+00:00",
				cluster.AnnotationTTL:         "30",
				cluster.AnnotationTransitions: "0",
				"optime":                      "67108960",
			}},
	}
	if leader != "" {
		cm.Annotations[cluster.AnnotationLeader] = leader
	}
	return cm
}

func terminating(p *corev1.Pod) {
	t := ago(time.Second)
	p.DeletionTimestamp = &t
}

func claim(pg *v1.Postgresql, ord int32, phase corev1.PersistentVolumeClaimPhase, mods ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	name := cluster.PersistentVolumeClaimName(pg.Name, ord)
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: pg.Namespace, Name: name, UID: types.UID(name + "-uid"),
			Labels: cluster.Labels(pg)},
		Status: corev1.PersistentVolumeClaimStatus{Phase: phase},
	}
	for _, m := range mods {
		m(c)
	}
	return c
}

// claimEvent returns a Warning of the persistent volume controller about
// the claim of ordinal ord of pg.
func claimEvent(pg *v1.Postgresql, ord int32, reason, msg string) *corev1.Event {
	name := cluster.PersistentVolumeClaimName(pg.Name, ord)
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: pg.Namespace, Name: name + "." + reason},
		InvolvedObject: corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
			Namespace: pg.Namespace, Name: name, UID: types.UID(name + "-uid")},
		Type: corev1.EventTypeWarning, Reason: reason, Message: msg,
		FirstTimestamp: ago(time.Minute), LastTimestamp: ago(time.Second),
		Source: corev1.EventSource{Component: "persistentvolume-controller"},
	}
}

func resourceQuota(name, version string) *corev1.ResourceQuota {
	return &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: version}}
}

// event returns an Event of the StatefulSet controller about sts.
func event(sts *appsv1.StatefulSet, name, typ, reason, msg string, last time.Duration) *corev1.Event {
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: sts.Namespace, Name: name},
		InvolvedObject: corev1.ObjectReference{Kind: "StatefulSet", APIVersion: "apps/v1",
			Namespace: sts.Namespace, Name: sts.Name, UID: sts.UID},
		Type: typ, Reason: reason, Message: msg,
		FirstTimestamp: ago(last + time.Minute), LastTimestamp: ago(last),
		Source: corev1.EventSource{Component: "statefulset-controller"},
	}
}

// start runs informers over the given objects until the test ends, and
// returns once their caches are synced.
func start(t testing.TB, opts Options, n Notifier, pgs []*v1.Postgresql, objs ...runtime.Object) (*Informers, *fake.Clientset, *pgfake.Clientset) {
	t.Helper()
	kube := fake.NewClientset(objs...)
	pgc := newPGClient(pgs...)
	inf := New(kube, pgc, opts, n)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	inf.Start(ctx)
	syncCtx, cancelSync := context.WithTimeout(ctx, 10*time.Second)
	defer cancelSync()
	if err := inf.WaitForCacheSync(syncCtx); err != nil {
		t.Fatal(err)
	}
	return inf, kube, pgc
}
