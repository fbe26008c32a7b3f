package operator

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

const manifestsDir = "../../manifests/operator"

// readManifest decodes the documents of a file of manifests/operator into
// the objects given, in order.
func readManifest(t *testing.T, name string, into ...any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(manifestsDir, name))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(raw), "\n---\n")
	if len(docs) != len(into) {
		t.Fatalf("%s: %d documents, want %d", name, len(docs), len(into))
	}
	for i, doc := range docs {
		if err := yaml.UnmarshalStrict([]byte(doc), into[i]); err != nil {
			t.Fatalf("%s, document %d: %v", name, i+1, err)
		}
	}
}

// allows reports whether rules grant verb on group/resource (any name).
func allows(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if len(r.ResourceNames) == 0 && slices.Contains(r.APIGroups, group) &&
			slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}

func TestClusterRole(t *testing.T) {
	var role rbacv1.ClusterRole
	readManifest(t, "clusterrole.yaml", &role)

	// 1. No wildcards.
	for _, r := range role.Rules {
		for _, s := range slices.Concat(r.APIGroups, r.Resources, r.Verbs, r.ResourceNames, r.NonResourceURLs) {
			if strings.Contains(s, "*") {
				t.Errorf("wildcard %q in rule %+v", s, r)
			}
		}
	}
	// 2. The operator holds every permission of the Role it grants to
	// Patroni: RBAC refuses to create it otherwise.
	for _, r := range cluster.Role(&v1.Postgresql{}).Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, verb := range r.Verbs {
					if !allows(role.Rules, g, res, verb) {
						t.Errorf("the operator grants Patroni %s on %s (group %q) without holding it", verb, res, g)
					}
				}
			}
		}
	}
	// 3. What the informers and the effects do.
	need := map[string][]string{
		"pgloop.dev/postgresqls":                 {"get", "list", "watch", "update", "patch"},
		"pgloop.dev/postgresqls/status":          {"update"},
		"pgloop.dev/postgresqls/finalizers":      {"update"},
		"/pods":                                  {"get", "list", "watch", "delete"},
		"/configmaps":                            {"list", "watch", "deletecollection"},
		"/services":                              {"get", "list", "watch", "create", "update", "delete"},
		"apps/statefulsets":                      {"get", "list", "watch", "create", "update", "delete"},
		"policy/poddisruptionbudgets":            {"get", "list", "watch", "create", "update", "delete"},
		"batch/cronjobs":                         {"get", "list", "watch", "create", "update", "delete"},
		"/secrets":                               {"get", "list", "watch", "create", "delete"},
		"/persistentvolumeclaims":                {"list", "watch", "patch", "delete"},
		"/resourcequotas":                        {"list", "watch"},
		"/events":                                {"create", "patch", "list", "watch"},
		"/serviceaccounts":                       {"get", "list", "watch", "create", "update", "delete"},
		"rbac.authorization.k8s.io/roles":        {"get", "list", "watch", "create", "update", "delete"},
		"rbac.authorization.k8s.io/rolebindings": {"get", "list", "watch", "create", "update", "delete"},
	}
	for gr, verbs := range need {
		group, resource, _ := strings.Cut(gr, "/")
		for _, verb := range verbs {
			if !allows(role.Rules, group, resource, verb) {
				t.Errorf("the ClusterRole lacks %s on %s", verb, gr)
			}
		}
	}
	// 4. Never the things pgloop has no business with.
	for _, gr := range []string{"/nodes", "/namespaces", "/persistentvolumes", "rbac.authorization.k8s.io/clusterroles"} {
		group, resource, _ := strings.Cut(gr, "/")
		for _, verb := range []string{"get", "create", "delete"} {
			if allows(role.Rules, group, resource, verb) {
				t.Errorf("the ClusterRole allows %s on %s", verb, gr)
			}
		}
	}
	// Credentials are updated only by a password rotation (update, with
	// the resourceVersion read): never patched, never deleted in bulk.
	if !allows(role.Rules, "", "secrets", "update") {
		t.Errorf("the ClusterRole does not allow update on secrets: a password rotation writes them")
	}
	for _, verb := range []string{"patch", "deletecollection"} {
		if allows(role.Rules, "", "secrets", verb) {
			t.Errorf("the ClusterRole allows %s on secrets", verb)
		}
	}
}

