package effects

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	pgfake "github.com/pgloop/pgloop/pkg/generated/clientset/versioned/fake"
)

// pgAPI is the API server's side of the Postgresql resources, which the
// effects reach through the fake clientset that clientset returns. Update
// and UpdateStatus check the resourceVersion like the apiserver (a stale
// one is a Conflict); Update keeps the stored status and UpdateStatus the
// stored spec and metadata; a resource being deleted goes once its last
// finalizer is removed. Hooks inject errors by call number (1-based).
type pgAPI struct {
	mu      sync.Mutex
	objs    map[string]*v1.Postgresql
	rv      int
	calls   map[string]int
	failGet func(n int) error
	failUpd func(n int) error
	failSt  func(n int) error
	// failPatch injects errors into patches.
	failPatch func(n int) error
}

func newPGAPI(pgs ...*v1.Postgresql) *pgAPI {
	f := &pgAPI{objs: map[string]*v1.Postgresql{}, calls: map[string]int{}}
	for _, pg := range pgs {
		f.put(pg)
	}
	return f
}

// clientset returns a fake clientset that f serves: every request for
// postgresqls reaches f, never the clientset's own object tracker.
func (f *pgAPI) clientset() *pgfake.Clientset {
	cs := pgfake.NewSimpleClientset()
	cs.PrependReactor("*", v1.PostgresqlResource, f.react)
	return cs
}

// react serves a get, a list, an update, an update of the status
// subresource and a JSON patch of the finalizers, counted as Get, List,
// Update, UpdateStatus and Patch; the effects need nothing else.
func (f *pgAPI) react(a k8stesting.Action) (bool, runtime.Object, error) {
	switch {
	case a.GetVerb() == "get":
		obj, err := f.getCall(a.GetNamespace(), a.(k8stesting.GetAction).GetName())
		return true, obj, err
	case a.GetVerb() == "list":
		return true, f.list(a.GetNamespace()), nil
	case a.GetVerb() == "patch" && a.GetSubresource() == "":
		p := a.(k8stesting.PatchAction)
		obj, err := f.patch(a.GetNamespace(), p.GetName(), p.GetPatchType(), p.GetPatch())
		return true, obj, err
	case a.GetVerb() == "update" && a.GetSubresource() == "":
		obj, err := f.update(a.(k8stesting.UpdateAction).GetObject().(*v1.Postgresql))
		return true, obj, err
	case a.GetVerb() == "update" && a.GetSubresource() == "status":
		obj, err := f.updateStatus(a.(k8stesting.UpdateAction).GetObject().(*v1.Postgresql))
		return true, obj, err
	}
	return true, nil, fmt.Errorf("%s %s: not implemented", a.GetVerb(), a.GetResource().Resource)
}

// put stores pg as it is (test setup), with a new resourceVersion.
func (f *pgAPI) put(pg *v1.Postgresql) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	pg = pg.DeepCopy()
	pg.ResourceVersion = fmt.Sprint(f.rv)
	f.objs[pg.Namespace+"/"+pg.Name] = pg
}

// get returns a copy of the stored resource, nil when there is none.
func (f *pgAPI) get(ns, name string) *v1.Postgresql {
	f.mu.Lock()
	defer f.mu.Unlock()
	if pg := f.objs[ns+"/"+name]; pg != nil {
		return pg.DeepCopy()
	}
	return nil
}

func (f *pgAPI) count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

func (f *pgAPI) writes() int { return f.count("Update") + f.count("UpdateStatus") + f.count("Patch") }

func (f *pgAPI) getCall(ns, name string) (*v1.Postgresql, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["Get"]++
	if f.failGet != nil {
		if err := f.failGet(f.calls["Get"]); err != nil {
			return nil, err
		}
	}
	pg := f.objs[ns+"/"+name]
	if pg == nil {
		return nil, apierrors.NewNotFound(v1.Resource(v1.PostgresqlResource), name)
	}
	return pg.DeepCopy(), nil
}

func (f *pgAPI) list(ns string) *v1.PostgresqlList {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["List"]++
	out := &v1.PostgresqlList{}
	for _, pg := range f.objs {
		if pg.Namespace == ns {
			out.Items = append(out.Items, *pg.DeepCopy())
		}
	}
	return out
}

// patch applies a JSON patch of the finalizers, the only one the effects
// send: its operations test and add /metadata/finalizers. As the
// apiserver, it answers a failed test with 422 (Invalid), and refuses a new
// finalizer on a resource being deleted.
func (f *pgAPI) patch(ns, name string, pt types.PatchType, data []byte) (*v1.Postgresql, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["Patch"]++
	if f.failPatch != nil {
		if err := f.failPatch(f.calls["Patch"]); err != nil {
			return nil, err
		}
	}
	if pt != types.JSONPatchType {
		return nil, fmt.Errorf("patch type %s: not implemented", pt)
	}
	stored := f.objs[ns+"/"+name]
	if stored == nil {
		return nil, apierrors.NewNotFound(v1.Resource(v1.PostgresqlResource), name)
	}
	var ops []struct {
		Op    string    `json:"op"`
		Path  string    `json:"path"`
		Value *[]string `json:"value"`
	}
	if err := json.Unmarshal(data, &ops); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	invalid := func(msg string) error {
		return apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch",
			v1.Resource(v1.PostgresqlResource), name, msg, 0, false)
	}
	out := stored.DeepCopy()
	for _, op := range ops {
		if op.Path != "/metadata/finalizers" {
			return nil, fmt.Errorf("patch of %s: not implemented", op.Path)
		}
		switch op.Op {
		case "test":
			if op.Value == nil && len(out.Finalizers) > 0 || op.Value != nil && !slices.Equal(*op.Value, out.Finalizers) {
				return nil, invalid("testing value /metadata/finalizers failed")
			}
		case "add":
			if op.Value == nil {
				return nil, invalid("add of null")
			}
			out.Finalizers = slices.Clone(*op.Value)
		default:
			return nil, fmt.Errorf("patch op %s: not implemented", op.Op)
		}
	}
	if out.DeletionTimestamp != nil && slices.ContainsFunc(out.Finalizers, func(fin string) bool { return !slices.Contains(stored.Finalizers, fin) }) {
		return nil, invalid("metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted")
	}
	f.rv++
	out.ResourceVersion = fmt.Sprint(f.rv)
	f.objs[ns+"/"+name] = out
	return out.DeepCopy(), nil
}

func (f *pgAPI) write(method string, in *v1.Postgresql, fail func(int) error, apply func(stored, in *v1.Postgresql)) (*v1.Postgresql, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[method]++
	if fail != nil {
		if err := fail(f.calls[method]); err != nil {
			return nil, err
		}
	}
	key := in.Namespace + "/" + in.Name
	stored := f.objs[key]
	if stored == nil {
		return nil, apierrors.NewNotFound(v1.Resource(v1.PostgresqlResource), in.Name)
	}
	if in.ResourceVersion != stored.ResourceVersion {
		return nil, apierrors.NewConflict(v1.Resource(v1.PostgresqlResource), in.Name, errors.New("the object has been modified"))
	}
	out := stored.DeepCopy()
	apply(out, in.DeepCopy())
	f.rv++
	out.ResourceVersion = fmt.Sprint(f.rv)
	if out.DeletionTimestamp != nil && len(out.Finalizers) == 0 {
		delete(f.objs, key)
	} else {
		f.objs[key] = out
	}
	return out.DeepCopy(), nil
}

func (f *pgAPI) update(pg *v1.Postgresql) (*v1.Postgresql, error) {
	return f.write("Update", pg, f.failUpd, func(stored, in *v1.Postgresql) {
		status := stored.Status
		*stored = *in
		stored.Status = status
	})
}

func (f *pgAPI) updateStatus(pg *v1.Postgresql) (*v1.Postgresql, error) {
	return f.write("UpdateStatus", pg, f.failSt, func(stored, in *v1.Postgresql) { stored.Status = in.Status })
}

