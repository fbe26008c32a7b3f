package effects

import (
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Cache is what the effects read instead of the API: the informers' caches
// (pkg/informers implements it). Reads come from the cache and only writes
// go to the API, so a resync of a cluster that did not change makes no API
// call at all, and a new cluster makes only its creates.
//
// Every object returned is the cache's own, shared with every reader: the
// effects copy before they modify. A cache may lag behind the API; the
// effects make up for it with the API's answers: a create of an object
// missing from the cache that meets AlreadyExists, and an update with a
// stale resourceVersion that meets Conflict, read the object from the API
// and go on from there.
type Cache interface {
	// Postgresql returns the resource of cluster key ("namespace/name").
	Postgresql(key string) (*v1.Postgresql, bool)
	// Postgresqls returns the resources of a namespace, in no particular
	// order.
	Postgresqls(namespace string) []*v1.Postgresql
	// StatefulSet, Service, Secret and PodDisruptionBudget return an
	// object of a cluster by namespace and name. Only objects labelled
	// application=spilo are cached.
	StatefulSet(namespace, name string) (*appsv1.StatefulSet, bool)
	Service(namespace, name string) (*corev1.Service, bool)
	// Secret tells whether the Secret exists: its data are not cached.
	Secret(namespace, name string) (*corev1.Secret, bool)
	PodDisruptionBudget(namespace, name string) (*policyv1.PodDisruptionBudget, bool)
	// ServiceAccount, Role and RoleBinding return the objects the
	// clusters of a namespace share (cluster.ServiceAccount...).
	ServiceAccount(namespace, name string) (*corev1.ServiceAccount, bool)
	Role(namespace, name string) (*rbacv1.Role, bool)
	RoleBinding(namespace, name string) (*rbacv1.RoleBinding, bool)
	// PersistentVolumeClaims and Pods return the claims and the pods of
	// cluster key, found by their cluster-name label.
	PersistentVolumeClaims(key string) []*corev1.PersistentVolumeClaim
	Pods(key string) []*corev1.Pod
}

// sharedRecheck is how long the memo of the shared RBAC objects of a
// namespace is trusted. The memo spares the ensures that follow a write
// until the cache has caught up; this bounds how long an object deleted by
// hand (the pods' ServiceAccount, say) goes unnoticed.
const sharedRecheck = 30 * time.Minute

// sharedMemo remembers, per namespace, the clusters whose owner reference
// this process has seen (or put) on all three shared objects, the
// ServiceAccount, Role and RoleBinding, with the Role's current rules (see
// ensureShared). The
// plans of several clusters run at once: it is safe for concurrent use.
type sharedMemo struct {
	mu sync.Mutex
	ns map[string]*sharedEntry
	// patchForbidden is set once RBAC refused a patch of a shared object:
	// they are read and updated instead from then on.
	patchForbidden atomic.Bool
}

type sharedEntry struct {
	owners  map[types.UID]struct{}
	checked time.Time
}

// owned tells whether this process has seen (or put) uid's reference on
// the namespace's objects less than sharedRecheck ago.
func (m *sharedMemo) owned(ns string, uid types.UID, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.ns[ns]
	if e == nil || now.Sub(e.checked) >= sharedRecheck {
		return false
	}
	_, owned := e.owners[uid]
	return owned
}

// record notes that the namespace's objects carry the references of owners,
// as just read or written.
func (m *sharedMemo) record(ns string, owners []types.UID, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ns == nil {
		m.ns = map[string]*sharedEntry{}
	}
	e := m.ns[ns]
	if e == nil || now.Sub(e.checked) >= sharedRecheck {
		// Only what was just seen counts: an expired entry is dropped,
		// so its owners are checked again.
		e = &sharedEntry{owners: map[types.UID]struct{}{}, checked: now}
		m.ns[ns] = e
	}
	for _, uid := range owners {
		e.owners[uid] = struct{}{}
	}
}

// release notes that a cleanup is about to remove uid's reference from the
// namespace's objects (and to delete them if no other cluster owns them):
// the other clusters' references stay known, uid's is no longer.
func (m *sharedMemo) release(ns string, uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.ns[ns]; e != nil {
		delete(e.owners, uid)
	}
}

// statusMemo remembers the status this process last wrote for each cluster
// (by key and UID), as the apiserver stores it. pgloop is the status's only
// writer, so that is the stored status; a cache that shows the status
// wanted now may be older than the last write, which the memo tells.
type statusMemo struct {
	mu sync.Mutex
	m  map[string]writtenStatus
}

type writtenStatus struct {
	uid    types.UID
	status *v1.PostgresqlStatus
}

// contradicts reports whether this process last wrote, for the resource
// key of that uid, another status than want: then a cached status equal to
// want is stale and is not trusted.
func (s *statusMemo) contradicts(key string, uid types.UID, want *v1.PostgresqlStatus) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.m[key]
	return ok && w.uid == uid && !equality.Semantic.DeepEqual(w.status, want)
}

// remember notes that status (in stored form) was written; nil forgets: the
// outcome of the last write is unknown, or the resource is gone.
func (s *statusMemo) remember(key string, uid types.UID, status *v1.PostgresqlStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if status == nil {
		delete(s.m, key)
		return
	}
	if s.m == nil {
		s.m = map[string]writtenStatus{}
	}
	s.m[key] = writtenStatus{uid: uid, status: status}
}
