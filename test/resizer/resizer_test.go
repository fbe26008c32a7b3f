package resizer

import (
	"context"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	listersv1 "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

const (
	class      = "kwok-volume"
	otherClass = "standard"
	prov       = "kwok.x-k8s.io/volume"
	ns         = "db"
	fsDelay    = 500 * time.Millisecond
)

var (
	gi1 = resource.MustParse("1Gi")
	gi2 = resource.MustParse("2Gi")
	gi3 = resource.MustParse("3Gi")
)

func storageClass(name, provisioner string) *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner,
		AllowVolumeExpansion: ptr.To(true)}
}

// bound is a Bound claim of class with capacity 1Gi requesting size.
func bound(class string, size resource.Quantity) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-db-0", UID: "u-1", ResourceVersion: "42"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(class),
			VolumeName:       "pvc-u-1",
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: size},
			},
		},
		Status: corev1.PersistentVolumeClaimStatus{
			Phase:       corev1.ClaimBound,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: gi1},
		},
	}
}

// volume is the 1Gi volume bound to bound's claim.
func volume(class string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-u-1", UID: "v-1", ResourceVersion: "7"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:         corev1.ResourceList{corev1.ResourceStorage: gi1},
			StorageClassName: class,
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: "data-db-0",
				UID: "u-1"},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound},
	}
}

func edit(c *corev1.PersistentVolumeClaim, f func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	c = c.DeepCopy()
	f(c)
	return c
}

func TestNext(t *testing.T) {
	pending := FileSystemResizePending(Resizing(bound(class, gi2), gi2, metav1.Now()), metav1.Now())
	for _, tc := range []struct {
		name  string
		claim *corev1.PersistentVolumeClaim
		want  Step
	}{
		{"same size", bound(class, gi1), None},
		{"smaller request", edit(bound(class, gi1), func(c *corev1.PersistentVolumeClaim) {
			c.Status.Capacity[corev1.ResourceStorage] = gi2
		}), None},
		{"larger request", bound(class, gi2), Expand},
		{"not Bound", edit(bound(class, gi2), func(c *corev1.PersistentVolumeClaim) { c.Status.Phase = corev1.ClaimPending }), None},
		{"no volume", edit(bound(class, gi2), func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "" }), None},
		{"being deleted", edit(bound(class, gi2), func(c *corev1.PersistentVolumeClaim) {
			c.DeletionTimestamp = ptr.To(metav1.Now())
		}), None},
		{"no storage request", edit(bound(class, gi2), func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests = nil
		}), None},
		{"Resizing, half done", Resizing(bound(class, gi2), gi2, metav1.Now()), Expand},
		{"FileSystemResizePending", pending, FinishFileSystem},
		{"FileSystemResizePending, request raised again", edit(pending, func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests[corev1.ResourceStorage] = gi3
		}), Expand},
		{"resized", Resized(pending, gi2), None},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Next(tc.claim); got != tc.want {
				t.Errorf("Next: %v, want %v", got, tc.want)
			}
		})
	}
}

