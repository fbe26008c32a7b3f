// Package labeller stands in for Patroni's role labelling on the local
// control plane, where no Spilo container runs: Patroni would label the pod
// of the leader spilo-role=master and the other members spilo-role=replica,
// and pgloop's Services, PodDisruptionBudget and readiness rules select on
// that label. It is used only by the tests and `make run` (issue 4, item 7).
//
// The rule: per cluster (pods labelled application=spilo, grouped by
// cluster-name), the master stays where it is as long as its pod is Ready and
// not terminating, so a replica coming or going never moves it; otherwise the
// lowest-ordinal Ready pod becomes master. Every other pod is a replica. Like
// Patroni it reacts to pod events (an informer), never polls, and patches a
// label only when it differs.
package labeller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
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

	"github.com/pgloop/pgloop/pkg/cluster"
)

// patchTimeout bounds each API call.
const patchTimeout = 10 * time.Second

// clusterKey names one cluster: its namespace and cluster-name label.
type clusterKey struct {
	Namespace, Name string
}

func (k clusterKey) String() string { return k.Namespace + "/" + k.Name }

// Run labels the spilo pods of namespace ("" means every namespace) until
// ctx is done. It returns nil when ctx ends and an error only if the pod
// cache cannot sync. One worker handles the clusters in turn: the labeller
// serves tests, where a handful of clusters change at a time.
func Run(ctx context.Context, kube kubernetes.Interface, namespace string, log logrus.FieldLogger) error {
	if log == nil {
		discard := logrus.New()
		discard.SetOutput(io.Discard)
		log = discard
	}
	selector := labels.SelectorFromSet(labels.Set{cluster.LabelApplication: cluster.ApplicationSpilo}).String()
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	podInformer := factory.Core().V1().Pods()
	informer := podInformer.Informer()
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[clusterKey](20*time.Millisecond, 5*time.Second),
		workqueue.TypedRateLimitingQueueConfig[clusterKey]{Name: "labeller"})
	defer queue.ShutDown()

	enqueue := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		if name := pod.Labels[cluster.LabelClusterName]; name != "" {
			queue.Add(clusterKey{pod.Namespace, name})
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return fmt.Errorf("while adding the pod handler: %w", err)
	}

	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("labeller: pod cache did not sync")
	}
	log.WithField("namespace", namespace).Info("labeller: watching spilo pods")

	l := &labeller{kube: kube, pods: podInformer.Lister(), log: log}
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		key, shutdown := queue.Get()
		if shutdown {
			return nil
		}
		if err := l.sync(ctx, key); err != nil && ctx.Err() == nil {
			log.WithField("cluster", key.String()).WithError(err).Debug("labeller: retrying")
			queue.AddRateLimited(key)
		} else {
			queue.Forget(key)
		}
		queue.Done(key)
	}
}

type labeller struct {
	kube kubernetes.Interface
	pods listersv1.PodLister
	log  logrus.FieldLogger
}

// sync brings the role labels of one cluster's pods to what Roles decides.
// The old master is demoted before the new one is promoted, so the master
// Service never selects two pods.
func (l *labeller) sync(ctx context.Context, key clusterKey) error {
	pods, err := l.pods.Pods(key.Namespace).List(labels.SelectorFromSet(cluster.Selector(key.Name)))
	if err != nil {
		return err
	}
	want := Roles(pods)
	var demote, promote []*corev1.Pod
	for _, pod := range pods {
		role, ok := want[pod.Name]
		if !ok || pod.Labels[cluster.LabelRole] == role {
			continue
		}
		if role == cluster.RoleMaster {
			promote = append(promote, pod)
		} else {
			demote = append(demote, pod)
		}
	}
	var errs []error
	for _, pod := range append(demote, promote...) {
		if err := l.label(ctx, pod, want[pod.Name]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// label sets the role label of pod with a merge patch that carries the
// resourceVersion the decision was made on: a pod that changed meanwhile
// answers Conflict, and its update event brings the cluster back to the
// queue. A pod that is gone needs no label.
func (l *labeller) label(ctx context.Context, pod *corev1.Pod, role string) error {
	patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"labels":{%q:%q}}}`, pod.ResourceVersion, cluster.LabelRole, role)
	ctx, cancel := context.WithTimeout(ctx, patchTimeout)
	defer cancel()
	_, err := l.kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	switch {
	case err == nil:
		l.log.WithFields(logrus.Fields{"pod": pod.Namespace + "/" + pod.Name, "role": role}).Info("labeller: labelled")
		return nil
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		// The newer version is in the queue already, or will be.
		return nil
	default:
		return fmt.Errorf("label pod %s/%s %s: %w", pod.Namespace, pod.Name, role, err)
	}
}

// Roles returns the role each pod of one cluster should carry, by pod name:
//  1. the pods labelled master that are still Ready and not terminating keep
//     the role, the lowest ordinal among them if there are several (which
//     only a hand edit makes);
//  2. else the lowest-ordinal Ready pod that is not terminating is master;
//  3. every other pod, Ready or not, is a replica; with no Ready pod there is
//     no master.
func Roles(pods []*corev1.Pod) map[string]string {
	sorted := slices.Clone(pods)
	slices.SortFunc(sorted, func(a, b *corev1.Pod) int {
		if oa, ob := ordinal(a.Name), ordinal(b.Name); oa != ob {
			return oa - ob
		}
		return strings.Compare(a.Name, b.Name)
	})
	master := ""
	for _, pod := range sorted {
		if pod.Labels[cluster.LabelRole] == cluster.RoleMaster && eligible(pod) {
			master = pod.Name
			break
		}
	}
	if master == "" {
		for _, pod := range sorted {
			if eligible(pod) {
				master = pod.Name
				break
			}
		}
	}
	roles := make(map[string]string, len(pods))
	for _, pod := range pods {
		roles[pod.Name] = cluster.RoleReplica
	}
	if master != "" {
		roles[master] = cluster.RoleMaster
	}
	return roles
}

// eligible reports whether pod may hold the master role: Ready and not
// being deleted.
func eligible(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ordinal returns the StatefulSet ordinal at the end of a pod's name, or a
// large number for a name without one, which sorts such pods last.
func ordinal(name string) int {
	i := strings.LastIndexByte(name, '-')
	if n, err := strconv.Atoi(name[i+1:]); err == nil && n >= 0 {
		return n
	}
	return 1 << 30
}
