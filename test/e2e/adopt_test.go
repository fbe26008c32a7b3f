package e2e

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/testbed"
)

// TestAdopt builds, on the real node, the objects the zalando operator
// makes with its default configuration for testdata/zalando-adopt.yaml
// (zalandoCluster: Patroni on Endpoints),
// writes rows, then applies the output of `pgloop convert --adopt` while a
// client inserts a row every 10 ms on the primary with the zalando
// superuser's password. pgloop must take the cluster over without
// restarting a pod and without a failed insert: the same pod UIDs and
// restart counts, the same Patroni leader, the zalando passwords still
// logging in (and copied into pgloop's Secrets), every row there. Then an
// edit of a parameter is applied without a restart, and one of the pod
// template rolls the pods out one by one.
// zalandoImage is the image of the zalando cluster the tests adopt.
const zalandoImage = "ghcr.io/zalando/spilo-18:4.1-p2"

func TestAdopt(t *testing.T) {
	ns := env.Namespace(t)
	ctx := Context(t, 15*time.Minute)
	const name = "acid-adopt"
	op := env.StartOperator(t, "adopt", []string{ns})

	manifest := convertAdopt(ctx, t, name)
	var pg v1.Postgresql
	if err := yaml.UnmarshalStrict(manifest, &pg); err != nil {
		t.Fatalf("the converted manifest: %v\n%s", err, manifest)
	}
	pg.Namespace = ns
	if !pg.AdoptRequested() {
		t.Fatalf("pgloop convert --adopt wrote no %s annotation:\n%s", v1.AnnotationAdopt, manifest)
	}

	// The zalando postgresql itself, from the same manifest, with the
	// zalando operator's enable_owner_references on: every object below
	// names it as its controller, as that operator would make them.
	zpg := zalandoResource(ctx, t, ns, name)
	owner := metav1.OwnerReference{APIVersion: "acid.zalan.do/v1", Kind: "postgresql", Name: name, UID: zpg.GetUID(), Controller: ptr.To(true)}
	passwords := zalandoCluster(ctx, t, &pg, owner)
	pods, err := env.WaitPods(ctx, ns, name, ReadyPods(2))
	if err != nil {
		t.Fatal(err)
	}
	leader := waitLeader(ctx, t, ns, name)
	zalandoRoles(ctx, t, ns, name, passwords)
	before := podState(pods)
	t.Logf("zalando cluster up: pods %v, leader %s", before, leader)

	primary := primaryConn(ctx, ns, name, passwords[cluster.SuperuserName])
	if primary == nil {
		t.Fatal("no primary answers with the zalando superuser's password")
	}
	const rows = 1000
	for _, q := range []string{
		"CREATE TABLE writes (at timestamptz NOT NULL)",
		"CREATE TABLE kept (id int PRIMARY KEY)",
		fmt.Sprintf("INSERT INTO kept SELECT generate_series(1, %d)", rows),
	} {
		if _, err := primary.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_ = primary.Close(ctx)

	w := startCountingWriter(ctx, t, ns, name, passwords[cluster.SuperuserName])
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(manifest, &obj.Object); err != nil {
		t.Fatal(err)
	}
	obj.SetNamespace(ns)
	if _, err := env.Dyn.Resource(v1.SchemeGroupVersionResource).Namespace(ns).Create(ctx, obj,
		metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
		t.Fatalf("apply the converted manifest: %v", err)
	}

	// In the wrong order: the zalando postgresql is still there. Refused,
	// nothing touched.
	stsBefore, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitCluster(ctx, ns, name, "the adoption refused while the zalando postgresql exists", func(pg *v1.Postgresql) bool {
		return pg.Status.Reason == fsm.ReasonAdoptionRefused && strings.Contains(pg.Status.Message, "the zalando postgresql "+ns+"/"+name+" still exists")
	}); err != nil {
		t.Fatal(err)
	}
	untouched(ctx, t, ns, name, stsBefore)

	// Then step 4 of docs/migrating.md: the postgresql deleted with orphan
	// propagation, the garbage collector removes the owner references,
	// pgloop adopts on its next try.
	orphan := metav1.DeletePropagationOrphan
	if err := env.Dyn.Resource(zalandoGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	adopted := inEffect(ctx, t, ns, name, 2)
	took := time.Since(began)
	ins := w.stop(ctx, t, "an insert after the adoption")
	inserts, failed, gap := ins.inserts, ins.failed, ins.gap
	t.Logf("adopted: Running with roles synced and configuration applied %v after the zalando postgresql's orphan deletion; %d inserts, %d failed, longest gap %v",
		took.Round(time.Millisecond), inserts, failed, gap.Round(time.Millisecond))
	if failed != 0 {
		t.Errorf("%d inserts failed during the take-over, want 0", failed)
	}
	if n := op.LogCount("adopt: pod counts as up to date"); n != 2 {
		t.Errorf("%d pods annotated by the adoption, want 2", n)
	}

	t.Run("nothing restarted", func(t *testing.T) {
		pods, err := env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: cluster.LabelClusterName + "=" + name})
		if err != nil {
			t.Fatal(err)
		}
		var ps []*corev1.Pod
		for i := range pods.Items {
			ps = append(ps, &pods.Items[i])
		}
		if after := podState(ps); !maps.Equal(after, before) {
			t.Errorf("pods (uid, restarts) %v after the adoption, want %v", after, before)
		}
		if got := waitLeader(ctx, t, ns, name); got != leader || adopted.Status.Primary != leader {
			t.Errorf("leader %s, status.primary %s after the adoption, want %s", got, adopted.Status.Primary, leader)
		}
		sts, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if refs := sts.OwnerReferences; len(refs) != 1 || refs[0].UID != adopted.UID {
			t.Errorf("statefulset owner references %v, want the Postgresql %s alone", refs, adopted.UID)
		}
	})

	t.Run("the zalando image kept", func(t *testing.T) {
		// Written into the spec, where the user sees it; the StatefulSet
		// keeps running it.
		if adopted.Spec.DockerImage != zalandoImage {
			t.Errorf("spec.dockerImage %q after the adoption, want the image the zalando operator ran, %s", adopted.Spec.DockerImage, zalandoImage)
		}
		sts, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := sts.Spec.Template.Spec.Containers[0].Image; got != zalandoImage {
			t.Errorf("statefulset image %s after the adoption, want %s", got, zalandoImage)
		}
	})

	t.Run("same passwords", func(t *testing.T) {
		for user, pw := range passwords {
			if got := password(ctx, t, ns, cluster.SecretName(user, name)); got != pw {
				t.Errorf("pgloop's secret of %s holds another password than zalando's", user)
			}
			if _, err := env.Kube.CoreV1().Secrets(ns).Get(ctx, cluster.ZalandoSecretName(user, name), metav1.GetOptions{}); err != nil {
				t.Errorf("zalando's secret of %s: %v (it is to be left as it is)", user, err)
			}
		}
		if err := login(ctx, ns, leader, "app_owner", passwords["app_owner"], "app"); err != nil {
			t.Errorf("app_owner with the zalando password: %v", err)
		}
		if err := login(ctx, ns, leader, cluster.SuperuserName, passwords[cluster.SuperuserName], "postgres"); err != nil {
			t.Errorf("postgres with the zalando password: %v", err)
		}
	})

	countRows := func(t *testing.T) {
		conn := env.SQL(ctx, t, env.Pod(ctx, t, ns, leaderPod(ctx, t, ns, name)))
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&n); err != nil || n != rows {
			t.Errorf("%d rows kept (%v), want %d", n, err, rows)
		}
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM writes").Scan(&n); err != nil || n < inserts {
			t.Errorf("%d rows written by the loop (%v), want at least its %d committed inserts", n, err, inserts)
		}
	}
	t.Run("rows", countRows)

	t.Run("a parameter applied without a restart", func(t *testing.T) {
		if _, err := env.MergePatchCluster(ctx, ns, name, `{"spec":{"postgresql":{"parameters":{"work_mem":"12MB"}}}}`); err != nil {
			t.Fatal(err)
		}
		inEffect(ctx, t, ns, name, 2)
		for _, p := range []string{name + "-0", name + "-1"} {
			if err := Eventually(ctx, "work_mem 12MB on "+p, func(ctx context.Context) (bool, error) {
				conn, err := connect(ctx, ns, p, cluster.SuperuserName, passwords[cluster.SuperuserName], "postgres")
				if err != nil {
					return false, err
				}
				defer conn.Close(ctx)
				var v string
				err = conn.QueryRow(ctx, "SHOW work_mem").Scan(&v)
				return v == "12MB", err
			}); err != nil {
				t.Error(err)
			}
		}
		samePods(ctx, t, ns, name, uids(before))
	})

	// docs/migrating.md: moving an adopted cluster to pgloop's image is an
	// edit of spec.dockerImage, rolled out as any template change.
	t.Run("moved to pgloop's image by an edit: a rolling change", func(t *testing.T) {
		if _, err := env.MergePatchCluster(ctx, ns, name,
			`{"spec":{"dockerImage":"`+cluster.DefaultImage+`","podAnnotations":{"adopted":"rolled"}}}`); err != nil {
			t.Fatal(err)
		}
		// One by one: every state the watch shows has a Ready pod.
		var noneReady []string
		if _, err := env.WaitPods(ctx, ns, name, func(pods []*corev1.Pod) bool {
			ready := 0
			for _, p := range pods {
				if ok, _ := testbed.PodReady(p); ok && p.DeletionTimestamp == nil {
					ready++
				}
			}
			if ready == 0 {
				noneReady = append(noneReady, DescribePods(pods))
			}
			if !ReadyPods(2)(pods) {
				return false
			}
			for _, p := range pods {
				if _, old := before[p.Name+"/"+string(p.UID)]; old || p.Annotations["adopted"] != "rolled" ||
					p.Spec.Containers[0].Image != cluster.DefaultImage {
					return false
				}
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if len(noneReady) > 0 {
			t.Errorf("the rollout left no pod Ready: %v", noneReady)
		}
		inEffect(ctx, t, ns, name, 2)
		if n := op.LogCount("switched over"); n < 1 {
			t.Errorf("%d switchovers logged for the rollout, want the primary's role handed over first", n)
		}
		if err := login(ctx, ns, leaderPod(ctx, t, ns, name), "app_owner", passwords["app_owner"], "app"); err != nil {
			t.Errorf("app_owner with the zalando password after the rollout: %v", err)
		}
		countRows(t)
	})

	t.Run("refused: a statefulset another controller owns", func(t *testing.T) {
		owner, err := env.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "some-controller"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		adoptRefused(ctx, t, ns, "owned", manifest, func(sts *appsv1.StatefulSet) {
			sts.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}
		}, "statefulset owned is controlled by v1 ConfigMap some-controller")
	})
	t.Run("refused: Patroni outside Kubernetes", func(t *testing.T) {
		adoptRefused(ctx, t, ns, "etcd", manifest, func(sts *appsv1.StatefulSet) {
			c := &sts.Spec.Template.Spec.Containers[0]
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "DCS_ENABLE_KUBERNETES_API" })
		}, "Patroni keeps its state outside Kubernetes")
	})
	t.Run("refused: Patroni on Endpoints, the manifest names ConfigMaps", func(t *testing.T) {
		// zalando's default, kubernetes_use_configmaps off, is adopted
		// (the adoption records pgloop.dev/patroni-store: endpoints); a
		// manifest that names the other store is refused.
		obj := map[string]any{}
		if err := yaml.Unmarshal(manifest, &obj); err != nil {
			t.Fatal(err)
		}
		meta := obj["metadata"].(map[string]any)
		annotations, _ := meta["annotations"].(map[string]any)
		if annotations == nil {
			annotations = map[string]any{}
		}
		annotations[v1.AnnotationPatroniStore] = string(v1.PatroniStoreConfigMaps)
		meta["annotations"] = annotations
		named, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		adoptRefused(ctx, t, ns, "endpoints", named, func(sts *appsv1.StatefulSet) {
			c := &sts.Spec.Template.Spec.Containers[0]
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "KUBERNETES_USE_CONFIGMAPS" })
		}, "Patroni keeps its state in endpoints")
	})
}

