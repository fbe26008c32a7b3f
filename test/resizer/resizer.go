// Package resizer is a volume resizer for the local control plane
// (test/testbed): it plays the external-resizer (the controller's half of
// a volume expansion) and the kubelet's file system resize (the node's
// half) for the claims of the plane's StorageClasses, where nothing else
// would expand a volume.
//
// A claim of a class whose provisioner it serves, Bound, whose
// spec.resources.requests.storage is above its status.capacity.storage, is
// expanded as the external-resizer does it with
// RecoverVolumeExpansionFailure (GA since Kubernetes 1.34): the claim's
// status gets condition Resizing, allocatedResources.storage the request
// and allocatedResourceStatuses.storage ControllerResizeInProgress; the
// volume's spec.capacity.storage becomes the request; the claim's status
// gets FileSystemResizePending in place of Resizing and
// allocatedResourceStatuses.storage NodeResizePending. Config.FSDelay
// later, it finishes as a kubelet does: status.capacity.storage becomes the
// new size, the resize conditions and allocatedResourceStatuses.storage
// are removed. A kubelet grows a mounted volume's file system online; this
// one does not wait for a pod at all.
//
// Whether a claim may grow is the API server's to say: its
// PersistentVolumeClaimResize admission refuses a larger request unless
// the claim's StorageClass has allowVolumeExpansion. A smaller request
// than the capacity is left alone: volumes never shrink.
//
// Used only by the tests (testbed.Options.NoResizer, ResizeFSDelay).
package resizer

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/pgloop/pgloop/test/internal/workers"
)

const (
	// DefaultWorkers is how many claims are handled at once when
	// Config.Workers is 0.
	DefaultWorkers = 4
)

// Config says which claims are the resizer's and how it resizes them.
type Config struct {
	// Provisioners are the provisioners it serves: a claim is the
	// resizer's when its StorageClass's provisioner is one of them
	// (testbed.Provisioner), as the external-resizer serves one CSI driver.
	Provisioners []string
	// FSDelay is how long a claim stays FileSystemResizePending before
	// its file system is "grown"; 0 means none (the two writes follow
	// each other at once).
	FSDelay time.Duration
	// Workers is how many claims are handled at once; 0 means
	// DefaultWorkers.
	Workers int
	// Log receives a line per step of a resize; nil discards them.
	Log logrus.FieldLogger
}

// Run resizes the claims of cfg's provisioners until ctx is done. It
// returns nil when ctx ends and an error only if a cache cannot sync. A
// failed claim (a conflict included) comes back with the queue's backoff.
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
	claims, classes := factory.Core().V1().PersistentVolumeClaims(), factory.Storage().V1().StorageClasses()
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](20*time.Millisecond, 5*time.Second),
		workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "resizer"})
	defer queue.ShutDown()

	r := newResizer(kube, claims.Lister(), classes.Lister(), cfg, queue.AddAfter)
	// A claim that needs a step is queued; its class is looked at by
	// sync: the handler sees every claim.
	add := func(obj any) {
		if claim, ok := obj.(*corev1.PersistentVolumeClaim); ok && Next(claim) != None {
			queue.Add(cache.MetaObjectToName(claim))
		}
	}
	handler := workers.OnChange(add, false)
	handler.DeleteFunc = r.forget
	defer factory.Shutdown()
	if ok, err := workers.Sync(ctx, "resizer", factory,
		workers.Informer{Informer: claims.Informer(), Handler: handler},
		workers.Informer{Informer: classes.Informer()}); !ok {
		return err
	}
	cfg.Log.WithFields(logrus.Fields{"provisioners": cfg.Provisioners, "fsDelay": cfg.FSDelay}).Info("resizer: watching claims")

	workers.Run(ctx, queue, cfg.Workers, r.sync, func(k cache.ObjectName, err error) {
		cfg.Log.WithField("claim", k.String()).WithError(err).Debug("resizer: retrying")
	})
	return nil
}

type resizer struct {
	kube    kubernetes.Interface
	claims  listersv1.PersistentVolumeClaimLister
	classes storagelisters.StorageClassLister
	cfg     Config
	// after queues a claim again after a delay (the queue's AddAfter).
	after func(cache.ObjectName, time.Duration)
	now   func() time.Time
	// pending holds, by claim uid, when this resizer first saw or made a
	// claim FileSystemResizePending: its file system is grown FSDelay
	// later. (The condition's lastTransitionTime has whole seconds only.)
	pending sync.Map
}

func newResizer(kube kubernetes.Interface, claims listersv1.PersistentVolumeClaimLister, classes storagelisters.StorageClassLister,
	cfg Config, after func(cache.ObjectName, time.Duration)) *resizer {
	return &resizer{kube: kube, claims: claims, classes: classes, cfg: cfg, after: after, now: time.Now}
}

// forget drops what is remembered of a deleted claim.
func (r *resizer) forget(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if claim, ok := obj.(*corev1.PersistentVolumeClaim); ok {
		r.pending.Delete(claim.UID)
	}
}

