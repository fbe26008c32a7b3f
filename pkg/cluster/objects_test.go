package cluster

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// wideCluster has many entries in every map of the spec, so that any
// dependence on map iteration order shows up as differing output.
func wideCluster(t testing.TB) *v1.Postgresql {
	pg := loadSample(t, "full")
	for i := range 40 {
		pg.Spec.Users[fmt.Sprintf("user_%02d", i)] = v1.UserFlags{v1.FlagLogin}
		pg.Spec.PostgreSQL.Parameters[fmt.Sprintf("custom.setting_%02d", i)] = fmt.Sprint(i)
		pg.Spec.PodAnnotations[fmt.Sprintf("example.com/pod-%02d", i)] = fmt.Sprint(i)
		pg.Spec.ServiceAnnotations[fmt.Sprintf("example.com/svc-%02d", i)] = fmt.Sprint(i)
	}
	return pg
}

func TestDeterministic(t *testing.T) {
	clusters := map[string]func(testing.TB) *v1.Postgresql{
		"minimal": func(t testing.TB) *v1.Postgresql { return loadSample(t, "minimal") },
		"full":    func(t testing.TB) *v1.Postgresql { return loadSample(t, "full") },
		"wide":    wideCluster,
	}
	for _, name := range slices.Sorted(maps.Keys(clusters)) {
		t.Run(name, func(t *testing.T) {
			first := encode(t, buildAll(t, clusters[name](t)).All())
			for range 20 {
				// A fresh cluster each time: fresh maps, fresh iteration
				// order.
				again := encode(t, buildAll(t, clusters[name](t)).All())
				if !bytes.Equal(first, again) {
					t.Fatalf("two builds of the same cluster differ:\n%s", lineDiff(first, again))
				}
			}
		})
	}
}