// convertAdopt runs `pgloop convert --adopt` on testdata/zalando-adopt.yaml
// for the cluster name on the real node.
func convertAdopt(ctx context.Context, t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile("testdata/zalando-adopt.yaml")
	if err != nil {
		t.Fatal(err)
	}
	in := onRealNode(t, raw, name)
	convert := exec.CommandContext(ctx, env.operatorBinary(t), "convert", "--adopt")
	convert.Stdin = strings.NewReader(in)
	var stderr strings.Builder
	convert.Stderr = &stderr
	out, err := convert.Output()
	if err != nil {
		t.Fatalf("pgloop convert --adopt: %v\n%s", err, stderr.String())
	}
	return out
}

// zalandoCluster creates the objects the zalando operator makes for pg
// (its spec holds the zalando manifest's values), with the zalando
// operator's default configuration (kubernetes_use_configmaps off: Patroni
// on Endpoints, which the real node's pod IPs allow) but spilo_fsgroup 103
// and without KUBERNETES_BOOTSTRAP_LABELS (Patroni 3.0.2 has no
// bootstrap_labels).
// The facts are from the zalando operator's pkg/cluster/k8sres.go at
// commit a7aaad0a (see pkg/cluster/adopt.go). It returns the passwords of
// the credentials Secrets by role.
func zalandoCluster(ctx context.Context, t *testing.T, pg *v1.Postgresql, owner metav1.OwnerReference) map[string]string {
	t.Helper()
	ns, name := pg.Namespace, pg.Name
	core := env.Kube.CoreV1()
	labels := map[string]string{"application": "spilo", "cluster-name": name, "team": pg.Spec.TeamID}
	selector := map[string]string{"application": "spilo", "cluster-name": name}
	meta := func(n string, l map[string]string) metav1.ObjectMeta {
		m := metav1.ObjectMeta{Name: n, Namespace: ns, Labels: l}
		if l != nil {
			// The cluster's objects, not the ServiceAccount and its RBAC.
			m.OwnerReferences = []metav1.OwnerReference{owner}
		}
		return m
	}
	passwords := map[string]string{}
	for _, user := range append([]string{cluster.SuperuserName, cluster.ReplicationUserName}, slices.Sorted(maps.Keys(pg.Spec.Users))...) {
		pw, err := cluster.Password(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		passwords[user] = pw
		s := &corev1.Secret{ObjectMeta: meta(cluster.ZalandoSecretName(user, name), labels), Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{"username": []byte(user), "password": []byte(pw)}}
		if _, err := core.Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The pods' ServiceAccount postgres-pod, with the rights Patroni needs
	// (zalando binds its ClusterRole postgres-pod; a Role does here).
	sa := &corev1.ServiceAccount{ObjectMeta: meta("postgres-pod", nil)}
	role := &rbacv1.Role{ObjectMeta: meta("postgres-pod", nil), Rules: cluster.Role(pg).Rules}
	binding := &rbacv1.RoleBinding{ObjectMeta: meta("postgres-pod", nil),
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "postgres-pod"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "postgres-pod", Namespace: ns}}}
	must(t, create(ctx, core.ServiceAccounts(ns).Create, sa))
	must(t, create(ctx, env.Kube.RbacV1().Roles(ns).Create, role))
	must(t, create(ctx, env.Kube.RbacV1().RoleBindings(ns).Create, binding))

	// Services: with Patroni on Endpoints the master Service has no
	// selector, and its Endpoints, which zalando creates empty, are
	// Patroni's: the leader writes its address there. The replicas'
	// Service selects by role.
	for svc, role := range map[string]string{name: "master", name + "-repl": "replica"} {
		l := maps.Clone(labels)
		l["spilo-role"] = role
		var sel map[string]string
		if role == "replica" {
			sel = maps.Clone(selector)
			sel["spilo-role"] = role
		}
		must(t, create(ctx, core.Services(ns).Create, &corev1.Service{ObjectMeta: meta(svc, l), Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: sel,
			Ports:    []corev1.ServicePort{{Name: "postgresql", Port: 5432, TargetPort: intstr.FromInt32(5432)}},
		}}))
	}
	masterLabels := maps.Clone(labels)
	masterLabels["spilo-role"] = "master"
	//lint:ignore SA1019 zalando creates the v1 Endpoints Patroni keeps
	must(t, create(ctx, core.Endpoints(ns).Create, &corev1.Endpoints{ObjectMeta: meta(name, masterLabels)}))
	masterSel := maps.Clone(selector)
	masterSel["spilo-role"] = "master"
	must(t, create(ctx, env.Kube.PolicyV1().PodDisruptionBudgets(ns).Create, &policyv1.PodDisruptionBudget{
		ObjectMeta: meta("postgres-"+name+"-pdb", labels),
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: masterSel}},
	}))
	criticalSel := maps.Clone(selector)
	criticalSel["critical-operation"] = "true"
	must(t, create(ctx, env.Kube.PolicyV1().PodDisruptionBudgets(ns).Create, &policyv1.PodDisruptionBudget{
		ObjectMeta: meta(cluster.ZalandoCriticalOpPodDisruptionBudgetName(name), labels),
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			Selector: &metav1.LabelSelector{MatchLabels: criticalSel}},
	}))

	spilo, err := json.Marshal(map[string]any{
		"postgresql": map[string]any{"parameters": pg.Spec.PostgreSQL.Parameters},
		"bootstrap": map[string]any{
			"initdb": []any{map[string]string{"auth-host": "md5"}, map[string]string{"auth-local": "trust"}},
			"dcs":    map[string]any{"ttl": pg.Spec.Patroni.TTL, "loop_wait": pg.Spec.Patroni.LoopWait, "retry_timeout": pg.Spec.Patroni.RetryTimeout},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	secretRef := func(user string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: cluster.ZalandoSecretName(user, name)}, Key: "password"}}
	}
	fieldRef := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}
	}
	container := corev1.Container{
		Name:            "postgres",
		Image:           zalandoImage,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Ports: []corev1.ContainerPort{{ContainerPort: 8008, Protocol: corev1.ProtocolTCP},
			{ContainerPort: 5432, Protocol: corev1.ProtocolTCP}, {ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("100Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("500Mi")},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "pgdata", MountPath: "/home/postgres/pgdata"}, {Name: "dshm", MountPath: "/dev/shm"}},
		Env: []corev1.EnvVar{
			{Name: "SCOPE", Value: name},
			{Name: "PGROOT", Value: "/home/postgres/pgdata/pgroot"},
			{Name: "POD_IP", ValueFrom: fieldRef("status.podIP")},
			{Name: "POD_NAMESPACE", ValueFrom: fieldRef("metadata.namespace")},
			{Name: "PGUSER_SUPERUSER", Value: cluster.SuperuserName},
			{Name: "KUBERNETES_SCOPE_LABEL", Value: "cluster-name"},
			{Name: "KUBERNETES_ROLE_LABEL", Value: "spilo-role"},
			{Name: "PGPASSWORD_SUPERUSER", ValueFrom: secretRef(cluster.SuperuserName)},
			{Name: "PGUSER_STANDBY", Value: cluster.ReplicationUserName},
			{Name: "PGPASSWORD_STANDBY", ValueFrom: secretRef(cluster.ReplicationUserName)},
			{Name: "PAM_OAUTH2"},
			{Name: "HUMAN_ROLE", Value: "zalandos"},
			{Name: "PGVERSION", Value: pg.Spec.PostgreSQL.Version},
			{Name: "KUBERNETES_LABELS", Value: `{"application":"spilo"}`},
			{Name: "SPILO_CONFIGURATION", Value: string(spilo)},
			{Name: "DCS_ENABLE_KUBERNETES_API", Value: "true"},
		},
	}
	sts := &appsv1.StatefulSet{
		ObjectMeta: meta(name, labels),
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(pg.Spec.NumberOfInstances),
			Selector:    &metav1.LabelSelector{MatchLabels: selector},
			ServiceName: name,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					// zalando's spilo_fsgroup: 103. Spilo's own image starts
					// as root and gives the volume to postgres itself;
					// pgloop's, which stands in for it here, runs as
					// postgres, and a real kubelet's volumes are root's.
					SecurityContext:               &corev1.PodSecurityContext{FSGroup: ptr.To[int64](103)},
					ServiceAccountName:            "postgres-pod",
					TerminationGracePeriodSeconds: ptr.To[int64](300),
					Containers:                    []corev1.Container{container},
					Volumes: []corev1.Volume{{Name: "dshm", VolumeSource: corev1.VolumeSource{
						EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}},
					Tolerations: pg.Spec.Tolerations,
					Affinity:    &corev1.Affinity{NodeAffinity: pg.Spec.NodeAffinity},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "pgdata", Labels: labels},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: pg.Spec.Volume.Size}},
					VolumeMode:       ptr.To(corev1.PersistentVolumeFilesystem),
					StorageClassName: ptr.To(pg.Spec.Volume.StorageClass),
				},
			}},
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			PodManagementPolicy: appsv1.OrderedReadyPodManagement,
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
		},
	}
	must(t, create(ctx, env.Kube.AppsV1().StatefulSets(ns).Create, sts))
	return passwords
}

