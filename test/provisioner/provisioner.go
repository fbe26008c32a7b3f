// Package provisioner is a volume provisioner for the local control plane
// (test/testbed) that does what kwok's volume stages do
// (bin/kwok-stages/pvc-provision.yaml, pv-bind.yaml, pvc-delete.yaml,
// pv-delete.yaml), with parallel workers. kwok v0.8.0 plays the stages of
// resources other than pods and nodes one at a time, so a burst of
// thousands of claims waits minutes for its volumes (docs/testbed.md): the
// plane, not the operator, was the bound of `make bench-scale`.
//
// For each claim of its classes with no volumeName, not being deleted and not
// Bound, it creates the PersistentVolume pvc-<claim uid> (Volume: pre-bound
// to the claim by a claimRef with its uid), then binds the claim (bind
// annotations and spec.volumeName, then status Bound); a volume of its
// classes with a claimRef and no phase yet (or Pending, Available) is made
// Bound. When a claim bound to one of its volumes is being deleted, or is
// gone, the volume is Released; a Released volume with reclaim policy
// Delete is deleted.
//
// It binds the claim itself rather than leaving it to
// kube-controller-manager's PV controller (which would bind a pre-bound
// volume too) because that controller handles claims on one goroutine at
// the controller-manager's client rate (20 requests/s by default), a few
// requests each: the same bound again. Both may write the same values at
// once; each write is a merge patch of those values, so whichever comes
// last changes nothing.
//
// Used only by the tests and benchmarks (testbed.Options.VolumeWorkers).
package provisioner

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/pgloop/pgloop/test/internal/workers"
)

const (
	// DefaultWorkers is how many claims and volumes are handled at once
	// when Config.Workers is 0.
	DefaultWorkers = 16
)

// Config says which claims are the provisioner's and how many it handles
// at once.
type Config struct {
	// StorageClasses are the classes of the claims and volumes it handles
	// (testbed.StorageClassName, testbed.FixedStorageClassName); other
	// classes are left alone.
	StorageClasses []string
	// Provisioner is the provisioner's name, written in the annotations
	// (testbed.Provisioner, the StorageClass's provisioner).
	Provisioner string
	// Workers is how many claims and volumes are handled at once; 0 means
	// DefaultWorkers.
	Workers int
	// Log receives a line per volume created, bound, released or deleted;
	// nil discards them.
	Log logrus.FieldLogger
	// Local, when set, makes the volumes local ones on a real node (a
	// kubelet mounts them, and gives them the pod's fsGroup, which it
	// does not for hostPath) in place of kwok's hostPaths.
	Local *LocalVolumes
}

// LocalVolumes are the volumes of a real node: the claims of StorageClass
// get a directory each under Root on the host, made before the volume and
// removed after it is deleted.
type LocalVolumes struct {
	StorageClass string
	Root         string
	Node         string
}

// kind tells what a key names.
type kind int

const (
	claimKey kind = iota
	volumeKey
)

// key is one item of the queue: a claim (namespace and name) or a volume
// (name).
type key struct {
	kind            kind
	namespace, name string
}

func (k key) String() string {
	if k.kind == volumeKey {
		return "pv/" + k.name
	}
	return "pvc/" + k.namespace + "/" + k.name
}

// Run provisions, binds, releases and deletes the volumes of cfg's classes
// until ctx is done. It returns nil when ctx ends and an error only if a
// cache cannot sync. Keys are handled by cfg.Workers goroutines; the queue
// never gives one key to two of them, and a failed key (a conflict
// included) comes back with a backoff.
func Run(ctx context.Context, kube kubernetes.Interface, cfg Config) error {
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Log == nil {
		discard := logrus.New()
		discard.SetOutput(io.Discard)
		cfg.Log = discard
	}
	factory := informers.NewSharedInformerFactory(kube, 0)
	claims, volumes := factory.Core().V1().PersistentVolumeClaims(), factory.Core().V1().PersistentVolumes()
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[key](20*time.Millisecond, 5*time.Second),
		workqueue.TypedRateLimitingQueueConfig[key]{Name: "provisioner"})
	defer queue.ShutDown()

	p := &provisioner{kube: kube, claims: claims.Lister(), volumes: volumes.Lister(), cfg: cfg}
	// onClaim queues a claim of its classes; a claim that is gone queues
	// its volume too, to be released.
	onClaim := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		claim, ok := obj.(*corev1.PersistentVolumeClaim)
		if !ok || !p.ours(claim.Spec.StorageClassName) {
			return
		}
		queue.Add(key{kind: claimKey, namespace: claim.Namespace, name: claim.Name})
		if claim.Spec.VolumeName != "" {
			queue.Add(key{kind: volumeKey, name: claim.Spec.VolumeName})
		}
	}
	onVolume := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		pv, ok := obj.(*corev1.PersistentVolume)
		if !ok || !p.ours(&pv.Spec.StorageClassName) {
			return
		}
		queue.Add(key{kind: volumeKey, name: pv.Name})
	}
	defer factory.Shutdown()
	if ok, err := workers.Sync(ctx, "provisioner", factory,
		workers.Informer{Informer: claims.Informer(), Handler: workers.OnChange(onClaim, true)},
		workers.Informer{Informer: volumes.Informer(), Handler: workers.OnChange(onVolume, true)}); !ok {
		return err
	}
	cfg.Log.WithFields(logrus.Fields{"classes": cfg.StorageClasses, "workers": cfg.Workers}).Info("provisioner: watching claims and volumes")

	workers.Run(ctx, queue, cfg.Workers, p.sync, func(k key, err error) {
		cfg.Log.WithField("key", k.String()).WithError(err).Debug("provisioner: retrying")
	})
	return nil
}

