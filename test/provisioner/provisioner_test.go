package provisioner

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	listersv1 "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

const (
	class      = "kwok-volume"
	fixedClass = "kwok-fixed" // a second class of the provisioner's
	prov       = "kwok.x-k8s.io/volume"
	ns         = "db"
)

var testConfig = Config{StorageClasses: []string{class, fixedClass}, Provisioner: prov}

// claim is a claim of class 1Gi ReadWriteOnce, as a StatefulSet's
// volumeClaimTemplate makes it.
func claim(name, uid, class string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: apitypes.UID(uid), ResourceVersion: "42"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(class),
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			},
		},
	}
}

func TestVolume(t *testing.T) {
	block := claim("data-db-0", "u-1", class)
	block.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock)
	for _, tc := range []struct {
		name  string
		claim *corev1.PersistentVolumeClaim
		mode  corev1.PersistentVolumeMode
	}{
		{"filesystem by default", claim("data-db-0", "u-1", class), corev1.PersistentVolumeFilesystem},
		{"the claim's volume mode", block, corev1.PersistentVolumeBlock},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pv := Volume(tc.claim, prov)
			want := &corev1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: "pvc-u-1", Annotations: map[string]string{AnnProvisionedBy: prov}},
				Spec: corev1.PersistentVolumeSpec{
					AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
					PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
					StorageClassName:              class,
					VolumeMode:                    ptr.To(tc.mode),
					ClaimRef: &corev1.ObjectReference{APIVersion: "v1", Kind: "PersistentVolumeClaim",
						Namespace: ns, Name: "data-db-0", UID: "u-1", ResourceVersion: "42"},
					PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
						Path: "/tmp/kwok-local-path-provisioner/pvc-u-1", Type: ptr.To(corev1.HostPathDirectoryOrCreate)}},
				},
			}
			if !reflect.DeepEqual(pv, want) {
				t.Errorf("Volume:\n got %+v\nwant %+v", pv, want)
			}
		})
	}
}

