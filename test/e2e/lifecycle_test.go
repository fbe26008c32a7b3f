package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/testbed"
)

// stepDeadline bounds one step of a suite (a create, a scale, an edit, a
// delete) on two busy cores.
const stepDeadline = 90 * time.Second

// patchedAnnotation is the pod annotation the lifecycle suite adds with a
// merge patch.
const patchedAnnotation = "e2e.pgloop.dev/patched"

// Create → Running with every object owned by the cluster; scale 2 → 3 → 1;
// a `kubectl patch` of the spec reaches the StatefulSet and the pods; delete
// removes the owned objects and the resource.
func TestLifecycle(t *testing.T) {
	ns := env.Namespace(t)
	env.StartLabeller(t, ns)
	env.StartOperator(t, "operator", []string{ns})
	const name = "db"

	// 1. Create.
	ctx := Context(t, stepDeadline)
	began := time.Now()
	pg := env.CreateCluster(t, ns, name, 2)
	running := env.MustState(ctx, t, ns, name, fsm.Running)
	t.Logf("create -> Running in %v", time.Since(began).Round(time.Millisecond))
	if running.Status.ReadyInstances != 2 {
		t.Errorf("Running with readyInstances %d, want 2: %s", running.Status.ReadyInstances, Summary(running))
	}
	assertCondition(t, running, v1.ConditionReady, metav1.ConditionTrue)
	assertOwnedObjects(ctx, t, pg)
	assertSharedObjects(ctx, t, ns, true)
	pods := mustPods(ctx, t, ns, name, ReadyPods(2))
	assertOneMaster(t, pods)

	// 2. Scale 2 → 3 → 1.
	for _, n := range []int32{3, 1} {
		ctx := Context(t, stepDeadline)
		began := time.Now()
		if _, err := env.UpdateCluster(ctx, ns, name, func(pg *v1.Postgresql) { pg.Spec.NumberOfInstances = n }); err != nil {
			t.Fatal(err)
		}
		scaled := env.MustState(ctx, t, ns, name, fsm.Running)
		mustPods(ctx, t, ns, name, ReadyPods(int(n)))
		sts, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, cluster.StatefulSetName(name), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *sts.Spec.Replicas != n || scaled.Status.ReadyInstances != n {
			t.Errorf("scaled to %d: StatefulSet replicas %d, status %s", n, *sts.Spec.Replicas, Summary(scaled))
		}
		t.Logf("scale to %d -> Running in %v", n, time.Since(began).Round(time.Millisecond))
	}

	// 3. A merge patch, as `kubectl patch pg db --type merge -p ...` sends:
	// a pod annotation (the pod template changes, pods are replaced) and a
	// PostgreSQL parameter Spilo sets per instance (SPILO_CONFIGURATION
	// changes). A parameter Patroni applies to running members, such as
	// work_mem, needs Patroni, which KWOK's pods do not run
	// (TestInDatabase).
	ctx = Context(t, stepDeadline)
	began = time.Now()
	patch := fmt.Sprintf(`{"spec":{"podAnnotations":{%q:"yes"},"postgresql":{"parameters":{"shared_buffers":"256MB"}}}}`, patchedAnnotation)
	patched := kubectlMergePatch(ctx, t, ns, name, patch)
	if patched.Spec.PodAnnotations[patchedAnnotation] != "yes" || patched.Spec.PostgreSQL.Parameters["shared_buffers"] != "256MB" {
		t.Fatalf("patch did not reach the spec: %+v", patched.Spec)
	}
	env.MustState(ctx, t, ns, name, fsm.Running)
	sts, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, cluster.StatefulSetName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sts.Spec.Template.Annotations[patchedAnnotation] != "yes" {
		t.Errorf("StatefulSet pod template annotations %v lack %s", sts.Spec.Template.Annotations, patchedAnnotation)
	}
	if env := containerEnv(sts, "SPILO_CONFIGURATION"); !strings.Contains(env, `"shared_buffers":"256MB"`) {
		t.Errorf("SPILO_CONFIGURATION %q lacks shared_buffers: 256MB", env)
	}
	hash := sts.Spec.Template.Annotations[cluster.AnnotationPodTemplateHash]
	pods = mustPods(ctx, t, ns, name, func(pods []*corev1.Pod) bool {
		if !ReadyPods(1)(pods) {
			return false
		}
		for _, p := range pods {
			if p.Annotations[cluster.AnnotationPodTemplateHash] != hash || p.Annotations[patchedAnnotation] != "yes" {
				return false
			}
		}
		return true
	})
	assertOneMaster(t, pods)
	t.Logf("patch -> Running with the pods replaced in %v", time.Since(began).Round(time.Millisecond))

	// 4. Delete: the resource goes, and with it everything it owned but
	// the credentials Secrets, kept with the volumes (Retain).
	ctx = Context(t, stepDeadline)
	began = time.Now()
	if err := env.PG.Postgresqls(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.WaitGone(ctx, ns, name); err != nil {
		t.Fatal(err)
	}
	t.Logf("delete -> gone in %v", time.Since(began).Round(time.Millisecond))
	assertOwnedObjectsGone(ctx, t, pg)
	// The namespace's last cluster: its cleanup deleted the shared
	// objects before the finalizer went.
	assertSharedObjects(ctx, t, ns, false)
	if _, err := env.WaitPods(ctx, ns, name, func(pods []*corev1.Pod) bool { return len(pods) == 0 }); err != nil {
		t.Error(err)
	}
}

// assertSharedObjects checks that the pods' ServiceAccount, Role and
// RoleBinding of namespace ns exist with no owner reference (they belong to
// the namespace, not to a cluster), or, unless present, that they are gone.
func assertSharedObjects(ctx context.Context, t *testing.T, ns string, present bool) {
	t.Helper()
	kube := env.Kube
	for kind, get := range map[string]func() (metav1.Object, error){
		"ServiceAccount": func() (metav1.Object, error) {
			return kube.CoreV1().ServiceAccounts(ns).Get(ctx, cluster.PodServiceAccountName, metav1.GetOptions{})
		},
		"Role": func() (metav1.Object, error) {
			return kube.RbacV1().Roles(ns).Get(ctx, cluster.PodRoleName, metav1.GetOptions{})
		},
		"RoleBinding": func() (metav1.Object, error) {
			return kube.RbacV1().RoleBindings(ns).Get(ctx, cluster.PodRoleBindingName, metav1.GetOptions{})
		},
	} {
		obj, err := get()
		switch {
		case !present && !apierrors.IsNotFound(err):
			t.Errorf("shared %s kept after the namespace's last cluster (%v)", kind, err)
		case present && err != nil:
			t.Errorf("shared %s: %v", kind, err)
		case present && len(obj.GetOwnerReferences()) != 0:
			t.Errorf("shared %s: owner references %+v, want none", kind, obj.GetOwnerReferences())
		}
	}
}

// kubectlMergePatch patches the cluster with kubectl when it is installed,
// else with the same request from Go.
func kubectlMergePatch(ctx context.Context, t *testing.T, ns, name, patch string) *v1.Postgresql {
	t.Helper()
	const kubectl = "/usr/bin/kubectl"
	if _, err := os.Stat(kubectl); err == nil {
		if _, err := runKubectl(ctx, kubectl, "patch", "pg", name, "-n", ns, "--type", "merge", "-p", patch); err != nil {
			t.Fatal(err)
		}
		pg, err := env.PG.Postgresqls(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return pg
	}
	pg, err := env.MergePatchCluster(ctx, ns, name, patch)
	if err != nil {
		t.Fatal(err)
	}
	return pg
}

func mustPods(ctx context.Context, t *testing.T, ns, name string, cond func([]*corev1.Pod) bool) []*corev1.Pod {
	t.Helper()
	pods, err := env.WaitPods(ctx, ns, name, cond)
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

func assertOneMaster(t *testing.T, pods []*corev1.Pod) {
	t.Helper()
	masters := 0
	for _, p := range pods {
		if p.Labels[cluster.LabelRole] == cluster.RoleMaster {
			masters++
		}
	}
	if masters != 1 {
		t.Errorf("%d masters, want 1: %s", masters, DescribePods(pods))
	}
}

func assertCondition(t *testing.T, pg *v1.Postgresql, typ string, status metav1.ConditionStatus) {
	t.Helper()
	for _, c := range pg.Status.Conditions {
		if c.Type == typ {
			if c.Status != status {
				t.Errorf("condition %s is %s (%s: %s), want %s", typ, c.Status, c.Reason, c.Message, status)
			}
			return
		}
	}
	t.Errorf("no condition %s: %s", typ, Summary(pg))
}

func containerEnv(sts *appsv1.StatefulSet, name string) string {
	for _, c := range sts.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == name {
				return e.Value
			}
		}
	}
	return ""
}

// ownedObject is one object a cluster owns, fetched by name.
type ownedObject struct {
	kind, name string
	get        func(ctx context.Context) (metav1.Object, error)
	absent     func(ctx context.Context) error
}

func ownedObjects(pg *v1.Postgresql) []ownedObject {
	ns, names := pg.Namespace, cluster.Names(pg)
	kube := env.Kube
	var objs []ownedObject
	add := func(kind, name string, get func(ctx context.Context) (metav1.Object, error), absent func(ctx context.Context) error) {
		objs = append(objs, ownedObject{kind, name, get, absent})
	}
	add("StatefulSet", names.StatefulSet,
		func(ctx context.Context) (metav1.Object, error) {
			return kube.AppsV1().StatefulSets(ns).Get(ctx, names.StatefulSet, metav1.GetOptions{})
		},
		func(ctx context.Context) error {
			return WaitAbsent(ctx, testbed.ListWatch(kube.AppsV1().StatefulSets(ns), ByName(names.StatefulSet)), &appsv1.StatefulSet{}, "StatefulSet "+names.StatefulSet)
		})
	for _, svc := range names.Services {
		add("Service", svc,
			func(ctx context.Context) (metav1.Object, error) {
				return kube.CoreV1().Services(ns).Get(ctx, svc, metav1.GetOptions{})
			},
			func(ctx context.Context) error {
				return WaitAbsent(ctx, testbed.ListWatch(kube.CoreV1().Services(ns), ByName(svc)), &corev1.Service{}, "Service "+svc)
			})
	}
	for _, secret := range names.Secrets {
		add("Secret", secret,
			func(ctx context.Context) (metav1.Object, error) {
				return kube.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
			},
			func(ctx context.Context) error {
				return WaitAbsent(ctx, testbed.ListWatch(kube.CoreV1().Secrets(ns), ByName(secret)), &corev1.Secret{}, "Secret "+secret)
			})
	}
	add("PodDisruptionBudget", names.PodDisruptionBudget,
		func(ctx context.Context) (metav1.Object, error) {
			return kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, names.PodDisruptionBudget, metav1.GetOptions{})
		},
		func(ctx context.Context) error {
			return WaitAbsent(ctx, testbed.ListWatch(kube.PolicyV1().PodDisruptionBudgets(ns), ByName(names.PodDisruptionBudget)),
				&policyv1.PodDisruptionBudget{}, "PodDisruptionBudget "+names.PodDisruptionBudget)
		})
	return objs
}

