package informers

import (
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/tools/cache"
)

// The informers are the effects' cache (effects.Cache): the effects read
// there and only write to the API. The readers below, like Postgresql and
// Pods, return the cache's own objects, shared with every reader: callers
// must not modify them (DeepCopy first). Only objects labelled
// application=spilo, and the connection poolers' (application=
// db-connection-pooler), are cached.

// StatefulSet returns the StatefulSet namespace/name from the cache.
func (i *Informers) StatefulSet(namespace, name string) (*appsv1.StatefulSet, bool) {
	s := i.scopeFor(namespace)
	if s == nil {
		return nil, false
	}
	return byKey[*appsv1.StatefulSet](s.statefulSets, namespace, name)
}

// Service returns the Service namespace/name from the cache.
func (i *Informers) Service(namespace, name string) (*corev1.Service, bool) {
	s := i.scopeFor(namespace)
	if s == nil {
		return nil, false
	}
	if svc, ok := byKey[*corev1.Service](s.owned.Core().V1().Services().Informer(), namespace, name); ok {
		return svc, true
	}
	return byKey[*corev1.Service](s.poolerServices, namespace, name)
}

// Deployment returns the Deployment namespace/name from the cache (the
// connection poolers' only: labelled application=db-connection-pooler).
func (i *Informers) Deployment(namespace, name string) (*appsv1.Deployment, bool) {
	s := i.scopeFor(namespace)
	if s == nil {
		return nil, false
	}
	return byKey[*appsv1.Deployment](s.deployments, namespace, name)
}

// CronJob returns the CronJob namespace/name from the cache (the logical
// backups': labelled application=spilo).
func (i *Informers) CronJob(namespace, name string) (*batchv1.CronJob, bool) {
	s := i.scopeFor(namespace)
	if s == nil {
		return nil, false
	}
	return byKey[*batchv1.CronJob](s.cronJobs, namespace, name)
}

// Secret returns the Secret namespace/name from the cache: its metadata
// only, the cache holds no data.
func (i *Informers) Secret(namespace, name string) (*corev1.Secret, bool) {
	s := i.scopeFor(namespace)
	if s == nil {
		return nil, false
	}
	return byKey[*corev1.Secret](s.owned.Core().V1().Secrets().Informer(), namespace, name)
}

// PodDisruptionBudget returns the PodDisruptionBudget namespace/name from
// the cache.
func (i *Informers) PodDisruptionBudget(namespace, name string) (*policyv1.PodDisruptionBudget, bool) {
	s := i.scopeFor(namespace)
	if s == nil {
		return nil, false
	}
	if pdb, ok := byKey[*policyv1.PodDisruptionBudget](s.owned.Policy().V1().PodDisruptionBudgets().Informer(), namespace, name); ok {
		return pdb, true
	}
	return byKey[*policyv1.PodDisruptionBudget](s.poolerBudgets, namespace, name)
}

// ServiceAccount returns the ServiceAccount namespace/name from the cache
// (pgloop's shared ones only: labelled application=spilo).
func (i *Informers) ServiceAccount(namespace, name string) (*corev1.ServiceAccount, bool) {
	s := i.scopeFor(namespace)
	if s == nil {
		return nil, false
	}
	return byKey[*corev1.ServiceAccount](s.owned.Core().V1().ServiceAccounts().Informer(), namespace, name)
}

// Role returns the Role namespace/name from the cache (pgloop's shared
// ones only).
func (i *Informers) Role(namespace, name string) (*rbacv1.Role, bool) {
	s := i.scopeFor(namespace)
	if s == nil {
		return nil, false
	}
	return byKey[*rbacv1.Role](s.owned.Rbac().V1().Roles().Informer(), namespace, name)
}

// RoleBinding returns the RoleBinding namespace/name from the cache
// (pgloop's shared ones only).
func (i *Informers) RoleBinding(namespace, name string) (*rbacv1.RoleBinding, bool) {
	s := i.scopeFor(namespace)
	if s == nil {
		return nil, false
	}
	return byKey[*rbacv1.RoleBinding](s.owned.Rbac().V1().RoleBindings().Informer(), namespace, name)
}

// PersistentVolumeClaims returns the volume claims of cluster key, sorted
// by name.
func (i *Informers) PersistentVolumeClaims(key string) []*corev1.PersistentVolumeClaim {
	s := i.scopeOf(key)
	if s == nil {
		return nil
	}
	claims := indexed[*corev1.PersistentVolumeClaim](s.claims, byCluster, key)
	slices.SortFunc(claims, func(a, b *corev1.PersistentVolumeClaim) int { return strings.Compare(a.Name, b.Name) })
	return claims
}

// byKey returns the object namespace/name of an informer's cache.
func byKey[T any](inf cache.SharedIndexInformer, namespace, name string) (T, bool) {
	return byCacheKey[T](inf, namespace+"/"+name)
}

// byCacheKey returns the object of an informer's cache whose key is key.
func byCacheKey[T any](inf cache.SharedIndexInformer, key string) (T, bool) {
	var zero T
	obj, ok, err := inf.GetStore().GetByKey(key)
	if err != nil || !ok {
		return zero, false
	}
	t, ok := obj.(T)
	return t, ok
}

// indexed returns the objects of an informer's cache whose index value is
// value, in no particular order.
func indexed[T any](inf cache.SharedIndexInformer, index, value string) []T {
	objs, _ := inf.GetIndexer().ByIndex(index, value)
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out
}