// harness is one Effects on fakes.
type harness struct {
	kube *fake.Clientset
	// pg holds the resources; pgc is the client of them the effects use.
	pg  *pgAPI
	pgc *pgfake.Clientset
	rec *record.FakeRecorder
	eff *Effects
	// cache is the effects' Cache, nil when they read the API.
	cache *fakeCache
}

// harnessFunc makes a harness over the resources pgs and the objects objs.
type harnessFunc func(t *testing.T, pgs []*v1.Postgresql, objs ...runtime.Object) *harness

// newHarness returns effects that read the API (no Cache).
func newHarness(t *testing.T, pgs []*v1.Postgresql, objs ...runtime.Object) *harness {
	t.Helper()
	return newHarnessCache(t, cacheNone, pgs, objs...)
}

// newCachedHarness returns effects that read a Cache that is always
// current, as informers are once their watch events have arrived.
func newCachedHarness(t *testing.T, pgs []*v1.Postgresql, objs ...runtime.Object) *harness {
	t.Helper()
	return newHarnessCache(t, cacheLive, pgs, objs...)
}

// newSnapshotHarness returns effects that read a Cache that changes only
// when the test syncs it: it lags behind the API as the test wants. It is
// synced once, with pgs and objs.
func newSnapshotHarness(t *testing.T, pgs []*v1.Postgresql, objs ...runtime.Object) *harness {
	t.Helper()
	return newHarnessCache(t, cacheSnapshot, pgs, objs...)
}

func newHarnessCache(t *testing.T, mode cacheMode, pgs []*v1.Postgresql, objs ...runtime.Object) *harness {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	h := &harness{kube: fake.NewClientset(objs...), pg: newPGAPI(pgs...), rec: record.NewFakeRecorder(32)}
	h.pgc = h.pg.clientset()
	h.kube.PrependReactor("delete-collection", "configmaps", deleteCollection(h.kube.Tracker()))
	// First of the reactors but those a test adds: every write is seen.
	h.kube.PrependReactor("*", "*", wantFieldManager(t))
	h.pgc.PrependReactor("*", "*", wantFieldManager(t))
	if mode != cacheNone {
		h.cache = newFakeCache(t, h.kube, h.pg, mode == cacheLive)
	}
	h.eff = New(h.kube, h.pgc, h.rec, Options{Random: seeded(7), Log: logrus.NewEntry(log), Cache: h.effectsCache()})
	return h
}

// effectsCache is the harness's cache as Options.Cache.
func (h *harness) effectsCache() Cache {
	if h.cache == nil {
		return nil
	}
	return h.cache
}

// bothModes runs test with effects that read the API and with effects that
// read an always current cache: what they write must be the same.
func bothModes(t *testing.T, test func(t *testing.T, newHarness harnessFunc)) {
	t.Run("api", func(t *testing.T) { test(t, newHarness) })
	t.Run("cache", func(t *testing.T) { test(t, newCachedHarness) })
}

// keyOf is the cluster key of pg, "namespace/name".
func keyOf(pg *v1.Postgresql) string { return pg.Namespace + "/" + pg.Name }

func (h *harness) ensure(t *testing.T, pg *v1.Postgresql) error {
	t.Helper()
	return h.eff.Ensure(context.Background(), keyOf(pg), EnsureOptions{})
}

func (h *harness) cleanup(t *testing.T, pg *v1.Postgresql) error {
	t.Helper()
	return h.eff.Cleanup(context.Background(), keyOf(pg))
}

// someoneElse is the field manager of the writes a test makes as a user,
// Patroni or another controller would.
const someoneElse = "test"

// wantFieldManager fails the test for a create, update or patch that
// carries neither FieldManager nor someoneElse. It handles nothing.
func wantFieldManager(t *testing.T) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		var got string
		switch a := a.(type) {
		case k8stesting.CreateActionImpl:
			got = a.CreateOptions.FieldManager
		case k8stesting.UpdateActionImpl:
			got = a.UpdateOptions.FieldManager
		case k8stesting.PatchActionImpl:
			got = a.PatchOptions.FieldManager
		default:
			return false, nil, nil
		}
		if got != FieldManager && got != someoneElse {
			t.Errorf("%s %s %s: field manager %q, want %q", a.GetVerb(), a.GetResource().Resource, a.GetSubresource(), got, FieldManager)
		}
		return false, nil, nil
	}
}

// deleteCollection makes the fake clientset delete the ConfigMaps a
// DeleteCollection selects by label, as the apiserver does: client-go's
// object tracker does nothing for it.
func deleteCollection(tracker k8stesting.ObjectTracker) k8stesting.ReactionFunc {
	return func(action k8stesting.Action) (bool, runtime.Object, error) {
		dc, ok := action.(k8stesting.DeleteCollectionActionImpl)
		if !ok {
			return false, nil, nil
		}
		gvr := dc.GetResource()
		list, err := tracker.List(gvr, corev1.SchemeGroupVersion.WithKind("ConfigMap"), dc.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		sel := dc.GetListRestrictions().Labels
		for _, cm := range list.(*corev1.ConfigMapList).Items {
			if sel == nil || sel.Matches(labels.Set(cm.Labels)) {
				if err := tracker.Delete(gvr, cm.Namespace, cm.Name); err != nil {
					return true, nil, err
				}
			}
		}
		return true, nil, nil
	}
}

// kubeWrites lists the write actions on the fake clientset as
// "verb resource name" ("verb resource selector" for a deletecollection),
// sorted, and clears the actions.
func (h *harness) kubeWrites() []string {
	var out []string
	for _, a := range h.kube.Actions() {
		var name string
		switch a := a.(type) {
		case k8stesting.DeleteCollectionActionImpl:
			name = a.GetListRestrictions().Labels.String()
		case k8stesting.CreateAction: // updates too: the same interface
			name = a.GetObject().(metav1.Object).GetName()
		case k8stesting.PatchAction:
			name = a.GetName()
		case k8stesting.DeleteAction:
			name = a.GetName()
		default:
			continue
		}
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource+" "+name)
	}
	h.kube.ClearActions()
	slices.Sort(out)
	return out
}

// testCluster is the minimal sample: 2 instances, users zalando and
// foo_user, in namespace db.
func testCluster(t *testing.T) *v1.Postgresql {
	t.Helper()
	return loadSample(t, "minimal")
}

// otherCluster is a second cluster of the namespace.
func otherCluster(t *testing.T) *v1.Postgresql {
	pg := testCluster(t)
	pg.Name = "acid-other"
	pg.UID = "11111111-2222-4333-8444-555555555555"
	return pg
}

func deleting(pg *v1.Postgresql) *v1.Postgresql {
	pg = pg.DeepCopy()
	pg.DeletionTimestamp = &metav1.Time{Time: time.Unix(1700000000, 0)}
	return pg
}

// TestBadKey: every effect fails for a key that is not "namespace/name",
// and calls nothing.
func TestBadKey(t *testing.T) {
	h := newHarness(t, nil)
	for name, effect := range effectsOf(h.eff, &v1.PostgresqlStatus{State: "Running"}) {
		for _, key := range []string{"no-namespace", "/no-namespace", "no-name/", "a/b/c"} {
			if err := effect(context.Background(), key); err == nil || !strings.Contains(err.Error(), "cluster key") {
				t.Errorf("%s of %q: err = %v, want a key error", name, key, err)
			}
		}
	}
	if n := len(h.kube.Actions()) + h.pg.count("Get") + h.pg.writes(); n != 0 {
		t.Errorf("%d API calls for bad keys", n)
	}
}

