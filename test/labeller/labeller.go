// Package labeller stands in for Patroni on the nodes kwok plays the
// kubelet of, where no Spilo container runs. It does the two things of
// Patroni that pgloop reads:
//
//   - the role labels: Patroni labels the pod of the leader
//     spilo-role=master and the other members spilo-role=replica; pgloop's
//     Services and PodDisruptionBudget select on them;
//   - the leader record: Patroni holds its leader lock in the ConfigMap
//     <cluster>-leader (annotation leader = the pod's name), and pgloop takes
//     the primary from there, not from the label.
//
// It is used only by the tests, the benchmarks and `make run` (issue 4,
// item 7; issue 7, item 4).
//
// The rule: per cluster (pods labelled application=spilo, grouped by
// cluster-name), the master stays where it is as long as its pod is Ready and
// not terminating, so a replica coming or going never moves it; otherwise the
// lowest-ordinal Ready pod becomes master. Every other pod is a replica. Like
// Patroni it reacts to events (informers), never polls, and writes a label or
// the record only when it differs.
//
// Only pods bound to a kwok node (label type=kwok) are the labeller's. Real
// Patroni runs on the nodes of the process kubelet (type=process): a cluster
// with a pod bound to any node that is not known to be kwok's is Patroni's,
// and the labeller leaves all of it alone, leader record included, lest the
// two fight over the lock. Pods not bound to a node yet are left alone too.
package labeller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	"github.com/pgloop/pgloop/test/internal/workers"
)

const (
	// NodeLabel is the node label that tells who plays a node's kubelet;
	// the labeller serves the pods of nodes where it is KwokNode.
	NodeLabel = "type"
	KwokNode  = "kwok"

	// LeaderTTL is the ttl the leader record states: Patroni's default. The
	// labeller never renews the record (nothing on a kwok node dies without
	// its pod going), and pgloop reads only who holds it.
	LeaderTTL = "30"

	// Workers are the clusters Run handles at once.
	Workers = 4

	// patchTimeout bounds each API call.
	patchTimeout = 10 * time.Second
	// byNode indexes pods by the node they are bound to.
	byNode = "node"
	// isoFormat is how Patroni writes acquireTime and renewTime: Python's
	// datetime.isoformat() of a UTC time.
	isoFormat = "2006-01-02T15:04:05.000000-07:00"
)

// clusterKey names one cluster: its namespace and cluster-name label.
type clusterKey struct {
	Namespace, Name string
}

func (k clusterKey) String() string { return k.Namespace + "/" + k.Name }

// Run labels the spilo pods of namespace ("" means every namespace) and
// writes their clusters' leader records until ctx is done. It needs to
// read nodes besides. It returns nil when ctx ends and an error only if a
// cache cannot sync. Workers clusters are handled at once (the queue never
// gives one cluster to two of them): a burst of thousands of clusters
// (make bench-scale) must not wait for one API call after another.
func Run(ctx context.Context, kube kubernetes.Interface, namespace string, log logrus.FieldLogger) error {
	if log == nil {
		discard := logrus.New()
		discard.SetOutput(io.Discard)
		log = discard
	}
	selector := labels.SelectorFromSet(labels.Set{cluster.LabelApplication: cluster.ApplicationSpilo}).String()
	// Pods and Patroni's ConfigMaps carry application=spilo.
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	nodeFactory := informers.NewSharedInformerFactory(kube, 0)
	pods, configMaps, nodes := factory.Core().V1().Pods(), factory.Core().V1().ConfigMaps(), nodeFactory.Core().V1().Nodes()
	podInformer := pods.Informer()
	if err := podInformer.AddIndexers(cache.Indexers{byNode: nodeIndex}); err != nil {
		return fmt.Errorf("while adding the pod index: %w", err)
	}
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[clusterKey](20*time.Millisecond, 5*time.Second),
		workqueue.TypedRateLimitingQueueConfig[clusterKey]{Name: "labeller"})
	defer queue.ShutDown()

	// enqueue queues the cluster of a pod, or of a leader record.
	enqueue := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		m, ok := obj.(metav1.Object)
		if !ok {
			return
		}
		name := m.GetLabels()[cluster.LabelClusterName]
		if name == "" {
			return
		}
		if _, isConfigMap := obj.(*corev1.ConfigMap); isConfigMap && m.GetName() != cluster.LeaderConfigMapName(name) {
			return // Patroni's other ConfigMaps
		}
		queue.Add(clusterKey{m.GetNamespace(), name})
	}
	// enqueueNode queues the clusters with pods on a node that came, went
	// or changed hands: their pods may have become the labeller's, or
	// stopped being.
	enqueueNode := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		node, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		objs, _ := podInformer.GetIndexer().ByIndex(byNode, node.Name)
		for _, o := range objs {
			enqueue(o)
		}
	}
	handlers := []struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		{podInformer, cache.ResourceEventHandlerFuncs{
			AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue}},
		{configMaps.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue}},
		{nodes.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc: enqueueNode,
			// Kubelets (and kwok) update their nodes' status all the time:
			// only a change of hands matters.
			UpdateFunc: func(oldObj, newObj any) {
				o, ok1 := oldObj.(*corev1.Node)
				n, ok2 := newObj.(*corev1.Node)
				if ok1 && ok2 && o.Labels[NodeLabel] != n.Labels[NodeLabel] {
					enqueueNode(n)
				}
			},
			DeleteFunc: enqueueNode}},
	}
	var synced []cache.InformerSynced
	for _, h := range handlers {
		reg, err := h.informer.AddEventHandler(h.handler)
		if err != nil {
			return fmt.Errorf("while adding a handler: %w", err)
		}
		synced = append(synced, reg.HasSynced)
	}

	factory.Start(ctx.Done())
	nodeFactory.Start(ctx.Done())
	defer factory.Shutdown()
	defer nodeFactory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("labeller: caches did not sync")
	}
	log.WithField("namespace", namespace).Info("labeller: watching spilo pods on kwok nodes")

	l := &labeller{kube: kube, pods: pods.Lister(), configMaps: configMaps.Lister(), nodes: nodes.Lister(), log: log, now: time.Now}
	workers.Run(ctx, queue, Workers, l.sync, func(k clusterKey, err error) {
		log.WithField("cluster", k.String()).WithError(err).Debug("labeller: retrying")
	})
	return nil
}

