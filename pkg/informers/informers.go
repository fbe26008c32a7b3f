package informers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	pgclient "github.com/pgloop/pgloop/pkg/generated/clientset/versioned"
	pginformers "github.com/pgloop/pgloop/pkg/generated/informers/externalversions"
)

// Notifier is the event loop's producer side (eventloop.Loop implements it).
// Notify must not block: informer handlers call it on their own goroutines.
type Notifier interface {
	Notify(key, signal string)
	// NotifyUrgent is Notify for a user's action: a Postgresql created,
	// edited or deleted (not its initial listing, nor a resync). The loop
	// takes it ahead of the events of clusters nobody touched.
	NotifyUrgent(key, signal string)
}

// Signals the handlers send, one per kind of change, so the loop's inbox
// coalesces a burst of the same kind into one event per cluster.
const (
	// SignalSpec: the Postgresql resource was added, deleted, or changed in
	// what the state machine reads (generation, deletion, finalizers,
	// labels, annotations).
	SignalSpec = "spec"
	// SignalPods: one of the cluster's pods changed.
	SignalPods = "pods"
	// SignalObjects: another object of the cluster changed (StatefulSet,
	// Service, Secret, PodDisruptionBudget, PersistentVolumeClaim, a
	// connection pooler's Deployment, the logical backup's CronJob).
	SignalObjects = "objects"
	// SignalEvents: a Warning Event about the cluster's StatefulSet
	// (FailedCreate, e.g. exceeded quota) or one of its claims
	// (ProvisioningFailed, e.g. a StorageClass not found) arrived.
	SignalEvents = "events"
	// SignalQuota: a ResourceQuota of the cluster's namespace changed; a
	// cluster whose pods a quota refused may be created now.
	SignalQuota = "quota"
	// SignalLeader: Patroni's leader record of the cluster changed hands
	// (or appeared, or went).
	SignalLeader = "leader"
)

// Options configure New. The zero value watches every namespace.
type Options struct {
	// Namespaces to watch. Empty (or containing "") means all namespaces;
	// otherwise one set of informers runs per namespace, so the operator
	// needs RBAC in those namespaces only.
	Namespaces []string
	// Resync is the informers' resync period; 0 means none. pgloop has its
	// own resync timers per cluster, so it needs none.
	Resync time.Duration
	// Log receives debug lines about objects that map to no cluster. Nil
	// means the standard logger.
	Log *logrus.Entry
}

// Index names of the caches.
const (
	// byCluster indexes the objects of a cluster by cluster key
	// ("namespace/cluster-name"), from their cluster-name label.
	byCluster = "cluster"
	// byInvolvedObject indexes Events by "namespace/name" of the object
	// they are about.
	byInvolvedObject = "involvedObject"
)

// scope is the set of informers of one namespace (or of all namespaces).
type scope struct {
	owned       kubeinformers.SharedInformerFactory
	events      kubeinformers.SharedInformerFactory
	claimEvents kubeinformers.SharedInformerFactory
	// namespaced holds the informers of every object of their kind in the
	// scope, not only pgloop's: ResourceQuotas.
	namespaced kubeinformers.SharedInformerFactory
	// pgloop holds the informer of the Postgresql resources.
	pgloop pginformers.SharedInformerFactory
	// poolers holds the informers of the connection poolers' objects,
	// labelled application=db-connection-pooler: their Deployments,
	// Services and PodDisruptionBudgets.
	poolers kubeinformers.SharedInformerFactory
	// deployments, poolerServices, poolerBudgets and poolerPods are
	// poolers'; poolerPods are indexed byCluster.
	deployments, poolerServices, poolerBudgets, poolerPods cache.SharedIndexInformer

	postgresqls cache.SharedIndexInformer
	pods        cache.SharedIndexInformer
	// cronJobs are the clusters' logical backup CronJobs.
	cronJobs     cache.SharedIndexInformer
	statefulSets cache.SharedIndexInformer
	claims       cache.SharedIndexInformer
	// warnings are the Warning Events of StatefulSets, claimWarnings
	// those of claims; both indexed byInvolvedObject.
	warnings      cache.SharedIndexInformer
	claimWarnings cache.SharedIndexInformer
	// quotas are the ResourceQuotas, indexed by namespace.
	quotas cache.SharedIndexInformer
	// configMaps are Patroni's (pgloop writes none): the leader record of
	// a cluster on ConfigMaps is read from them. endpoints are Patroni's
	// too, and those the endpoints controller keeps for the Services
	// with a selector: the leader record of a cluster on Endpoints is
	// read from them (cluster.LeaderRecordName).
	configMaps, endpoints cache.SharedIndexInformer
	// synced complete once each handler has been handed its informer's
	// initial list (which implies the informer's cache holds it).
	synced []cache.DoneChecker
}