func TestPatches(t *testing.T) {
	c := claim("data-db-0", "u-1", class)
	pv := Volume(c, prov)
	pv.UID, pv.ResourceVersion = "v-1", "7"
	for _, tc := range []struct {
		name  string
		patch []byte
		want  string
	}{
		{"bind", BindPatch(c, prov), `{"metadata":{"uid":"u-1","annotations":{` +
			`"pv.kubernetes.io/bind-completed":"yes","pv.kubernetes.io/bound-by-controller":"yes",` +
			`"volume.beta.kubernetes.io/storage-provisioner":"kwok.x-k8s.io/volume",` +
			`"volume.kubernetes.io/storage-provisioner":"kwok.x-k8s.io/volume"}},"spec":{"volumeName":"pvc-u-1"}}`},
		{"claim bound", ClaimBoundPatch(c), `{"metadata":{"uid":"u-1"},"status":{"accessModes":["ReadWriteOnce"],` +
			`"capacity":{"storage":"1Gi"},"phase":"Bound"}}`},
		{"volume bound", VolumePhasePatch(pv, corev1.VolumeBound), `{"metadata":{"uid":"v-1","resourceVersion":"7"},"status":{"phase":"Bound"}}`},
		{"volume released", VolumePhasePatch(pv, corev1.VolumeReleased), `{"metadata":{"uid":"v-1","resourceVersion":"7"},"status":{"phase":"Released"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(tc.patch); got != tc.want {
				t.Errorf("patch:\n got %s\nwant %s", got, tc.want)
			}
			if !json.Valid(tc.patch) {
				t.Error("not JSON")
			}
		})
	}
}

// write is one write the provisioner made: verb, resource, subresource,
// name.
type write struct{ verb, resource, sub, name string }

func writes(kube *fake.Clientset) []write {
	var out []write
	for _, a := range kube.Actions() {
		if a.GetVerb() == "get" || a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
		}
		name := ""
		switch a := a.(type) {
		case k8stesting.CreateAction:
			name = a.GetObject().(metav1.Object).GetName()
		case k8stesting.PatchAction:
			name = a.GetName()
		case k8stesting.DeleteAction:
			name = a.GetName()
		}
		out = append(out, write{a.GetVerb(), a.GetResource().Resource, a.GetSubresource(), name})
	}
	return out
}

// newSynced is a provisioner whose listers hold objs, on a fake API that
// holds them too, as the caches would after a sync.
func newSynced(t *testing.T, objs ...runtime.Object) (*provisioner, *fake.Clientset) {
	t.Helper()
	claims := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	volumes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, o := range objs {
		var err error
		switch o.(type) {
		case *corev1.PersistentVolumeClaim:
			err = claims.Add(o)
		case *corev1.PersistentVolume:
			err = volumes.Add(o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	kube := fake.NewClientset(objs...)
	return &provisioner{kube: kube, claims: listersv1.NewPersistentVolumeClaimLister(claims),
		volumes: listersv1.NewPersistentVolumeLister(volumes), cfg: withLog(t, testConfig)}, kube
}

func withLog(t *testing.T, cfg Config) Config {
	log := logrus.New()
	log.SetOutput(t.Output())
	log.SetLevel(logrus.DebugLevel)
	cfg.Log = log
	return cfg
}

func TestSyncClaim(t *testing.T) {
	fresh := claim("data-db-0", "u-1", class)
	other := claim("data-db-0", "u-1", "standard")
	deleting := claim("data-db-0", "u-1", class)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	deleting.Spec.VolumeName = "pvc-u-1"
	deletingUnbound := deleting.DeepCopy()
	deletingUnbound.Spec.VolumeName = ""
	boundPV := Volume(fresh, prov)
	boundPV.Status.Phase = corev1.VolumeBound
	preBound := claim("data-db-0", "u-1", class)
	preBound.Spec.VolumeName = "someone-elses"
	halfWay := claim("data-db-0", "u-1", class)
	halfWay.Spec.VolumeName = "pvc-u-1"
	bound := halfWay.DeepCopy()
	bound.Status.Phase = corev1.ClaimBound

	createAndBind := []write{
		{"create", "persistentvolumes", "", "pvc-u-1"},
		{"patch", "persistentvolumeclaims", "", "data-db-0"},
		{"patch", "persistentvolumeclaims", "status", "data-db-0"},
	}
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		want []write
	}{
		{"gone", nil, nil},
		{"another class", []runtime.Object{other}, nil},
		{"new: volume created, claim bound", []runtime.Object{fresh}, createAndBind},
		{"the second class: volume created, claim bound", []runtime.Object{claim("data-db-0", "u-1", fixedClass)}, createAndBind},
		{"volume there already: claim bound", []runtime.Object{fresh, Volume(fresh, prov)}, createAndBind[1:]},
		{"volume named, not Bound: status", []runtime.Object{halfWay, Volume(fresh, prov)}, createAndBind[2:]},
		{"Bound", []runtime.Object{bound, boundPV}, nil},
		{"pre-bound to another volume", []runtime.Object{preBound}, nil},
		{"deleting: volume released", []runtime.Object{deleting, boundPV},
			[]write{{"patch", "persistentvolumes", "status", "pvc-u-1"}}},
		{"deleting, volume gone", []runtime.Object{deleting}, nil},
		{"deleting, never bound", []runtime.Object{deletingUnbound}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, kube := newSynced(t, tc.objs...)
			kube.ClearActions()
			if err := p.syncClaim(context.Background(), ns, "data-db-0"); err != nil {
				t.Fatalf("syncClaim: %v", err)
			}
			if got := writes(kube); !slices.Equal(got, tc.want) {
				t.Errorf("writes:\n got %v\nwant %v", got, tc.want)
			}
		})
	}

	t.Run("status written once while the cache lags", func(t *testing.T) {
		p, kube := newSynced(t, halfWay, Volume(fresh, prov))
		for range 2 {
			if err := p.syncClaim(context.Background(), ns, "data-db-0"); err != nil {
				t.Fatal(err)
			}
		}
		if got := writes(kube); !slices.Equal(got, createAndBind[2:]) {
			t.Errorf("writes:\n got %v\nwant %v", got, createAndBind[2:])
		}
	})

	t.Run("claim bound as the stage binds it", func(t *testing.T) {
		p, kube := newSynced(t, fresh)
		if err := p.syncClaim(context.Background(), ns, "data-db-0"); err != nil {
			t.Fatal(err)
		}
		got, err := kube.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), "data-db-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantAnn := map[string]string{AnnBindCompleted: "yes", AnnBoundByController: "yes",
			AnnStorageProvisioner: prov, AnnBetaStorageProvisioner: prov}
		if !reflect.DeepEqual(got.Annotations, wantAnn) || got.Spec.VolumeName != "pvc-u-1" ||
			got.Status.Phase != corev1.ClaimBound || !reflect.DeepEqual(got.Status.AccessModes, fresh.Spec.AccessModes) ||
			!got.Status.Capacity.Storage().Equal(resource.MustParse("1Gi")) {
			t.Errorf("claim: %+v", got)
		}
		pv, err := kube.CoreV1().PersistentVolumes().Get(context.Background(), "pvc-u-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(pv.Spec, Volume(fresh, prov).Spec) {
			t.Errorf("volume: %+v", pv.Spec)
		}
	})
}

func TestSyncVolume(t *testing.T) {
	c := claim("data-db-0", "u-1", class)
	withPhase := func(phase corev1.PersistentVolumePhase, edit ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
		pv := Volume(c, prov)
		pv.UID = "v-1"
		pv.Status.Phase = phase
		for _, e := range edit {
			e(pv)
		}
		return pv
	}
	retain := func(pv *corev1.PersistentVolume) {
		pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
	}
	noClaim := func(pv *corev1.PersistentVolume) { pv.Spec.ClaimRef = nil }
	deleting := func(pv *corev1.PersistentVolume) { pv.DeletionTimestamp = &metav1.Time{Time: time.Now()} }
	otherClass := func(pv *corev1.PersistentVolume) { pv.Spec.StorageClassName = "standard" }
	recreated := claim("data-db-0", "u-2", class)

	statusPatch := []write{{"patch", "persistentvolumes", "status", "pvc-u-1"}}
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		want []write
	}{
		{"gone", nil, nil},
		{"another class", []runtime.Object{c, withPhase("", otherClass)}, nil},
		{"new: Bound", []runtime.Object{c, withPhase("")}, statusPatch},
		{"Pending: Bound", []runtime.Object{c, withPhase(corev1.VolumePending)}, statusPatch},
		{"Available: Bound", []runtime.Object{c, withPhase(corev1.VolumeAvailable)}, statusPatch},
		{"no claimRef", []runtime.Object{withPhase("", noClaim)}, nil},
		{"being deleted", []runtime.Object{c, withPhase(corev1.VolumeReleased, deleting)}, nil},
		{"Bound, claim there", []runtime.Object{c, withPhase(corev1.VolumeBound)}, nil},
		{"Bound, claim gone: Released", []runtime.Object{withPhase(corev1.VolumeBound)}, statusPatch},
		{"Bound, claim made again: Released", []runtime.Object{recreated, withPhase(corev1.VolumeBound)}, statusPatch},
		{"Released: deleted", []runtime.Object{withPhase(corev1.VolumeReleased)},
			[]write{{"delete", "persistentvolumes", "", "pvc-u-1"}}},
		{"Released, Retain: kept", []runtime.Object{withPhase(corev1.VolumeReleased, retain)}, nil},
		{"Failed", []runtime.Object{withPhase(corev1.VolumeFailed)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, kube := newSynced(t, tc.objs...)
			kube.ClearActions()
			if err := p.syncVolume(context.Background(), "pvc-u-1"); err != nil {
				t.Fatalf("syncVolume: %v", err)
			}
			if got := writes(kube); !slices.Equal(got, tc.want) {
				t.Errorf("writes:\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

// TestRun runs the provisioner on a fake API: claims of its classes get a
// Bound volume, others nothing; a deleted claim's volume is released, then
// deleted.
func TestRun(t *testing.T) {
	mine := []*corev1.PersistentVolumeClaim{claim("data-a-0", "u-a", class), claim("data-b-0", "u-b", fixedClass)}
	other := claim("data-c-0", "u-c", "standard")
	kube := fake.NewClientset(mine[0], other)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := testConfig
	cfg.Workers = 4
	go func() { done <- Run(ctx, kube, withLog(t, cfg)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	// One claim there before the start, one after.
	if _, err := kube.CoreV1().PersistentVolumeClaims(ns).Create(ctx, mine[1], metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range mine {
		eventually(t, c.Name+" Bound", func() bool {
			got, err := kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, c.Name, metav1.GetOptions{})
			if err != nil || got.Status.Phase != corev1.ClaimBound {
				return false
			}
			pv, err := kube.CoreV1().PersistentVolumes().Get(ctx, got.Spec.VolumeName, metav1.GetOptions{})
			return err == nil && pv.Status.Phase == corev1.VolumeBound
		})
	}
	if pvs, err := kube.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{}); err != nil || len(pvs.Items) != 2 {
		t.Fatalf("volumes: %v, %v; want the two of classes %s and %s only", pvs, err, class, fixedClass)
	}

	if err := kube.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, mine[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted claim's volume deleted", func() bool {
		_, err := kube.CoreV1().PersistentVolumes().Get(ctx, "pvc-u-a", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	var released bool
	for _, a := range kube.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && p.GetName() == "pvc-u-a" && phaseOf(t, p.GetPatch()) == corev1.VolumeReleased {
			released = true
		}
	}
	if !released {
		t.Error("the volume was deleted without being Released first")
	}
	if _, err := kube.CoreV1().PersistentVolumes().Get(ctx, "pvc-u-b", metav1.GetOptions{}); err != nil {
		t.Errorf("the other claim's volume: %v", err)
	}
}

// phaseOf is the status.phase a patch writes.
func phaseOf(t *testing.T, patch []byte) corev1.PersistentVolumePhase {
	var m struct {
		Status struct{ Phase corev1.PersistentVolumePhase } `json:"status"`
	}
	if err := json.Unmarshal(patch, &m); err != nil {
		t.Fatal(err)
	}
	return m.Status.Phase
}

// eventually waits until cond holds; the provisioner works on its own
// goroutines, from informer events.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
