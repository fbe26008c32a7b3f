// Package podreaper finalizes the deleted pods of kwok's nodes for the
// local control plane (test/testbed), in place of kwok's pod-delete stage
// (bin/kwok-stages/pod-delete.yaml). Nothing runs in a fake node's pods, so
// no kubelet ever confirms that one has stopped: someone has to delete a
// pod with a deletionTimestamp for good, with a zero grace period.
//
// kwok v0.8.0's stage does it by name, with no UID precondition
// (deleteResource in its pod controller). When its queue lags, as in a
// rollout of many StatefulSet pods, its delete of an old pod lands on the
// new pod the StatefulSet controller has already made under the same name,
// which is then deleted too, and so on: measured with 20 one-instance
// clusters rolled out at once, pods were re-created every second for
// minutes and never stayed Ready. The reaper deletes with the UID of the
// pod it saw being deleted as a precondition, so a pod of the same name
// made since is left alone.
//
// Pods of nodes the reaper does not manage (process nodes, whose kubelet
// terminates its pods itself) and pods whose status a test writes (kwok's
// --disregard-status-with-annotation-selector) are left alone, as kwok
// leaves them.
//
// Used only by the tests and benchmarks (test/testbed starts it).
package podreaper

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/pgloop/pgloop/test/internal/workers"
)

const (
	// DefaultWorkers is how many pods are deleted at once when
	// Config.Workers is 0.
	DefaultWorkers = 8

	// byNode indexes the cached pods by the node they are bound to, so a
	// node that appears, or becomes managed, brings back its pods being
	// deleted.
	byNode = "nodeName"
)

// Config says which nodes' pods the reaper deletes and how many at once.
type Config struct {
	// Nodes selects, by their annotations, the nodes whose deleted pods
	// are reaped: kwok's --manage-nodes-with-annotation-selector. Nil
	// selects none.
	Nodes labels.Selector
	// Disregard selects, by their annotations, pods left alone: kwok's
	// --disregard-status-with-annotation-selector. Nil selects none.
	Disregard labels.Selector
	// Workers is how many pods are deleted at once; 0 means
	// DefaultWorkers.
	Workers int
	// Log receives a line per pod deleted; nil discards them.
	Log logrus.FieldLogger
}

func (c Config) withDefaults() Config {
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.Nodes == nil {
		c.Nodes = labels.Nothing()
	}
	if c.Disregard == nil {
		c.Disregard = labels.Nothing()
	}
	if c.Log == nil {
		discard := logrus.New()
		discard.SetOutput(io.Discard)
		c.Log = discard
	}
	return c
}

// Run deletes, with a zero grace period and a UID precondition, each pod
// being deleted on a node cfg.Nodes selects, until ctx is done. It returns
// nil when ctx ends and an error only if a cache cannot sync. Pods are
// handled by cfg.Workers goroutines; the queue never gives one pod to two
// of them, and a failed delete comes back with a backoff.
func Run(ctx context.Context, kube kubernetes.Interface, cfg Config) error {
	cfg = cfg.withDefaults()
	factory := informers.NewSharedInformerFactory(kube, 0)
	pods, nodes := factory.Core().V1().Pods(), factory.Core().V1().Nodes()
	if err := pods.Informer().AddIndexers(cache.Indexers{byNode: func(obj any) ([]string, error) {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
			return []string{pod.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return fmt.Errorf("while adding the pods' index: %w", err)
	}
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](20*time.Millisecond, 5*time.Second),
		workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "podreaper"})
	defer queue.ShutDown()

	r := &reaper{kube: kube, pods: pods.Lister(), nodes: nodes.Lister(), cfg: cfg}
	// Only pods being deleted, and bound to a node, are queued: a gone
	// pod has nothing left to do.
	onPod := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok && pod.DeletionTimestamp != nil && pod.Spec.NodeName != "" {
			queue.Add(types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name})
		}
	}
	podIndex := pods.Informer().GetIndexer()
	onNode := func(obj any) {
		node, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		bound, _ := podIndex.ByIndex(byNode, node.Name)
		for _, obj := range bound {
			onPod(obj)
		}
	}
	defer factory.Shutdown()
	if ok, err := workers.Sync(ctx, "podreaper", factory,
		workers.Informer{Informer: pods.Informer(), Handler: workers.OnChange(onPod, false)},
		workers.Informer{Informer: nodes.Informer(), Handler: workers.OnChange(onNode, false)}); !ok {
		return err
	}
	cfg.Log.WithFields(logrus.Fields{"nodes": cfg.Nodes.String(), "workers": cfg.Workers}).Info("podreaper: watching pods")

	workers.Run(ctx, queue, cfg.Workers, r.sync, func(k types.NamespacedName, err error) {
		cfg.Log.WithField("pod", k.String()).WithError(err).Debug("podreaper: retrying")
	})
	return nil
}

type reaper struct {
	kube  kubernetes.Interface
	pods  listersv1.PodLister
	nodes listersv1.NodeLister
	cfg   Config
}

// sync plays pod-delete.yaml for one pod, with a UID precondition. The
// cases:
//
//  1. gone, not being deleted, or not bound to a node: nothing to do;
//  2. its status is a test's (Config.Disregard): left alone, as kwok
//     leaves it;
//  3. its node is not in the cache, or not managed (a process node): left
//     alone; the node's events bring its pods back should it become one;
//  4. finalizers pending and the grace period zero already: the apiserver
//     deletes it once they are removed (the stage removes none either);
//  5. otherwise it is deleted with a zero grace period, under the
//     precondition of its UID: NotFound (gone already) and Conflict (the
//     name is another pod's now, the StatefulSet controller's new one) are
//     done.
func (r *reaper) sync(ctx context.Context, k types.NamespacedName) error {
	pod, err := r.pods.Pods(k.Namespace).Get(k.Name)
	if apierrors.IsNotFound(err) {
		return nil // 1
	}
	if err != nil {
		return err
	}
	if pod.DeletionTimestamp == nil || pod.Spec.NodeName == "" {
		return nil // 1
	}
	if len(pod.Annotations) > 0 && r.cfg.Disregard.Matches(labels.Set(pod.Annotations)) {
		return nil // 2
	}
	node, err := r.nodes.Get(pod.Spec.NodeName)
	if apierrors.IsNotFound(err) {
		return nil // 3
	}
	if err != nil {
		return err
	}
	if !r.cfg.Nodes.Matches(labels.Set(node.Annotations)) {
		return nil // 3
	}
	if len(pod.Finalizers) > 0 && pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0 {
		return nil // 4
	}
	uid := pod.UID
	err = workers.Call(ctx, func(ctx context.Context) error { // 5
		return r.kube.CoreV1().Pods(k.Namespace).Delete(ctx, k.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      &metav1.Preconditions{UID: &uid},
		})
	})
	log := r.cfg.Log.WithFields(logrus.Fields{"pod": k.String(), "uid": uid, "node": pod.Spec.NodeName})
	switch {
	case apierrors.IsNotFound(err):
		log.Debug("podreaper: pod gone already")
		return nil
	case apierrors.IsConflict(err):
		log.Debug("podreaper: the name is another pod's now")
		return nil
	case err != nil:
		return fmt.Errorf("delete pod %s (uid %s): %w", k, uid, err)
	}
	log.Info("podreaper: pod deleted")
	return nil
}
