package effects

import (
	"context"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// poolerCluster is the test cluster with the master pooler enabled, and
// the replica's when replica.
func poolerCluster(t *testing.T, replica bool) *v1.Postgresql {
	t.Helper()
	pg := testCluster(t)
	pg.Spec.EnableConnectionPooler = ptr.To(true)
	pg.Spec.EnableReplicaConnectionPooler = ptr.To(replica)
	return pg
}

// poolerWrites are the creates (verb "create") or deletes of the objects
// of pg's poolers of roles, and of the pooler's Secret, as kubeWrites
// lists them, sorted.
func poolerWrites(pg *v1.Postgresql, verb string, roles ...string) []string {
	var out []string
	for _, role := range roles {
		name := cluster.PoolerName(pg.Name, role)
		out = append(out, verb+" deployments "+name, verb+" services "+name,
			verb+" poddisruptionbudgets "+cluster.PoolerPodDisruptionBudgetName(pg.Name, role))
	}
	out = append(out, verb+" secrets "+cluster.SecretName(pg.Spec.PoolerUser(), pg.Name))
	slices.Sort(out)
	return out
}

// uidsOnCreate makes the fake clientset give every object it creates a
// UID, as the apiserver does, so that a delete's UID precondition means
// something. It checks the field manager first, as the harness does.
func uidsOnCreate(t *testing.T, h *harness) {
	fieldManager := wantFieldManager(t)
	tracker := h.kube.Tracker()
	h.kube.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if _, _, err := fieldManager(a); err != nil {
			return true, nil, err
		}
		obj := a.(k8stesting.CreateAction).GetObject().DeepCopyObject()
		m := obj.(metav1.Object)
		if m.GetUID() == "" {
			m.SetUID(types.UID(a.GetResource().Resource + "-" + m.GetName() + "-uid"))
		}
		if err := tracker.Create(a.GetResource(), obj, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, obj, nil
	})
}

// checkDeletePreconditions fails t for a delete of one of pg's poolers'
// objects or of the pooler's Secret without the stored object's UID as
// precondition. It handles nothing.
func checkDeletePreconditions(t *testing.T, h *harness, pg *v1.Postgresql) {
	pooler := map[string]bool{cluster.SecretName(pg.Spec.PoolerUser(), pg.Name): true}
	for _, role := range cluster.PoolerRoles {
		pooler[cluster.PoolerName(pg.Name, role)] = true
		pooler[cluster.PoolerPodDisruptionBudgetName(pg.Name, role)] = true
	}
	tracker := h.kube.Tracker()
	h.kube.PrependReactor("delete", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteActionImpl)
		if !pooler[d.Name] {
			return false, nil, nil
		}
		obj, err := tracker.Get(a.GetResource(), d.Namespace, d.Name)
		if err != nil {
			return false, nil, nil
		}
		pre := d.DeleteOptions.Preconditions
		if pre == nil || pre.UID == nil || *pre.UID != obj.(metav1.Object).GetUID() {
			t.Errorf("delete %s %s: preconditions %+v, want its UID %s", a.GetResource().Resource, d.Name, pre, obj.(metav1.Object).GetUID())
		}
		return false, nil, nil
	})
}

// setSpec stores pg's resource with its spec edited by edit, as a user's
// update would.
func setSpec(h *harness, pg *v1.Postgresql, edit func(*v1.PostgresqlSpec)) {
	stored := h.pg.get(pg.Namespace, pg.Name)
	stored.Generation++
	edit(&stored.Spec)
	h.pg.put(stored)
}