// Informers are pgloop's caches and the handlers that notify the loop.
type Informers struct {
	// all is set when every namespace is watched; otherwise byNamespace
	// holds one scope per watched namespace.
	all         *scope
	byNamespace map[string]*scope
	scopes      []*scope

	// classes are the StorageClasses (cluster-scoped, all of them):
	// whether a claim's class allows volume expansion. classesSynced
	// completes once its handler has seen the initial list.
	classFactory  kubeinformers.SharedInformerFactory
	classes       cache.SharedIndexInformer
	classesSynced cache.DoneChecker

	notifier Notifier
	log      *logrus.Entry

	startOnce sync.Once
}

// New sets up the informers and registers their handlers; nothing runs
// until Start. n is notified of every change, keyed by cluster.
func New(kube kubernetes.Interface, pg pgclient.Interface, opts Options, n Notifier) *Informers {
	i := &Informers{notifier: n, log: opts.Log}
	if i.log == nil {
		i.log = logrus.NewEntry(logrus.StandardLogger())
	}
	i.classFactory = kubeinformers.NewSharedInformerFactoryWithOptions(kube, opts.Resync, kubeinformers.WithTransform(transform))
	i.classes = i.classFactory.Storage().V1().StorageClasses().Informer()
	if reg, err := i.classes.AddEventHandler(i.classHandler()); err != nil {
		i.must(err)
	} else {
		i.classesSynced = reg.HasSyncedChecker()
	}
	namespaces := slices.Clone(opts.Namespaces)
	slices.Sort(namespaces)
	namespaces = slices.Compact(namespaces)
	if len(namespaces) == 0 || slices.Contains(namespaces, metav1.NamespaceAll) {
		i.all = i.newScope(kube, pg, metav1.NamespaceAll, opts.Resync)
		i.scopes = []*scope{i.all}
		return i
	}
	i.byNamespace = make(map[string]*scope, len(namespaces))
	for _, ns := range namespaces {
		s := i.newScope(kube, pg, ns, opts.Resync)
		i.byNamespace[ns] = s
		i.scopes = append(i.scopes, s)
	}
	return i
}