type provisioner struct {
	kube    kubernetes.Interface
	claims  listersv1.PersistentVolumeClaimLister
	volumes listersv1.PersistentVolumeLister
	cfg     Config
	// written holds the uids of the claims whose status this provisioner
	// made Bound while its cache does not show it yet: the event of the
	// bind patch brings the claim back before the status write's event,
	// and a second status write would change nothing.
	written sync.Map
}

// ours reports whether a claim or volume of class is the provisioner's.
func (p *provisioner) ours(class *string) bool {
	return class != nil && slices.Contains(p.cfg.StorageClasses, *class)
}

func (p *provisioner) sync(ctx context.Context, k key) error {
	if k.kind == volumeKey {
		return p.syncVolume(ctx, k.name)
	}
	return p.syncClaim(ctx, k.namespace, k.name)
}

// syncClaim plays pvc-provision.yaml and pvc-delete.yaml for one claim.
// The cases:
//
//  1. gone: its volume's key, queued by the delete event, releases it;
//  2. being deleted and bound to a volume: that volume is Released;
//  3. bound to another volume than pvc-<uid> (pre-bound by its author, or
//     already Bound): not the provisioner's to bind;
//  4. no volumeName: the volume is created (an existing one is fine),
//     then the claim bound, then its status made Bound;
//  5. volumeName pvc-<uid> but not Bound yet (a previous sync stopped
//     half way, or the PV controller bound it): its status is made Bound,
//     unless this provisioner wrote it already and its cache lags.
func (p *provisioner) syncClaim(ctx context.Context, namespace, name string) error {
	claim, err := p.claims.PersistentVolumeClaims(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil // 1
	}
	if err != nil {
		return err
	}
	if !p.ours(claim.Spec.StorageClassName) {
		return nil
	}
	log := p.cfg.Log.WithField("claim", namespace+"/"+name)
	if claim.DeletionTimestamp != nil {
		p.written.Delete(claim.UID)
		if claim.Spec.VolumeName == "" {
			return nil
		}
		return p.release(ctx, claim.Spec.VolumeName, claim.UID) // 2
	}
	if claim.Status.Phase == corev1.ClaimBound {
		p.written.Delete(claim.UID)
		return nil // 3
	}
	if claim.Spec.VolumeName != "" && claim.Spec.VolumeName != VolumeName(claim) {
		return nil // 3
	}
	if _, ok := p.written.Load(claim.UID); ok {
		return nil // 5, written already
	}
	client := p.kube.CoreV1().PersistentVolumeClaims(namespace)
	if claim.Spec.VolumeName == "" { // 4
		if _, err := p.volumes.Get(VolumeName(claim)); apierrors.IsNotFound(err) {
			if err := workers.Call(ctx, func(ctx context.Context) error {
				pv := Volume(claim, p.cfg.Provisioner)
				if l := p.cfg.Local; l != nil && claim.Spec.StorageClassName != nil && *claim.Spec.StorageClassName == l.StorageClass {
					if err := os.MkdirAll(filepath.Join(l.Root, pv.Name), 0o755); err != nil {
						return err
					}
					MakeLocal(pv, l.Root, l.Node)
				}
				_, err := p.kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
				return err
			}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create volume %s: %w", VolumeName(claim), err)
			}
			log.WithField("volume", VolumeName(claim)).Info("provisioner: volume created")
		}
		if err := workers.Call(ctx, func(ctx context.Context) error {
			_, err := client.Patch(ctx, name, types.MergePatchType, BindPatch(claim, p.cfg.Provisioner), metav1.PatchOptions{})
			return err
		}); err != nil {
			return workers.Gone(fmt.Errorf("bind claim %s/%s: %w", namespace, name, err))
		}
	}
	if err := workers.Call(ctx, func(ctx context.Context) error { // 4, 5
		_, err := client.Patch(ctx, name, types.MergePatchType, ClaimBoundPatch(claim), metav1.PatchOptions{}, "status")
		return err
	}); err != nil {
		return workers.Gone(fmt.Errorf("claim %s/%s status: %w", namespace, name, err))
	}
	p.written.Store(claim.UID, struct{}{})
	log.WithField("volume", VolumeName(claim)).Info("provisioner: claim bound")
	return nil
}

