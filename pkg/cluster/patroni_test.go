package cluster

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	pgsamples "github.com/pgloop/pgloop/pkg/internal/samples"
)

// withStore returns a copy of pg whose Patroni keeps its state in store.
func withStore(pg *v1.Postgresql, store v1.PatroniStore) *v1.Postgresql {
	out := pg.DeepCopy()
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[v1.AnnotationPatroniStore] = string(store)
	return out
}

func TestLeaderRecordName(t *testing.T) {
	for _, tc := range []struct {
		store v1.PatroniStore
		want  string
	}{
		{v1.PatroniStoreConfigMaps, "db-leader"},
		{v1.PatroniStoreEndpoints, "db"},
	} {
		t.Run(string(tc.store), func(t *testing.T) {
			if got := LeaderRecordName(tc.store, "db"); got != tc.want {
				t.Errorf("LeaderRecordName(%s) = %q, want %q", tc.store, got, tc.want)
			}
		})
	}
	if LeaderEndpointsName("db") != MasterServiceName("db") {
		t.Error("the leader Endpoints is not the master Service's")
	}
}

func TestTemplatePatroniStore(t *testing.T) {
	pg := loadSample(t, "minimal")
	zalando := pgsamples.ZalandoStatefulSet(pg)
	env := pgsamples.ZalandoEnv
	noSpilo := zalando.DeepCopy()
	noSpilo.Spec.Template.Spec.Containers[0].Name = "db"
	for _, tc := range []struct {
		name  string
		sts   *appsv1.StatefulSet
		want  v1.PatroniStore
		known bool
	}{
		{"pgloop's, default", StatefulSet(pg, Options{}), v1.PatroniStoreConfigMaps, true},
		{"pgloop's, endpoints", StatefulSet(withStore(pg, v1.PatroniStoreEndpoints), Options{}), v1.PatroniStoreEndpoints, true},
		{"zalando, kubernetes_use_configmaps", zalando, v1.PatroniStoreConfigMaps, true},
		{"zalando, default", env(zalando, "KUBERNETES_USE_CONFIGMAPS", ""), v1.PatroniStoreEndpoints, true},
		// Spilo tests the string: any value means ConfigMaps.
		{"KUBERNETES_USE_CONFIGMAPS=false", env(zalando, "KUBERNETES_USE_CONFIGMAPS", "false"), v1.PatroniStoreConfigMaps, true},
		{"etcd", env(zalando, "DCS_ENABLE_KUBERNETES_API", ""), "", false},
		{"no Spilo container", noSpilo, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, known := TemplatePatroniStore(tc.sts)
			if got != tc.want || known != tc.known {
				t.Errorf("TemplatePatroniStore = %q, %v; want %q, %v", got, known, tc.want, tc.known)
			}
		})
	}
}

// TestPatroniStoreObjects: what differs between the stores is the Spilo
// environment (no KUBERNETES_USE_CONFIGMAPS, as zalando's StatefulSet) and
// the master Service's selector (none: Patroni keeps its Endpoints); the
// config Service, the replica Service and the pods' Role are the same.
func TestPatroniStoreObjects(t *testing.T) {
	base := loadSample(t, "full")
	for _, tc := range []struct {
		store          v1.PatroniStore
		useConfigMaps  bool
		masterSelector bool
	}{
		{"", true, true},
		{v1.PatroniStoreConfigMaps, true, true},
		{v1.PatroniStoreEndpoints, false, false},
	} {
		t.Run(string(tc.store), func(t *testing.T) {
			pg := base
			if tc.store != "" {
				pg = withStore(base, tc.store)
			}
			sts := StatefulSet(pg, Options{})
			i := slices.IndexFunc(sts.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == ContainerName })
			hasVar := slices.ContainsFunc(sts.Spec.Template.Spec.Containers[i].Env, func(e corev1.EnvVar) bool {
				return e.Name == "KUBERNETES_USE_CONFIGMAPS" && e.Value == "true"
			})
			if hasVar != tc.useConfigMaps {
				t.Errorf("KUBERNETES_USE_CONFIGMAPS=true in the env: %v, want %v", hasVar, tc.useConfigMaps)
			}
			svcs := Services(pg, Options{})
			if got := svcs[0].Spec.Selector != nil; got != tc.masterSelector {
				t.Errorf("master Service selector %v, want one: %v", svcs[0].Spec.Selector, tc.masterSelector)
			}
			if svcs[0].Spec.Ports[0].Name != PostgresPortName || svcs[0].Spec.Ports[0].Port != PostgresPort {
				t.Errorf("master Service ports %v: Patroni's Endpoints name their port %s, %d", svcs[0].Spec.Ports, PostgresPortName, PostgresPort)
			}
			if want := RoleSelector(pg.Name, RoleReplica); !mapsEqual(svcs[1].Spec.Selector, want) {
				t.Errorf("replica Service selector %v, want %v", svcs[1].Spec.Selector, want)
			}
			if svcs[2].Name != ConfigServiceName(pg.Name) || svcs[2].Spec.ClusterIP != corev1.ClusterIPNone || svcs[2].Spec.Selector != nil {
				t.Errorf("config Service %s %+v, want the headless %s without a selector", svcs[2].Name, svcs[2].Spec, ConfigServiceName(pg.Name))
			}
			role := Role(pg)
			if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
				return slices.Contains(r.Resources, "endpoints") && slices.Contains(r.Verbs, "patch")
			}) {
				t.Errorf("the pods' Role %v does not let Patroni patch endpoints", role.Rules)
			}
			// An existing Service with a selector loses it.
			if tc.masterSelector {
				return
			}
			current := MasterService(base, Options{})
			if !ServiceNeedsUpdate(current, svcs[0]) {
				t.Error("a master Service with a selector needs no update to none")
			}
			if got := ApplyService(current, svcs[0]); got.Spec.Selector != nil {
				t.Errorf("applied selector %v, want none", got.Spec.Selector)
			}
		})
	}
	// The default renders what it did before the store was a choice: the
	// pod template hash of every existing cluster stays (TestGolden keeps
	// the objects themselves).
	if a, b := PodTemplateHash(StatefulSet(base, Options{})), PodTemplateHash(StatefulSet(withStore(base, v1.PatroniStoreConfigMaps), Options{})); a != b {
		t.Errorf("pod template hash %s with the annotation configmaps, %s without", b, a)
	}
	if a, b := PodTemplateHash(StatefulSet(base, Options{})), PodTemplateHash(StatefulSet(withStore(base, v1.PatroniStoreEndpoints), Options{})); a == b {
		t.Error("the same pod template hash for both stores")
	}
}