func (i *Informers) newScope(kube kubernetes.Interface, pg pgclient.Interface, ns string, resync time.Duration) *scope {
	spilo := labels.Set{cluster.LabelApplication: cluster.ApplicationSpilo}.String()
	pooler := labels.Set{cluster.LabelApplication: cluster.ApplicationPooler}.String()
	// Only Warnings explain stuck pods; the Normal SuccessfulCreate and
	// SuccessfulDelete of every pod would be most of the cache otherwise.
	statefulSetEvents := fields.Set{"involvedObject.kind": "StatefulSet", "type": corev1.EventTypeWarning}.AsSelector().String()
	claimEvents := fields.Set{"involvedObject.kind": "PersistentVolumeClaim", "type": corev1.EventTypeWarning}.AsSelector().String()
	s := &scope{
		owned: kubeinformers.NewSharedInformerFactoryWithOptions(kube, resync,
			kubeinformers.WithNamespace(ns),
			kubeinformers.WithTransform(transform),
			kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = spilo })),
		events: kubeinformers.NewSharedInformerFactoryWithOptions(kube, resync,
			kubeinformers.WithNamespace(ns),
			kubeinformers.WithTransform(transform),
			kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = statefulSetEvents })),
		claimEvents: kubeinformers.NewSharedInformerFactoryWithOptions(kube, resync,
			kubeinformers.WithNamespace(ns),
			kubeinformers.WithTransform(transform),
			kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = claimEvents })),
		namespaced: kubeinformers.NewSharedInformerFactoryWithOptions(kube, resync,
			kubeinformers.WithNamespace(ns),
			kubeinformers.WithTransform(transform)),
		pgloop: pginformers.NewSharedInformerFactoryWithOptions(pg, resync,
			pginformers.WithNamespace(ns),
			pginformers.WithTransform(transform)),
		poolers: kubeinformers.NewSharedInformerFactoryWithOptions(kube, resync,
			kubeinformers.WithNamespace(ns),
			kubeinformers.WithTransform(transform),
			kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = pooler })),
	}

	// Indexed by namespace, as every informer of a factory. Its list and
	// watch opt out of watch-list semantics when the client does, as the
	// fake clientset of tests does.
	s.postgresqls = s.pgloop.Pgloop().V1().Postgresqls().Informer()
	s.pods = s.owned.Core().V1().Pods().Informer()
	s.statefulSets = s.owned.Apps().V1().StatefulSets().Informer()
	s.cronJobs = s.owned.Batch().V1().CronJobs().Informer()
	s.claims = s.owned.Core().V1().PersistentVolumeClaims().Informer()
	services := s.owned.Core().V1().Services().Informer()
	// Secrets are watched for their existence only; slim drops their data
	// before it reaches the cache, so it can never be logged from there.
	secrets := s.owned.Core().V1().Secrets().Informer()
	pdbs := s.owned.Policy().V1().PodDisruptionBudgets().Informer()
	// Patroni labels its ConfigMaps and Endpoints application=spilo too
	// (its KUBERNETES_LABELS), so the same filter finds them.
	s.configMaps = s.owned.Core().V1().ConfigMaps().Informer()
	s.endpoints = s.owned.Core().V1().Endpoints().Informer()
	s.warnings = s.events.Core().V1().Events().Informer()
	s.claimWarnings = s.claimEvents.Core().V1().Events().Informer()
	s.quotas = s.namespaced.Core().V1().ResourceQuotas().Informer()
	s.deployments = s.poolers.Apps().V1().Deployments().Informer()
	s.poolerServices = s.poolers.Core().V1().Services().Informer()
	s.poolerBudgets = s.poolers.Policy().V1().PodDisruptionBudgets().Informer()
	s.poolerPods = s.poolers.Core().V1().Pods().Informer()

	i.must(s.pods.AddIndexers(cache.Indexers{byCluster: clusterIndex}))
	i.must(s.claims.AddIndexers(cache.Indexers{byCluster: clusterIndex}))
	i.must(s.poolerPods.AddIndexers(cache.Indexers{byCluster: clusterIndex}))
	i.must(s.warnings.AddIndexers(cache.Indexers{byInvolvedObject: involvedObjectIndex}))
	i.must(s.claimWarnings.AddIndexers(cache.Indexers{byInvolvedObject: involvedObjectIndex}))
	// The factory's informers come with the namespace index, which
	// Objects reads the quotas by.

	s.addHandler(i, s.postgresqls, i.specHandler())
	s.addHandler(i, s.pods, i.ownedHandler(SignalPods))
	for _, inf := range []cache.SharedIndexInformer{s.statefulSets, s.claims, services, secrets, pdbs, s.cronJobs} {
		s.addHandler(i, inf, i.ownedHandler(SignalObjects))
	}
	// The apiserver lists and watches the poolers' objects by their
	// label; the filter makes sure a watch that does not (client-go's
	// fakes) does not notify twice.
	for _, inf := range []cache.SharedIndexInformer{s.deployments, s.poolerServices, s.poolerBudgets, s.poolerPods} {
		s.addHandler(i, inf, cache.FilteringResourceEventHandler{
			FilterFunc: func(obj any) bool {
				m, ok := untombed(obj).(metav1.Object)
				return ok && m.GetLabels()[cluster.LabelApplication] == cluster.ApplicationPooler
			},
			Handler: i.ownedHandler(SignalObjects),
		})
	}
	s.addHandler(i, s.configMaps, i.leaderHandler(cluster.LeaderConfigMapName))
	s.addHandler(i, s.endpoints, i.leaderHandler(cluster.LeaderEndpointsName))
	s.addHandler(i, s.warnings, i.eventHandler(s, "StatefulSet"))
	s.addHandler(i, s.claimWarnings, i.eventHandler(s, "PersistentVolumeClaim"))
	s.addHandler(i, s.quotas, i.quotaHandler(s))
	// The objects the clusters of a namespace share are read from the
	// cache by the effects, so that a restarted operator finds them in
	// place without a call; a change of them asks for nothing (the
	// resync restores one deleted by hand).
	for _, inf := range []cache.SharedIndexInformer{s.owned.Core().V1().ServiceAccounts().Informer(),
		s.owned.Rbac().V1().Roles().Informer(), s.owned.Rbac().V1().RoleBindings().Informer()} {
		s.addHandler(i, inf, cache.ResourceEventHandlerFuncs{})
	}
	return s
}