// syncVolume plays pv-bind.yaml and pv-delete.yaml for one volume of the
// class, and releases a volume whose claim is gone. The cases:
//
//  1. gone, or being deleted: nothing to do;
//  2. no claimRef: not bound to anything, left alone;
//  3. Released with reclaim policy Delete: deleted;
//  4. Bound, or Released or Failed (policy Retain): nothing to do, unless
//     (Bound) its claim is gone: then it is Released;
//  5. otherwise (a new volume: no phase, Pending, Available) it is made
//     Bound, as the stage does as soon as it has a claimRef.
func (p *provisioner) syncVolume(ctx context.Context, name string) error {
	pv, err := p.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil // 1
	}
	if err != nil {
		return err
	}
	if !p.ours(&pv.Spec.StorageClassName) || pv.DeletionTimestamp != nil || pv.Spec.ClaimRef == nil {
		return nil // 1, 2
	}
	log := p.cfg.Log.WithField("volume", name)
	switch pv.Status.Phase {
	case corev1.VolumeReleased: // 3
		if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
			return nil
		}
		err := workers.Call(ctx, func(ctx context.Context) error {
			return p.kube.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pv.UID}})
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete volume %s: %w", name, err)
		}
		if l := p.cfg.Local; l != nil && pv.Spec.Local != nil && pv.Spec.Local.Path == filepath.Join(l.Root, name) {
			if err := os.RemoveAll(pv.Spec.Local.Path); err != nil {
				return fmt.Errorf("remove volume %s's directory: %w", name, err)
			}
		}
		log.Info("provisioner: volume deleted")
		return nil
	case corev1.VolumeBound: // 4
		gone, err := p.claimGone(ctx, pv.Spec.ClaimRef)
		if err != nil || !gone {
			return err
		}
		return p.release(ctx, name, pv.Spec.ClaimRef.UID)
	case corev1.VolumeFailed:
		return nil // 4
	}
	if err := workers.Call(ctx, func(ctx context.Context) error { // 5
		_, err := p.kube.CoreV1().PersistentVolumes().Patch(ctx, name, types.MergePatchType, VolumePhasePatch(pv, corev1.VolumeBound), metav1.PatchOptions{}, "status")
		return err
	}); err != nil {
		return workers.Gone(fmt.Errorf("volume %s status: %w", name, err))
	}
	log.Info("provisioner: volume bound")
	return nil
}

// claimGone reports whether the claim ref names is gone: not in the cache,
// nor in the API (the cache may lag: a volume is made from a claim the
// cache holds, but its events and the claim's come on two watches), or
// there under another uid.
func (p *provisioner) claimGone(ctx context.Context, ref *corev1.ObjectReference) (bool, error) {
	claim, err := p.claims.PersistentVolumeClaims(ref.Namespace).Get(ref.Name)
	if err == nil {
		return claim.UID != ref.UID, nil
	}
	if !apierrors.IsNotFound(err) {
		return false, err
	}
	err = workers.Call(ctx, func(ctx context.Context) error {
		claim, err = p.kube.CoreV1().PersistentVolumeClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("get claim %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return claim.UID != ref.UID, nil
}

// release makes the volume name Released, if it is bound to the claim of
// uid and not Released or being deleted already. Its update event brings
// it back to the queue, to be deleted.
func (p *provisioner) release(ctx context.Context, name string, uid types.UID) error {
	pv, err := p.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pv.DeletionTimestamp != nil || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != uid ||
		slices.Contains([]corev1.PersistentVolumePhase{corev1.VolumeReleased, corev1.VolumeFailed}, pv.Status.Phase) {
		return nil
	}
	if err := workers.Call(ctx, func(ctx context.Context) error {
		_, err := p.kube.CoreV1().PersistentVolumes().Patch(ctx, name, types.MergePatchType, VolumePhasePatch(pv, corev1.VolumeReleased), metav1.PatchOptions{}, "status")
		return err
	}); err != nil {
		return workers.Gone(fmt.Errorf("release volume %s: %w", name, err))
	}
	p.cfg.Log.WithField("volume", name).Info("provisioner: volume released")
	return nil
}
