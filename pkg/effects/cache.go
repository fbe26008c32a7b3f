package effects

import (
	"crypto/sha256"
	"encoding/json"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
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
	// StorageClass returns a StorageClass by name.
	StorageClass(name string) (*storagev1.StorageClass, bool)
	// Deployment returns a connection pooler's Deployment by namespace
	// and name. Service and PodDisruptionBudget return the poolers'
	// too (labelled application=db-connection-pooler).
	Deployment(namespace, name string) (*appsv1.Deployment, bool)
	// CronJob returns a logical backup's CronJob by namespace and name.
	CronJob(namespace, name string) (*batchv1.CronJob, bool)
}

// sharedRecheck is how long the memo of the shared RBAC objects of a
// namespace is trusted. The memo spares the ensures that follow a write
// until the cache has caught up; this bounds how long an object deleted by
// hand (the pods' ServiceAccount, say) goes unnoticed.
const sharedRecheck = 30 * time.Minute

// sharedMemo remembers, per namespace, what this process knows of the
// objects the clusters of the namespace share, the ServiceAccount, Role and
// RoleBinding (see ensureShared). Its invariants:
//
//   - a namespace is in place when an ensure saw (or put) all three, with
//     the Role's current rules and no owner reference of a cluster, less
//     than sharedRecheck ago, and no cleanup deleted them since;
//   - once a cleanup of this process deleted them, the namespace is
//     deleted until an ensure writes them again: the cache may still show
//     them, so an ensure creates them without asking it;
//   - gen counts those deletions: an ensure records what it saw only if
//     no deletion happened while it looked (a cleanup that runs at the
//     same time as an ensure wins).
//
// The plans of several clusters run at once: it is safe for concurrent use.
type sharedMemo struct {
	mu sync.Mutex
	ns map[string]*sharedEntry
}

type sharedEntry struct {
	// checked is when the objects were last seen or written in place,
	// zero when they are not known to be.
	checked time.Time
	deleted bool
	gen     uint64
}

// state returns whether the namespace's objects are in place as far as
// this process knows, whether a cleanup of this process deleted them since
// they last were, and the generation for record.
func (m *sharedMemo) state(ns string, now time.Time) (inPlace, deleted bool, gen uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.ns[ns]
	if e == nil {
		return false, false, 0
	}
	inPlace = !e.checked.IsZero() && now.Sub(e.checked) < sharedRecheck
	return inPlace, e.deleted, e.gen
}

// record notes that the namespace's objects are in place, as just read or
// written, unless a cleanup deleted them since state returned gen.
func (m *sharedMemo) record(ns string, gen uint64, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(ns)
	if e.gen != gen {
		return
	}
	e.checked, e.deleted = now, false
}

// entry returns the namespace's entry, made when missing; m.mu is held.
func (m *sharedMemo) entry(ns string) *sharedEntry {
	if m.ns == nil {
		m.ns = map[string]*sharedEntry{}
	}
	e := m.ns[ns]
	if e == nil {
		e = &sharedEntry{}
		m.ns[ns] = e
	}
	return e
}

// deleteAll notes that a cleanup deleted the namespace's objects (or tried
// to: it is called after the deletions, whatever their outcome).
func (m *sharedMemo) deleteAll(ns string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(ns)
	e.checked, e.deleted = time.Time{}, true
	e.gen++
}

// statusMemo remembers the status this process last wrote for each cluster
// (by key and UID), as the apiserver stores it. pgloop is the status's only
// writer, so that is the stored status; a cache that shows the status
// wanted now may be older than the last write, which the memo tells.
//
// It keeps a digest of each status's stored form (its JSON encoding, what
// the apiserver stores), not a copy: a status is about 1.2 KB, its digest
// 32 bytes, and the memo holds one per cluster (docs/scale.md). Two
// statuses of equal stored form are equal once stored, so the digest
// tells what a copy would.
type statusMemo struct {
	mu sync.Mutex
	m  map[string]writtenStatus
}

type writtenStatus struct {
	uid types.UID
	sum [sha256.Size]byte
}

// statusSum is the digest of status's stored form; ok is false when it
// cannot be encoded (then nothing is remembered of it).
func statusSum(status *v1.PostgresqlStatus) (sum [sha256.Size]byte, ok bool) {
	data, err := json.Marshal(status)
	if err != nil {
		return sum, false
	}
	return sha256.Sum256(data), true
}

// contradicts reports whether this process last wrote, for the resource
// key of that uid, another status than want: then a cached status equal to
// want is stale and is not trusted.
func (s *statusMemo) contradicts(key string, uid types.UID, want *v1.PostgresqlStatus) bool {
	s.mu.Lock()
	w, ok := s.m[key]
	s.mu.Unlock()
	if !ok || w.uid != uid {
		return false
	}
	sum, encoded := statusSum(want)
	return !encoded || sum != w.sum
}

// remember notes that status (in stored form) was written; nil forgets: the
// outcome of the last write is unknown, or the resource is gone.
func (s *statusMemo) remember(key string, uid types.UID, status *v1.PostgresqlStatus) {
	var sum [sha256.Size]byte
	ok := status != nil
	if ok {
		sum, ok = statusSum(status)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok {
		delete(s.m, key)
		return
	}
	if s.m == nil {
		s.m = map[string]writtenStatus{}
	}
	s.m[key] = writtenStatus{uid: uid, sum: sum}
}
