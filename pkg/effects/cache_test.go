package effects

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// cacheMode is how a harness's effects read.
type cacheMode int

const (
	// cacheNone: from the API.
	cacheNone cacheMode = iota
	// cacheLive: from a cache always current with the fakes.
	cacheLive
	// cacheSnapshot: from a cache the test syncs with the fakes.
	cacheSnapshot
)

// cachedResources are the kinds the informers cache, as the fake cache
// reads them from the fake clientset's tracker.
var cachedResources = []schema.GroupVersionKind{
	appsv1.SchemeGroupVersion.WithKind("StatefulSet"),
	corev1.SchemeGroupVersion.WithKind("Service"),
	corev1.SchemeGroupVersion.WithKind("Secret"),
	policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"),
	corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"),
	corev1.SchemeGroupVersion.WithKind("Pod"),
	corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
	rbacv1.SchemeGroupVersion.WithKind("Role"),
	rbacv1.SchemeGroupVersion.WithKind("RoleBinding"),
	appsv1.SchemeGroupVersion.WithKind("Deployment"),
	batchv1.SchemeGroupVersion.WithKind("CronJob"),
}

func resourceOfKind(gvk schema.GroupVersionKind) schema.GroupVersionResource {
	plural := strings.ToLower(gvk.Kind) + "s"
	return gvk.GroupVersion().WithResource(plural)
}

// fakeCache is an in-memory Cache over the fakes, as pkg/informers keeps
// it: objects labelled application=spilo or db-connection-pooler only,
// Secrets without data. It
// reads the fakes' stores directly, so it adds no action to the fake
// clientsets nor a call to pgAPI. A live one syncs before every read; a
// snapshot one when the test calls sync.
//
// It hands out its own objects, as informers do, and keeps a copy of each:
// check fails the test when the effects modified one.
type fakeCache struct {
	kube *fake.Clientset
	pg   *pgAPI
	live bool

	mu   sync.Mutex
	pgs  map[string]*v1.Postgresql
	objs map[schema.GroupVersionKind]map[string]cluster.Object
	// handed are the objects read, with a copy of each as handed out.
	handed []handedObject
}

type handedObject struct{ obj, copy runtime.Object }

var _ Cache = (*fakeCache)(nil)

func newFakeCache(t *testing.T, kube *fake.Clientset, pg *pgAPI, live bool) *fakeCache {
	c := &fakeCache{kube: kube, pg: pg, live: live}
	c.sync()
	t.Cleanup(func() { c.check(t) })
	return c
}

// sync makes the cache current.
func (c *fakeCache) sync() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.syncLocked()
}

func (c *fakeCache) syncLocked() {
	c.syncPGLocked()
	c.objs = map[schema.GroupVersionKind]map[string]cluster.Object{}
	for _, gvk := range cachedResources {
		list, err := c.kube.Tracker().List(resourceOfKind(gvk), gvk, "")
		if err != nil {
			panic(err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			panic(err)
		}
		byKey := map[string]cluster.Object{}
		for _, item := range items {
			o := item.(cluster.Object)
			if app := o.GetLabels()[cluster.LabelApplication]; app != cluster.ApplicationSpilo && app != cluster.ApplicationPooler {
				continue
			}
			switch o := o.(type) {
			case *corev1.Secret:
				o.Data, o.StringData = nil, nil
			case *appsv1.StatefulSet:
				// Less than the informers keep of a template
				// (pkg/informers, slimStatefulSet): an ensure
				// that wrote this one back would be seen.
				o.Spec.Template = corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{
					Annotations: map[string]string{cluster.AnnotationPodTemplateHash: cluster.PodTemplateHash(o)}}}
			}
			byKey[o.GetNamespace()+"/"+o.GetName()] = o
		}
		c.objs[gvk] = byKey
	}
}

// syncPG makes the cache's resources current, and only them.
func (c *fakeCache) syncPG() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.syncPGLocked()
}

func (c *fakeCache) syncPGLocked() {
	c.pg.mu.Lock()
	defer c.pg.mu.Unlock()
	c.pgs = map[string]*v1.Postgresql{}
	for k, pg := range c.pg.objs {
		c.pgs[k] = pg.DeepCopy()
	}
}

// drop removes an object from the cache, as if its watch event were late.
func (c *fakeCache) drop(gvk schema.GroupVersionKind, ns, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.objs[gvk], ns+"/"+name)
}

// read returns the cache's object of kind gvk, and records it as handed.
func (c *fakeCache) read(gvk schema.GroupVersionKind, ns, name string) (cluster.Object, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live {
		c.syncLocked()
	}
	o, ok := c.objs[gvk][ns+"/"+name]
	if ok {
		c.hand(o)
	}
	return o, ok
}

func (c *fakeCache) hand(o runtime.Object) {
	c.handed = append(c.handed, handedObject{o, o.DeepCopyObject()})
}

