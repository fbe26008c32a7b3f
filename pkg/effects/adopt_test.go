package effects

//lint:file-ignore SA1019 Patroni 3 keeps its state in v1 Endpoints, which EndpointSlices cannot replace: the tests make them as Patroni does.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	pgsamples "github.com/pgloop/pgloop/pkg/internal/samples"
)

// zalandoObjects are the objects the zalando operator made for pg: the
// StatefulSet with two running pods, the Services, both budgets, a claim
// and the credentials Secrets of the superuser, the replication user and
// foo_user (the other user has none).
func zalandoObjects(pg *v1.Postgresql) []runtime.Object {
	labels := map[string]string{"application": "spilo", "cluster-name": pg.Name, "team": pg.Spec.TeamID}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: pg.Namespace, Labels: labels}
	}
	sts := pgsamples.ZalandoStatefulSet(pg)
	objs := []runtime.Object{sts,
		&corev1.Service{ObjectMeta: meta(cluster.MasterServiceName(pg.Name))},
		&corev1.Service{ObjectMeta: meta(cluster.ReplicaServiceName(pg.Name))},
		&policyv1.PodDisruptionBudget{ObjectMeta: meta(cluster.PodDisruptionBudgetName(pg.Name))},
		&policyv1.PodDisruptionBudget{ObjectMeta: meta(cluster.ZalandoCriticalOpPodDisruptionBudgetName(pg.Name))},
		&corev1.PersistentVolumeClaim{ObjectMeta: meta(cluster.PersistentVolumeClaimName(pg.Name, 0))},
	}
	for i := range int32(2) {
		m := meta(cluster.PodName(pg.Name, i))
		m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID, Controller: ptr.To(true)}}
		objs = append(objs, &corev1.Pod{ObjectMeta: m})
	}
	for _, user := range []string{cluster.SuperuserName, cluster.ReplicationUserName, "foo_user"} {
		objs = append(objs, &corev1.Secret{ObjectMeta: meta(cluster.ZalandoSecretName(user, pg.Name)),
			Data: map[string][]byte{cluster.SecretUsernameKey: []byte(user), cluster.SecretPasswordKey: []byte("zalando-" + user)}})
	}
	return objs
}

func adopting(pg *v1.Postgresql) *v1.Postgresql {
	pg = pg.DeepCopy()
	pg.Annotations = map[string]string{v1.AnnotationAdopt: v1.AdoptZalando}
	return pg
}