// effectsOf returns every effect of eff, by name, as a call for a key:
// status writes status; the pods, the version and the events are made up.
func effectsOf(eff *Effects, status *v1.PostgresqlStatus) map[string]func(context.Context, string) error {
	return map[string]func(context.Context, string) error{
		"status": func(ctx context.Context, key string) error { return eff.WriteStatus(ctx, key, status) },
		"ensure": func(ctx context.Context, key string) error { return eff.Ensure(ctx, key, EnsureOptions{}) },
		"replacePods": func(ctx context.Context, key string) error {
			return eff.ReplacePods(ctx, key, []Pod{{Name: "acid-minimal-cluster-0", UID: "u"}})
		},
		"nudge":   func(ctx context.Context, key string) error { return eff.Nudge(ctx, key, "q1") },
		"cleanup": eff.Cleanup,
		"events": func(ctx context.Context, key string) error {
			return eff.RecordEvents(ctx, key, []Record{{Reason: "Running"}})
		},
	}
}

func TestEnsureCreatesEverything(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := testCluster(t)
		h := newHarness(t, []*v1.Postgresql{pg})
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		stored := h.pg.get(pg.Namespace, pg.Name)
		if !slices.Contains(stored.Finalizers, cluster.Finalizer) {
			t.Errorf("finalizers = %v, want %s", stored.Finalizers, cluster.Finalizer)
		}
		objs, err := cluster.Build(pg, cluster.Options{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, o := range objs.All() {
			want = append(want, "create "+resourceOf(o)+" "+o.GetName())
		}
		slices.Sort(want)
		if got := h.kubeWrites(); !slices.Equal(got, want) {
			t.Errorf("writes:\n got %v\nwant %v", got, want)
		}
		shared := map[string]bool{"ServiceAccount": true, "Role": true, "RoleBinding": true}
		for _, o := range objs.All() {
			kind := o.GetObjectKind().GroupVersionKind().Kind
			got := getObject(t, h, o)
			refs := got.GetOwnerReferences()
			if shared[kind] {
				// The namespace's, not the cluster's.
				if len(refs) != 0 {
					t.Errorf("%s %s: owner references %+v, want none", kind, o.GetName(), refs)
				}
				continue
			}
			if len(refs) != 1 || refs[0].UID != pg.UID || refs[0].Kind != v1.PostgresqlKind || metav1.GetControllerOf(got) == nil {
				t.Errorf("%s %s: owner references %+v, want the cluster as controller", kind, o.GetName(), refs)
			}
		}
	})
}

// resourceOf is the resource name of a built object, as fake actions
// report it.
func resourceOf(o cluster.Object) string {
	kind := strings.ToLower(o.GetObjectKind().GroupVersionKind().Kind)
	switch kind {
	case "poddisruptionbudget":
		return "poddisruptionbudgets"
	}
	return kind + "s"
}

// getObject reads the stored version of a built object.
func getObject(t *testing.T, h *harness, o cluster.Object) metav1.Object {
	t.Helper()
	gvk := o.GetObjectKind().GroupVersionKind()
	gvr := gvk.GroupVersion().WithResource(resourceOf(o))
	got, err := h.kube.Tracker().Get(gvr, o.GetNamespace(), o.GetName())
	if err != nil {
		t.Fatalf("get %s %s: %v", gvk.Kind, o.GetName(), err)
	}
	return got.(metav1.Object)
}

func TestEnsureTwiceWritesNothing(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		for _, sample := range samples {
			t.Run(sample, func(t *testing.T) {
				pg := loadSample(t, sample)
				h := newHarness(t, []*v1.Postgresql{pg})
				if err := h.ensure(t, pg); err != nil {
					t.Fatal(err)
				}
				h.kubeWrites()
				before := h.pg.writes()
				if err := h.ensure(t, pg); err != nil {
					t.Fatal(err)
				}
				if got := h.kubeWrites(); len(got) != 0 {
					t.Errorf("second ensure wrote %v", got)
				}
				if n := h.pg.writes() - before; n != 0 {
					t.Errorf("second ensure wrote the resource %d times", n)
				}
			})
		}
	})
}

// ensured returns a harness of newHarness whose cluster's objects are all
// in place (one ensure), its writes so far forgotten.
func ensured(t *testing.T, newHarness harnessFunc) (*v1.Postgresql, *harness) {
	t.Helper()
	pg := testCluster(t)
	h := newHarness(t, []*v1.Postgresql{pg})
	if err := h.ensure(t, pg); err != nil {
		t.Fatal(err)
	}
	h.kubeWrites()
	return pg, h
}

func TestEnsureSpecChange(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		sts := "acid-minimal-cluster"
		tests := []struct {
			name   string
			edit   func(*v1.Postgresql)
			writes []string
		}{
			{"scale up", func(pg *v1.Postgresql) { pg.Spec.NumberOfInstances = 3 },
				[]string{"update statefulsets " + sts}},
			{"new image", func(pg *v1.Postgresql) { pg.Spec.DockerImage = "example.org/spilo:next" },
				[]string{"update statefulsets " + sts}},
			{"stop", func(pg *v1.Postgresql) { pg.Spec.NumberOfInstances = 0 },
				[]string{"update poddisruptionbudgets postgres-" + sts + "-pdb", "update statefulsets " + sts}},
			{"service annotations", func(pg *v1.Postgresql) { pg.Spec.ServiceAnnotations = map[string]string{"a": "b"} },
				[]string{"update services " + sts, "update services " + sts + "-repl"}},
			{"new user", func(pg *v1.Postgresql) { pg.Spec.Users["bar"] = v1.UserFlags{} },
				[]string{"create secrets bar." + sts + ".credentials.postgresql.pgloop.dev"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				pg, h := ensured(t, newHarness)
				edited := h.pg.get(pg.Namespace, pg.Name)
				tt.edit(edited)
				h.pg.put(edited)
				if err := h.ensure(t, pg); err != nil {
					t.Fatal(err)
				}
				got := h.kubeWrites()
				if !slices.Equal(got, tt.writes) {
					t.Errorf("writes:\n got %v\nwant %v", got, tt.writes)
				}
				for _, w := range got {
					if strings.Contains(w, " secrets ") && !strings.HasPrefix(w, "create ") {
						t.Errorf("a Secret was touched: %s", w)
					}
				}
			})
		}
	})
}

// An ensure that keeps the pod template (the cluster waits for a rollout
// slot) writes nothing for a new image alone, and for a new image with a
// scale-up writes the replicas with the old template: no pod is outdated
// until the slot is the cluster's; the next ensure writes the template.
func TestEnsureKeepPodTemplate(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		sts := "acid-minimal-cluster"
		keep := EnsureOptions{KeepPodTemplate: true}
		for _, tt := range []struct {
			name         string
			edit         func(*v1.Postgresql)
			writes       []string
			wantReplicas int32
		}{
			{"new image", func(pg *v1.Postgresql) { pg.Spec.DockerImage = "example.org/spilo:next" }, nil, 2},
			{"new image and scale up", func(pg *v1.Postgresql) {
				pg.Spec.DockerImage = "example.org/spilo:next"
				pg.Spec.NumberOfInstances = 3
			}, []string{"update statefulsets " + sts}, 3},
		} {
			t.Run(tt.name, func(t *testing.T) {
				pg, h := ensured(t, newHarness)
				get := func() *appsv1.StatefulSet {
					t.Helper()
					out, err := h.kube.AppsV1().StatefulSets(pg.Namespace).Get(context.Background(), sts, metav1.GetOptions{})
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				before := cluster.PodTemplateHash(get())
				edited := h.pg.get(pg.Namespace, pg.Name)
				tt.edit(edited)
				h.pg.put(edited)
				if err := h.eff.Ensure(context.Background(), keyOf(pg), keep); err != nil {
					t.Fatal(err)
				}
				if got := h.kubeWrites(); !slices.Equal(got, tt.writes) {
					t.Errorf("writes keeping the template:\n got %v\nwant %v", got, tt.writes)
				}
				kept := get()
				if h := cluster.PodTemplateHash(kept); h != before {
					t.Errorf("template hash %s, want %s kept", h, before)
				}
				if n := ptr.Deref(kept.Spec.Replicas, 0); n != tt.wantReplicas {
					t.Errorf("replicas %d, want %d", n, tt.wantReplicas)
				}
				if err := h.ensure(t, pg); err != nil {
					t.Fatal(err)
				}
				if got, want := h.kubeWrites(), []string{"update statefulsets " + sts}; !slices.Equal(got, want) {
					t.Errorf("writes with the slot:\n got %v\nwant %v", got, want)
				}
				if h := cluster.PodTemplateHash(get()); h == before {
					t.Error("template not written with the slot")
				}
			})
		}
	})
}