// addHandler registers h and remembers when it has seen the initial list.
func (s *scope) addHandler(i *Informers, inf cache.SharedIndexInformer, h cache.ResourceEventHandler) {
	reg, err := inf.AddEventHandler(h)
	if err != nil {
		i.must(err)
		return
	}
	s.synced = append(s.synced, reg.HasSyncedChecker())
}

// must reports a setup error of client-go. They only happen when an
// informer has already started, which New rules out.
func (i *Informers) must(err error) {
	if err != nil {
		i.log.WithError(err).Error("informer setup")
	}
}

// Start starts every informer; it does not wait for them. They stop when
// ctx is done. Calls after the first do nothing.
func (i *Informers) Start(ctx context.Context) {
	i.startOnce.Do(func() {
		i.classFactory.Start(ctx.Done())
		for _, s := range i.scopes {
			s.owned.Start(ctx.Done())
			s.events.Start(ctx.Done())
			s.claimEvents.Start(ctx.Done())
			s.namespaced.Start(ctx.Done())
			s.pgloop.Start(ctx.Done())
			s.poolers.Start(ctx.Done())
		}
	})
}

// WaitForCacheSync blocks until every cache holds its initial list and
// every handler has notified it, so the loop never acts on a partial view
// (a cluster whose pods are not listed yet looks like one with no pods). It
// returns an error when ctx is done first.
func (i *Informers) WaitForCacheSync(ctx context.Context) error {
	var synced []cache.DoneChecker
	if i.classesSynced != nil {
		synced = append(synced, i.classesSynced)
	}
	for _, s := range i.scopes {
		synced = append(synced, s.synced...)
	}
	// WaitFor is woken by the informers rather than polling every 100ms.
	if !cache.WaitFor(ctx, "", synced...) {
		return fmt.Errorf("wait for informer caches to sync: %w", context.Cause(ctx))
	}
	return nil
}

// scopeFor returns the scope that watches namespace ns, nil when none does.
func (i *Informers) scopeFor(ns string) *scope {
	if i.all != nil {
		return i.all
	}
	return i.byNamespace[ns]
}

// scopeOf returns the scope of a cluster key, nil when none watches it.
func (i *Informers) scopeOf(key string) *scope {
	ns, _, _ := strings.Cut(key, "/")
	return i.scopeFor(ns)
}

// Keys returns the key of every cluster in the cache, sorted, for the loop
// to enqueue at start: a cluster whose resource did not change while the
// operator was down gets no watch event, yet must be resumed.
func (i *Informers) Keys() []string {
	var keys []string
	for _, s := range i.scopes {
		keys = append(keys, s.postgresqls.GetStore().ListKeys()...)
	}
	slices.Sort(keys)
	return keys
}

// Postgresqls returns the clusters of namespace in the cache, in no
// particular order: the cleanup of a cluster deletes the objects the
// clusters of its namespace share when it finds no other. They are the
// cache's own objects: callers must not modify them.
func (i *Informers) Postgresqls(namespace string) []*v1.Postgresql {
	s := i.scopeFor(namespace)
	if s == nil {
		return nil
	}
	return indexed[*v1.Postgresql](s.postgresqls, cache.NamespaceIndex, namespace)
}