// ours reports whether claim's StorageClass has one of cfg's provisioners.
// A class not in the cache is not: a claim of a class that does not exist
// was not provisioned by us.
func (r *resizer) ours(claim *corev1.PersistentVolumeClaim) (bool, error) {
	if claim.Spec.StorageClassName == nil || *claim.Spec.StorageClassName == "" {
		return false, nil
	}
	class, err := r.classes.Get(*claim.Spec.StorageClassName)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, p := range r.cfg.Provisioners {
		if class.Provisioner == p {
			return true, nil
		}
	}
	return false, nil
}

// sync takes the claim of key one step further (Next).
func (r *resizer) sync(ctx context.Context, key cache.ObjectName) error {
	claim, err := r.claims.PersistentVolumeClaims(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	step := Next(claim)
	if step == None {
		r.pending.Delete(claim.UID)
		return nil
	}
	if ours, err := r.ours(claim); err != nil || !ours {
		return err
	}
	if step == Expand {
		return r.expand(ctx, key, claim)
	}
	return r.finish(ctx, key, claim)
}

// expand plays the external-resizer: claim Resizing (unless it is
// already, for this size), the volume's capacity raised (unless it is
// already), claim FileSystemResizePending; the claim then comes back
// after FSDelay. Each write starts from what the previous one returned;
// a cache that lags behind them costs a conflict and a retry.
func (r *resizer) expand(ctx context.Context, key cache.ObjectName, claim *corev1.PersistentVolumeClaim) error {
	size := Requested(claim)
	log := r.cfg.Log.WithFields(logrus.Fields{"claim": key.String(), "volume": claim.Spec.VolumeName, "size": size.String()})
	now := metav1.NewTime(r.now())
	allocated, ok := claim.Status.AllocatedResources[corev1.ResourceStorage]
	if !hasCondition(claim, corev1.PersistentVolumeClaimResizing) || !ok || !allocated.Equal(size) ||
		claim.Status.AllocatedResourceStatuses[corev1.ResourceStorage] != corev1.PersistentVolumeClaimControllerResizeInProgress {
		var err error
		if claim, err = r.updateStatus(ctx, Resizing(claim, size, now)); err != nil {
			return workers.Gone(err)
		}
		log.Info("resizer: claim Resizing")
	}

	var pv *corev1.PersistentVolume
	err := workers.Call(ctx, func(ctx context.Context) (err error) {
		pv, err = r.kube.CoreV1().PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		log.Warn("resizer: the claim's volume is gone")
		return nil
	}
	if err != nil {
		return fmt.Errorf("get volume %s: %w", claim.Spec.VolumeName, err)
	}
	if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != claim.UID {
		log.Warn("resizer: the claim's volume is bound to another claim")
		return nil
	}
	if have := pv.Spec.Capacity[corev1.ResourceStorage]; have.Cmp(size) < 0 {
		pv = pv.DeepCopy()
		if pv.Spec.Capacity == nil {
			pv.Spec.Capacity = corev1.ResourceList{}
		}
		pv.Spec.Capacity[corev1.ResourceStorage] = size
		if err := workers.Call(ctx, func(ctx context.Context) (err error) {
			_, err = r.kube.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
			return err
		}); err != nil {
			return workers.Gone(fmt.Errorf("update volume %s: %w", pv.Name, err))
		}
		log.Info("resizer: volume expanded")
	}

	if _, err := r.updateStatus(ctx, FileSystemResizePending(claim, now)); err != nil {
		return workers.Gone(err)
	}
	r.pending.Store(claim.UID, now.Time)
	log.Info("resizer: claim FileSystemResizePending")
	r.after(key, r.cfg.FSDelay)
	return nil
}

// finish plays the kubelet once the claim has been FileSystemResizePending
// for FSDelay: its capacity becomes the allocated size (that of the
// volume), and its resize conditions go.
func (r *resizer) finish(ctx context.Context, key cache.ObjectName, claim *corev1.PersistentVolumeClaim) error {
	since, _ := r.pending.LoadOrStore(claim.UID, r.now())
	if wait := r.cfg.FSDelay - r.now().Sub(since.(time.Time)); wait > 0 {
		r.after(key, wait)
		return nil
	}
	size := claim.Status.AllocatedResources[corev1.ResourceStorage]
	if _, err := r.updateStatus(ctx, Resized(claim, size)); err != nil {
		return workers.Gone(err)
	}
	r.pending.Delete(claim.UID)
	r.cfg.Log.WithFields(logrus.Fields{"claim": key.String(), "size": size.String()}).Info("resizer: file system resized")
	return nil
}

// updateStatus writes claim's status through the status subresource, with
// its resourceVersion: a claim changed meanwhile answers Conflict.
func (r *resizer) updateStatus(ctx context.Context, claim *corev1.PersistentVolumeClaim) (*corev1.PersistentVolumeClaim, error) {
	var out *corev1.PersistentVolumeClaim
	err := workers.Call(ctx, func(ctx context.Context) (err error) {
		out, err = r.kube.CoreV1().PersistentVolumeClaims(claim.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim %s/%s status: %w", claim.Namespace, claim.Name, err)
	}
	return out, nil
}