func TestEnsureAdopts(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := adopting(testCluster(t))
		h := newHarness(t, []*v1.Postgresql{pg}, zalandoObjects(pg)...)
		err := h.ensure(t, pg)
		if !errors.Is(err, act.ErrWaiting) {
			t.Fatalf("first ensure: %v, want the adoption's act.ErrWaiting", err)
		}
		want := []string{
			"create secrets foo-user.acid-minimal-cluster.credentials.postgresql.pgloop.dev",
			"create secrets postgres.acid-minimal-cluster.credentials.postgresql.pgloop.dev",
			"create secrets standby.acid-minimal-cluster.credentials.postgresql.pgloop.dev",
			"patch pods acid-minimal-cluster-0",
			"patch pods acid-minimal-cluster-1",
			"update poddisruptionbudgets postgres-acid-minimal-cluster-critical-op-pdb",
			"update poddisruptionbudgets postgres-acid-minimal-cluster-pdb",
			"update services acid-minimal-cluster",
			"update services acid-minimal-cluster-repl",
			"update statefulsets acid-minimal-cluster",
		}
		if got := h.kubeWrites(); !slices.Equal(got, want) {
			t.Fatalf("adoption wrote\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		// The image the zalando operator ran is kept, in the spec.
		got, err := h.pgc.PgloopV1().Postgresqls(pg.Namespace).Get(context.Background(), pg.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.DockerImage != "ghcr.io/zalando/spilo-18:4.1-p2" {
			t.Errorf("spec.dockerImage %q after the adoption, want the zalando StatefulSet's image", got.Spec.DockerImage)
		}
		pg = got
		objs := buildAll(t, pg)
		hash := cluster.PodTemplateHash(objs.StatefulSet)
		for i := range int32(2) {
			pod, err := h.kube.CoreV1().Pods(pg.Namespace).Get(context.Background(), cluster.PodName(pg.Name, i), metav1.GetOptions{})
			if err != nil || cluster.PodTemplateHash(pod) != hash {
				t.Errorf("pod %d: %v, hash %q, want %q", i, err, cluster.PodTemplateHash(pod), hash)
			}
		}
		for _, user := range []string{cluster.SuperuserName, cluster.ReplicationUserName, "foo_user"} {
			s, err := h.kube.CoreV1().Secrets(pg.Namespace).Get(context.Background(), cluster.SecretName(user, pg.Name), metav1.GetOptions{})
			if err != nil || string(s.Data[cluster.SecretPasswordKey]) != "zalando-"+user {
				t.Errorf("secret of %s: %v, want zalando's password", user, err)
			}
		}
		if h.cache != nil {
			h.cache.sync()
		}

		// The ensure that follows updates the objects to the spec and
		// replaces no pod: they carry the template's hash.
		if err := h.ensure(t, pg); err != nil {
			t.Fatalf("second ensure: %v", err)
		}
		sts, err := h.kube.AppsV1().StatefulSets(pg.Namespace).Get(context.Background(), pg.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cluster.PodTemplateHash(sts) != hash {
			t.Errorf("statefulset hash %q, want %q", cluster.PodTemplateHash(sts), hash)
		}
		if sts.Spec.PodManagementPolicy != appsv1.OrderedReadyPodManagement {
			t.Errorf("podManagementPolicy %s: an immutable field is kept", sts.Spec.PodManagementPolicy)
		}
		for _, w := range h.kubeWrites() {
			if strings.HasPrefix(w, "delete pods") || strings.Contains(w, "acid.zalan.do") {
				t.Errorf("%s after an adoption", w)
			}
		}
		// Done: the adoption reads and writes nothing more.
		if h.cache != nil {
			h.cache.sync()
		}
		h.kube.ClearActions()
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		if got := h.kubeWrites(); len(got) != 0 {
			t.Errorf("a third ensure wrote %v", got)
		}
	})
}

// zalandoEndpointsObjects are zalandoObjects of a zalando operator with
// kubernetes_use_configmaps off (its default): no KUBERNETES_USE_CONFIGMAPS,
// a master Service without a selector, and its Endpoints, which Patroni's
// leader keeps: the lock in its annotations, its address in its subsets.
func zalandoEndpointsObjects(pg *v1.Postgresql) []runtime.Object {
	objs := zalandoObjects(pg)
	objs[0] = pgsamples.ZalandoEnv(objs[0].(*appsv1.StatefulSet), "KUBERNETES_USE_CONFIGMAPS", "")
	svc := objs[1].(*corev1.Service)
	svc.Spec.Ports = []corev1.ServicePort{{Name: cluster.PostgresPortName, Port: cluster.PostgresPort}}
	return append(objs, &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: cluster.LeaderEndpointsName(pg.Name), Namespace: pg.Namespace, Labels: cluster.Selector(pg.Name),
			Annotations: map[string]string{cluster.AnnotationLeader: cluster.PodName(pg.Name, 0), cluster.AnnotationTTL: "30"}},
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "10.0.0.10"}},
			Ports: []corev1.EndpointPort{{Name: cluster.PostgresPortName, Port: cluster.PostgresPort}}}},
	})
}