func TestStatuses(t *testing.T) {
	t0, t1 := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0))
	other := corev1.PersistentVolumeClaimCondition{Type: "ModifyingVolume", Status: corev1.ConditionTrue}
	start := edit(bound(class, gi2), func(c *corev1.PersistentVolumeClaim) {
		c.Status.Conditions = []corev1.PersistentVolumeClaimCondition{other}
	})
	resizing := Resizing(start, gi2, t0)
	again := Resizing(resizing, gi2, t1)
	pending := FileSystemResizePending(resizing, t1)
	resized := Resized(pending, gi2)

	check := func(name string, got corev1.PersistentVolumeClaimStatus, want corev1.PersistentVolumeClaimStatus) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
		}
	}
	base := start.Status
	check("Resizing", resizing.Status, corev1.PersistentVolumeClaimStatus{
		Phase: base.Phase, AccessModes: base.AccessModes, Capacity: corev1.ResourceList{corev1.ResourceStorage: gi1},
		Conditions: []corev1.PersistentVolumeClaimCondition{other,
			{Type: corev1.PersistentVolumeClaimResizing, Status: corev1.ConditionTrue, LastTransitionTime: t0}},
		AllocatedResources:        corev1.ResourceList{corev1.ResourceStorage: gi2},
		AllocatedResourceStatuses: map[corev1.ResourceName]corev1.ClaimResourceStatus{corev1.ResourceStorage: corev1.PersistentVolumeClaimControllerResizeInProgress},
	})
	check("Resizing again keeps its time", again.Status, resizing.Status)
	check("FileSystemResizePending", pending.Status, corev1.PersistentVolumeClaimStatus{
		Phase: base.Phase, AccessModes: base.AccessModes, Capacity: corev1.ResourceList{corev1.ResourceStorage: gi1},
		Conditions: []corev1.PersistentVolumeClaimCondition{other,
			{Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue, LastTransitionTime: t1,
				Message: "Waiting for user to (re-)start a pod to finish file system resize of volume on node."}},
		AllocatedResources:        corev1.ResourceList{corev1.ResourceStorage: gi2},
		AllocatedResourceStatuses: map[corev1.ResourceName]corev1.ClaimResourceStatus{corev1.ResourceStorage: corev1.PersistentVolumeClaimNodeResizePending},
	})
	check("Resized", resized.Status, corev1.PersistentVolumeClaimStatus{
		Phase: base.Phase, AccessModes: base.AccessModes, Capacity: corev1.ResourceList{corev1.ResourceStorage: gi2},
		Conditions:         []corev1.PersistentVolumeClaimCondition{other},
		AllocatedResources: corev1.ResourceList{corev1.ResourceStorage: gi2},
	})
	check("the claim given is not modified", start.Status, edit(bound(class, gi2), func(c *corev1.PersistentVolumeClaim) {
		c.Status.Conditions = []corev1.PersistentVolumeClaimCondition{other}
	}).Status)
}

// write is one write the resizer made: verb, resource, subresource, name.
type write struct{ verb, resource, sub, name string }

var (
	claimStatus  = write{"update", "persistentvolumeclaims", "status", "data-db-0"}
	volumeUpdate = write{"update", "persistentvolumes", "", "pvc-u-1"}
)

func writes(kube *fake.Clientset) []write {
	var out []write
	for _, a := range kube.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok {
			out = append(out, write{a.GetVerb(), a.GetResource().Resource, a.GetSubresource(), u.GetObject().(metav1.Object).GetName()})
		} else if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
			out = append(out, write{verb: v, resource: a.GetResource().Resource})
		}
	}
	return out
}

// requeue is one call of after.
type requeue struct {
	key   cache.ObjectName
	delay time.Duration
}

// fixture is a resizer whose listers hold objs, on a fake API that holds
// them too, as the caches would after a sync; its clock is now and its
// requeues are recorded.
type fixture struct {
	r        *resizer
	kube     *fake.Clientset
	claims   cache.Indexer
	now      time.Time
	requeues []requeue
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{now: time.Unix(1000, 0)}
	f.claims = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	classes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, o := range objs {
		if _, ok := o.(*corev1.PersistentVolumeClaim); ok {
			if err := f.claims.Add(o); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, sc := range []*storagev1.StorageClass{storageClass(class, prov), storageClass(otherClass, "ebs.csi.aws.com")} {
		objs = append(objs, sc)
		if err := classes.Add(sc); err != nil {
			t.Fatal(err)
		}
	}
	f.kube = fake.NewClientset(objs...)
	f.r = newResizer(f.kube, listersv1.NewPersistentVolumeClaimLister(f.claims), storagelisters.NewStorageClassLister(classes),
		withLog(t, Config{Provisioners: []string{prov}, FSDelay: fsDelay}),
		func(k cache.ObjectName, d time.Duration) { f.requeues = append(f.requeues, requeue{k, d}) })
	f.r.now = func() time.Time { return f.now }
	return f
}

// sync syncs the claim after its cache caught up with the API.
func (f *fixture) sync(t *testing.T) {
	t.Helper()
	c, err := f.kube.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), "data-db-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.claims.Update(c); err != nil {
		t.Fatal(err)
	}
	f.kube.ClearActions()
	f.requeues = nil
	if err := f.r.sync(context.Background(), cache.NewObjectName(ns, "data-db-0")); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

func (f *fixture) get(t *testing.T) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	t.Helper()
	c, err := f.kube.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), "data-db-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := f.kube.CoreV1().PersistentVolumes().Get(context.Background(), "pvc-u-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c, pv
}