func TestOwnerReferencesAndLabels(t *testing.T) {
	shared := []string{"ServiceAccount", "Role", "RoleBinding"}
	for _, name := range samples {
		t.Run(name, func(t *testing.T) {
			pg := loadSample(t, name)
			objs := buildAll(t, pg)
			for _, o := range objs.All() {
				kind := o.GetObjectKind().GroupVersionKind().Kind
				what := kind + " " + o.GetName()
				if kind == "" {
					t.Errorf("%s has no kind", o.GetName())
				}
				if o.GetNamespace() != pg.Namespace {
					t.Errorf("%s: namespace %q, want %q", what, o.GetNamespace(), pg.Namespace)
				}
				refs := o.GetOwnerReferences()
				if slices.Contains(shared, kind) {
					// Shared by the namespace's clusters: it belongs
					// to the namespace, not to one of them.
					if len(refs) != 0 {
						t.Errorf("%s: shared object has owner references %+v", what, refs)
					}
					if want := sharedLabels(); !mapsEqual(o.GetLabels(), want) {
						t.Errorf("%s: labels %v, want %v", what, o.GetLabels(), want)
					}
					continue
				}
				if len(refs) != 1 {
					t.Errorf("%s: %d owner references, want 1", what, len(refs))
					continue
				}
				ref := refs[0]
				if ref.APIVersion != "pgloop.dev/v1" || ref.Kind != "Postgresql" || ref.Name != pg.Name || ref.UID != pg.UID {
					t.Errorf("%s: owner reference %+v does not point at the cluster", what, ref)
				}
				if metav1.GetControllerOf(o) == nil || !*ref.Controller || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
					t.Errorf("%s: owner reference %+v is not controller=true, blockOwnerDeletion=true", what, ref)
				}
				want := Labels(pg)
				if o.GetLabels()[LabelConnectionPooler] != "" {
					// A pooler's: not PostgreSQL's application.
					want[LabelApplication] = ApplicationPooler
				}
				if !containsAll(o.GetLabels(), want) {
					t.Errorf("%s: labels %v lack %v", what, o.GetLabels(), want)
				}
			}
			sts := objs.StatefulSet
			for what, labels := range map[string]map[string]string{
				"pod template":          sts.Spec.Template.Labels,
				"volume claim template": sts.Spec.VolumeClaimTemplates[0].Labels,
			} {
				if !mapsEqual(labels, Labels(pg)) {
					t.Errorf("%s labels %v, want %v", what, labels, Labels(pg))
				}
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool { return containsAll(a, b) && containsAll(b, a) }

func TestNamesMatchBuild(t *testing.T) {
	for _, name := range samples {
		t.Run(name, func(t *testing.T) {
			pg := loadSample(t, name)
			objs := buildAll(t, pg)
			n := Names(pg)
			var secrets, services []string
			for _, s := range objs.Secrets {
				secrets = append(secrets, s.Name)
			}
			for _, s := range objs.Services {
				services = append(services, s.Name)
			}
			checks := []struct {
				what      string
				got, want any
			}{
				{"statefulset", n.StatefulSet, objs.StatefulSet.Name},
				{"services", n.Services, services},
				{"secrets", n.Secrets, secrets},
				{"pdb", n.PodDisruptionBudget, objs.PodDisruptionBudget.Name},
				{"serviceaccount", n.ServiceAccount, objs.ServiceAccount.Name},
				{"role", n.Role, objs.Role.Name},
				{"rolebinding", n.RoleBinding, objs.RoleBinding.Name},
				{"pod template service account", objs.StatefulSet.Spec.Template.Spec.ServiceAccountName, n.ServiceAccount},
			}
			for _, c := range checks {
				if !apiequality.Semantic.DeepEqual(c.got, c.want) {
					t.Errorf("%s: Names says %v, Build made %v", c.what, c.got, c.want)
				}
			}
		})
	}
	if got, want := PersistentVolumeClaimName("acid-x", 2), "pgdata-acid-x-2"; got != want {
		t.Errorf("PersistentVolumeClaimName = %q, want %q", got, want)
	}
	if got, want := PodName("acid-x", 0), "acid-x-0"; got != want {
		t.Errorf("PodName = %q, want %q", got, want)
	}
	if got, want := LeaderConfigMapName("acid-x"), "acid-x-leader"; got != want {
		t.Errorf("LeaderConfigMapName = %q, want %q", got, want)
	}
}

// TestNamesValidAtTheLimits builds a cluster whose name and user names are
// as long as the API allows and checks that every name and label is one
// the apiserver accepts.
func TestNamesValidAtTheLimits(t *testing.T) {
	pg := loadSample(t, "minimal")
	pg.Name = "a" + strings.Repeat("b", v1.MaxClusterNameLength-1)
	pg.Spec.TeamID = strings.Repeat("t", 63)
	pg.Spec.Users = map[string]v1.UserFlags{strings.Repeat("u", 30) + "_" + strings.Repeat("v", 32): {}}
	pg.Spec.Databases = nil
	if errs := pg.Validate(); len(errs) > 0 {
		t.Fatalf("test cluster invalid: %v", errs.ToAggregate())
	}
	objs := buildAll(t, pg)
	for _, o := range objs.All() {
		check := validation.IsDNS1123Subdomain
		if _, ok := o.(*corev1.Service); ok {
			check = validation.IsDNS1035Label
		}
		for _, msg := range check(o.GetName()) {
			t.Errorf("%T name %q: %s", o, o.GetName(), msg)
		}
		for k, v := range o.GetLabels() {
			for _, msg := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
				t.Errorf("%T %s label %s=%s: %s", o, o.GetName(), k, v, msg)
			}
		}
	}
	// The StatefulSet controller labels pods with
	// controller-revision-hash=<statefulset>-<10 characters>.
	for _, msg := range validation.IsValidLabelValue(objs.StatefulSet.Name + "-" + strings.Repeat("x", 10)) {
		t.Errorf("revision label of %s: %s", objs.StatefulSet.Name, msg)
	}
}

// TestBuildDoesNotAliasCluster changes every map and slice of the built
// objects and checks that the cluster they came from is untouched: builders
// get clusters from an informer's cache, which must never change.
func TestBuildDoesNotAliasCluster(t *testing.T) {
	pg := loadSample(t, "full")
	before := pg.DeepCopy()
	objs := buildAll(t, pg)

	sts := objs.StatefulSet
	for _, m := range []map[string]string{sts.Labels, sts.Spec.Template.Labels, sts.Spec.Template.Annotations, sts.Spec.Selector.MatchLabels} {
		for k := range m {
			m[k] = "changed"
		}
	}
	pod := &sts.Spec.Template.Spec
	pod.Tolerations[0].Key = "changed"
	pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key = "changed"
	c := &pod.Containers[0]
	for name, q := range c.Resources.Requests {
		q.Add(resource.MustParse("1"))
		c.Resources.Requests[name] = q
	}
	for name, q := range c.Resources.Limits {
		q.Add(resource.MustParse("1"))
		c.Resources.Limits[name] = q
	}
	vct := &sts.Spec.VolumeClaimTemplates[0]
	*vct.Spec.StorageClassName = "changed"
	storage := vct.Spec.Resources.Requests[corev1.ResourceStorage]
	storage.Add(resource.MustParse("1Gi"))
	vct.Spec.Resources.Requests[corev1.ResourceStorage] = storage
	for _, svc := range objs.Services {
		for k := range svc.Annotations {
			svc.Annotations[k] = "changed"
		}
		for k := range svc.Spec.Selector {
			svc.Spec.Selector[k] = "changed"
		}
	}

	if !apiequality.Semantic.DeepEqual(before, pg) {
		t.Errorf("changing built objects changed the cluster")
	}
}

func TestAllOrder(t *testing.T) {
	objs := buildAll(t, loadSample(t, "minimal"))
	var kinds []string
	for _, o := range objs.All() {
		kinds = append(kinds, o.GetObjectKind().GroupVersionKind().Kind)
	}
	want := []string{"ServiceAccount", "Role", "RoleBinding", "Secret", "Secret", "Secret", "Secret",
		"Service", "Service", "Service", "PodDisruptionBudget", "StatefulSet"}
	if !slices.Equal(kinds, want) {
		t.Errorf("All() kinds = %v, want %v", kinds, want)
	}
	if _, ok := objs.All()[len(want)-1].(*appsv1.StatefulSet); !ok {
		t.Errorf("the StatefulSet must come last: it needs the Secrets and the ServiceAccount")
	}
}

// TestBuildEmptyCluster: builders assume a valid cluster but must not panic
// on one that is not (an empty spec, as a broken test fixture would be).
func TestBuildEmptyCluster(t *testing.T) {
	pg := &v1.Postgresql{}
	pg.Name = "x"
	objs, err := Build(pg, Options{}, seeded(4))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(objs.All()); got != 10 {
		t.Errorf("%d objects, want 10", got)
	}
}
