package effects

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/reqclass"
)

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
				template := get().Spec.Template
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
				// The whole template, not only its hash: the
				// cache's StatefulSet has no more than the hash.
				if !apiequality.Semantic.DeepEqual(kept.Spec.Template, template) {
					t.Errorf("template with hash %s and %d containers written, want the one in place (hash %s) kept whole",
						cluster.PodTemplateHash(kept), len(kept.Spec.Template.Spec.Containers), before)
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
	if !errors.Is(err, act.ErrWaiting) || !strings.Contains(err.Error(), "earlier postgresql") {
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
		if !errors.Is(err, act.ErrWaiting) || !strings.Contains(err.Error(), `storage class fast`) {
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

// The writes of a cluster's headless Service are marked as a class of
// their own for the operator's write windows; those of a Service with a
// ClusterIP are not.
func TestServiceContextMarksHeadless(t *testing.T) {
	pg := testCluster(t)
	headless := 0
	for _, s := range cluster.Services(pg, cluster.Options{}) {
		got := reqclass.WriteClassOf(serviceContext(context.Background(), s))
		want := ""
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			want = HeadlessClass
			headless++
		}
		if got != want {
			t.Errorf("service %s (clusterIP %q): write class %q, want %q", s.Name, s.Spec.ClusterIP, got, want)
		}
	}
	if headless == 0 {
		t.Errorf("no headless Service among %d, want the config one", len(cluster.Services(pg, cluster.Options{})))
	}
}

// knownFunc is a DesiredStatefulSets.
type knownFunc func(pg *v1.Postgresql) (cluster.StatefulSetSummary, bool)

func (f knownFunc) KnownStatefulSet(pg *v1.Postgresql) (cluster.StatefulSetSummary, bool) {
	return f(pg)
}

// TestEnsureTrustsKnownStatefulSet checks the ensure of a cluster whose
// desired StatefulSet Options.Desired knows (the facts built it for the
// resource's generation): it compares the cached StatefulSet with what is
// known and builds none. Someone put another value in a label of pgloop's
// on the StatefulSet. Told that the label's new value is the desired one,
// the ensure writes nothing, although a build would differ (so it built
// none to compare). Told the summary of the StatefulSet as built, or told
// nothing, or told for another generation only, it writes the label back.
func TestEnsureTrustsKnownStatefulSet(t *testing.T) {
	tests := []struct {
		name string
		// known is what Desired says of pg, given the StatefulSet as
		// built and as edited.
		known     func(pg *v1.Postgresql, built, edited *appsv1.StatefulSet) (cluster.StatefulSetSummary, bool)
		wantWrite bool
	}{
		{name: "the edit known as desired", known: func(_ *v1.Postgresql, _, edited *appsv1.StatefulSet) (cluster.StatefulSetSummary, bool) {
			return cluster.Summarize(edited), true
		}},
		{name: "the build known", wantWrite: true, known: func(_ *v1.Postgresql, built, _ *appsv1.StatefulSet) (cluster.StatefulSetSummary, bool) {
			return cluster.Summarize(built), true
		}},
		{name: "nothing known", wantWrite: true, known: func(*v1.Postgresql, *appsv1.StatefulSet, *appsv1.StatefulSet) (cluster.StatefulSetSummary, bool) {
			return cluster.StatefulSetSummary{}, false
		}},
		{name: "known for another generation", wantWrite: true, known: func(pg *v1.Postgresql, _, edited *appsv1.StatefulSet) (cluster.StatefulSetSummary, bool) {
			return cluster.Summarize(edited), pg.Generation == 1000
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pg, h := ensured(t, newCachedHarness)
			built := buildAll(t, pg).StatefulSet
			edited := getObject(t, h, built).(*appsv1.StatefulSet).DeepCopy()
			edited.Labels[cluster.LabelManagedBy] = "helm"
			if _, err := h.kube.AppsV1().StatefulSets(pg.Namespace).Update(context.Background(), edited,
				metav1.UpdateOptions{FieldManager: someoneElse}); err != nil {
				t.Fatal(err)
			}
			h.kubeWrites()
			asked := 0
			h.eff = New(h.kube, h.pgc, h.rec, Options{Random: seeded(7), Log: h.eff.log, Cache: h.effectsCache(),
				Desired: knownFunc(func(got *v1.Postgresql) (cluster.StatefulSetSummary, bool) {
					asked++
					if got.UID != pg.UID || got.Generation != pg.Generation {
						t.Errorf("asked of %s generation %d", got.UID, got.Generation)
					}
					return tt.known(got, built, edited)
				})})
			if err := h.ensure(t, pg); err != nil {
				t.Fatal(err)
			}
			var want []string
			if tt.wantWrite {
				want = []string{"update statefulsets " + built.Name}
			}
			if got := h.kubeWrites(); !slices.Equal(got, want) {
				t.Errorf("writes %v, want %v", got, want)
			}
			if asked != 1 {
				t.Errorf("Desired asked %d times, want once", asked)
			}
		})
	}
}