func withLog(t *testing.T, cfg Config) Config {
	log := logrus.New()
	log.SetOutput(t.Output())
	log.SetLevel(logrus.DebugLevel)
	cfg.Log = log
	return cfg
}

func conditionTypes(c *corev1.PersistentVolumeClaim) []corev1.PersistentVolumeClaimConditionType {
	var out []corev1.PersistentVolumeClaimConditionType
	for _, cond := range c.Status.Conditions {
		out = append(out, cond.Type)
	}
	return out
}

// TestGrow takes a claim from 1Gi to 2Gi: the controller's half (volume
// 2Gi, claim FileSystemResizePending, capacity still 1Gi), nothing before
// FSDelay, then the node's half (capacity 2Gi, no condition).
func TestGrow(t *testing.T) {
	f := newFixture(t, bound(class, gi2), volume(class))
	key := cache.NewObjectName(ns, "data-db-0")

	f.sync(t)
	if got, want := writes(f.kube), []write{claimStatus, volumeUpdate, claimStatus}; !slices.Equal(got, want) {
		t.Errorf("expand's writes:\n got %v\nwant %v", got, want)
	}
	if want := []requeue{{key, fsDelay}}; !slices.Equal(f.requeues, want) {
		t.Errorf("requeues %v, want %v", f.requeues, want)
	}
	c, pv := f.get(t)
	if !pv.Spec.Capacity.Storage().Equal(gi2) {
		t.Errorf("volume's capacity %v, want 2Gi", pv.Spec.Capacity.Storage())
	}
	if !c.Status.Capacity.Storage().Equal(gi1) {
		t.Errorf("claim's capacity %v before the file system is grown, want 1Gi", c.Status.Capacity.Storage())
	}
	if got := conditionTypes(c); !slices.Equal(got, []corev1.PersistentVolumeClaimConditionType{corev1.PersistentVolumeClaimFileSystemResizePending}) ||
		c.Status.Conditions[0].Status != corev1.ConditionTrue || c.Status.Conditions[0].Message != FileSystemResizePendingMessage {
		t.Errorf("claim's conditions %+v, want FileSystemResizePending", c.Status.Conditions)
	}
	if got := c.Status.AllocatedResources[corev1.ResourceStorage]; !got.Equal(gi2) {
		t.Errorf("allocatedResources %v, want 2Gi", c.Status.AllocatedResources)
	}
	if got := c.Status.AllocatedResourceStatuses[corev1.ResourceStorage]; got != corev1.PersistentVolumeClaimNodeResizePending {
		t.Errorf("allocatedResourceStatuses %v, want NodeResizePending", c.Status.AllocatedResourceStatuses)
	}

	f.now = f.now.Add(fsDelay / 5)
	f.sync(t)
	if got := writes(f.kube); len(got) > 0 {
		t.Errorf("writes before FSDelay: %v", got)
	}
	if want := []requeue{{key, fsDelay * 4 / 5}}; !slices.Equal(f.requeues, want) {
		t.Errorf("requeues %v, want %v", f.requeues, want)
	}

	f.now = f.now.Add(fsDelay)
	f.sync(t)
	if got, want := writes(f.kube), []write{claimStatus}; !slices.Equal(got, want) {
		t.Errorf("finish's writes:\n got %v\nwant %v", got, want)
	}
	c, _ = f.get(t)
	if !c.Status.Capacity.Storage().Equal(gi2) || len(c.Status.Conditions) > 0 || len(c.Status.AllocatedResourceStatuses) > 0 {
		t.Errorf("claim's status %+v, want capacity 2Gi, no condition nor resource status", c.Status)
	}

	f.sync(t)
	if got := writes(f.kube); len(got) > 0 || len(f.requeues) > 0 {
		t.Errorf("once resized: writes %v, requeues %v", got, f.requeues)
	}
}