func TestEnsureNeverOverwritesSecret(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		// Made by pgloop (labelled, so in the cache) or by someone else
		// (not labelled, so not in the cache).
		for _, labelled := range []bool{true, false} {
			t.Run(fmt.Sprintf("labelled=%v", labelled), func(t *testing.T) {
				pg := testCluster(t)
				name := cluster.SecretName(cluster.SuperuserName, pg.Name)
				existing := &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pg.Namespace},
					Data:       map[string][]byte{cluster.SecretUsernameKey: []byte("postgres"), cluster.SecretPasswordKey: []byte("keep-me")},
				}
				if labelled {
					existing.Labels = cluster.Labels(pg)
				}
				h := newHarness(t, []*v1.Postgresql{pg}, existing)
				if err := h.ensure(t, pg); err != nil {
					t.Fatal(err)
				}
				for _, w := range h.kubeWrites() {
					// One the cache does not have is created, which
					// fails with AlreadyExists.
					if tried := !labelled && h.cache != nil && w == "create secrets "+name; strings.HasSuffix(w, " "+name) && !tried {
						t.Errorf("existing secret written: %s", w)
					}
				}
				got, err := h.kube.CoreV1().Secrets(pg.Namespace).Get(context.Background(), name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if string(got.Data[cluster.SecretPasswordKey]) != "keep-me" {
					t.Error("existing password overwritten")
				}
			})
		}
	})
}

// A Secret controlled by an earlier resource of the same name (deleted
// before its cleanup kept the Secret: the garbage collector's now) makes
// the new cluster wait, and no StatefulSet starts with its password; one
// kept for it (no owner, volume.retention Retain) is used as it is
// (TestEnsureNeverOverwritesSecret).
func TestEnsureSecretOfEarlierCluster(t *testing.T) {
	pg := testCluster(t)
	earlier := pg.DeepCopy()
	earlier.UID = "uid-of-an-earlier-one"
	name := cluster.SecretName(cluster.SuperuserName, pg.Name)
	existing := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pg.Namespace,
		Labels: cluster.Labels(pg), OwnerReferences: []metav1.OwnerReference{cluster.OwnerReference(earlier)}}}
	h := newCachedHarness(t, []*v1.Postgresql{pg}, existing)
	err := h.ensure(t, pg)
	if !errors.Is(err, ErrWaiting) || !strings.Contains(err.Error(), "earlier postgresql") {
		t.Fatalf("ensure: %v, want a wait for the garbage collector", err)
	}
	_, err = h.kube.AppsV1().StatefulSets(pg.Namespace).Get(context.Background(), cluster.StatefulSetName(pg.Name), metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("statefulset: %v, want not found", err)
	}
	// The garbage collector deletes it: the next ensure creates the
	// cluster's own.
	if err := h.kube.CoreV1().Secrets(pg.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.ensure(t, pg); err != nil {
		t.Fatal(err)
	}
	got, err := h.kube.CoreV1().Secrets(pg.Namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(got); ref == nil || ref.UID != pg.UID {
		t.Errorf("secret's controller %v, want the cluster", ref)
	}
}

func TestEnsureSecretCreateRace(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		// Another writer creates the Secret between the read and the create:
		// AlreadyExists is success.
		pg := testCluster(t)
		h := newHarness(t, []*v1.Postgresql{pg})
		h.kube.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
			name := a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName()
			theirs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pg.Namespace},
				Data: map[string][]byte{cluster.SecretPasswordKey: []byte("theirs")}}
			if err := h.kube.Tracker().Add(theirs); err != nil {
				return true, nil, err
			}
			return true, nil, apierrors.NewAlreadyExists(corev1.Resource("secrets"), name)
		})
		if err := h.ensure(t, pg); err != nil {
			t.Fatalf("AlreadyExists must be success: %v", err)
		}
		for _, w := range h.kubeWrites() {
			if strings.Contains(w, " secrets ") && !strings.HasPrefix(w, "create ") {
				t.Errorf("a Secret was written after AlreadyExists: %s", w)
			}
		}
	})
}

func TestEnsureRefusesForeignObject(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := testCluster(t)
		foreign := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: cluster.MasterServiceName(pg.Name), Namespace: pg.Namespace}}
		h := newHarness(t, []*v1.Postgresql{pg}, foreign)
		err := h.ensure(t, pg)
		if !errors.Is(err, ErrNotControlled) {
			t.Fatalf("err = %v, want ErrNotControlled", err)
		}
		for _, w := range h.kubeWrites() {
			if w == "update services "+foreign.Name {
				t.Error("foreign service updated")
			}
		}
	})
}

// legacyOwner is the owner reference a release before issue 14 put on the
// shared objects for each cluster of the namespace.
func legacyOwner(pg *v1.Postgresql) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "pgloop.dev/v1", Kind: "Postgresql", Name: pg.Name, UID: pg.UID, Controller: ptr.To(false)}
}

// foreignOwner is an owner reference of another controller's.
var foreignOwner = metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "Thing", Name: "x", UID: "foreign-uid"}

// sharedObjects returns the shared objects of pg's namespace as an older
// release left them: the Role with other rules, each with refs.
func sharedObjects(pg *v1.Postgresql, refs ...metav1.OwnerReference) []runtime.Object {
	sa, role, binding := cluster.ServiceAccount(pg), cluster.Role(pg), cluster.RoleBinding(pg)
	role.Rules = role.Rules[:1]
	out := []runtime.Object{sa, role, binding}
	for _, o := range out {
		o.(metav1.Object).SetOwnerReferences(slices.Clone(refs))
	}
	return out
}

// The shared objects belong to the namespace: the second cluster writes
// none of them. The Role's rules are updated, and the owner references of
// clusters an older release left are removed (those of other owners kept).
func TestEnsureSharedRBAC(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		a, b := testCluster(t), otherCluster(t)
		h := newHarness(t, []*v1.Postgresql{a, b}, sharedObjects(a, legacyOwner(a), foreignOwner, legacyOwner(b))...)
		if err := h.ensure(t, a); err != nil {
			t.Fatal(err)
		}
		var shared []string
		for _, w := range h.kubeWrites() {
			if strings.Contains(w, "pgloop-pod") {
				shared = append(shared, w)
			}
		}
		if want := []string{"update rolebindings pgloop-pod", "update roles pgloop-pod", "update serviceaccounts pgloop-pod"}; !slices.Equal(shared, want) {
			t.Errorf("shared writes:\n got %v\nwant %v", shared, want)
		}
		for _, o := range []cluster.Object{cluster.ServiceAccount(a), cluster.Role(a), cluster.RoleBinding(a)} {
			got := getObject(t, h, o)
			if refs := got.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != foreignOwner.UID {
				t.Errorf("%s: owner references %+v, want the foreign one only", o.GetName(), refs)
			}
		}
		role, err := h.kube.RbacV1().Roles(a.Namespace).Get(context.Background(), cluster.PodRoleName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cluster.RoleNeedsUpdate(role, cluster.Role(a)) {
			t.Errorf("role rules not updated: %+v", role.Rules)
		}
		if err := h.ensure(t, b); err != nil {
			t.Fatal(err)
		}
		for _, w := range h.kubeWrites() {
			if strings.Contains(w, "pgloop-pod") {
				t.Errorf("the second cluster wrote a shared object: %s", w)
			}
		}
	})
}