// TestEnsureAdoptsEndpoints: a zalando cluster on Endpoints is adopted in
// place, as one on ConfigMaps: the annotation records its store, the pods
// count as up to date with the Endpoints template, and the ensure that
// follows keeps the master Service without a selector and never writes
// Patroni's Endpoints.
func TestEnsureAdoptsEndpoints(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := adopting(testCluster(t))
		h := newHarness(t, []*v1.Postgresql{pg}, zalandoEndpointsObjects(pg)...)
		if err := h.ensure(t, pg); !errors.Is(err, act.ErrWaiting) {
			t.Fatalf("first ensure: %v, want the adoption's act.ErrWaiting", err)
		}
		got, err := h.pgc.PgloopV1().Postgresqls(pg.Namespace).Get(context.Background(), pg.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.PatroniStore() != v1.PatroniStoreEndpoints || got.Spec.DockerImage != "ghcr.io/zalando/spilo-18:4.1-p2" {
			t.Fatalf("after the adoption: store %q, image %q; want endpoints and zalando's image", got.PatroniStore(), got.Spec.DockerImage)
		}
		select {
		case <-h.rec.Events:
		default:
			t.Errorf("no %s event", ReasonAdopted)
		}
		pg = got
		hash := cluster.PodTemplateHash(buildAll(t, pg).StatefulSet)
		for i := range int32(2) {
			pod, err := h.kube.CoreV1().Pods(pg.Namespace).Get(context.Background(), cluster.PodName(pg.Name, i), metav1.GetOptions{})
			if err != nil || cluster.PodTemplateHash(pod) != hash {
				t.Errorf("pod %d: %v, hash %q, want the Endpoints template's %q", i, err, cluster.PodTemplateHash(pod), hash)
			}
		}
		if h.cache != nil {
			h.cache.sync()
		}
		h.kubeWrites()

		if err := h.ensure(t, pg); err != nil {
			t.Fatalf("second ensure: %v", err)
		}
		for _, w := range h.kubeWrites() {
			if strings.HasPrefix(w, "delete pods") || strings.Contains(w, " endpoints ") {
				t.Errorf("%s after an adoption", w)
			}
		}
		sts, err := h.kube.AppsV1().StatefulSets(pg.Namespace).Get(context.Background(), pg.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if store, ok := cluster.TemplatePatroniStore(sts); cluster.PodTemplateHash(sts) != hash || !ok || store != v1.PatroniStoreEndpoints {
			t.Errorf("statefulset hash %q, store %q; want %q on endpoints", cluster.PodTemplateHash(sts), store, hash)
		}
		svc, err := h.kube.CoreV1().Services(pg.Namespace).Get(context.Background(), cluster.MasterServiceName(pg.Name), metav1.GetOptions{})
		if err != nil || svc.Spec.Selector != nil || metav1.GetControllerOf(svc) == nil {
			t.Errorf("master service %v: selector %v, controller %v; want the cluster's, without a selector", err, svc.Spec.Selector, metav1.GetControllerOf(svc))
		}
		ep, err := h.kube.CoreV1().Endpoints(pg.Namespace).Get(context.Background(), pg.Name, metav1.GetOptions{})
		if err != nil || len(ep.Subsets) != 1 || ep.Annotations[cluster.AnnotationLeader] != cluster.PodName(pg.Name, 0) || len(ep.OwnerReferences) != 0 {
			t.Errorf("Patroni's Endpoints %v: %+v; want them as Patroni left them", err, ep)
		}
		// Settled: nothing to write, the selector-less Service included.
		if h.cache != nil {
			h.cache.sync()
		}
		h.kube.ClearActions()
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		if got := h.kubeWrites(); len(got) != 0 {
			t.Errorf("a third ensure wrote %v", got)
		}
	})
}

// TestEnsureAdoptionStoreMismatch: a resource whose annotation names
// another store than the zalando StatefulSet's is refused, untouched.
func TestEnsureAdoptionStoreMismatch(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := adopting(testCluster(t))
		pg.Annotations[v1.AnnotationPatroniStore] = string(v1.PatroniStoreConfigMaps)
		h := newHarness(t, []*v1.Postgresql{pg}, zalandoEndpointsObjects(pg)...)
		err := h.ensure(t, pg)
		if !errors.Is(err, v1.ErrAdoptionRefused) || !strings.Contains(err.Error(), "Patroni keeps its state in endpoints") {
			t.Fatalf("ensure: %v, want the adoption refused for the store", err)
		}
		if got := h.kubeWrites(); len(got) != 0 {
			t.Errorf("a refused adoption wrote %v", got)
		}
	})
}