// byCluster returns the cache's objects of kind gvk labelled with cluster
// key's name, sorted by name.
func (c *fakeCache) byCluster(gvk schema.GroupVersionKind, key string) []cluster.Object {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live {
		c.syncLocked()
	}
	ns, name, _ := strings.Cut(key, "/")
	var out []cluster.Object
	for _, o := range c.objs[gvk] {
		if o.GetNamespace() == ns && o.GetLabels()[cluster.LabelClusterName] == name {
			c.hand(o)
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b cluster.Object) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out
}

// check fails t when an object the cache handed out was modified.
func (c *fakeCache) check(t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.handed {
		if !equality.Semantic.DeepEqual(h.obj, h.copy) {
			o := h.obj.(metav1.Object)
			t.Errorf("the effects modified the cache's %T %s", h.obj, o.GetName())
		}
	}
}

func (c *fakeCache) Postgresql(key string) (*v1.Postgresql, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live {
		c.syncLocked()
	}
	pg, ok := c.pgs[key]
	if ok {
		c.hand(pg)
	}
	return pg, ok
}

func (c *fakeCache) Postgresqls(ns string) []*v1.Postgresql {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live {
		c.syncLocked()
	}
	var out []*v1.Postgresql
	for _, pg := range c.pgs {
		if pg.Namespace == ns {
			c.hand(pg)
			out = append(out, pg)
		}
	}
	return out
}

func typed[T cluster.Object](o cluster.Object, ok bool) (T, bool) {
	if !ok {
		var zero T
		return zero, false
	}
	return o.(T), true
}

func (c *fakeCache) StatefulSet(ns, name string) (*appsv1.StatefulSet, bool) {
	return typed[*appsv1.StatefulSet](c.read(cachedResources[0], ns, name))
}

func (c *fakeCache) Service(ns, name string) (*corev1.Service, bool) {
	return typed[*corev1.Service](c.read(cachedResources[1], ns, name))
}

func (c *fakeCache) Secret(ns, name string) (*corev1.Secret, bool) {
	return typed[*corev1.Secret](c.read(cachedResources[2], ns, name))
}

func (c *fakeCache) PodDisruptionBudget(ns, name string) (*policyv1.PodDisruptionBudget, bool) {
	return typed[*policyv1.PodDisruptionBudget](c.read(cachedResources[3], ns, name))
}

func (c *fakeCache) Deployment(ns, name string) (*appsv1.Deployment, bool) {
	return typed[*appsv1.Deployment](c.read(cachedResources[9], ns, name))
}

func (c *fakeCache) CronJob(ns, name string) (*batchv1.CronJob, bool) {
	return typed[*batchv1.CronJob](c.read(cachedResources[10], ns, name))
}

func (c *fakeCache) ServiceAccount(ns, name string) (*corev1.ServiceAccount, bool) {
	return typed[*corev1.ServiceAccount](c.read(cachedResources[6], ns, name))
}

func (c *fakeCache) Role(ns, name string) (*rbacv1.Role, bool) {
	return typed[*rbacv1.Role](c.read(cachedResources[7], ns, name))
}

func (c *fakeCache) RoleBinding(ns, name string) (*rbacv1.RoleBinding, bool) {
	return typed[*rbacv1.RoleBinding](c.read(cachedResources[8], ns, name))
}

func (c *fakeCache) PersistentVolumeClaims(key string) []*corev1.PersistentVolumeClaim {
	var out []*corev1.PersistentVolumeClaim
	for _, o := range c.byCluster(cachedResources[4], key) {
		out = append(out, o.(*corev1.PersistentVolumeClaim))
	}
	return out
}

// StorageClass reads the class from the fake API: classes are no objects
// of a cluster, and tests make them before the cache reads.
func (c *fakeCache) StorageClass(name string) (*storagev1.StorageClass, bool) {
	sc, err := c.kube.StorageV1().StorageClasses().Get(context.Background(), name, metav1.GetOptions{})
	return sc, err == nil
}

func (c *fakeCache) Pods(key string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, o := range c.byCluster(cachedResources[5], key) {
		out = append(out, o.(*corev1.Pod))
	}
	return out
}

// kubeCalls lists every action on the fake clientset, reads included, as
// "verb resource[ name]", in order, and clears the actions.
func (h *harness) kubeCalls() []string {
	var out []string
	for _, a := range h.kube.Actions() {
		call := a.GetVerb() + " " + a.GetResource().Resource
		// CreateAction matches updates too, and GetAction patches and
		// deletes: their interfaces have the same methods.
		switch a := a.(type) {
		case k8stesting.CreateAction:
			call += " " + a.GetObject().(metav1.Object).GetName()
		case k8stesting.GetAction:
			call += " " + a.GetName()
		}
		out = append(out, call)
	}
	h.kube.ClearActions()
	return out
}

// pgCalls is the number of calls of each kind pgAPI served.
func (h *harness) pgCalls() map[string]int {
	h.pg.mu.Lock()
	defer h.pg.mu.Unlock()
	out := map[string]int{}
	for k, v := range h.pg.calls {
		if v > 0 {
			out[k] = v
		}
	}
	return out
}

// resetPGCalls zeroes the counts of pgCalls.
func (h *harness) resetPGCalls() {
	h.pg.mu.Lock()
	defer h.pg.mu.Unlock()
	h.pg.calls = map[string]int{}
}

// enforceResourceVersions makes the fake clientset keep resourceVersions
// as the apiserver does: every create and update sets a new one, and an
// update that carries another one than the stored object's is a Conflict.
func (h *harness) enforceResourceVersions() {
	var rv atomic.Int64
	rv.Store(1000)
	tracker := h.kube.Tracker()
	h.kube.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject().DeepCopyObject()
		obj.(metav1.Object).SetResourceVersion(strconv.FormatInt(rv.Add(1), 10))
		if err := tracker.Create(a.GetResource(), obj, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, obj, nil
	})
	h.kube.PrependReactor("update", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.UpdateAction).GetObject().DeepCopyObject()
		m := obj.(metav1.Object)
		stored, err := tracker.Get(a.GetResource(), a.GetNamespace(), m.GetName())
		if err != nil {
			return true, nil, err
		}
		if have := stored.(metav1.Object).GetResourceVersion(); have != m.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), m.GetName(),
				errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		m.SetResourceVersion(strconv.FormatInt(rv.Add(1), 10))
		if err := tracker.Update(a.GetResource(), obj, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, obj, nil
	})
}