func TestEnsureGrowsVolumes(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		claim := func(pg *v1.Postgresql, ordinal int32, size string, phase corev1.PersistentVolumeClaimPhase) *corev1.PersistentVolumeClaim {
			return &corev1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{Name: cluster.PersistentVolumeClaimName(pg.Name, ordinal), Namespace: pg.Namespace, Labels: cluster.Labels(pg)},
				Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}},
				Status: corev1.PersistentVolumeClaimStatus{Phase: phase},
			}
		}
		grows := []string{"patch persistentvolumeclaims pgdata-acid-minimal-cluster-0", "patch persistentvolumeclaims pgdata-acid-minimal-cluster-3"}
		tests := []struct {
			name      string
			forbidden bool
			// fixed: the claims' StorageClass does not allow expansion.
			fixed   bool
			wantErr bool
			writes  []string
		}{
			{name: "grows bound smaller claims", writes: grows},
			{name: "expansion refused", forbidden: true, wantErr: true},
			// Known from the cache, such a claim is left alone (the facts
			// name the cause); read from the API, the apiserver decides.
			{name: "a class that does not allow expansion", fixed: true, writes: grows},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				pg := testCluster(t)
				other := otherCluster(t)
				h := newHarness(t, []*v1.Postgresql{pg})
				if err := h.ensure(t, pg); err != nil {
					t.Fatal(err)
				}
				if tt.fixed {
					if h.cache != nil {
						tt.writes = nil
					}
					fixed := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fixed"}, AllowVolumeExpansion: ptr.To(false)}
					if err := h.kube.Tracker().Add(fixed); err != nil {
						t.Fatal(err)
					}
				}
				for _, c := range []*corev1.PersistentVolumeClaim{
					claim(pg, 0, "1Gi", corev1.ClaimBound),   // grows
					claim(pg, 1, "2Gi", corev1.ClaimBound),   // large enough
					claim(pg, 2, "1Gi", corev1.ClaimPending), // resized once bound
					claim(pg, 3, "1Gi", corev1.ClaimBound),   // kept from a scale-down: grows
					claim(other, 0, "1Gi", corev1.ClaimBound),
				} {
					if tt.fixed {
						c.Spec.StorageClassName = ptr.To("fixed")
					}
					if err := h.kube.Tracker().Add(c); err != nil {
						t.Fatal(err)
					}
				}
				if tt.forbidden {
					h.kube.PrependReactor("patch", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
						return true, nil, apierrors.NewForbidden(corev1.Resource("persistentvolumeclaims"), "pgdata-acid-minimal-cluster-0",
							errors.New("only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"))
					})
				}
				grown := h.pg.get(pg.Namespace, pg.Name)
				grown.Spec.Volume.Size = resource.MustParse("2Gi")
				h.pg.put(grown)
				h.kubeWrites()
				err := h.ensure(t, pg)
				got := h.kubeWrites()
				if tt.wantErr {
					if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "resize persistentvolumeclaim") {
						t.Fatalf("err = %v, want a wrapped Forbidden", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, tt.writes) {
					t.Errorf("writes:\n got %v\nwant %v", got, tt.writes)
				}
				c, err := h.kube.CoreV1().PersistentVolumeClaims(pg.Namespace).Get(context.Background(), "pgdata-acid-minimal-cluster-0", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if q := c.Spec.Resources.Requests[corev1.ResourceStorage]; (q.String() != "2Gi") != (tt.writes == nil) {
					t.Errorf("claim 0 requests %s, want 2Gi", q.String())
				}
			})
		}
	})
}

func TestEnsureFinalizer(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		tests := []struct {
			name          string
			pg            func(*v1.Postgresql) *v1.Postgresql
			wantFinalizer bool
			wantObjects   bool
		}{
			{name: "added", pg: func(pg *v1.Postgresql) *v1.Postgresql { return pg }, wantFinalizer: true, wantObjects: true},
			{name: "added to another's", pg: func(pg *v1.Postgresql) *v1.Postgresql {
				pg.Finalizers = []string{"other"}
				return pg
			}, wantFinalizer: true, wantObjects: true},
			{name: "kept", pg: func(pg *v1.Postgresql) *v1.Postgresql {
				pg.Finalizers = []string{"other", cluster.Finalizer}
				return pg
			}, wantFinalizer: true, wantObjects: true},
			{name: "not added while deleting", pg: func(pg *v1.Postgresql) *v1.Postgresql {
				pg = deleting(pg)
				pg.Finalizers = []string{"other"}
				return pg
			}},
			{name: "resource gone", pg: func(*v1.Postgresql) *v1.Postgresql { return nil }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				pg := testCluster(t)
				var pgs []*v1.Postgresql
				if p := tt.pg(pg.DeepCopy()); p != nil {
					pgs = append(pgs, p)
				}
				h := newHarness(t, pgs)
				var before []string
				if len(pgs) > 0 {
					before = pgs[0].Finalizers
				}
				if err := h.ensure(t, pg); err != nil {
					t.Fatal(err)
				}
				if stored := h.pg.get(pg.Namespace, pg.Name); stored != nil {
					want := before
					if tt.wantFinalizer && !slices.Contains(before, cluster.Finalizer) {
						want = append(slices.Clone(before), cluster.Finalizer)
					}
					if !slices.Equal(stored.Finalizers, want) {
						t.Errorf("finalizers %v, want %v", stored.Finalizers, want)
					}
				}
				// One patch when it is missing, no update.
				wantPatches := 0
				if tt.wantFinalizer && !slices.Contains(before, cluster.Finalizer) {
					wantPatches = 1
				}
				if got := h.pg.count("Patch"); got != wantPatches || h.pg.count("Update") != 0 {
					t.Errorf("%d patches (want %d), %d updates of the resource", got, wantPatches, h.pg.count("Update"))
				}
				if got := len(h.kubeWrites()) > 0; got != tt.wantObjects {
					t.Errorf("objects written: %v, want %v", got, tt.wantObjects)
				}
			})
		}
	})
}

func TestStatus(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		conflict := apierrors.NewConflict(v1.Resource(v1.PostgresqlResource), "x", errors.New("modified"))
		running := v1.PostgresqlStatus{State: "Running", Epoch: 3, StateSince: &metav1.Time{Time: t0}, Ready: "2/2"}
		// The state machine's clock has sub-second precision; the stored copy
		// has whole seconds.
		precise := *running.DeepCopy()
		precise.StateSince = &metav1.Time{Time: t0.Add(300 * time.Millisecond)}
		tests := []struct {
			name       string
			stored     *v1.PostgresqlStatus // nil: the resource is gone
			failSt     func(int) error
			want       v1.PostgresqlStatus
			wantWrites int
			wantErr    func(error) bool
		}{
			{name: "written when different", stored: &v1.PostgresqlStatus{State: "Creating"}, want: running, wantWrites: 1},
			{name: "skipped when equal", stored: &running, want: running},
			{name: "skipped when equal to the second", stored: &running, want: precise},
			{name: "retried on conflict", stored: &v1.PostgresqlStatus{}, want: running, wantWrites: 2,
				failSt: func(n int) error {
					if n == 1 {
						return conflict
					}
					return nil
				}},
			{name: "gives up on persistent conflict", stored: &v1.PostgresqlStatus{}, want: running, wantWrites: maxAttempts,
				failSt: func(int) error { return conflict }, wantErr: apierrors.IsConflict},
			{name: "resource gone", want: running},
			{name: "resource gone while writing", stored: &v1.PostgresqlStatus{}, want: running, wantWrites: 1,
				failSt: func(int) error { return apierrors.NewNotFound(v1.Resource(v1.PostgresqlResource), "x") }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				pg := testCluster(t)
				var pgs []*v1.Postgresql
				if tt.stored != nil {
					pg.Status = *tt.stored
					pgs = append(pgs, pg)
				}
				h := newHarness(t, pgs)
				h.pg.failSt = tt.failSt
				want := tt.want.DeepCopy()
				err := h.eff.WriteStatus(context.Background(), keyOf(pg), want)
				if tt.wantErr != nil {
					if !tt.wantErr(err) {
						t.Fatalf("err = %v", err)
					}
				} else if err != nil {
					t.Fatal(err)
				}
				if n := h.pg.count("UpdateStatus"); n != tt.wantWrites {
					t.Errorf("%d status writes, want %d", n, tt.wantWrites)
				}
				if h.pg.count("Update") != 0 {
					t.Error("the status step wrote the spec")
				}
				if !equality.Semantic.DeepEqual(want, &tt.want) {
					t.Error("the plan's status was modified")
				}
				if got := h.pg.get(pg.Namespace, pg.Name); got != nil && tt.wantErr == nil && tt.failSt == nil {
					if !equality.Semantic.DeepEqual(stored(&got.Status), stored(&tt.want)) {
						t.Errorf("stored status %+v, want %+v", got.Status, tt.want)
					}
				}
			})
		}
	})
}