// Postgresql returns the cluster key from the cache. It is the cache's own
// object, shared with every reader: callers must not modify it (DeepCopy
// first).
func (i *Informers) Postgresql(key string) (*v1.Postgresql, bool) {
	s := i.scopeOf(key)
	if s == nil {
		return nil, false
	}
	obj, ok, err := s.postgresqls.GetStore().GetByKey(key)
	if err != nil || !ok {
		return nil, false
	}
	pg, ok := obj.(*v1.Postgresql)
	return pg, ok
}

// Pods returns the pods of cluster key, terminating ones included, sorted
// by name. They are the cache's objects: callers must not modify them.
func (i *Informers) Pods(key string) []*corev1.Pod {
	s := i.scopeOf(key)
	if s == nil {
		return nil
	}
	return sortedPods(indexed[*corev1.Pod](s.pods, byCluster, key))
}

// clusterIndex indexes an object under the key of the cluster its
// cluster-name label names. Labels, not owner references: pods are owned by
// the StatefulSet and claims by nobody, while all carry the label (the
// StatefulSet copies it from its templates).
func clusterIndex(obj any) ([]string, error) {
	if key, ok := clusterKey(obj); ok {
		return []string{key}, nil
	}
	return nil, nil
}

// involvedObjectIndex indexes an Event under "namespace/name" of the object
// it is about.
func involvedObjectIndex(obj any) ([]string, error) {
	ev, ok := obj.(*corev1.Event)
	if !ok {
		return nil, nil
	}
	return []string{involvedKey(ev)}, nil
}

func involvedKey(ev *corev1.Event) string {
	ns := ev.InvolvedObject.Namespace
	if ns == "" {
		ns = ev.Namespace
	}
	return ns + "/" + ev.InvolvedObject.Name
}

// clusterKey returns "namespace/cluster-name" of an object of a cluster.
func clusterKey(obj any) (string, bool) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return "", false
	}
	name := m.GetLabels()[cluster.LabelClusterName]
	if name == "" {
		return "", false
	}
	return m.GetNamespace() + "/" + name, true
}

// slim drops from an object what pgloop never reads before it enters a
// cache (client-go's transform: the handlers see the slimmed object too).
// What each kind keeps is what its readers read (pkg/facts, the effects'
// Cache, pkg/archiving), and what an effect that updates an object read
// from the cache writes back (cluster.ApplyStatefulSet keeps a
// StatefulSet's spec but its pod template, cluster.ApplyService a
// Service's spec, the cleanup's Update a Postgresql's metadata), so those
// keep all but managed fields:
//   - every object: no managed fields (often the larger part of the
//     metadata);
//   - a StatefulSet: slimStatefulSet;
//   - a Postgresql: no kubectl last-applied-configuration annotation, a
//     copy of its spec kubectl keeps (the one Update of a cached
//     Postgresql, the cleanup's removal of the finalizer, is its last
//     write: the resource is being deleted);
//   - a pod: slimPod; a PersistentVolumeClaim: slimClaim;
//   - a PodDisruptionBudget: no status (its healthy pods and conditions),
//     which nothing reads; the ensure's Update of a cached one leaves it
//     to the apiserver, which keeps the stored status on an update;
//   - a Secret: no data, which pgloop only needs to know exists (and so
//     can never log from the cache);
//   - a ConfigMap (Patroni's: leader, config, failover, sync): no data and
//     only the leader annotation, the member holding Patroni's lock: the
//     rest (renewTime, optime, the dynamic configuration, the history) is
//     rewritten every HA loop and read by no one;
//   - an Endpoints (Patroni's on Endpoints, or the endpoints controller's
//     of a Service with a selector): the same, and no subsets (the
//     addresses, which the facts take from the pods).
func slim(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *v1.Postgresql:
		delete(o.Annotations, corev1.LastAppliedConfigAnnotation)
	case *appsv1.StatefulSet:
		slimStatefulSet(o)
	case *corev1.Pod:
		slimPod(o)
	case *corev1.PersistentVolumeClaim:
		slimClaim(o)
	case *policyv1.PodDisruptionBudget:
		o.Status = policyv1.PodDisruptionBudgetStatus{}
	case *corev1.Secret:
		o.Data, o.StringData = nil, nil
	case *corev1.ConfigMap:
		o.Data, o.BinaryData = nil, nil
		o.Annotations = leaderOnly(o.Annotations)
	//lint:ignore SA1019 Patroni 3 keeps its state in v1 Endpoints, which EndpointSlices cannot replace
	case *corev1.Endpoints:
		o.Subsets = nil
		o.Annotations = leaderOnly(o.Annotations)
	}
	return obj, nil
}