// nodeIndex indexes a pod under the node it is bound to.
func nodeIndex(obj any) ([]string, error) {
	if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
		return []string{pod.Spec.NodeName}, nil
	}
	return nil, nil
}

type labeller struct {
	kube       kubernetes.Interface
	pods       listersv1.PodLister
	configMaps listersv1.ConfigMapLister
	nodes      listersv1.NodeLister
	log        logrus.FieldLogger
	now        func() time.Time
	// promoted is, by clusterKey, the UID of the pod this labeller last
	// labelled master, until it demotes it: its cache may not show that
	// label yet (sync).
	promoted sync.Map
}

// sync plays Patroni for one cluster: the role labels of its pods as Roles
// decides, and its leader record naming the master. The old master is
// demoted first, then the record names the new one (Patroni takes the lock
// before it promotes), then the new master is promoted, so the master
// Service never selects two pods.
func (l *labeller) sync(ctx context.Context, key clusterKey) error {
	all, err := l.pods.Pods(key.Namespace).List(labels.SelectorFromSet(cluster.Selector(key.Name)))
	if err != nil {
		return err
	}
	var pods []*corev1.Pod
	for _, pod := range all {
		if pod.Spec.NodeName == "" {
			continue // not bound yet: nobody's
		}
		if !l.onKwok(pod) {
			l.log.WithFields(logrus.Fields{"cluster": key.String(), "pod": pod.Name, "node": pod.Spec.NodeName}).
				Debug("labeller: a pod on a node that is not kwok's: the cluster is left to Patroni")
			return nil
		}
		pods = append(pods, pod)
	}
	if len(pods) == 0 {
		return nil
	}
	// The master this labeller promoted last may not carry its label in
	// the cache yet (the watch lags the patch): counted as labelled, or
	// Roles would pick a lower ordinal that just became Ready, and two
	// pods would be master at once.
	if uid, ok := l.promoted.Load(key); ok {
		for i, pod := range pods {
			if pod.UID == uid && pod.Labels[cluster.LabelRole] != cluster.RoleMaster {
				c := pod.DeepCopy()
				c.Labels = mergeLabels(c.Labels, map[string]string{cluster.LabelRole: cluster.RoleMaster})
				pods[i] = c
			}
		}
	}
	want := Roles(pods)
	master := ""
	var demote, promote []*corev1.Pod
	for _, pod := range pods {
		role := want[pod.Name]
		if role == cluster.RoleMaster {
			master = pod.Name
		}
		if pod.Labels[cluster.LabelRole] == role {
			continue
		}
		if role == cluster.RoleMaster {
			promote = append(promote, pod)
		} else {
			demote = append(demote, pod)
		}
	}
	var errs []error
	for _, pod := range demote {
		if wrote, err := l.label(ctx, pod, want[pod.Name]); err != nil {
			errs = append(errs, err)
		} else if wrote {
			l.promoted.CompareAndDelete(key, pod.UID)
		}
	}
	if master != "" {
		if err := l.record(ctx, key, master); err != nil {
			// Patroni promotes only once it holds the lock.
			return errors.Join(append(errs, err)...)
		}
	}
	for _, pod := range promote {
		if wrote, err := l.label(ctx, pod, want[pod.Name]); err != nil {
			errs = append(errs, err)
		} else if wrote {
			l.promoted.Store(key, pod.UID)
		}
	}
	return errors.Join(errs...)
}