// verbs returns the distinct verbs of calls.
func verbs(calls []string) []string {
	var out []string
	for _, c := range calls {
		v, _, _ := strings.Cut(c, " ")
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

var (
	gvkStatefulSet = cachedResources[0]
	gvkService     = cachedResources[1]
	gvkSecret      = cachedResources[2]
)

// A cluster created from nothing costs its creates and the finalizer, and
// not one read.
func TestCacheEnsureFromNothingOnlyCreates(t *testing.T) {
	for _, sample := range samples {
		t.Run(sample, func(t *testing.T) {
			pg := loadSample(t, sample)
			h := newSnapshotHarness(t, []*v1.Postgresql{pg})
			if err := h.ensure(t, pg); err != nil {
				t.Fatal(err)
			}
			calls := h.kubeCalls()
			if v := verbs(calls); !slices.Equal(v, []string{"create"}) {
				t.Errorf("calls %v, want creates only", calls)
			}
			if n, want := len(calls), len(buildAll(t, pg).All()); n != want {
				t.Errorf("%d creates, want %d: %v", n, want, calls)
			}
			if got, want := h.pgCalls(), map[string]int{"Patch": 1}; !equalCounts(got, want) {
				t.Errorf("resource calls %v, want %v (the finalizer)", got, want)
			}
		})
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Once the cache has caught up, a resync of a cluster that did not change
// makes no API call at all: no read, no write.
func TestCacheResyncMakesNoCalls(t *testing.T) {
	for _, sample := range samples {
		t.Run(sample, func(t *testing.T) {
			pg := loadSample(t, sample)
			h := newSnapshotHarness(t, []*v1.Postgresql{pg})
			h.enforceResourceVersions()
			if err := h.ensure(t, pg); err != nil {
				t.Fatal(err)
			}
			h.cache.sync()
			h.kubeCalls()
			h.resetPGCalls()
			ctx, key := context.Background(), keyOf(pg)
			if err := h.eff.WriteStatus(ctx, key, &v1.PostgresqlStatus{}); err != nil {
				t.Fatalf("status: %v", err)
			}
			if err := h.eff.Ensure(ctx, key, EnsureOptions{}); err != nil {
				t.Fatalf("ensure: %v", err)
			}
			if err := h.eff.RecordEvents(ctx, key, []act.Record{{Reason: "Resync"}}); err != nil {
				t.Fatalf("events: %v", err)
			}
			if calls := h.kubeCalls(); len(calls) != 0 {
				t.Errorf("resync made %d API calls: %v", len(calls), calls)
			}
			if calls := h.pgCalls(); len(calls) != 0 {
				t.Errorf("resync called the resource client: %v", calls)
			}
			if e := <-h.rec.Events; !strings.Contains(e, "Resync") {
				t.Errorf("event %q", e)
			}
		})
	}
}

// A change of the spec costs its writes only, made with the cache's
// resourceVersions.
func TestCacheSpecChangeOnlyWrites(t *testing.T) {
	pg := testCluster(t)
	h := newSnapshotHarness(t, []*v1.Postgresql{pg})
	h.enforceResourceVersions()
	if err := h.ensure(t, pg); err != nil {
		t.Fatal(err)
	}
	edited := h.pg.get(pg.Namespace, pg.Name)
	edited.Spec.NumberOfInstances = 3
	edited.Spec.ServiceAnnotations = map[string]string{"a": "b"}
	h.pg.put(edited)
	h.cache.sync()
	h.kubeCalls()
	h.resetPGCalls()
	if err := h.ensure(t, pg); err != nil {
		t.Fatal(err)
	}
	want := []string{"update services acid-minimal-cluster", "update services acid-minimal-cluster-repl",
		"update statefulsets acid-minimal-cluster"}
	if got := h.kubeCalls(); !sameWrites(got, want) {
		t.Errorf("calls:\n got %v\nwant %v", got, want)
	}
	if calls := h.pgCalls(); len(calls) != 0 {
		t.Errorf("resource calls %v, want none", calls)
	}
}

// Objects missing from a cache that lags are created, which fails with
// AlreadyExists; then they are read from the API and brought in line.
// Secrets are left as they are, unread.
func TestCacheStaleMissingObject(t *testing.T) {
	pg := testCluster(t)
	h := newSnapshotHarness(t, []*v1.Postgresql{pg})
	h.enforceResourceVersions()
	if err := h.ensure(t, pg); err != nil {
		t.Fatal(err)
	}
	h.cache.sync()
	ctx := context.Background()
	// Someone scales the StatefulSet; the cache has seen neither it nor
	// the master Service nor the superuser's Secret.
	sts, err := h.kube.AppsV1().StatefulSets(pg.Namespace).Get(ctx, cluster.StatefulSetName(pg.Name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sts.Spec.Replicas = ptr.To[int32](5)
	if _, err := h.kube.AppsV1().StatefulSets(pg.Namespace).Update(ctx, sts, metav1.UpdateOptions{FieldManager: someoneElse}); err != nil {
		t.Fatal(err)
	}
	secret := cluster.SecretName(cluster.SuperuserName, pg.Name)
	before, err := h.kube.CoreV1().Secrets(pg.Namespace).Get(ctx, secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.cache.drop(gvkStatefulSet, pg.Namespace, sts.Name)
	h.cache.drop(gvkService, pg.Namespace, cluster.MasterServiceName(pg.Name))
	h.cache.drop(gvkSecret, pg.Namespace, secret)
	h.kubeCalls()

	if err := h.ensure(t, pg); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"create secrets " + secret,
		"create services acid-minimal-cluster", "get services acid-minimal-cluster",
		"create statefulsets acid-minimal-cluster", "get statefulsets acid-minimal-cluster",
		"update statefulsets acid-minimal-cluster",
	}
	if got := h.kubeCalls(); !sameWrites(got, want) {
		t.Errorf("calls:\n got %v\nwant %v", got, want)
	}
	sts, err = h.kube.AppsV1().StatefulSets(pg.Namespace).Get(ctx, sts.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := ptr.Deref(sts.Spec.Replicas, 0); n != pg.Spec.NumberOfInstances {
		t.Errorf("replicas %d, want %d", n, pg.Spec.NumberOfInstances)
	}
	after, err := h.kube.CoreV1().Secrets(pg.Namespace).Get(ctx, secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(before, after) {
		t.Error("the existing secret was changed")
	}
}

// An update with a cache's stale resourceVersion meets a Conflict: the
// object is read from the API and the update made again, keeping what the
// other writer changed.
func TestCacheStaleResourceVersion(t *testing.T) {
	pg := testCluster(t)
	h := newSnapshotHarness(t, []*v1.Postgresql{pg})
	h.enforceResourceVersions()
	if err := h.ensure(t, pg); err != nil {
		t.Fatal(err)
	}
	h.cache.sync()
	ctx := context.Background()
	name := cluster.MasterServiceName(pg.Name)
	svc, err := h.kube.CoreV1().Services(pg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Annotations = map[string]string{"someone": "else"}
	if _, err := h.kube.CoreV1().Services(pg.Namespace).Update(ctx, svc, metav1.UpdateOptions{FieldManager: someoneElse}); err != nil {
		t.Fatal(err)
	}
	edited := h.pg.get(pg.Namespace, pg.Name)
	edited.Spec.ServiceAnnotations = map[string]string{"a": "b"}
	h.pg.put(edited)
	h.cache.syncPG()
	h.kubeCalls()

	if err := h.ensure(t, pg); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"update services " + name, "get services " + name, "update services " + name,
		"update services " + cluster.ReplicaServiceName(pg.Name),
	}
	if got := h.kubeCalls(); !sameWrites(got, want) {
		t.Errorf("calls:\n got %v\nwant %v", got, want)
	}
	svc, err = h.kube.CoreV1().Services(pg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := svc.Annotations; got["a"] != "b" || got["someone"] != "else" {
		t.Errorf("annotations %v, want a=b and someone=else", got)
	}
}

// An object the cache still has but the API no longer does is created
// again.
func TestCacheObjectGoneBehindCache(t *testing.T) {
	pg := testCluster(t)
	h := newSnapshotHarness(t, []*v1.Postgresql{pg})
	h.enforceResourceVersions()
	if err := h.ensure(t, pg); err != nil {
		t.Fatal(err)
	}
	edited := h.pg.get(pg.Namespace, pg.Name)
	edited.Spec.NumberOfInstances = 3
	h.pg.put(edited)
	h.cache.sync()
	sts := cluster.StatefulSetName(pg.Name)
	if err := h.kube.AppsV1().StatefulSets(pg.Namespace).Delete(context.Background(), sts, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.kubeCalls()
	if err := h.ensure(t, pg); err != nil {
		t.Fatal(err)
	}
	want := []string{"update statefulsets " + sts, "get statefulsets " + sts, "create statefulsets " + sts}
	if got := h.kubeCalls(); !slices.Equal(got, want) {
		t.Errorf("calls:\n got %v\nwant %v", got, want)
	}
}

// The finalizer is added by a JSON patch that carries no resourceVersion:
// a resource written since the cache's copy (a status write, an edit)
// takes it at once, and the StatefulSet, which waits for it, is built from
// the spec as patched when that spec is newer (the others, written beside
// the patch, follow at the ensure the newer spec's event plans).
func TestCacheFinalizerStaleResourceVersion(t *testing.T) {
	pg := testCluster(t)
	h := newSnapshotHarness(t, []*v1.Postgresql{pg})
	edited := h.pg.get(pg.Namespace, pg.Name)
	edited.Spec.NumberOfInstances = 3
	// As the API server does on a change of spec:
	edited.Generation++
	h.pg.put(edited) // not in the cache
	if err := h.ensure(t, pg); err != nil {
		t.Fatal(err)
	}
	if got, want := h.pgCalls(), map[string]int{"Patch": 1}; !equalCounts(got, want) {
		t.Errorf("resource calls %v, want %v", got, want)
	}
	stored := h.pg.get(pg.Namespace, pg.Name)
	if !slices.Equal(stored.Finalizers, []string{cluster.Finalizer}) || stored.Spec.NumberOfInstances != 3 {
		t.Errorf("stored finalizers %v, instances %d", stored.Finalizers, stored.Spec.NumberOfInstances)
	}
	sts, err := h.kube.AppsV1().StatefulSets(pg.Namespace).Get(context.Background(), cluster.StatefulSetName(pg.Name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := ptr.Deref(sts.Spec.Replicas, 0); n != 3 {
		t.Errorf("replicas %d: built from the stale spec", n)
	}
}

// A resource deleted since the cache's copy refuses the finalizer: the
// StatefulSet, which waits for it, is not created (its claims would
// outlive the resource), and the ensure ends without an error. The objects
// written beside the patch are the resource's: the garbage collector's.
func TestCacheFinalizerDeletedSince(t *testing.T) {
	pg := testCluster(t)
	h := newSnapshotHarness(t, []*v1.Postgresql{pg})
	gone := deleting(h.pg.get(pg.Namespace, pg.Name))
	gone.Finalizers = []string{"other"}
	h.pg.put(gone) // not in the cache
	if err := h.ensure(t, pg); err != nil {
		t.Fatal(err)
	}
	if got := h.pg.get(pg.Namespace, pg.Name).Finalizers; !slices.Equal(got, []string{"other"}) {
		t.Errorf("finalizers %v, want [other]", got)
	}
	_, err := h.kube.AppsV1().StatefulSets(pg.Namespace).Get(context.Background(), cluster.StatefulSetName(pg.Name), metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("statefulset: %v, want not found", err)
	}
}

// A finalizer the API server fails to add is the ensure's error, and no
// StatefulSet is created without it.
func TestEnsureFinalizerFails(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := testCluster(t)
		h := newHarness(t, []*v1.Postgresql{pg})
		h.pg.failPatch = func(int) error { return apierrors.NewInternalError(errors.New("etcd is down")) }
		err := h.ensure(t, pg)
		if err == nil || !strings.Contains(err.Error(), "add finalizer") {
			t.Fatalf("ensure: %v, want the finalizer's error", err)
		}
		_, err = h.kube.AppsV1().StatefulSets(pg.Namespace).Get(context.Background(), cluster.StatefulSetName(pg.Name), metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("statefulset: %v, want not found", err)
		}
	})
}

// Another controller's finalizer, added since the cache's copy, fails the
// patch's test: the resource is read from the API and patched again, with
// both finalizers, ours once.
func TestCacheFinalizerOtherAdded(t *testing.T) {
	pg := testCluster(t)
	h := newSnapshotHarness(t, []*v1.Postgresql{pg})
	edited := h.pg.get(pg.Namespace, pg.Name)
	edited.Finalizers = []string{"other"}
	h.pg.put(edited) // not in the cache
	if err := h.ensure(t, pg); err != nil {
		t.Fatal(err)
	}
	if got, want := h.pgCalls(), map[string]int{"Patch": 2, "Get": 1}; !equalCounts(got, want) {
		t.Errorf("resource calls %v, want %v", got, want)
	}
	if got, want := h.pg.get(pg.Namespace, pg.Name).Finalizers, []string{"other", cluster.Finalizer}; !slices.Equal(got, want) {
		t.Errorf("finalizers %v, want %v", got, want)
	}
}

func TestCacheStatus(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	creating := v1.PostgresqlStatus{State: "Creating", Epoch: 1, StateSince: &metav1.Time{Time: t0}}
	running := v1.PostgresqlStatus{State: "Running", Epoch: 2, StateSince: &metav1.Time{Time: t0.Add(time.Second)}, Ready: "2/2"}
	tests := []struct {
		name string
		// cached and stored are the statuses in the cache and in the
		// API; the API's resourceVersion is newer when they differ, or
		// when newer is set.
		cached, stored v1.PostgresqlStatus
		newer          bool
		// written is a status this process wrote before, which the
		// cache has not seen.
		written   *v1.PostgresqlStatus
		want      v1.PostgresqlStatus
		wantCalls map[string]int
	}{
		{name: "current: no call", cached: running, stored: running, want: running, wantCalls: map[string]int{}},
		{name: "written with the cached resourceVersion", cached: creating, stored: creating, want: running,
			wantCalls: map[string]int{"UpdateStatus": 1}},
		{name: "stale resourceVersion: conflict, read, write", cached: creating, stored: creating, newer: true, want: running,
			wantCalls: map[string]int{"UpdateStatus": 2, "Get": 1}},
		{name: "stale status, already written", cached: creating, stored: running, want: running,
			wantCalls: map[string]int{"UpdateStatus": 1, "Get": 1}},
		{name: "cache behind this process's own write", cached: creating, stored: creating, written: &running, want: creating,
			wantCalls: map[string]int{"UpdateStatus": 3, "Get": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pg := testCluster(t)
			pg.Status = *tt.cached.DeepCopy()
			h := newSnapshotHarness(t, []*v1.Postgresql{pg})
			status := func(st v1.PostgresqlStatus) error {
				return h.eff.WriteStatus(context.Background(), keyOf(pg), st.DeepCopy())
			}
			if tt.written != nil {
				if err := status(*tt.written); err != nil {
					t.Fatal(err)
				}
			}
			if tt.newer || !equality.Semantic.DeepEqual(tt.cached, tt.stored) {
				cur := h.pg.get(pg.Namespace, pg.Name)
				cur.Status = *tt.stored.DeepCopy()
				h.pg.put(cur)
			}
			if err := status(tt.want); err != nil {
				t.Fatal(err)
			}
			if got := h.pgCalls(); !equalCounts(got, tt.wantCalls) {
				t.Errorf("resource calls %v, want %v", got, tt.wantCalls)
			}
			if got := h.pg.get(pg.Namespace, pg.Name).Status; !equality.Semantic.DeepEqual(stored(&got), stored(&tt.want)) {
				t.Errorf("stored status %+v, want %+v", got, tt.want)
			}
		})
	}
}

// sharedCalls returns the calls on the shared objects since the last
// kubeCalls.
func (h *harness) sharedCalls() []string {
	var out []string
	for _, c := range h.kubeCalls() {
		if strings.Contains(c, " serviceaccounts") || strings.Contains(c, " roles") || strings.Contains(c, " rolebindings") {
			out = append(out, c)
		}
	}
	return out
}

var (
	sharedCreates = []string{"create serviceaccounts pgloop-pod", "create roles pgloop-pod", "create rolebindings pgloop-pod"}
	sharedDeletes = []string{"delete serviceaccounts pgloop-pod", "delete roles pgloop-pod", "delete rolebindings pgloop-pod"}
)

// The shared ServiceAccount, Role and RoleBinding are read from the cache
// only: created when it does not show them, and left alone when it shows
// them in place, by the other clusters of the namespace and by a new
// process. The cleanup of a cluster that is not the last touches none;
// the last one's deletes them, and a new cluster creates them again.
func TestCacheSharedRBACMemo(t *testing.T) {
	a, b := testCluster(t), otherCluster(t)
	h := newCachedHarness(t, []*v1.Postgresql{a, b})
	ensure := func(pg *v1.Postgresql, want ...string) {
		t.Helper()
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		if got := h.sharedCalls(); !slices.Equal(got, want) {
			t.Errorf("ensure of %s, shared objects:\n got %v\nwant %v", pg.Name, got, want)
		}
	}
	cleanup := func(pg *v1.Postgresql, want ...string) {
		t.Helper()
		h.pg.put(deleting(h.pg.get(pg.Namespace, pg.Name)))
		if err := h.cleanup(t, pg); err != nil {
			t.Fatal(err)
		}
		if got := h.sharedCalls(); !slices.Equal(got, want) {
			t.Errorf("cleanup of %s, shared objects:\n got %v\nwant %v", pg.Name, got, want)
		}
	}

	// A new namespace: created without a read.
	ensure(a, sharedCreates...)
	// They exist: the second cluster writes none.
	ensure(b)
	ensure(a)
	// Checked again after a while: the cache shows them in place.
	now := time.Now()
	h.eff.now = func() time.Time { return now.Add(sharedRecheck) }
	ensure(b)
	ensure(a)
	// A new process knows nothing but what its cache shows: in place.
	h.eff = New(h.kube, h.pgc, h.rec, Options{Log: h.eff.log, Cache: h.cache})
	ensure(a)
	ensure(b)
	// a's cleanup leaves them to b.
	cleanup(a)
	ensure(b)
	// b's, the last, deletes them: a new cluster creates them.
	cleanup(b, sharedDeletes...)
	c := testCluster(t)
	c.Name, c.UID = "acid-third", "33333333-2222-4333-8444-555555555555"
	h.pg.put(c)
	ensure(c, sharedCreates...)
	for _, o := range []cluster.Object{cluster.ServiceAccount(c), cluster.Role(c), cluster.RoleBinding(c)} {
		if refs := getObject(t, h, o).GetOwnerReferences(); len(refs) != 0 {
			t.Errorf("%s: owner references %v, want none", o.GetName(), refs)
		}
	}
}

// Two clusters of a namespace deleted at once: the first to lose its pods
// leaves the shared objects to the other, whose pods still use the
// ServiceAccount as they stop; the other's cleanup deletes them. Once
// neither has pods, neither counts the other.
func TestCacheSharedRBACDeletedTogether(t *testing.T) {
	a, b := deleting(testCluster(t)), deleting(otherCluster(t))
	bPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: cluster.PodName(b.Name, 0), Namespace: b.Namespace, Labels: cluster.Labels(b)}}
	h := newCachedHarness(t, []*v1.Postgresql{a, b}, append(sharedObjects(a), bPod)...)
	if err := h.cleanup(t, a); err != nil {
		t.Fatal(err)
	}
	if got := h.sharedCalls(); len(got) != 0 {
		t.Errorf("cleanup of a while b's pod runs, shared objects: %v, want none", got)
	}
	if err := h.kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), bPod.Namespace, bPod.Name); err != nil {
		t.Fatal(err)
	}
	if err := h.cleanup(t, b); err != nil {
		t.Fatal(err)
	}
	if got := h.sharedCalls(); !slices.Equal(got, sharedDeletes) {
		t.Errorf("cleanup of b, its pods gone, shared objects:\n got %v\nwant %v", got, sharedDeletes)
	}

	// Both without pods: the first cleanup deletes them.
	a, b = deleting(testCluster(t)), deleting(otherCluster(t))
	h = newCachedHarness(t, []*v1.Postgresql{a, b}, sharedObjects(a)...)
	if err := h.cleanup(t, a); err != nil {
		t.Fatal(err)
	}
	if got := h.sharedCalls(); !slices.Equal(got, sharedDeletes) {
		t.Errorf("shared objects:\n got %v\nwant %v", got, sharedDeletes)
	}
	if err := h.cleanup(t, b); err != nil {
		t.Fatal(err)
	}
}

// A cluster created while the last one is cleaned up: the cache of
// resources does not show it yet, so the cleanup deletes the shared
// objects the new cluster's ensure found in place. Its next ensure creates
// them again, though the cache still shows them.
func TestCacheSharedRBACDeletedUnderNewCluster(t *testing.T) {
	a := testCluster(t)
	h := newSnapshotHarness(t, []*v1.Postgresql{a})
	if err := h.ensure(t, a); err != nil {
		t.Fatal(err)
	}
	h.cache.sync()
	c := testCluster(t)
	c.Name, c.UID = "acid-third", "33333333-2222-4333-8444-555555555555"
	h.pg.put(c)
	h.cache.mu.Lock()
	h.cache.pgs[keyOf(c)] = h.pg.get(c.Namespace, c.Name)
	h.cache.mu.Unlock()
	h.kubeCalls()
	if err := h.ensure(t, c); err != nil {
		t.Fatal(err)
	}
	if got := h.sharedCalls(); len(got) != 0 {
		t.Errorf("ensure of the new cluster, shared objects: %v, want none", got)
	}
	// a's deletion reaches the cache; c is not in it.
	h.pg.put(deleting(h.pg.get(a.Namespace, a.Name)))
	h.cache.mu.Lock()
	h.cache.pgs[keyOf(a)] = h.pg.get(a.Namespace, a.Name)
	delete(h.cache.pgs, keyOf(c))
	h.cache.mu.Unlock()
	if err := h.cleanup(t, a); err != nil {
		t.Fatal(err)
	}
	if got := h.sharedCalls(); !slices.Equal(got, sharedDeletes) {
		t.Errorf("cleanup of the last cluster, shared objects:\n got %v\nwant %v", got, sharedDeletes)
	}
	// The cache still shows them; c's next ensure (its retry, a resync)
	// creates them, once.
	h.cache.syncPG()
	for i, want := range [][]string{sharedCreates, nil} {
		if err := h.ensure(t, c); err != nil {
			t.Fatal(err)
		}
		if got := h.sharedCalls(); !slices.Equal(got, want) {
			t.Errorf("ensure %d of the new cluster, shared objects:\n got %v\nwant %v", i+1, got, want)
		}
	}
}

// Shared objects an older release left with the owner references of the
// clusters: the first ensure removes them, once; a cleanup that finds its
// cluster's reference removes it (and the others), so the garbage
// collector never deletes the objects under the clusters left.
func TestCacheSharedRBACLegacyOwners(t *testing.T) {
	t.Run("ensure", func(t *testing.T) {
		a, b := testCluster(t), otherCluster(t)
		h := newCachedHarness(t, []*v1.Postgresql{a, b}, sharedObjects(a, legacyOwner(a), legacyOwner(b))...)
		for i, tt := range []struct {
			pg   *v1.Postgresql
			want []string
		}{
			{a, []string{"update serviceaccounts pgloop-pod", "update roles pgloop-pod", "update rolebindings pgloop-pod"}},
			{b, nil},
			{a, nil},
		} {
			if err := h.ensure(t, tt.pg); err != nil {
				t.Fatal(err)
			}
			if got := h.sharedCalls(); !slices.Equal(got, tt.want) {
				t.Errorf("ensure %d, shared objects:\n got %v\nwant %v", i+1, got, tt.want)
			}
		}
	})
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		a, b := deleting(testCluster(t)), otherCluster(t)
		a.Finalizers = []string{cluster.Finalizer}
		objs := sharedObjects(a, legacyOwner(a), legacyOwner(b), foreignOwner)
		h := newHarness(t, []*v1.Postgresql{a, b}, objs...)
		if err := h.cleanup(t, a); err != nil {
			t.Fatal(err)
		}
		var updates []string
		for _, c := range h.sharedCalls() {
			if !strings.HasPrefix(c, "get ") {
				updates = append(updates, c)
			}
		}
		if want := []string{"update serviceaccounts pgloop-pod", "update roles pgloop-pod", "update rolebindings pgloop-pod"}; !slices.Equal(updates, want) {
			t.Errorf("cleanup, shared objects:\n got %v\nwant %v", updates, want)
		}
		for _, o := range objs {
			if refs := getObject(t, h, o.(cluster.Object)).GetOwnerReferences(); len(refs) != 1 || refs[0].UID != foreignOwner.UID {
				t.Errorf("%s: owner references %+v, want the foreign one only", o.(cluster.Object).GetName(), refs)
			}
		}
	})
}

// With a cache, the cleanup waits for terminating pods without an API call,
// but goes on only once the API says that no pod is left; a pod the cache
// shows terminating for longer than terminatingTrust is looked for in the
// API, in case the cache missed its end.
func TestCacheCleanupPods(t *testing.T) {
	// A deletion with a grace period of 5 minutes, asked for 10 s ago or
	// (long) a minute ago.
	grace := int64(300)
	recently := &metav1.Time{Time: time.Now().Add(-10*time.Second + time.Duration(grace)*time.Second)}
	longAgo := &metav1.Time{Time: recently.Add(-50 * time.Second)}
	pod := func(pg *v1.Postgresql, ord int32, terminating bool, since *metav1.Time) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: cluster.PodName(pg.Name, ord), Namespace: pg.Namespace, Labels: cluster.Labels(pg)}}
		if terminating {
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds, p.Finalizers = since, &grace, []string{"kubelet"}
		}
		return p
	}
	tests := []struct {
		name string
		// cached and notCached are the pods in the API, the first in the
		// cache too.
		cached, notCached []bool // terminating
		// long: the cached pods' deletion was asked for a minute ago;
		// gone: they are no longer in the API (the cache missed it).
		long, gone bool
		wantErr    error
		wantCalls  []string // on pods
	}{
		{name: "terminating: waits without a call", cached: []bool{true}, wantErr: ErrPodsTerminating},
		{name: "terminating for long: listed, still there", cached: []bool{true}, long: true, wantErr: ErrPodsTerminating,
			wantCalls: []string{"list pods"}},
		{name: "terminating for long: listed, gone, done", cached: []bool{true}, long: true, gone: true,
			wantCalls: []string{"list pods"}},
		{name: "running: deleted, then listed", cached: []bool{false, true}, wantErr: ErrPodsTerminating,
			wantCalls: []string{"delete pods acid-minimal-cluster-0", "list pods"}},
		{name: "one the cache missed: listed and deleted", notCached: []bool{false}, wantErr: ErrPodsTerminating,
			wantCalls: []string{"list pods", "delete pods acid-minimal-cluster-0"}},
		{name: "none: listed, then done", wantCalls: []string{"list pods"}},
		{name: "unscheduled running pod: deleted, listed, done", cached: []bool{false},
			wantCalls: []string{"delete pods acid-minimal-cluster-0", "list pods"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pg := deleting(testCluster(t))
			pg.Finalizers = []string{cluster.Finalizer}
			since := recently
			if tt.long {
				since = longAgo
			}
			var objs []runtime.Object
			for i, term := range tt.cached {
				objs = append(objs, pod(pg, int32(i), term, since))
			}
			h := newSnapshotHarness(t, []*v1.Postgresql{pg}, objs...)
			for i, term := range tt.notCached {
				if err := h.kube.Tracker().Add(pod(pg, int32(len(tt.cached)+i), term, since)); err != nil {
					t.Fatal(err)
				}
			}
			if tt.gone {
				for i := range tt.cached {
					gvr := corev1.SchemeGroupVersion.WithResource("pods")
					if err := h.kube.Tracker().Delete(gvr, pg.Namespace, cluster.PodName(pg.Name, int32(i))); err != nil {
						t.Fatal(err)
					}
				}
			}
			err := h.cleanup(t, pg)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			var got []string
			for _, c := range h.kubeCalls() {
				if strings.Contains(c, " pods") {
					got = append(got, c)
				}
			}
			if !slices.Equal(got, tt.wantCalls) {
				t.Errorf("calls on pods:\n got %v\nwant %v", got, tt.wantCalls)
			}
			kept := h.pg.get(pg.Namespace, pg.Name) != nil
			if want := tt.wantErr != nil; kept != want {
				t.Errorf("resource kept = %v, want %v", kept, want)
			}
		})
	}
}

// A cache that does not show the shared objects yet, in a new process:
// each create finds the object (AlreadyExists), which is then read to be
// compared; being in place, none is written.
func TestCacheSharedRBACLagging(t *testing.T) {
	a := testCluster(t)
	h := newSnapshotHarness(t, []*v1.Postgresql{a})
	if err := h.ensure(t, a); err != nil {
		t.Fatal(err)
	}
	h.eff = New(h.kube, h.pgc, h.rec, Options{Log: h.eff.log, Cache: h.cache})
	h.kubeCalls()
	if err := h.ensure(t, a); err != nil {
		t.Fatal(err)
	}
	want := []string{"create serviceaccounts pgloop-pod", "get serviceaccounts pgloop-pod", "create roles pgloop-pod",
		"get roles pgloop-pod", "create rolebindings pgloop-pod", "get rolebindings pgloop-pod"}
	if got := h.sharedCalls(); !slices.Equal(got, want) {
		t.Errorf("shared objects:\n got %v\nwant %v", got, want)
	}
}

// sameWrites reports whether the calls got are want's, in the order that
// matters: an ensure writes its Secrets, Services and PodDisruptionBudget
// at once, in any order but each object's own calls (create, get, update)
// in sequence, and the StatefulSet once the Secrets are written, beside
// the Services. So each object's calls must come in want's order, every
// Secret call before the first StatefulSet call, and after want's last
// StatefulSet call got must be want.
func sameWrites(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	is := func(kind string) func(string) bool {
		return func(c string) bool { return strings.Contains(c, " "+kind+" ") }
	}
	end := len(want)
	if i := lastIndexFunc(want, is("statefulsets")); i >= 0 {
		end = i + 1
	}
	if !slices.Equal(got[end:], want[end:]) {
		return false
	}
	if sts := slices.IndexFunc(got[:end], is("statefulsets")); sts >= 0 && lastIndexFunc(got[:end], is("secrets")) > sts {
		return false
	}
	byObject := func(calls []string) map[string][]string {
		m := map[string][]string{}
		for _, c := range calls {
			verb, object, _ := strings.Cut(c, " ")
			m[object] = append(m[object], verb)
		}
		return m
	}
	return maps.EqualFunc(byObject(got[:end]), byObject(want[:end]), slices.Equal)
}

// lastIndexFunc is the index of the last call that f accepts, -1 if none.
func lastIndexFunc(calls []string, f func(string) bool) int {
	for i := len(calls) - 1; i >= 0; i-- {
		if f(calls[i]) {
			return i
		}
	}
	return -1
}