// onRealNode fills in testdata/zalando-adopt.yaml's placeholders: the
// cluster's name, and the real node's toleration and affinity (its class,
// testbed.RealStorageClassName, is in the file).
func onRealNode(t *testing.T, raw []byte, name string) string {
	t.Helper()
	tol, err := json.Marshal(testbed.RealNodeToleration())
	if err != nil {
		t.Fatal(err)
	}
	return strings.NewReplacer("name: NAME", "name: "+name,
		"- TOLERATION", "- "+string(tol),
		"- AFFINITY", fmt.Sprintf("- {key: %s, operator: In, values: [%s]}", testbed.NodeLabel, testbed.RealNodeLabelValue)).Replace(string(raw))
}

// zalandoGVR is the zalando operator's postgresql resource.
var zalandoGVR = schema.GroupVersionResource{Group: "acid.zalan.do", Version: "v1", Resource: "postgresqls"}

// zalandoResource installs a CustomResourceDefinition of the zalando
// operator's postgresql (its group, names and scope; the schema left open)
// unless there is one, and creates the zalando manifest
// testdata/zalando-adopt.yaml as cluster name.
func zalandoResource(ctx context.Context, t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": "postgresqls.acid.zalan.do"},
		"spec": map[string]any{
			"group": "acid.zalan.do",
			"scope": "Namespaced",
			"names": map[string]any{"kind": "postgresql", "listKind": "postgresqlList", "plural": "postgresqls", "singular": "postgresql"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	crds := env.Dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("testdata/zalando-adopt.yaml")
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(onRealNode(t, raw, name)), &obj.Object); err != nil {
		t.Fatal(err)
	}
	obj.SetName(name)
	obj.SetNamespace(ns)
	var out *unstructured.Unstructured
	// The resource is served once the definition is established.
	if err := Eventually(ctx, "the zalando postgresql created", func(ctx context.Context) (bool, error) {
		out, err = env.Dyn.Resource(zalandoGVR).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
		return err == nil, err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// untouched fails t unless the StatefulSet name has the spec (generation)
// and metadata it had before (its status is the StatefulSet controller's),
// and pgloop made no Secret and added no finalizer: what a refusal must
// leave.
func untouched(ctx context.Context, t *testing.T, ns, name string, before *appsv1.StatefulSet) {
	t.Helper()
	now, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.Generation != before.Generation || !reflect.DeepEqual(now.OwnerReferences, before.OwnerReferences) ||
		!maps.Equal(now.Labels, before.Labels) || !maps.Equal(now.Annotations, before.Annotations) {
		t.Errorf("statefulset %s changed (generation %d, was %d; owners %v, labels %v, annotations %v): a refusal touches nothing",
			name, now.Generation, before.Generation, now.OwnerReferences, now.Labels, now.Annotations)
	}
	if _, err := env.Kube.CoreV1().Secrets(ns).Get(ctx, cluster.SecretName(cluster.SuperuserName, name), metav1.GetOptions{}); err == nil {
		t.Errorf("secret %s made for a refused adoption", cluster.SecretName(cluster.SuperuserName, name))
	}
	pg, err := env.PG.Postgresqls(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(pg.Finalizers, cluster.Finalizer) {
		t.Errorf("finalizer %s added to a refused adoption", cluster.Finalizer)
	}
}

// zalandoRoles does what the zalando operator does in the database once
// the cluster runs: the manifest's users with their Secrets' passwords,
// and its databases.
func zalandoRoles(ctx context.Context, t *testing.T, ns, name string, passwords map[string]string) {
	t.Helper()
	var conn *pgx.Conn
	if err := Eventually(ctx, "the zalando cluster's primary", func(ctx context.Context) (bool, error) {
		conn = primaryConn(ctx, ns, name, passwords[cluster.SuperuserName])
		return conn != nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		fmt.Sprintf("CREATE ROLE app_owner LOGIN CREATEDB PASSWORD '%s'", passwords["app_owner"]),
		"CREATE DATABASE app OWNER app_owner",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", strings.SplitN(q, " PASSWORD", 2)[0], err)
		}
	}
}

// waitLeader returns the member Patroni's leader record names, once there
// is one.
func waitLeader(ctx context.Context, t *testing.T, ns, name string) string {
	t.Helper()
	var leader string
	if err := Eventually(ctx, "a Patroni leader of "+name, func(ctx context.Context) (bool, error) {
		var err error
		leader, err = env.LeaderRecord(ctx, ns, name)
		return leader != "", IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("%v\n%s", err, env.ContainerLogs(context.Background(), ns, name, 30))
	}
	return leader
}

// leaderPod is waitLeader under the name the tests read better.
func leaderPod(ctx context.Context, t *testing.T, ns, name string) string {
	t.Helper()
	return waitLeader(ctx, t, ns, name)
}

// podState maps each pod ("name/uid") to its containers' restart count.
func podState(pods []*corev1.Pod) map[string]int32 {
	out := map[string]int32{}
	for _, p := range pods {
		var restarts int32
		for _, c := range p.Status.ContainerStatuses {
			restarts += c.RestartCount
		}
		out[p.Name+"/"+string(p.UID)] = restarts
	}
	return out
}

// uids turns a podState into the pods' IDs in name order.
func uids(state map[string]int32) []podID {
	var out []podID
	for k := range state {
		n, uid, _ := strings.Cut(k, "/")
		out = append(out, podID{n, types.UID(uid)})
	}
	slices.SortFunc(out, func(a, b podID) int { return strings.Compare(a.name, b.name) })
	return out
}

// startCountingWriter inserts a row every 10 ms on the primary and counts
// the inserts that failed, the reconnections included: during an adoption
// no pod restarts, so none may fail.
func startCountingWriter(ctx context.Context, t *testing.T, ns, name, password string) *insertLoop {
	t.Helper()
	conn := primaryConn(ctx, ns, name, password)
	if conn == nil {
		t.Fatal("no primary for the writer")
	}
	return startInserts(ctx, func(ctx context.Context) (bool, error) {
		if conn == nil {
			if conn = primaryConn(ctx, ns, name, password); conn == nil {
				return false, errors.New("no primary to connect to")
			}
		}
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := conn.Exec(ictx, "INSERT INTO writes VALUES (clock_timestamp())"); err != nil {
			_ = conn.Close(context.Background())
			conn = nil
			return false, err
		}
		return true, nil
	}, func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	})
}

// adoptRefused applies an adopting manifest (the converted one, renamed
// name) over a StatefulSet with no pod (zalando's selector and Patroni
// environment, changed by mutate), and checks that the status gives the
// reason with want in its message, and that nothing was touched.
func adoptRefused(ctx context.Context, t *testing.T, ns, name string, manifest []byte, mutate func(*appsv1.StatefulSet), want string) {
	t.Helper()
	selector := map[string]string{"application": "spilo", "cluster-name": name}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: selector},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: selector},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: zalandoImage, Env: []corev1.EnvVar{
					{Name: "SCOPE", Value: name},
					{Name: "KUBERNETES_SCOPE_LABEL", Value: "cluster-name"},
					{Name: "KUBERNETES_ROLE_LABEL", Value: "spilo-role"},
					{Name: "KUBERNETES_LABELS", Value: `{"application":"spilo"}`},
					{Name: "DCS_ENABLE_KUBERNETES_API", Value: "true"},
					{Name: "KUBERNETES_USE_CONFIGMAPS", Value: "true"},
				}}}}},
		},
	}
	mutate(sts)
	sts, err := env.Kube.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(manifest, &obj.Object); err != nil {
		t.Fatal(err)
	}
	obj.SetNamespace(ns)
	obj.SetName(name)
	if _, err := env.Dyn.Resource(v1.SchemeGroupVersionResource).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pg, err := env.WaitCluster(ctx, ns, name, "the adoption refused in status", func(pg *v1.Postgresql) bool {
		return pg.Status.Reason == fsm.ReasonAdoptionRefused && strings.Contains(pg.Status.Message, want)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status: %s, %s: %s", pg.Status.State, pg.Status.Reason, pg.Status.Message)
	untouched(ctx, t, ns, name, sts)
}

// create calls a typed client's Create.
func create[T any](ctx context.Context, f func(context.Context, T, metav1.CreateOptions) (T, error), obj T) error {
	_, err := f(ctx, obj, metav1.CreateOptions{})
	return err
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