// leaderOnly returns Patroni's leader annotation of annotations, nil when
// there is none.
func leaderOnly(annotations map[string]string) map[string]string {
	if leader, ok := annotations[cluster.AnnotationLeader]; ok {
		return map[string]string{cluster.AnnotationLeader: leader}
	}
	return nil
}

// slimStatefulSet keeps of a StatefulSet all but its pod template (most
// of it), and of the template what the facts read: its hash annotation
// (cluster.Compare, cluster.PodUpToDate) and of each container its name,
// SPILO_CONFIGURATION (cluster.BootstrapConfig) and the variables that
// choose Patroni's store (cluster.StoreEnv, cluster.TemplatePatroniStore). No effect writes the
// cached template back: the ensure's update takes the template from the
// spec (cluster.ApplyStatefulSet), or, while the cluster waits for a
// rollout slot, reads the one to keep from the API.
func slimStatefulSet(s *appsv1.StatefulSet) {
	t := &s.Spec.Template
	var annotations map[string]string
	if h, ok := t.Annotations[cluster.AnnotationPodTemplateHash]; ok {
		annotations = map[string]string{cluster.AnnotationPodTemplateHash: h}
	}
	containers := make([]corev1.Container, len(t.Spec.Containers))
	for i, c := range t.Spec.Containers {
		containers[i].Name = c.Name
		for _, e := range c.Env {
			if e.Name == cluster.SpiloConfigurationVar || slices.Contains(cluster.StoreEnv, e.Name) {
				containers[i].Env = append(containers[i].Env, e)
			}
		}
	}
	*t = corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}, Spec: corev1.PodSpec{Containers: containers}}
}

// slimPod keeps of a pod (pgloop's and its poolers') its metadata, managed
// fields apart, and what the facts and the effects read of the rest: the
// node it is bound to and its scheduler (facts: scheduled,
// schedulingFailure); its phase, conditions and IP; of each container's
// status its name, readiness and state (facts: runsNothing,
// stuckContainer). The rest of its spec (containers, their environment,
// volumes, affinity: most of a pod) is the StatefulSet's template, which
// the facts compare by its hash annotation. No effect writes a pod read
// from the cache: they delete it by name and UID, or patch it.
func slimPod(p *corev1.Pod) {
	p.Spec = corev1.PodSpec{NodeName: p.Spec.NodeName, SchedulerName: p.Spec.SchedulerName}
	st := &p.Status
	*st = corev1.PodStatus{Phase: st.Phase, Conditions: st.Conditions, PodIP: st.PodIP,
		InitContainerStatuses: slimContainers(st.InitContainerStatuses), ContainerStatuses: slimContainers(st.ContainerStatuses)}
}

// slimClaim keeps of a claim its metadata, managed fields and annotations
// (the binder's and the provisioner's) apart, and what the facts
// (volumes, stuck, wrongClassClaim) and the ensure's resize read of the
// rest: its class, its request and the volume it is bound to; its phase,
// capacity and conditions (a resize pending on the file system). No effect
// writes a claim read from the cache: the resize patches its request.
func slimClaim(c *corev1.PersistentVolumeClaim) {
	c.Annotations = nil
	c.Spec = corev1.PersistentVolumeClaimSpec{StorageClassName: c.Spec.StorageClassName, Resources: c.Spec.Resources, VolumeName: c.Spec.VolumeName}
	c.Status = corev1.PersistentVolumeClaimStatus{Phase: c.Status.Phase, Capacity: c.Status.Capacity, Conditions: c.Status.Conditions}
}

// slimContainers returns the name, readiness and state of each status.
func slimContainers(statuses []corev1.ContainerStatus) []corev1.ContainerStatus {
	if len(statuses) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(statuses))
	for i, s := range statuses {
		out[i] = corev1.ContainerStatus{Name: s.Name, Ready: s.Ready, State: s.State}
	}
	return out
}