func TestReplacePod(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pod := func(name string, uid types.UID) *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "db", UID: uid}}
		}
		claim := func(name string, uid types.UID) *corev1.PersistentVolumeClaim {
			return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "db", UID: uid}}
		}
		const p0, p1, c1 = "acid-minimal-cluster-0", "acid-minimal-cluster-1", "pgdata-acid-minimal-cluster-1"
		tests := []struct {
			name     string
			existing []runtime.Object
			replace  []Pod
			// wantGone and wantKept name the objects deleted and left.
			wantGone, wantKept []string
		}{
			{name: "deletes the pod", existing: []runtime.Object{pod(p1, "u1")},
				replace: []Pod{{Name: p1, UID: "u1"}}, wantGone: []string{p1}},
			{name: "stale UID: already replaced", existing: []runtime.Object{pod(p1, "u2")},
				replace: []Pod{{Name: p1, UID: "u1"}}, wantKept: []string{p1}},
			{name: "pod gone", replace: []Pod{{Name: p1, UID: "u1"}}},
			{name: "several pods at once", existing: []runtime.Object{pod(p0, "u0"), pod(p1, "u1")},
				replace: []Pod{{Name: p0, UID: "u0"}, {Name: p1, UID: "u1"}}, wantGone: []string{p0, p1}},
			{name: "a pod and its claim", existing: []runtime.Object{pod(p1, "u1"), claim(c1, "c1")},
				replace: []Pod{{Name: p1, UID: "u1", Claim: c1, ClaimUID: "c1"}}, wantGone: []string{p1, c1}},
			{name: "a claim already replaced is left", existing: []runtime.Object{pod(p1, "u1"), claim(c1, "c2")},
				replace: []Pod{{Name: p1, UID: "u1", Claim: c1, ClaimUID: "c1"}}, wantGone: []string{p1}, wantKept: []string{c1}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				pg := testCluster(t)
				h := newHarness(t, []*v1.Postgresql{pg}, tt.existing...)
				// The fake clientset ignores preconditions; the apiserver
				// answers Conflict when the UID differs.
				for _, res := range []string{"pods", "persistentvolumeclaims"} {
					h.kube.PrependReactor("delete", res, func(a k8stesting.Action) (bool, runtime.Object, error) {
						d := a.(k8stesting.DeleteActionImpl)
						obj, err := h.kube.Tracker().Get(corev1.SchemeGroupVersion.WithResource(res), d.Namespace, d.Name)
						if err != nil {
							return true, nil, err
						}
						if pre := d.DeleteOptions.Preconditions; pre != nil && pre.UID != nil && *pre.UID != obj.(metav1.Object).GetUID() {
							return true, nil, apierrors.NewConflict(corev1.Resource(res), d.Name, errors.New("precondition failed"))
						}
						return false, nil, nil
					})
				}
				if err := h.eff.ReplacePods(context.Background(), keyOf(pg), tt.replace); err != nil {
					t.Fatal(err)
				}
				exists := func(name string) bool {
					_, errPod := h.kube.CoreV1().Pods("db").Get(context.Background(), name, metav1.GetOptions{})
					_, errClaim := h.kube.CoreV1().PersistentVolumeClaims("db").Get(context.Background(), name, metav1.GetOptions{})
					return errPod == nil || errClaim == nil
				}
				for _, name := range tt.wantGone {
					if exists(name) {
						t.Errorf("%s not deleted", name)
					}
				}
				for _, name := range tt.wantKept {
					if !exists(name) {
						t.Errorf("%s deleted", name)
					}
				}
			})
		}
	})
}

// TestNudge: the nudge annotates the StatefulSet with the quota version,
// which is all it takes for its controller to sync it again.
func TestNudge(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := testCluster(t)
		h := newHarness(t, []*v1.Postgresql{pg})
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		h.kube.ClearActions()
		if err := h.eff.Nudge(context.Background(), keyOf(pg), "q7"); err != nil {
			t.Fatal(err)
		}
		if got, want := h.kubeWrites(), []string{"patch statefulsets acid-minimal-cluster"}; !slices.Equal(got, want) {
			t.Errorf("writes %v, want %v", got, want)
		}
		sts, err := h.kube.AppsV1().StatefulSets("db").Get(context.Background(), cluster.StatefulSetName(pg.Name), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := sts.Annotations[cluster.AnnotationQuotaSeen]; got != "q7" {
			t.Errorf("annotation %s = %q, want q7", cluster.AnnotationQuotaSeen, got)
		}
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		if got := h.kubeWrites(); len(got) != 0 {
			t.Errorf("an ensure after the nudge wrote %v: the annotation is no difference", got)
		}
		gone := testCluster(t)
		gone.Name = "gone"
		if err := newHarness(t, []*v1.Postgresql{gone}).eff.Nudge(context.Background(), keyOf(gone), "q7"); err != nil {
			t.Errorf("nudge of a StatefulSet that is gone: %v", err)
		}
	})
}

// TestEnsureStorageClassChange: a new StorageClass in the spec deletes the
// StatefulSet with orphan propagation (its volumeClaimTemplates cannot
// change) and says it waits; once it is gone the next ensure creates it
// with the new class.
func TestEnsureStorageClassChange(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := testCluster(t)
		pg.Spec.Volume.StorageClass = "missing"
		h := newHarness(t, []*v1.Postgresql{pg})
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		cur, err := h.pgc.PgloopV1().Postgresqls(pg.Namespace).Get(context.Background(), pg.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fixed := cur.DeepCopy()
		fixed.Spec.Volume.StorageClass = "fast"
		fixed.Generation++
		if fixed, err = h.pgc.PgloopV1().Postgresqls(fixed.Namespace).Update(context.Background(), fixed, metav1.UpdateOptions{FieldManager: someoneElse}); err != nil {
			t.Fatal(err)
		}
		if h.cache != nil {
			h.cache.sync()
		}
		var deleteOpts *metav1.DeleteOptions
		h.kube.PrependReactor("delete", "statefulsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
			opts := a.(k8stesting.DeleteActionImpl).DeleteOptions
			deleteOpts = &opts
			return false, nil, nil
		})
		h.kube.ClearActions()
		err = h.ensure(t, fixed)
		if !errors.Is(err, ErrWaiting) || !strings.Contains(err.Error(), `storage class fast`) {
			t.Fatalf("ensure = %v, want a wait for the StatefulSet's re-creation", err)
		}
		if deleteOpts == nil || deleteOpts.PropagationPolicy == nil || *deleteOpts.PropagationPolicy != metav1.DeletePropagationOrphan ||
			deleteOpts.Preconditions == nil || deleteOpts.Preconditions.UID == nil {
			t.Fatalf("statefulset deleted with %+v, want orphan propagation and a UID precondition", deleteOpts)
		}
		if h.cache != nil {
			h.cache.sync()
		}
		if err := h.ensure(t, fixed); err != nil {
			t.Fatal(err)
		}
		sts, err := h.kube.AppsV1().StatefulSets("db").Get(context.Background(), cluster.StatefulSetName(pg.Name), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := cluster.ClaimTemplateClass(sts); got != "fast" {
			t.Errorf("re-created with class %q, want fast", got)
		}
	})
}

