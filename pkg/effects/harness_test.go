package effects

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	pgfake "github.com/pgloop/pgloop/pkg/generated/clientset/versioned/fake"
)

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
	h.kube.PrependReactor("delete-collection", "endpoints", deleteCollection(h.kube.Tracker()))
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
		if got != act.FieldManager && got != someoneElse {
			t.Errorf("%s %s %s: field manager %q, want %q", a.GetVerb(), a.GetResource().Resource, a.GetSubresource(), got, act.FieldManager)
		}
		return false, nil, nil
	}
}

// deleteCollection makes the fake clientset delete the ConfigMaps or
// Endpoints a DeleteCollection selects by label, as the apiserver does:
// client-go's object tracker does nothing for it.
func deleteCollection(tracker k8stesting.ObjectTracker) k8stesting.ReactionFunc {
	return func(action k8stesting.Action) (bool, runtime.Object, error) {
		dc, ok := action.(k8stesting.DeleteCollectionActionImpl)
		if !ok {
			return false, nil, nil
		}
		gvr := dc.GetResource()
		kind := "ConfigMap"
		if gvr.Resource == "endpoints" {
			kind = "Endpoints"
		}
		list, err := tracker.List(gvr, corev1.SchemeGroupVersion.WithKind(kind), dc.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return true, nil, err
		}
		sel := dc.GetListRestrictions().Labels
		for _, item := range items {
			o := item.(metav1.Object)
			if sel == nil || sel.Matches(labels.Set(o.GetLabels())) {
				if err := tracker.Delete(gvr, o.GetNamespace(), o.GetName()); err != nil {
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

// effectsOf returns every effect of eff, by name, as a call for a key:
// status writes status; the pods, the version and the events are made up.
func effectsOf(eff *Effects, status *v1.PostgresqlStatus) map[string]func(context.Context, string) error {
	return map[string]func(context.Context, string) error{
		"status": func(ctx context.Context, key string) error { return eff.WriteStatus(ctx, key, status) },
		"ensure": func(ctx context.Context, key string) error { return eff.Ensure(ctx, key, EnsureOptions{}) },
		"replacePods": func(ctx context.Context, key string) error {
			return eff.ReplacePods(ctx, key, []act.Pod{{Name: "acid-minimal-cluster-0", UID: "u"}})
		},
		"nudge":   func(ctx context.Context, key string) error { return eff.Nudge(ctx, key, "q1") },
		"cleanup": eff.Cleanup,
		"events": func(ctx context.Context, key string) error {
			return eff.RecordEvents(ctx, key, []act.Record{{Reason: "Running"}})
		},
	}
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