func TestEnsurePooler(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := poolerCluster(t, true)
		h := newHarness(t, []*v1.Postgresql{pg})
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, o := range buildAll(t, pg).All() {
			want = append(want, "create "+resourceOf(o)+" "+o.GetName())
		}
		slices.Sort(want)
		got := h.kubeWrites()
		if !slices.Equal(got, want) {
			t.Errorf("writes:\n got %v\nwant %v", got, want)
		}
		for _, w := range poolerWrites(pg, "create", cluster.PoolerRoles...) {
			if !slices.Contains(got, w) {
				t.Errorf("no %s", w)
			}
		}
		for _, p := range buildAll(t, pg).Poolers {
			for _, o := range []cluster.Object{p.Deployment, p.Service, p.PodDisruptionBudget} {
				if ref := metav1.GetControllerOf(getObject(t, h, o)); ref == nil || ref.UID != pg.UID {
					t.Errorf("%s: controller %v, want the cluster", o.GetName(), ref)
				}
			}
		}
		secret, err := h.kube.CoreV1().Secrets(pg.Namespace).Get(context.Background(), cluster.SecretName("pooler", pg.Name), metav1.GetOptions{})
		if err != nil || string(secret.Data[cluster.SecretUsernameKey]) != "pooler" || len(secret.Data[cluster.SecretPasswordKey]) == 0 {
			t.Errorf("the pooler's Secret: %v %v", secret, err)
		}

		// Again: nothing to write, nothing to delete.
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

// A Deployment the Deployment controller and the apiserver have added to
// (defaults, status, a revision annotation) is left alone.
func TestEnsurePoolerServedDeployment(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := poolerCluster(t, false)
		h := newHarness(t, []*v1.Postgresql{pg})
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		deps := h.kube.AppsV1().Deployments(pg.Namespace)
		d, err := deps.Get(ctx, cluster.PoolerName(pg.Name, cluster.RoleMaster), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d.Annotations["deployment.kubernetes.io/revision"] = "1"
		d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType}
		d.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, AvailableReplicas: 2}
		if _, err := deps.Update(ctx, d, metav1.UpdateOptions{FieldManager: someoneElse}); err != nil {
			t.Fatal(err)
		}
		h.kubeWrites()
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		if got := h.kubeWrites(); len(got) != 0 {
			t.Errorf("ensure wrote %v", got)
		}
	})
}

func TestEnsurePoolerOff(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		for _, tt := range []struct {
			name  string
			roles []string
			edit  func(*v1.PostgresqlSpec)
		}{
			{"both off", cluster.PoolerRoles, func(s *v1.PostgresqlSpec) {
				s.EnableConnectionPooler, s.EnableReplicaConnectionPooler = ptr.To(false), ptr.To(false)
			}},
			{"both unset", cluster.PoolerRoles, func(s *v1.PostgresqlSpec) {
				s.EnableConnectionPooler, s.EnableReplicaConnectionPooler = nil, nil
			}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				pg := poolerCluster(t, true)
				h := newHarness(t, []*v1.Postgresql{pg})
				uidsOnCreate(t, h)
				checkDeletePreconditions(t, h, pg)
				if err := h.ensure(t, pg); err != nil {
					t.Fatal(err)
				}
				h.kubeWrites()
				setSpec(h, pg, tt.edit)
				if err := h.ensure(t, pg); err != nil {
					t.Fatal(err)
				}
				if got, want := h.kubeWrites(), poolerWrites(pg, "delete", tt.roles...); !slices.Equal(got, want) {
					t.Errorf("writes:\n got %v\nwant %v", got, want)
				}
				for _, p := range buildAll(t, pg).Poolers {
					for _, o := range []cluster.Object{p.Deployment, p.Service, p.PodDisruptionBudget} {
						gvr := o.GetObjectKind().GroupVersionKind().GroupVersion().WithResource(resourceOf(o))
						if _, err := h.kube.Tracker().Get(gvr, o.GetNamespace(), o.GetName()); !apierrors.IsNotFound(err) {
							t.Errorf("%s %s not deleted (%v)", resourceOf(o), o.GetName(), err)
						}
					}
				}
				// Off, again: nothing to delete.
				if err := h.ensure(t, pg); err != nil {
					t.Fatal(err)
				}
				if got := h.kubeWrites(); len(got) != 0 {
					t.Errorf("ensure of a cluster without poolers wrote %v", got)
				}
			})
		}

		t.Run("the replica's off, the master's on", func(t *testing.T) {
			pg := poolerCluster(t, true)
			h := newHarness(t, []*v1.Postgresql{pg})
			uidsOnCreate(t, h)
			checkDeletePreconditions(t, h, pg)
			if err := h.ensure(t, pg); err != nil {
				t.Fatal(err)
			}
			h.kubeWrites()
			setSpec(h, pg, func(s *v1.PostgresqlSpec) { s.EnableReplicaConnectionPooler = nil })
			if err := h.ensure(t, pg); err != nil {
				t.Fatal(err)
			}
			want := poolerWrites(pg, "delete", cluster.RoleReplica)
			want = slices.DeleteFunc(want, func(w string) bool { return strings.Contains(w, " secrets ") })
			if got := h.kubeWrites(); !slices.Equal(got, want) {
				t.Errorf("writes:\n got %v\nwant %v (the Secret kept for the master's)", got, want)
			}
		})
	})
}