// onKwok reports whether pod is bound to a node labelled type=kwok. A node
// not in the cache yet is not known to be kwok's; its arrival queues the
// pod's cluster again.
func (l *labeller) onKwok(pod *corev1.Pod) bool {
	node, err := l.nodes.Get(pod.Spec.NodeName)
	return err == nil && node.Labels[NodeLabel] == KwokNode
}

// label sets the role label of pod with a merge patch that carries the
// resourceVersion the decision was made on: a pod that changed meanwhile
// answers Conflict, and its update event brings the cluster back to the
// queue. A pod that is gone needs no label. wrote says whether the label
// was written.
func (l *labeller) label(ctx context.Context, pod *corev1.Pod, role string) (wrote bool, err error) {
	patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"labels":{%q:%q}}}`, pod.ResourceVersion, cluster.LabelRole, role)
	ctx, cancel := context.WithTimeout(ctx, patchTimeout)
	defer cancel()
	_, err = l.kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	switch {
	case err == nil:
		l.log.WithFields(logrus.Fields{"pod": pod.Namespace + "/" + pod.Name, "role": role}).Info("labeller: labelled")
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	case apierrors.IsConflict(err):
		// The newer version is in the queue already, or will be.
		return false, nil
	default:
		return false, fmt.Errorf("label pod %s/%s %s: %w", pod.Namespace, pod.Name, role, err)
	}
}

// record makes the cluster's leader record name leader, as Patroni 3 does
// when a member takes the lock (patroni/dcs/kubernetes.py,
// attempt_to_acquire_leader): the ConfigMap <cluster>-leader, labelled
// application=spilo and cluster-name=<cluster>, without owner references,
// with the annotations leader, acquireTime and renewTime (now), ttl, and
// transitions (one more than before when the holder changes). A record
// that already names leader is left alone. The update carries the
// resourceVersion of the cached record: a record that changed meanwhile
// answers Conflict, and its event brings the cluster back to the queue; so
// does a create that finds the record already there.
func (l *labeller) record(ctx context.Context, key clusterKey, leader string) error {
	name := cluster.LeaderConfigMapName(key.Name)
	cur, err := l.configMaps.ConfigMaps(key.Namespace).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if cur != nil && cur.Annotations[cluster.AnnotationLeader] == leader {
		return nil
	}
	now := l.now().UTC().Format(isoFormat)
	ctx, cancel := context.WithTimeout(ctx, patchTimeout)
	defer cancel()
	client := l.kube.CoreV1().ConfigMaps(key.Namespace)
	if cur == nil {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Namespace: key.Namespace, Name: name, Labels: cluster.Selector(key.Name),
			Annotations: leaderAnnotations(leader, now, 0),
		}}
		_, err = client.Create(ctx, cm, metav1.CreateOptions{})
	} else {
		transitions, _ := strconv.Atoi(cur.Annotations[cluster.AnnotationTransitions])
		upd := cur.DeepCopy()
		upd.Labels = mergeLabels(upd.Labels, cluster.Selector(key.Name))
		if upd.Annotations == nil {
			upd.Annotations = map[string]string{}
		}
		maps.Copy(upd.Annotations, leaderAnnotations(leader, now, transitions+1))
		_, err = client.Update(ctx, upd, metav1.UpdateOptions{})
	}
	switch {
	case err == nil:
		l.log.WithFields(logrus.Fields{"cluster": key.String(), "leader": leader}).Info("labeller: leader record written")
		return nil
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		return nil
	default:
		return fmt.Errorf("write leader record %s/%s: %w", key.Namespace, name, err)
	}
}

// leaderAnnotations are the annotations of a leader record taken by leader
// at now.
func leaderAnnotations(leader, now string, transitions int) map[string]string {
	return map[string]string{
		cluster.AnnotationLeader:      leader,
		cluster.AnnotationAcquireTime: now,
		cluster.AnnotationRenewTime:   now,
		cluster.AnnotationTTL:         LeaderTTL,
		cluster.AnnotationTransitions: strconv.Itoa(transitions),
	}
}

// mergeLabels returns have with want set, as a new map.
func mergeLabels(have, want map[string]string) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, want)
	return out
}

// Roles returns the role each pod of one cluster should carry, by pod
// name; pods are the cluster's pods the labeller plays Patroni for:
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
