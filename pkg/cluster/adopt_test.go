package cluster

import (
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	pgsamples "github.com/pgloop/pgloop/pkg/internal/samples"
)

func TestAdoptionRefusal(t *testing.T) {
	pg := loadSample(t, "minimal")
	zalando := pgsamples.ZalandoStatefulSet(pg)
	env := pgsamples.ZalandoEnv
	zalandoOwner := metav1.OwnerReference{APIVersion: "acid.zalan.do/v1", Kind: "postgresql", Name: pg.Name, UID: "z", Controller: ptr.To(true)}
	otherController := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "x", UID: "d", Controller: ptr.To(true)}
	withOwner := func(o metav1.Object, ref metav1.OwnerReference) metav1.Object {
		o.SetOwnerReferences([]metav1.OwnerReference{ref})
		return o
	}
	service := func() *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: pg.Name}}
	}
	claim := func() *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "pgdata-" + pg.Name + "-0"}}
	}
	otherSelector := zalando.DeepCopy()
	otherSelector.Spec.Selector.MatchLabels["environment"] = "prod"
	noSpilo := zalando.DeepCopy()
	noSpilo.Spec.Template.Spec.Containers[0].Name = "db"
	ours := zalando.DeepCopy()
	ours.OwnerReferences = []metav1.OwnerReference{OwnerReference(pg)}

	for _, tc := range []struct {
		name   string
		pg     *v1.Postgresql // nil for pg
		sts    *appsv1.StatefulSet
		others []metav1.Object
		want   string // "" for none
	}{
		{name: "zalando's objects, kubernetes_use_configmaps", sts: zalando, others: []metav1.Object{service(), claim()}},
		{name: "nothing at all"},
		{name: "already the cluster's", sts: ours},
		{name: "a claim the statefulset controls", sts: zalando, others: []metav1.Object{withOwner(claim(), metav1.OwnerReference{
			APIVersion: "apps/v1", Kind: "StatefulSet", Name: pg.Name, UID: pgsamples.ZalandoUID, Controller: ptr.To(true)})}},
		{name: "owner reference to the zalando postgresql", sts: zalando, others: []metav1.Object{withOwner(service(), zalandoOwner)},
			want: "service acid-minimal-cluster has an owner reference to the zalando postgresql acid-minimal-cluster: stop the zalando operator and delete its postgresql with --cascade=orphan"},
		{name: "claim with an owner reference to the zalando postgresql", sts: zalando, others: []metav1.Object{withOwner(claim(), zalandoOwner)},
			want: "persistentvolumeclaim pgdata-acid-minimal-cluster-0 has an owner reference to the zalando postgresql"},
		{name: "statefulset of another controller", sts: withOwner(zalando.DeepCopy(), otherController).(*appsv1.StatefulSet),
			want: "statefulset acid-minimal-cluster is controlled by apps/v1 Deployment x: pgloop takes over no object another controller owns"},
		{name: "another selector", sts: otherSelector,
			want: "selects its pods by application=spilo,cluster-name=acid-minimal-cluster,environment=prod, pgloop by application=spilo,cluster-name=acid-minimal-cluster"},
		{name: "no Spilo container", sts: noSpilo, want: `has no container "postgres"`},
		{name: "zalando's objects, Endpoints", sts: env(zalando, "KUBERNETES_USE_CONFIGMAPS", ""), others: []metav1.Object{service(), claim()}},
		{name: "Endpoints, the annotation says endpoints", pg: withStore(pg, v1.PatroniStoreEndpoints), sts: env(zalando, "KUBERNETES_USE_CONFIGMAPS", "")},
		{name: "ConfigMaps, the annotation says configmaps", pg: withStore(pg, v1.PatroniStoreConfigMaps), sts: zalando},
		{name: "Endpoints, the annotation says configmaps", pg: withStore(pg, v1.PatroniStoreConfigMaps), sts: env(zalando, "KUBERNETES_USE_CONFIGMAPS", ""),
			want: `Patroni keeps its state in endpoints (KUBERNETES_USE_CONFIGMAPS ""), the annotation pgloop.dev/patroni-store says configmaps`},
		{name: "ConfigMaps, the annotation says endpoints", pg: withStore(pg, v1.PatroniStoreEndpoints), sts: zalando,
			want: `Patroni keeps its state in configmaps (KUBERNETES_USE_CONFIGMAPS "true"), the annotation pgloop.dev/patroni-store says endpoints`},
		{name: "etcd", sts: env(env(zalando, "DCS_ENABLE_KUBERNETES_API", ""), "ETCD_HOST", "etcd:2379"), want: "Patroni keeps its state outside Kubernetes"},
		{name: "another scope", sts: env(zalando, "SCOPE", "other"), want: `Patroni's scope is "other"`},
		{name: "another scope label", sts: env(zalando, "KUBERNETES_SCOPE_LABEL", "version"), want: `scope and role labels are "version" and "spilo-role"`},
		{name: "other member labels", sts: env(zalando, "KUBERNETES_LABELS", `{"application":"spilo","env":"prod"}`), want: "Patroni's member labels are"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pg
			if tc.pg != nil {
				p = tc.pg
			}
			err := AdoptionRefusal(p, tc.sts, tc.others)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "":
			case err == nil:
				t.Fatalf("not refused, want %q", tc.want)
			case !errors.Is(err, v1.ErrAdoptionRefused) || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("err = %v, want v1.ErrAdoptionRefused with %q", err, tc.want)
			}
		})
	}
}

func TestAdoptedSecret(t *testing.T) {
	pg := loadSample(t, "minimal")
	from := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ZalandoSecretName("foo_user", pg.Name)},
		Data: map[string][]byte{SecretUsernameKey: []byte("foo_user"), SecretPasswordKey: []byte("s3cret")}}
	if from.Name != "foo-user.acid-minimal-cluster.credentials.postgresql.acid.zalan.do" {
		t.Errorf("zalando secret name %s", from.Name)
	}
	s, err := AdoptedSecret(pg, "foo_user", from)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != SecretName("foo_user", pg.Name) || string(s.Data[SecretPasswordKey]) != "s3cret" || string(s.Data[SecretUsernameKey]) != "foo_user" {
		t.Errorf("adopted secret %s with %q/%q, want %s with foo_user/s3cret", s.Name, s.Data[SecretUsernameKey], s.Data[SecretPasswordKey], SecretName("foo_user", pg.Name))
	}
	if ref := metav1.GetControllerOf(s); ref == nil || ref.UID != pg.UID {
		t.Errorf("adopted secret's controller %v, want the cluster", ref)
	}
	empty := from.DeepCopy()
	delete(empty.Data, SecretPasswordKey)
	if _, err := AdoptedSecret(pg, "foo_user", empty); err == nil {
		t.Error("a zalando secret without a password adopted")
	}
}

func TestWithControllerReference(t *testing.T) {
	pg := loadSample(t, "minimal")
	other := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "x"}
	refs, added := WithControllerReference([]metav1.OwnerReference{other}, pg)
	if !added || len(refs) != 2 || refs[0] != other || refs[1].UID != pg.UID || !ptr.Deref(refs[1].Controller, false) {
		t.Fatalf("refs %v, added %v; want the other reference kept and the cluster's controller reference added", refs, added)
	}
	if again, added := WithControllerReference(refs, pg); added || len(again) != 2 {
		t.Errorf("added twice: %v", again)
	}
}
