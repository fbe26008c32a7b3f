package informers

import (
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/cache"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/observed"
)

// Objects returns what the facts of cluster key are derived from, read from
// the caches only (it runs on the loop goroutine), and false when its
// resource is not in the cache: pkg/facts reads the caches through it (its
// Reader). They are the cache's own objects, shared with every reader:
// callers must not modify them (DeepCopy first).
func (i *Informers) Objects(key string) (observed.Cluster, bool) {
	pg, ok := i.Postgresql(key)
	if !ok {
		return observed.Cluster{}, false
	}
	s := i.scopeOf(key)
	stsName := cluster.StatefulSetName(pg.Name)
	stsKey := key
	if stsName != pg.Name {
		stsKey = pg.Namespace + "/" + stsName
	}
	objs := observed.Cluster{
		Postgresql: pg,
		Pods:       sortedPods(indexed[*corev1.Pod](s.pods, byCluster, key)),
	}
	objs.StatefulSet, _ = byCacheKey[*appsv1.StatefulSet](s.statefulSets, stsKey)
	for _, role := range cluster.PoolerRoles {
		if d, ok := byKey[*appsv1.Deployment](s.deployments, pg.Namespace, cluster.PoolerName(pg.Name, role)); ok {
			objs.Poolers = append(objs.Poolers, d)
		}
	}
	if len(objs.Poolers) > 0 {
		objs.PoolerPods = sortedPods(indexed[*corev1.Pod](s.poolerPods, byCluster, key))
	}
	objs.LogicalBackup, _ = byKey[*batchv1.CronJob](s.cronJobs, pg.Namespace, cluster.LogicalBackupJobName(pg.Name))
	if pg.PatroniStore() == v1.PatroniStoreEndpoints {
		//lint:ignore SA1019 Patroni 3 keeps its state in v1 Endpoints, which EndpointSlices cannot replace
		objs.LeaderEndpoints, _ = byKey[*corev1.Endpoints](s.endpoints, pg.Namespace, cluster.LeaderEndpointsName(pg.Name))
	} else {
		objs.Leader, _ = byKey[*corev1.ConfigMap](s.configMaps, pg.Namespace, cluster.LeaderConfigMapName(pg.Name))
	}
	secrets := s.owned.Core().V1().Secrets().Informer()
	for _, name := range cluster.Names(pg).Secrets {
		if sec, ok := byKey[*corev1.Secret](secrets, pg.Namespace, name); ok {
			objs.Secrets = append(objs.Secrets, sec)
		}
	}
	// The claims' size is part of the spec in effect: always read (an
	// index lookup, one claim per instance), with the StorageClasses of
	// those smaller than the spec's size.
	objs.Claims = indexed[*corev1.PersistentVolumeClaim](s.claims, byCluster, key)
	objs.StorageClasses = i.classesToGrow(objs.Claims, pg.Spec.Volume.Size)
	if allReady(objs.Pods, pg.Spec.NumberOfInstances) {
		// Warnings and quotas only explain missing or unready pods
		// (observed.Cluster): the healthy path, most observations, reads
		// none of them.
		return objs, true
	}
	objs.StatefulSetWarnings = indexed[*corev1.Event](s.warnings, byInvolvedObject, stsKey)
	objs.Quotas = indexed[*corev1.ResourceQuota](s.quotas, cache.NamespaceIndex, pg.Namespace)
	// Only the Warnings of a Pending claim say anything about the cluster
	// (observed.Cluster): a healthy cluster's claims cost no Event lookup.
	for _, c := range objs.Claims {
		if c.Status.Phase == corev1.ClaimPending {
			objs.ClaimWarnings = append(objs.ClaimWarnings,
				indexed[*corev1.Event](s.claimWarnings, byInvolvedObject, c.Namespace+"/"+c.Name)...)
		}
	}
	return objs, true
}

// allReady reports whether at least desired pods exist, none terminating,
// and every one is Ready.
func allReady(pods []*corev1.Pod, desired int32) bool {
	n := int32(0)
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			return false
		}
		ready := false
		for i := range p.Status.Conditions {
			if c := &p.Status.Conditions[i]; c.Type == corev1.PodReady {
				ready = c.Status == corev1.ConditionTrue
			}
		}
		if !ready {
			return false
		}
		n++
	}
	return n >= desired
}

// sortedPods sorts pods by name, which makes "the first cause found" of
// the facts the same on every read (facts sorts them otherwise).
func sortedPods(pods []*corev1.Pod) []*corev1.Pod {
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return pods
}

// classesToGrow returns the StorageClasses in the cache of the claims that
// ask for less than size: whether they allow volume expansion.
func (i *Informers) classesToGrow(claims []*corev1.PersistentVolumeClaim, size resource.Quantity) []*storagev1.StorageClass {
	var out []*storagev1.StorageClass
	for _, c := range claims {
		if c.Spec.StorageClassName == nil || size.IsZero() {
			continue
		}
		if have := c.Spec.Resources.Requests[corev1.ResourceStorage]; have.Cmp(size) >= 0 {
			continue
		}
		name := *c.Spec.StorageClassName
		if slices.ContainsFunc(out, func(sc *storagev1.StorageClass) bool { return sc.Name == name }) {
			continue
		}
		if sc, ok := i.StorageClass(name); ok {
			out = append(out, sc)
		}
	}
	return out
}

// StorageClass returns the StorageClass name from the cache. It is the
// cache's own object: callers must not modify it.
func (i *Informers) StorageClass(name string) (*storagev1.StorageClass, bool) {
	obj, ok, err := i.classes.GetStore().GetByKey(name)
	if err != nil || !ok {
		return nil, false
	}
	sc, ok := obj.(*storagev1.StorageClass)
	return sc, ok
}
