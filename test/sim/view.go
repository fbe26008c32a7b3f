package sim

import (
	"slices"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/effects"
	"github.com/pgloop/pgloop/pkg/facts"
	"github.com/pgloop/pgloop/pkg/informers"
	"github.com/pgloop/pgloop/pkg/observed"
)

// view stands in for pkg/informers: the operator's caches of the API,
// which the simulator fills with the API's changes when it decides (late,
// or dropped and then relisted), and which notifies the loop as the
// informers' handlers do. The real informers run goroutines of their own
// whose order a seed cannot decide; the view is filled on the simulator's
// goroutine only. Like the informers it caches only the objects labelled
// application=spilo among the owned kinds, and no Secret or ConfigMap data.
type view struct {
	mu   sync.RWMutex
	objs map[objKey]runtime.Object
}

var (
	_ facts.Reader  = (*view)(nil)
	_ effects.Cache = (*view)(nil)
)

// owned are the kinds cached only when labelled application=spilo.
var owned = map[string]bool{"pods": true, "statefulsets": true, "services": true, "secrets": true,
	"poddisruptionbudgets": true, "persistentvolumeclaims": true, "configmaps": true,
	"serviceaccounts": true, "roles": true, "rolebindings": true, "cronjobs": true}

func newView() *view { return &view{objs: map[objKey]runtime.Object{}} }

// cached returns what the cache keeps of obj, nil when it keeps nothing.
func cached(key objKey, obj runtime.Object) runtime.Object {
	if obj == nil {
		return nil
	}
	if owned[key.res] && objMeta(obj).GetLabels()[cluster.LabelApplication] != cluster.ApplicationSpilo {
		return nil
	}
	switch o := obj.(type) {
	case *corev1.Secret:
		o.Data, o.StringData = nil, nil
	case *corev1.ConfigMap:
		o.Data, o.BinaryData = nil, nil
	}
	return obj
}

// apply puts one object (nil: its deletion) in the cache and returns the
// signals the informers' handlers would send for the change, as
// "cluster-key signal" pairs.
func (v *view) apply(key objKey, obj runtime.Object) [][2]string {
	obj = cached(key, obj)
	v.mu.Lock()
	old := v.objs[key]
	if obj == nil {
		delete(v.objs, key)
	} else {
		v.objs[key] = obj
	}
	v.mu.Unlock()
	if old == nil && obj == nil {
		return nil
	}
	return signals(key, old, obj)
}

// relist replaces the cached objects of one kind (res) with a list of
// the API, as the informer of that kind does when its watch ends with 410
// Gone (its resourceVersion too old, compacted) and its reflector lists
// again: client-go (tools/cache processReplacedAllInfo) hands the
// handlers first a delete of each cached object the list lacks (a
// DeletedFinalStateUnknown), then an update of every listed object that
// was cached, changed or not, and an add of the others; each in key
// order here. It returns the signals the handlers send for them: an
// update that changed nothing still notifies for the owned kinds (their
// handlers do not compare), not for a Postgresql whose spec is the same
// (informers.SpecChanged) nor for a leader record naming the same member.
func (v *view) relist(res string, objs map[objKey]runtime.Object) [][2]string {
	var listed, deleted []objKey
	for k := range objs {
		if k.res == res {
			listed = append(listed, k)
		}
	}
	v.mu.RLock()
	for k := range v.objs {
		if _, ok := objs[k]; !ok && k.res == res {
			deleted = append(deleted, k)
		}
	}
	v.mu.RUnlock()
	byKey := func(x, y objKey) int { return strings.Compare(x.String(), y.String()) }
	slices.SortFunc(deleted, byKey)
	slices.SortFunc(listed, byKey)
	var out [][2]string
	for _, k := range deleted {
		out = append(out, v.apply(k, nil)...)
	}
	for _, k := range listed {
		out = append(out, v.apply(k, objs[k])...)
	}
	return out
}

// signals are what pkg/informers' handlers notify for a change of one
// object from old to cur (either may be nil).
func signals(key objKey, old, cur runtime.Object) [][2]string {
	either := cur
	if either == nil {
		either = old
	}
	m := objMeta(either)
	clusterKey := m.GetNamespace() + "/" + m.GetLabels()[cluster.LabelClusterName]
	switch key.res {
	case "postgresqls":
		if old != nil && cur != nil && !informers.SpecChanged(old.(*v1.Postgresql), cur.(*v1.Postgresql)) {
			return nil
		}
		return [][2]string{{key.ns + "/" + key.name, informers.SignalSpec}}
	case "configmaps":
		if m.GetLabels()[cluster.LabelClusterName] == "" || key.name != cluster.LeaderConfigMapName(m.GetLabels()[cluster.LabelClusterName]) {
			return nil
		}
		if old != nil && cur != nil && objMeta(old).GetAnnotations()[cluster.AnnotationLeader] == objMeta(cur).GetAnnotations()[cluster.AnnotationLeader] {
			return nil
		}
		return [][2]string{{clusterKey, informers.SignalLeader}}
	case "pods":
		if m.GetLabels()[cluster.LabelClusterName] != "" {
			return [][2]string{{clusterKey, informers.SignalPods}}
		}
	case "statefulsets", "services", "secrets", "poddisruptionbudgets", "persistentvolumeclaims":
		if m.GetLabels()[cluster.LabelClusterName] != "" {
			return [][2]string{{clusterKey, informers.SignalObjects}}
		}
	}
	return nil
}