func TestEnsureAdoptionRefusedTouchesNothing(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := adopting(testCluster(t))
		objs := zalandoObjects(pg)
		objs[0] = pgsamples.ZalandoEnv(objs[0].(*appsv1.StatefulSet), "DCS_ENABLE_KUBERNETES_API", "")
		h := newHarness(t, []*v1.Postgresql{pg}, objs...)
		err := h.ensure(t, pg)
		if !errors.Is(err, v1.ErrAdoptionRefused) || !strings.Contains(err.Error(), "outside Kubernetes") {
			t.Fatalf("ensure: %v, want the adoption refused for a store outside Kubernetes", err)
		}
		if got := h.kubeWrites(); len(got) != 0 {
			t.Errorf("a refused adoption wrote %v", got)
		}
		if got, err := h.pgc.PgloopV1().Postgresqls(pg.Namespace).Get(context.Background(), pg.Name, metav1.GetOptions{}); err != nil || len(got.Finalizers) != 0 {
			t.Errorf("resource %v, finalizers %v: a refused adoption adds none", err, got.Finalizers)
		}
		select {
		case ev := <-h.rec.Events:
			if !strings.Contains(ev, ReasonAdoptionRefused) {
				t.Errorf("event %q, want %s", ev, ReasonAdoptionRefused)
			}
		default:
			t.Errorf("no %s event", ReasonAdoptionRefused)
		}
	})
}

func TestEnsureAdoptionWithoutStatefulSet(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := adopting(testCluster(t))
		// The zalando operator deleted the cluster with its postgresql:
		// the claim and (enable_secrets_deletion off) the Secrets are left.
		objs := slices.DeleteFunc(zalandoObjects(pg), func(o runtime.Object) bool {
			switch o.(type) {
			case *corev1.PersistentVolumeClaim, *corev1.Secret:
				return false
			}
			return true
		})
		h := newHarness(t, []*v1.Postgresql{pg}, objs...)
		err := h.ensure(t, pg)
		if !errors.Is(err, v1.ErrAdoptionRefused) || !strings.Contains(err.Error(), "no statefulset acid-minimal-cluster to adopt") {
			t.Fatalf("ensure: %v, want the adoption refused: nothing to adopt", err)
		}
		if got := h.kubeWrites(); len(got) != 0 {
			t.Errorf("a refused adoption wrote %v", got)
		}

		// Adopted once (pgloop's superuser Secret is the resource's), the
		// StatefulSet deleted since: the ensure creates it again.
		superuser := buildAll(t, pg).Secrets[0]
		h = newHarness(t, []*v1.Postgresql{pg}, append(objs, superuser)...)
		if err := h.ensure(t, pg); err != nil {
			t.Fatalf("ensure of an adopted cluster without its statefulset: %v", err)
		}
		if !slices.Contains(h.kubeWrites(), "create statefulsets acid-minimal-cluster") {
			t.Error("the statefulset of an adopted cluster not created again")
		}
	})
}

// TestEnsureAdoptsAfterAPlainApply: a manifest without the annotation was
// applied first; pgloop refused the objects it does not control but made
// its Secrets with new passwords. The adoption gives them zalando's.
func TestEnsureAdoptsAfterAPlainApply(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		plain := testCluster(t)
		h := newHarness(t, []*v1.Postgresql{plain}, zalandoObjects(plain)...)
		if err := h.ensure(t, plain); !errors.Is(err, ErrNotControlled) {
			t.Fatalf("ensure without the annotation: %v, want ErrNotControlled", err)
		}
		cur, err := h.pgc.PgloopV1().Postgresqls(plain.Namespace).Get(context.Background(), plain.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pg := adopting(cur)
		if _, err := h.pgc.PgloopV1().Postgresqls(pg.Namespace).Update(context.Background(), pg, metav1.UpdateOptions{FieldManager: someoneElse}); err != nil {
			t.Fatal(err)
		}
		if h.cache != nil {
			h.cache.sync()
		}
		if err := h.ensure(t, pg); !errors.Is(err, act.ErrWaiting) {
			t.Fatalf("ensure with the annotation: %v, want the adoption's act.ErrWaiting", err)
		}
		s, err := h.kube.CoreV1().Secrets(pg.Namespace).Get(context.Background(), cluster.SecretName(cluster.SuperuserName, pg.Name), metav1.GetOptions{})
		if err != nil || string(s.Data[cluster.SecretPasswordKey]) != "zalando-postgres" {
			t.Errorf("superuser secret %v: want zalando's password", err)
		}
	})
}