func TestNothingToDo(t *testing.T) {
	for _, tc := range []struct {
		name  string
		claim *corev1.PersistentVolumeClaim
	}{
		{"same size", bound(class, gi1)},
		{"smaller request", edit(bound(class, gi1), func(c *corev1.PersistentVolumeClaim) {
			c.Status.Capacity[corev1.ResourceStorage] = gi2
		})},
		{"another provisioner's class", bound(otherClass, gi2)},
		{"a class that does not exist", bound("gone", gi2)},
		{"no class", edit(bound(class, gi2), func(c *corev1.PersistentVolumeClaim) { c.Spec.StorageClassName = nil })},
		{"not Bound", edit(bound(class, gi2), func(c *corev1.PersistentVolumeClaim) { c.Status.Phase = corev1.ClaimPending })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.claim, volume(class))
			f.sync(t)
			if got := writes(f.kube); len(got) > 0 || len(f.requeues) > 0 {
				t.Errorf("writes %v, requeues %v; want none", got, f.requeues)
			}
			if _, pv := f.get(t); !pv.Spec.Capacity.Storage().Equal(gi1) {
				t.Errorf("volume's capacity %v", pv.Spec.Capacity.Storage())
			}
		})
	}
}

// TestExpandResumes: a claim left Resizing, the volume expanded already,
// is made FileSystemResizePending with one write.
func TestExpandResumes(t *testing.T) {
	pv := volume(class)
	pv.Spec.Capacity[corev1.ResourceStorage] = gi2
	f := newFixture(t, Resizing(bound(class, gi2), gi2, metav1.Now()), pv)
	f.sync(t)
	if got, want := writes(f.kube), []write{claimStatus}; !slices.Equal(got, want) {
		t.Errorf("writes:\n got %v\nwant %v", got, want)
	}
}

// TestConflict: a conflict is sync's error, for the queue to retry.
func TestConflict(t *testing.T) {
	f := newFixture(t, bound(class, gi2), volume(class))
	f.kube.PrependReactor("update", "persistentvolumes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumes"}, "pvc-u-1", nil)
	})
	err := f.r.sync(context.Background(), cache.NewObjectName(ns, "data-db-0"))
	if !apierrors.IsConflict(err) {
		t.Errorf("sync: %v, want a conflict", err)
	}
}

// TestRun runs the resizer on a fake API, through its informers and
// queue: a claim raised to 2Gi is resized although its first status
// write meets a conflict (retried with the queue's backoff).
func TestRun(t *testing.T) {
	kube := fake.NewClientset(bound(class, gi1), volume(class), storageClass(class, prov))
	var conflicts atomic.Int32
	kube.PrependReactor("update", "persistentvolumeclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && conflicts.Add(1) == 1 {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumeclaims"}, "data-db-0", nil)
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, kube, withLog(t, Config{Provisioners: []string{prov}, FSDelay: 10 * time.Millisecond}))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	c, err := kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-db-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Spec.Resources.Requests[corev1.ResourceStorage] = gi2
	if _, err := kube.CoreV1().PersistentVolumeClaims(ns).Update(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-db-0", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pv, err := kube.CoreV1().PersistentVolumes().Get(ctx, "pvc-u-1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return c.Status.Capacity.Storage().Equal(gi2) && len(c.Status.Conditions) == 0 && pv.Spec.Capacity.Storage().Equal(gi2), nil
	})
	if err != nil {
		t.Fatalf("waiting for the claim to be resized: %v", err)
	}
	if n := conflicts.Load(); n < 2 {
		t.Errorf("%d status writes, want the conflict and more", n)
	}
}