func TestCleanup(t *testing.T) {
	// Retain (the default): the volume claims and the credentials Secrets
	// outlive the cluster, the Secrets without their owner reference to it;
	// Delete (spec.volume.retention): both go.
	for _, retention := range []v1.VolumeRetention{"", v1.DeleteVolumes} {
		t.Run("retention="+string(retention), func(t *testing.T) {
			bothModes(t, func(t *testing.T, newHarness harnessFunc) {
				a, b := testCluster(t), otherCluster(t)
				h := newHarness(t, []*v1.Postgresql{a, b})
				for _, pg := range []*v1.Postgresql{a, b} {
					if err := h.ensure(t, pg); err != nil {
						t.Fatal(err)
					}
				}
				ctx := context.Background()
				// Patroni's ConfigMaps of a, b's, and ConfigMaps Patroni did not
				// write: only a's go.
				patroni := func(pg *v1.Postgresql, suffix string) *corev1.ConfigMap {
					return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: pg.Name + "-" + suffix, Namespace: pg.Namespace,
						Labels: cluster.Selector(pg.Name), Annotations: map[string]string{cluster.AnnotationLeader: cluster.PodName(pg.Name, 0)}}}
				}
				var gone, kept []*corev1.ConfigMap
				for _, suffix := range []string{"config", "leader", "failover", "sync"} {
					gone = append(gone, patroni(a, suffix))
					kept = append(kept, patroni(b, suffix))
				}
				unlabelled := patroni(a, "mine")
				unlabelled.Labels = nil
				otherApp := patroni(a, "app")
				otherApp.Labels = map[string]string{cluster.LabelApplication: "other", cluster.LabelClusterName: a.Name}
				otherNS := patroni(a, "leader")
				otherNS.Namespace = "elsewhere"
				kept = append(kept, unlabelled, otherApp, otherNS)
				for _, cm := range slices.Concat(gone, kept) {
					if _, err := h.kube.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{FieldManager: someoneElse}); err != nil {
						t.Fatal(err)
					}
				}
				claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
					Name: cluster.PersistentVolumeClaimName(a.Name, 0), Namespace: a.Namespace, Labels: cluster.Labels(a)}}
				running := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: cluster.PodName(a.Name, 0), Namespace: a.Namespace, Labels: cluster.Labels(a)}}
				for _, o := range []runtime.Object{claim, running} {
					if err := h.kube.Tracker().Add(o); err != nil {
						t.Fatal(err)
					}
				}
				dying := deleting(h.pg.get(a.Namespace, a.Name))
				dying.Spec.Volume.Retention = retention
				h.pg.put(dying)
				h.kubeWrites()

				if err := h.cleanup(t, a); err != nil {
					t.Fatal(err)
				}
				for _, w := range h.kubeWrites() {
					if strings.Contains(w, "pgloop-pod") {
						t.Errorf("cleanup of a cluster that is not the last wrote a shared object: %s", w)
					}
				}
				if h.pg.get(a.Namespace, a.Name) != nil {
					t.Error("finalizer not removed: the resource is still there")
				}
				for _, o := range buildAll(t, a).All() {
					kind := o.GetObjectKind().GroupVersionKind().Kind
					gvr := o.GetObjectKind().GroupVersionKind().GroupVersion().WithResource(resourceOf(o))
					_, err := h.kube.Tracker().Get(gvr, o.GetNamespace(), o.GetName())
					switch kind {
					case "ServiceAccount", "Role", "RoleBinding":
						// Still used by b.
						if err != nil {
							t.Errorf("shared %s deleted while another cluster uses it", kind)
						}
					case "Secret":
						if retention == v1.DeleteVolumes {
							if !apierrors.IsNotFound(err) {
								t.Errorf("Secret %s not deleted with retention Delete (%v)", o.GetName(), err)
							}
							continue
						}
						s, err := h.kube.CoreV1().Secrets(o.GetNamespace()).Get(ctx, o.GetName(), metav1.GetOptions{})
						switch {
						case err != nil:
							t.Errorf("Secret %s deleted with retention Retain (%v)", o.GetName(), err)
						case len(s.OwnerReferences) != 0:
							t.Errorf("Secret %s kept with its owner references %v: the garbage collector would delete it", s.Name, s.OwnerReferences)
						}
					default:
						if !apierrors.IsNotFound(err) {
							t.Errorf("%s %s not deleted (%v)", kind, o.GetName(), err)
						}
					}
				}
				for _, cm := range gone {
					if _, err := h.kube.CoreV1().ConfigMaps(cm.Namespace).Get(ctx, cm.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
						t.Errorf("Patroni's configmap %s not deleted (%v)", cm.Name, err)
					}
				}
				for _, cm := range kept {
					if _, err := h.kube.CoreV1().ConfigMaps(cm.Namespace).Get(ctx, cm.Name, metav1.GetOptions{}); err != nil {
						t.Errorf("configmap %s/%s %v deleted: not Patroni's of %s (%v)", cm.Namespace, cm.Name, cm.Labels, a.Name, err)
					}
				}
				if _, err := h.kube.CoreV1().Pods(a.Namespace).Get(ctx, running.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Errorf("pod %s not deleted", running.Name)
				}
				_, err := h.kube.CoreV1().PersistentVolumeClaims(a.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
				switch {
				case retention == v1.DeleteVolumes && !apierrors.IsNotFound(err):
					t.Errorf("volume claim kept with retention Delete (%v)", err)
				case retention != v1.DeleteVolumes && err != nil:
					t.Errorf("volume claim deleted with retention Retain (%v)", err)
				}
				// b is untouched.
				h.kubeWrites()
				if err := h.ensure(t, b); err != nil {
					t.Fatal(err)
				}
				if w := h.kubeWrites(); len(w) != 0 {
					t.Errorf("cleanup of a changed b's objects: ensure of b wrote %v", w)
				}

				// The last cluster's cleanup deletes the shared objects.
				h.pg.put(deleting(h.pg.get(b.Namespace, b.Name)))
				if err := h.cleanup(t, b); err != nil {
					t.Fatal(err)
				}
				for _, o := range []cluster.Object{cluster.ServiceAccount(b), cluster.Role(b), cluster.RoleBinding(b)} {
					gvr := o.GetObjectKind().GroupVersionKind().GroupVersion().WithResource(resourceOf(o))
					if _, err := h.kube.Tracker().Get(gvr, o.GetNamespace(), o.GetName()); !apierrors.IsNotFound(err) {
						t.Errorf("shared %s kept after the last cluster (%v)", o.GetObjectKind().GroupVersionKind().Kind, err)
					}
				}
				// A second run finds nothing to do.
				if err := h.cleanup(t, b); err != nil {
					t.Errorf("cleanup of a gone resource: %v", err)
				}
			})
		})
	}
}

func TestCleanupWaitsForPods(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := deleting(testCluster(t))
		pg.Finalizers = []string{cluster.Finalizer}
		terminating := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name: cluster.PodName(pg.Name, 0), Namespace: pg.Namespace, Labels: cluster.Labels(pg),
			DeletionTimestamp: &metav1.Time{Time: time.Unix(1700000000, 0)}, Finalizers: []string{"kubelet"}}}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cluster.LeaderConfigMapName(pg.Name), Namespace: pg.Namespace,
			Labels: cluster.Selector(pg.Name)}}
		h := newHarness(t, []*v1.Postgresql{pg}, terminating, cm)
		err := h.cleanup(t, pg)
		if !errors.Is(err, ErrPodsTerminating) {
			t.Fatalf("err = %v, want ErrPodsTerminating", err)
		}
		if stored := h.pg.get(pg.Namespace, pg.Name); stored == nil || !slices.Contains(stored.Finalizers, cluster.Finalizer) {
			t.Error("finalizer removed while a pod still runs")
		}
		if _, err := h.kube.CoreV1().ConfigMaps(pg.Namespace).Get(context.Background(), cm.Name, metav1.GetOptions{}); err != nil {
			t.Error("Patroni's configmap deleted while Patroni still runs")
		}
		for _, w := range h.kubeWrites() {
			if strings.HasPrefix(w, "delete pods ") {
				t.Errorf("a terminating pod deleted again: %s", w)
			}
		}
	})
}