// assertOwnedObjects checks that the StatefulSet, Services, Secrets and
// PodDisruptionBudget exist with a controller reference to pg.
func assertOwnedObjects(ctx context.Context, t *testing.T, pg *v1.Postgresql) {
	t.Helper()
	for _, o := range ownedObjects(pg) {
		obj, err := o.get(ctx)
		if err != nil {
			t.Errorf("%s %s: %v", o.kind, o.name, err)
			continue
		}
		ref := metav1.GetControllerOf(obj)
		if ref == nil || ref.UID != pg.UID || ref.Kind != v1.PostgresqlKind {
			t.Errorf("%s %s: controller reference %+v, want the cluster (uid %s)", o.kind, o.name, ref, pg.UID)
		}
	}
}

// assertOwnedObjectsGone waits until every object pg owned is gone.
func assertOwnedObjectsGone(ctx context.Context, t *testing.T, pg *v1.Postgresql) {
	t.Helper()
	for _, o := range ownedObjects(pg) {
		if o.kind == "Secret" {
			// Kept with the volumes (volume.retention Retain, the
			// default), no longer owned by the deleted resource:
			// TestVolumeRetention.
			obj, err := o.get(ctx)
			if err != nil {
				t.Errorf("Secret %s not kept with the volumes: %v", o.name, err)
				continue
			}
			for _, ref := range obj.GetOwnerReferences() {
				if ref.UID == pg.UID {
					t.Errorf("Secret %s kept with an owner reference to the deleted cluster", o.name)
				}
			}
			continue
		}
		if err := o.absent(ctx); err != nil {
			t.Error(err)
		}
	}
}

// uidOf is a short form of a UID for logs.
func uidOf(uid types.UID) string {
	if len(uid) > 8 {
		return string(uid[:8])
	}
	return string(uid)
}