// lookup returns the cached object res/ns/name as a T.
func lookup[T runtime.Object](v *view, res, ns, name string) (T, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	obj, ok := v.objs[objKey{res, ns, name}].(T)
	return obj, ok
}

// members returns the cached objects of res labelled for the cluster
// key, sorted by name.
func members[T runtime.Object](v *view, res, key string) []T {
	ns, name, _ := strings.Cut(key, "/")
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []T
	for k, obj := range v.objs {
		if k.res == res && k.ns == ns && objMeta(obj).GetLabels()[cluster.LabelClusterName] == name {
			out = append(out, obj.(T))
		}
	}
	slices.SortFunc(out, func(a, b T) int { return strings.Compare(objMeta(a).GetName(), objMeta(b).GetName()) })
	return out
}

func (v *view) Objects(key string) (observed.Cluster, bool) {
	pg, ok := v.Postgresql(key)
	if !ok {
		return observed.Cluster{}, false
	}
	objs := observed.Cluster{Postgresql: pg, Pods: v.Pods(key), Claims: v.PersistentVolumeClaims(key)}
	objs.StatefulSet, _ = v.StatefulSet(pg.Namespace, cluster.StatefulSetName(pg.Name))
	objs.LogicalBackup, _ = v.CronJob(pg.Namespace, cluster.LogicalBackupJobName(pg.Name))
	objs.Leader, _ = lookup[*corev1.ConfigMap](v, "configmaps", pg.Namespace, cluster.LeaderConfigMapName(pg.Name))
	for _, name := range cluster.Names(pg).Secrets {
		if s, ok := v.Secret(pg.Namespace, name); ok {
			objs.Secrets = append(objs.Secrets, s)
		}
	}
	return objs, true
}

func (v *view) Postgresql(key string) (*v1.Postgresql, bool) {
	ns, name, _ := strings.Cut(key, "/")
	return lookup[*v1.Postgresql](v, "postgresqls", ns, name)
}

func (v *view) Postgresqls(namespace string) []*v1.Postgresql {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []*v1.Postgresql
	for k, obj := range v.objs {
		if k.res == "postgresqls" && k.ns == namespace {
			out = append(out, obj.(*v1.Postgresql))
		}
	}
	slices.SortFunc(out, func(a, b *v1.Postgresql) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (v *view) StatefulSet(ns, name string) (*appsv1.StatefulSet, bool) {
	return lookup[*appsv1.StatefulSet](v, "statefulsets", ns, name)
}

func (v *view) Service(ns, name string) (*corev1.Service, bool) {
	return lookup[*corev1.Service](v, "services", ns, name)
}

func (v *view) Secret(ns, name string) (*corev1.Secret, bool) {
	return lookup[*corev1.Secret](v, "secrets", ns, name)
}

func (v *view) PodDisruptionBudget(ns, name string) (*policyv1.PodDisruptionBudget, bool) {
	return lookup[*policyv1.PodDisruptionBudget](v, "poddisruptionbudgets", ns, name)
}

// Deployment and CronJob: the simulator's clusters run no connection
// pooler and no logical backup, so none is ever cached.
func (v *view) Deployment(ns, name string) (*appsv1.Deployment, bool) {
	return lookup[*appsv1.Deployment](v, "deployments", ns, name)
}

func (v *view) CronJob(ns, name string) (*batchv1.CronJob, bool) {
	return lookup[*batchv1.CronJob](v, "cronjobs", ns, name)
}

func (v *view) ServiceAccount(ns, name string) (*corev1.ServiceAccount, bool) {
	return lookup[*corev1.ServiceAccount](v, "serviceaccounts", ns, name)
}

func (v *view) Role(ns, name string) (*rbacv1.Role, bool) {
	return lookup[*rbacv1.Role](v, "roles", ns, name)
}

func (v *view) RoleBinding(ns, name string) (*rbacv1.RoleBinding, bool) {
	return lookup[*rbacv1.RoleBinding](v, "rolebindings", ns, name)
}

func (v *view) PersistentVolumeClaims(key string) []*corev1.PersistentVolumeClaim {
	return members[*corev1.PersistentVolumeClaim](v, "persistentvolumeclaims", key)
}

// StorageClass: the simulator's claims name no class, so none is known.
func (v *view) StorageClass(string) (*storagev1.StorageClass, bool) { return nil, false }

func (v *view) Pods(key string) []*corev1.Pod { return members[*corev1.Pod](v, "pods", key) }