// The names of a cluster's poolers are those of another cluster's objects
// when that one is named <cluster>-pooler: its master Service, its replica
// Service and its PodDisruptionBudget are not the poolers' to delete.
func TestEnsurePoolerLeavesOthersObjects(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := testCluster(t)
		other := testCluster(t)
		other.Name = cluster.PoolerName(pg.Name, cluster.RoleMaster)
		other.UID = "22222222-3333-4444-8555-666666666666"
		h := newHarness(t, []*v1.Postgresql{pg, other})
		if err := h.ensure(t, other); err != nil {
			t.Fatalf("ensure %s: %v", other.Name, err)
		}
		h.kubeWrites()
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		for _, w := range h.kubeWrites() {
			if strings.Contains(w, other.Name) {
				t.Errorf("ensure of %s without poolers wrote %s", pg.Name, w)
			}
		}
		if err := h.ensure(t, other); err != nil {
			t.Fatal(err)
		}
		if got := h.kubeWrites(); len(got) != 0 {
			t.Errorf("ensure of %s wrote %v: its objects were touched", other.Name, got)
		}
	})
}

// Turning a pooler off deletes its objects, and none of the same names
// that another controls.
func TestEnsurePoolerOffLeavesForeignService(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := poolerCluster(t, true)
		pg.Spec.EnableConnectionPooler = nil // the replica's only: the master's names are free
		// The master Service of a cluster named <cluster>-pooler.
		other := testCluster(t)
		other.Name = cluster.PoolerName(pg.Name, cluster.RoleMaster)
		other.UID = "22222222-3333-4444-8555-666666666666"
		foreign := cluster.MasterService(other, cluster.Options{})
		foreign.UID = "foreign-service-uid"
		h := newHarness(t, []*v1.Postgresql{pg}, foreign)
		uidsOnCreate(t, h)
		checkDeletePreconditions(t, h, pg)
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		h.kubeWrites()
		setSpec(h, pg, func(s *v1.PostgresqlSpec) { s.EnableReplicaConnectionPooler = ptr.To(false) })
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		if got, want := h.kubeWrites(), poolerWrites(pg, "delete", cluster.RoleReplica); !slices.Equal(got, want) {
			t.Errorf("writes:\n got %v\nwant %v", got, want)
		}
		if _, err := h.kube.CoreV1().Services(pg.Namespace).Get(context.Background(), foreign.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("%s's master Service %s: %v", other.Name, foreign.Name, err)
		}
	})
}

// A user of the spec named as the pooler's role keeps its Secret while no
// pooler is enabled: the Secret is the user's.
func TestEnsurePoolerOffKeepsUsersSecret(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := testCluster(t)
		pg.Spec.Users[v1.DefaultPoolerUser] = v1.UserFlags{}
		if errs := pg.Validate(); len(errs) > 0 {
			t.Fatalf("invalid: %v", errs)
		}
		h := newHarness(t, []*v1.Postgresql{pg})
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		h.kubeWrites()
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		if got := h.kubeWrites(); len(got) != 0 {
			t.Errorf("second ensure wrote %v", got)
		}
		name := cluster.SecretName(v1.DefaultPoolerUser, pg.Name)
		if _, err := h.kube.CoreV1().Secrets(pg.Namespace).Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			t.Errorf("the user's Secret %s: %v", name, err)
		}
	})
}