func TestCleanupRefusesLiveCluster(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := testCluster(t)
		h := newHarness(t, []*v1.Postgresql{pg})
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		h.kubeWrites()
		if err := h.cleanup(t, pg); err == nil {
			t.Fatal("cleanup of a cluster not being deleted must fail")
		}
		if w := h.kubeWrites(); len(w) != 0 {
			t.Errorf("refused cleanup wrote %v", w)
		}
	})
}

func TestCleanupFinalizerConflict(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := deleting(testCluster(t))
		pg.Finalizers = []string{"other", cluster.Finalizer}
		h := newHarness(t, []*v1.Postgresql{pg})
		h.pg.failUpd = func(n int) error {
			if n == 1 {
				return apierrors.NewConflict(v1.Resource(v1.PostgresqlResource), pg.Name, errors.New("modified"))
			}
			return nil
		}
		if err := h.cleanup(t, pg); err != nil {
			t.Fatal(err)
		}
		if got := h.pg.get(pg.Namespace, pg.Name).Finalizers; !slices.Equal(got, []string{"other"}) {
			t.Errorf("finalizers = %v, want [other]", got)
		}
	})
}

// uidRecorder records the objects events are recorded on.
type uidRecorder struct {
	*record.FakeRecorder
	mu   sync.Mutex
	uids []types.UID
}

func (r *uidRecorder) Event(obj runtime.Object, typ, reason, msg string) {
	r.mu.Lock()
	r.uids = append(r.uids, obj.(metav1.Object).GetUID())
	r.mu.Unlock()
	r.FakeRecorder.Event(obj, typ, reason, msg)
}

func TestEvents(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := testCluster(t)
		events := []Record{
			{Reason: "Running", Message: "Creating -> Running on podsReady"},
			{Warning: true, Reason: "Degraded", Message: "Running -> Degraded: 50% of pods lost"},
		}
		want := []string{"Normal Running Creating -> Running on podsReady", "Warning Degraded Running -> Degraded: 50% of pods lost"}
		for _, tt := range []struct {
			name    string
			status  *v1.PostgresqlStatus
			ctx     func() context.Context
			wantUID types.UID
		}{
			{name: "after status", status: &v1.PostgresqlStatus{State: "Degraded"}, wantUID: pg.UID},
			{name: "alone", wantUID: pg.UID},
			{name: "cancelled plan", ctx: func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				h := newHarness(t, []*v1.Postgresql{pg})
				rec := &uidRecorder{FakeRecorder: record.NewFakeRecorder(8)}
				h.eff.rec = rec
				ctx := context.Background()
				if tt.ctx != nil {
					ctx = tt.ctx()
				}
				if tt.status != nil {
					if err := h.eff.WriteStatus(ctx, keyOf(pg), tt.status); err != nil {
						t.Fatalf("status: %v", err)
					}
				}
				if err := h.eff.RecordEvents(ctx, keyOf(pg), events); err != nil {
					t.Fatalf("events failed: %v", err)
				}
				close(rec.Events)
				var got []string
				for e := range rec.Events {
					got = append(got, e)
				}
				if !slices.Equal(got, want) {
					t.Errorf("events:\n got %q\nwant %q", got, want)
				}
				for _, uid := range rec.uids {
					if uid != tt.wantUID {
						t.Errorf("event on UID %q, want %q", uid, tt.wantUID)
					}
				}
			})
		}
	})
}

// TestEffectsHonourCancelledContext: with ctx done, an effect calls
// nothing and returns ctx's error; only the Events are still recorded.
func TestEffectsHonourCancelledContext(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		pg := deleting(testCluster(t))
		for _, name := range []string{"status", "ensure", "replacePods", "nudge", "cleanup"} {
			t.Run(name, func(t *testing.T) {
				h := newHarness(t, []*v1.Postgresql{pg})
				start := time.Now()
				err := effectsOf(h.eff, &v1.PostgresqlStatus{State: "Running"})[name](ctx, keyOf(pg))
				if !errors.Is(err, context.Canceled) {
					t.Errorf("err = %v, want context.Canceled", err)
				}
				if d := time.Since(start); d > time.Second {
					t.Errorf("took %v", d)
				}
				if n := len(h.kube.Actions()); n != 0 {
					t.Errorf("%d API calls after cancellation", n)
				}
				if n := h.pg.count("Get") + h.pg.writes(); n != 0 {
					t.Errorf("%d resource calls after cancellation", n)
				}
			})
		}
	})
}

// TestEnsureCancelledMidway cancels the context during the ensure: the
// step stops at the next object with the context's error.
func TestEnsureCancelledMidway(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := testCluster(t)
		h := newHarness(t, []*v1.Postgresql{pg})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		h.kube.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
			cancel()
			return false, nil, nil
		})
		err := h.eff.Ensure(ctx, keyOf(pg), EnsureOptions{})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		for _, w := range h.kubeWrites() {
			if strings.Contains(w, " statefulsets ") {
				t.Errorf("kept going after cancellation: %s", w)
			}
		}
	})
}

// TestEnsureConcurrentClusters runs the plans of two clusters at once, as
// the executor's workers do, and draws passwords from the shared random
// source from both: with -race it checks that Effects shares nothing
// unsafely (the random source here is not safe for concurrent use).
func TestEnsureConcurrentClusters(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		a, b := testCluster(t), otherCluster(t)
		h := newHarness(t, []*v1.Postgresql{a, b})
		h.eff = New(h.kube, h.pgc, h.rec, Options{Random: &countingReader{}, Log: h.eff.log, Cache: h.effectsCache()})
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, 4)
		for i, pg := range []*v1.Postgresql{a, b} {
			wg.Go(func() {
				<-start
				errs[i] = h.eff.Ensure(context.Background(), keyOf(pg), EnsureOptions{})
			})
			wg.Go(func() {
				<-start
				for range 100 {
					if _, err := cluster.Build(pg, cluster.Options{}, h.eff.random); err != nil {
						errs[2+i] = err
					}
				}
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	})
}

// countingReader yields the bytes of a SplitMix64 sequence over a counter:
// deterministic, never repeating a password in practice (a plain byte
// counter wraps every 256 bytes and, depending on how concurrent readers
// interleave, repeats one), and racy when shared without a lock.
type countingReader struct{ next uint64 }

func (c *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		c.next++
		z := c.next * 0x9e3779b97f4a7c15
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		p[i] = byte(z ^ z>>31)
	}
	return len(p), nil
}

// TestEnsureStatefulSetBesideServices: the StatefulSet follows the
// Secrets (its pods read them) but not the Services, which are written
// beside it (an API server allocates cluster IPs one after another). A
// fake clientset runs one call at a time, so the test looks at what a
// failed write holds back.
func TestEnsureStatefulSetBesideServices(t *testing.T) {
	refuse := func(h *harness, resource string) {
		h.kube.PrependReactor("create", resource, func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "x", errors.New("exceeded quota"))
		})
	}
	for _, tc := range []struct {
		refused string
		sts     bool
	}{
		{refused: "services", sts: true},
		{refused: "secrets", sts: false},
	} {
		t.Run(tc.refused, func(t *testing.T) {
			pg := testCluster(t)
			h := newHarness(t, []*v1.Postgresql{pg})
			refuse(h, tc.refused)
			if err := h.ensure(t, pg); err == nil || !strings.Contains(err.Error(), "exceeded quota") {
				t.Fatalf("ensure: %v, want the refusal", err)
			}
			_, err := h.kube.AppsV1().StatefulSets(pg.Namespace).Get(context.Background(), cluster.StatefulSetName(pg.Name), metav1.GetOptions{})
			if got := err == nil; got != tc.sts {
				t.Errorf("StatefulSet created %v (%v), want %v", got, err, tc.sts)
			}
		})
	}
}