func TestLeaderElectionRBAC(t *testing.T) {
	var role rbacv1.Role
	var binding rbacv1.RoleBinding
	readManifest(t, "leader-election.yaml", &role, &binding)
	var dep appsv1.Deployment
	readManifest(t, "deployment.yaml", &dep)

	if role.Namespace != dep.Namespace || binding.Namespace != dep.Namespace {
		t.Errorf("the Lease's Role is in %q, the operator in %q", role.Namespace, dep.Namespace)
	}
	if !allows(role.Rules, "coordination.k8s.io", "leases", "create") {
		t.Error("cannot create the Lease")
	}
	for _, verb := range []string{"get", "update"} {
		ok := false
		for _, r := range role.Rules {
			if slices.Contains(r.Verbs, verb) && slices.Contains(r.Resources, "leases") &&
				slices.Contains(r.ResourceNames, DefaultLeaderElectionID) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("cannot %s the Lease %s", verb, DefaultLeaderElectionID)
		}
	}
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != dep.Spec.Template.Spec.ServiceAccountName {
		t.Errorf("the Role is not bound to the operator's ServiceAccount: %+v", binding)
	}
}

func TestDeployment(t *testing.T) {
	var dep appsv1.Deployment
	readManifest(t, "deployment.yaml", &dep)
	var sa corev1.ServiceAccount
	readManifest(t, "serviceaccount.yaml", &sa)
	var crb rbacv1.ClusterRoleBinding
	readManifest(t, "clusterrolebinding.yaml", &crb)

	spec := dep.Spec.Template.Spec
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", dep.Spec.Replicas)
	}
	if spec.ServiceAccountName != sa.Name || sa.Namespace != dep.Namespace {
		t.Errorf("ServiceAccount %s/%s, the pods use %s", sa.Namespace, sa.Name, spec.ServiceAccountName)
	}
	if crb.Subjects[0].Name != sa.Name || crb.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("the ClusterRoleBinding binds %+v", crb.Subjects)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	if !slices.Contains(c.Args, "operator") || !slices.Contains(c.Args, "--leader-elect=true") {
		t.Errorf("args %v: want the operator with leader election", c.Args)
	}
	podNamespace, memoryLimit := false, false
	for _, e := range c.Env {
		if e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace" {
			podNamespace = true
		}
		// --memory-limit is the container's own (no containerName: this one).
		if e.Name == "PGLOOP_MEMORY_LIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil &&
			e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" && e.ValueFrom.ResourceFieldRef.ContainerName == "" {
			memoryLimit = true
		}
	}
	if !podNamespace {
		t.Error("POD_NAMESPACE is not set from the downward API")
	}
	if !memoryLimit {
		t.Error("PGLOOP_MEMORY_LIMIT is not set from the container's limits.memory")
	}
	port := func(p corev1.ProbeHandler) int32 {
		if p.HTTPGet == nil {
			return 0
		}
		if p.HTTPGet.Port.StrVal == "" {
			return p.HTTPGet.Port.IntVal
		}
		for _, cp := range c.Ports {
			if cp.Name == p.HTTPGet.Port.StrVal {
				return cp.ContainerPort
			}
		}
		return 0
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || port(c.LivenessProbe.ProbeHandler) != 8080 {
		t.Errorf("liveness probe %+v, want /healthz on 8080", c.LivenessProbe)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || port(c.ReadinessProbe.ProbeHandler) != 8080 {
		t.Errorf("readiness probe %+v, want /readyz on 8080", c.ReadinessProbe)
	}
	if DefaultHealthAddr != ":8080" {
		t.Errorf("the probes assume --health-addr :8080, the default is %s", DefaultHealthAddr)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
		if _, ok := c.Resources.Limits[r]; !ok {
			t.Errorf("no %s limit", r)
		}
	}
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no container securityContext")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Error("runAsNonRoot is not set")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("readOnlyRootFilesystem is not set")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation is not false")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
		t.Error("capabilities are not all dropped")
	}
	if psc := spec.SecurityContext; psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("seccomp profile is not RuntimeDefault")
	}
}

// TestKustomization lists every manifest of the directory, and the CRDs.
func TestKustomization(t *testing.T) {
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	readManifest(t, "kustomization.yaml", &k)
	files, err := filepath.Glob(filepath.Join(manifestsDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"../crds"}
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" {
			want = append(want, base)
		}
	}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization resources %v, want %v", got, want)
	}
	// ../crds is a directory: kustomize needs a kustomization there.
	if _, err := os.Stat(filepath.Join(manifestsDir, "../crds/Kustomization")); err != nil {
		t.Errorf("manifests/crds has no Kustomization: %v", err)
	}
}