func TestEnsurePoolerModeChange(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := poolerCluster(t, false)
		h := newHarness(t, []*v1.Postgresql{pg})
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		h.kubeWrites()
		ctx := context.Background()
		name := cluster.PoolerName(pg.Name, cluster.RoleMaster)
		before, err := h.kube.AppsV1().Deployments(pg.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		setSpec(h, pg, func(s *v1.PostgresqlSpec) { s.ConnectionPooler = &v1.ConnectionPooler{Mode: "session"} })
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		if got, want := h.kubeWrites(), []string{"update deployments " + name}; !slices.Equal(got, want) {
			t.Errorf("writes:\n got %v\nwant %v", got, want)
		}
		after, err := h.kube.AppsV1().Deployments(pg.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hb, ha := before.Spec.Template.Annotations[cluster.AnnotationPodTemplateHash], after.Spec.Template.Annotations[cluster.AnnotationPodTemplateHash]
		if hb == ha || after.Annotations[cluster.AnnotationPodTemplateHash] != ha {
			t.Errorf("template hash %s -> %s (the Deployment's %s), want a new one on both", hb, ha, after.Annotations[cluster.AnnotationPodTemplateHash])
		}
		for _, e := range after.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "CONNECTION_POOLER_MODE" && e.Value != "session" {
				t.Errorf("mode %q, want session", e.Value)
			}
		}
		// Scaled: the Deployment and the PodDisruptionBudget.
		setSpec(h, pg, func(s *v1.PostgresqlSpec) { s.ConnectionPooler.NumberOfInstances = ptr.To[int32](1) })
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		want := []string{"update deployments " + name, "update poddisruptionbudgets " + cluster.PoolerPodDisruptionBudgetName(pg.Name, cluster.RoleMaster)}
		if got := h.kubeWrites(); !slices.Equal(got, want) {
			t.Errorf("scaled to 1, writes:\n got %v\nwant %v", got, want)
		}
	})
}

// TestEnsurePoolerForeignDeployment: a Deployment of the pooler's name
// that the cluster does not control is refused, not taken over.
func TestEnsurePoolerForeignDeployment(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := poolerCluster(t, false)
		foreign := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: cluster.PoolerName(pg.Name, cluster.RoleMaster), Namespace: pg.Namespace,
			Labels: map[string]string{cluster.LabelApplication: cluster.ApplicationPooler}}}
		h := newHarness(t, []*v1.Postgresql{pg}, foreign)
		if err := h.ensure(t, pg); err == nil || !strings.Contains(err.Error(), "deployment "+foreign.Name) {
			t.Fatalf("err = %v, want ErrNotControlled for deployment %s", err, foreign.Name)
		}
		for _, w := range h.kubeWrites() {
			if strings.Contains(w, "deployments "+foreign.Name) {
				t.Errorf("foreign Deployment written: %s", w)
			}
		}
	})
}

func TestCleanupPooler(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := poolerCluster(t, true)
		h := newHarness(t, []*v1.Postgresql{pg})
		uidsOnCreate(t, h)
		checkDeletePreconditions(t, h, pg)
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		h.pg.put(deleting(h.pg.get(pg.Namespace, pg.Name)))
		h.kubeWrites()
		if err := h.cleanup(t, pg); err != nil {
			t.Fatal(err)
		}
		got := h.kubeWrites()
		for _, w := range poolerWrites(pg, "delete", cluster.PoolerRoles...) {
			if strings.Contains(w, " secrets ") {
				continue // kept, volume retention Retain
			}
			if !slices.Contains(got, w) {
				t.Errorf("no %s in %v", w, got)
			}
		}
		for _, p := range buildAll(t, pg).Poolers {
			for _, o := range []cluster.Object{p.Deployment, p.Service, p.PodDisruptionBudget} {
				gvr := o.GetObjectKind().GroupVersionKind().GroupVersion().WithResource(resourceOf(o))
				if _, err := h.kube.Tracker().Get(gvr, o.GetNamespace(), o.GetName()); !apierrors.IsNotFound(err) {
					t.Errorf("%s %s not deleted (%v)", resourceOf(o), o.GetName(), err)
				}
			}
		}
		s, err := h.kube.CoreV1().Secrets(pg.Namespace).Get(context.Background(), cluster.SecretName("pooler", pg.Name), metav1.GetOptions{})
		switch {
		case err != nil:
			t.Errorf("the pooler's Secret deleted with retention Retain (%v)", err)
		case len(s.OwnerReferences) != 0:
			t.Errorf("the pooler's Secret kept with its owner references %v", s.OwnerReferences)
		}
		if h.pg.get(pg.Namespace, pg.Name) != nil {
			t.Error("finalizer not removed")
		}
	})
}
