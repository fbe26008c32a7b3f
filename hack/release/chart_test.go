package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

const (
	chartDir     = "../../charts/pgloop"
	kustomizeDir = "../../manifests/operator"
	// backupOverlayDir sets the default backup repository through the
	// ConfigMap manifests/operator's Deployment reads.
	backupOverlayDir = "../../manifests/operator-with-backups"
	crdDir           = "../../manifests/crds"
	// namespace is the one manifests/operator installs into.
	namespace = "pgloop-system"
)

// helmLabels are the labels the chart adds to every object's metadata
// beside those of manifests/operator (never to selectors nor to the pod
// template, so an upgrade does not change what the Deployment selects):
// what Helm users expect to find, with the values they expect.
func helmLabels(chartVersion, version string) map[string]string {
	return map[string]string{
		"helm.sh/chart":                "pgloop-" + chartVersion,
		"app.kubernetes.io/managed-by": "Helm",
		"app.kubernetes.io/instance":   "pgloop",
		"app.kubernetes.io/version":    version,
	}
}

// objects decodes a stream of YAML documents into objects keyed by
// apiVersion/kind/namespace/name.
func objects(t *testing.T, stream string) map[string]*unstructured.Unstructured {
	t.Helper()
	out := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(stream), 4096)
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if m == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		key := objectKey(u)
		if _, dup := out[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		out[key] = u
	}
}

func objectKey(u *unstructured.Unstructured) string {
	return strings.Join([]string{u.GetAPIVersion(), u.GetKind(), u.GetNamespace(), u.GetName()}, "/")
}

func kustomizeObjects(t *testing.T) map[string]*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), kustomizeDir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", kustomizeDir, err)
	}
	y, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return objects(t, string(y))
}

// chartObjects renders the chart as version (the repository's own
// Chart.yaml when version is empty) with values.
func chartObjects(t *testing.T, version string, values map[string]any) map[string]*unstructured.Unstructured {
	t.Helper()
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if version != "" {
		if ch, err = loadChart(chartDir, version, time.Unix(0, 0)); err != nil {
			t.Fatal(err)
		}
	}
	manifest, err := renderChart(ch, namespace, values)
	if err != nil {
		t.Fatal(err)
	}
	return objects(t, manifest)
}

// stripHelmLabels checks that every object the chart rendered from its
// templates carries Helm's labels, and removes them. The CRD comes from
// crds/, which Helm does not template: it has none.
func stripHelmLabels(t *testing.T, objs map[string]*unstructured.Unstructured, chartVersion, version string) {
	t.Helper()
	for key, u := range objs {
		if u.GetKind() == "CustomResourceDefinition" {
			continue
		}
		labels := u.GetLabels()
		for k, want := range helmLabels(chartVersion, version) {
			if labels[k] != want {
				t.Errorf("%s: label %s is %q, want %q", key, k, labels[k], want)
			}
			delete(labels, k)
		}
		u.SetLabels(labels)
	}
}

// TestChartMatchesKustomize renders the chart with its default values and
// builds manifests/operator with kustomize, and compares the objects. The
// differences allowed, and why:
//  1. Helm's labels on the chart's objects (helmLabels), which users of a
//     chart expect and kubectl apply -k has no use for.
//  2. The Namespace: a chart does not create its release namespace by
//     default (helm install --create-namespace, or whoever made it, did);
//     with namespace.create it does, the same as manifests/operator's.
//  3. The operator container's envFrom of the ConfigMap
//     pgloop-operator-settings (optional): kustomize's way to set flags
//     without editing the base (manifests/operator-with-backups), where
//     the chart has values.
func TestChartMatchesKustomize(t *testing.T) {
	want := kustomizeObjects(t)
	dropSettingsConfigMap(t, want[deploymentKey], settingsConfigMap)
	nsKey := "v1/Namespace//" + namespace
	if _, ok := want[nsKey]; !ok {
		t.Fatalf("manifests/operator has no %s", nsKey)
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   func() map[string]*unstructured.Unstructured
	}{
		{name: "defaults", want: func() map[string]*unstructured.Unstructured {
			w := maps(want)
			delete(w, nsKey)
			return w
		}},
		{name: "namespace.create", values: map[string]any{"namespace": map[string]any{"create": true}},
			want: func() map[string]*unstructured.Unstructured { return want }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := chartObjects(t, "", tc.values)
			stripHelmLabels(t, got, "0.0.0-dev", "latest")
			w := tc.want()
			if diff := cmp.Diff(keys(w), keys(got)); diff != "" {
				t.Fatalf("objects (-kustomize +chart):\n%s", diff)
			}
			for k := range w {
				if diff := cmp.Diff(w[k].Object, got[k].Object); diff != "" {
					t.Errorf("%s (-kustomize +chart):\n%s", k, diff)
				}
			}
		})
	}
}

const (
	deploymentKey = "apps/v1/Deployment/" + namespace + "/pgloop-operator"
	// settingsConfigMap is the ConfigMap of PGLOOP_<FLAG> variables that
	// manifests/operator's Deployment reads. Not pgloop-operator:
	// kustomize renames every resourceNames entry equal to a generated
	// ConfigMap's name, whatever the resource, and the leader election's
	// Role names the Lease pgloop-operator (TestKustomizeBackupOverlay
	// found it).
	settingsConfigMap = "pgloop-operator-settings"
)

// dropSettingsConfigMap checks that the operator's container of dep reads
// the optional ConfigMap name with envFrom, and nothing else with it, and
// removes that envFrom.
func dropSettingsConfigMap(t *testing.T, dep *unstructured.Unstructured, name string) {
	t.Helper()
	if dep == nil {
		t.Fatal("no Deployment pgloop-operator")
	}
	containers, _, err := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if err != nil || len(containers) != 1 {
		t.Fatalf("containers %v: %v", containers, err)
	}
	c := containers[0].(map[string]any)
	want := []any{map[string]any{"configMapRef": map[string]any{"name": name, "optional": true}}}
	if diff := cmp.Diff(want, c["envFrom"]); diff != "" {
		t.Errorf("the operator's envFrom (-want +got):\n%s", diff)
	}
	delete(c, "envFrom")
	if err := unstructured.SetNestedSlice(dep.Object, containers, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
}

// TestKustomizeBackupOverlay builds manifests/operator-with-backups: the
// objects of manifests/operator, and a ConfigMap of operator.env's
// variables that the Deployment reads by its generated name.
func TestKustomizeBackupOverlay(t *testing.T) {
	base := kustomizeObjects(t)
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), backupOverlayDir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", backupOverlayDir, err)
	}
	y, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	got := objects(t, string(y))
	var cm *unstructured.Unstructured
	for key, u := range got {
		if u.GetKind() == "ConfigMap" {
			if cm != nil {
				t.Fatalf("two ConfigMaps: %s, %s", objectKey(cm), key)
			}
			cm = u
			delete(got, key)
		}
	}
	if cm == nil || cm.GetNamespace() != namespace || !strings.HasPrefix(cm.GetName(), settingsConfigMap+"-") {
		t.Fatalf("the overlay's ConfigMap: %v", cm)
	}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	wantData := map[string]string{
		"PGLOOP_BACKUP_S3_ENDPOINT": "s3.eu-central-1.amazonaws.com",
		"PGLOOP_BACKUP_S3_BUCKET":   "my-backups",
		"PGLOOP_BACKUP_S3_REGION":   "eu-central-1",
		"PGLOOP_BACKUP_S3_SECRET":   "backup-credentials",
	}
	if diff := cmp.Diff(wantData, data); diff != "" {
		t.Errorf("the ConfigMap's data (-want +got):\n%s", diff)
	}
	// The Deployment reads it under its generated name; the rest is the
	// base's.
	dropSettingsConfigMap(t, got[deploymentKey], cm.GetName())
	dropSettingsConfigMap(t, base[deploymentKey], settingsConfigMap)
	if diff := cmp.Diff(keys(base), keys(got)); diff != "" {
		t.Fatalf("objects (-manifests/operator +overlay):\n%s", diff)
	}
	for k := range base {
		if diff := cmp.Diff(base[k].Object, got[k].Object); diff != "" {
			t.Errorf("%s (-manifests/operator +overlay):\n%s", k, diff)
		}
	}
}

func maps(m map[string]*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := make(map[string]*unstructured.Unstructured, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func keys(m map[string]*unstructured.Unstructured) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestChartCRDsAreManifests: crds/ holds the files `make generate` writes
// into manifests/crds, byte for byte.
func TestChartCRDsAreManifests(t *testing.T) {
	want, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if err != nil || len(want) == 0 {
		t.Fatalf("no CRD in %s: %v", crdDir, err)
	}
	got, _ := filepath.Glob(filepath.Join(chartDir, "crds", "*"))
	var gotNames, wantNames []string
	for _, g := range got {
		gotNames = append(gotNames, filepath.Base(g))
	}
	for _, w := range want {
		wantNames = append(wantNames, filepath.Base(w))
		a, _ := os.ReadFile(w)
		b, err := os.ReadFile(filepath.Join(chartDir, "crds", filepath.Base(w)))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("charts/pgloop/crds/%s differs from %s (%v): cp %s charts/pgloop/crds/", filepath.Base(w), w, err, w)
		}
	}
	if diff := cmp.Diff(wantNames, gotNames); diff != "" {
		t.Errorf("files of charts/pgloop/crds (-manifests/crds +chart):\n%s", diff)
	}
}

// TestChartLint runs helm lint's checks (with --strict's severity: a
// warning fails) on the chart, with its defaults and with values that set
// everything the chart templates.
func TestChartLint(t *testing.T) {
	for name, values := range map[string]map[string]any{"defaults": nil, "everything": everything()} {
		t.Run(name, func(t *testing.T) {
			res := lint.RunAll(chartDir, values, namespace)
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("lint: %s", m)
				} else {
					t.Logf("lint: %s", m)
				}
			}
		})
	}
}

// everything sets each value of the chart away from its default: a new
// map each time, as rendering may write into the values it is given.
func everything() map[string]any {
	return map[string]any{
		"image":            map[string]any{"repository": "registry.example.com/pgloop", "tag": "v9.9.9", "pullPolicy": "Always"},
		"imagePullSecrets": []any{map[string]any{"name": "pull"}},
		"replicaCount":     3,
		"leaderElect":      true,
		"watchNamespaces":  []any{"team-a", "team-b"},
		"logLevel":         "debug",
		"logFormat":        "text",
		"extraArgs":        []any{"--workers=32", "--spilo-image=spilo:x y"},
		"extraEnv":         []any{map[string]any{"name": "PGLOOP_RESYNC_PERIOD", "value": "5m"}},
		"resources":        map[string]any{"requests": map[string]any{"cpu": "200m", "memory": "256Mi"}, "limits": map[string]any{"memory": "2Gi"}},
		"serviceAccount":   map[string]any{"create": false, "name": "mine"},
		"namespace":        map[string]any{"create": true},
		"podAnnotations":   map[string]any{"example.com/a": "b"},
		"podLabels":        map[string]any{"team": "db"},
		"nodeSelector":     map[string]any{"kubernetes.io/os": "linux"},
		"tolerations":      []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}},
		"affinity": map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
			"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "db", "operator": "Exists"}}}}}}},
		"priorityClassName": "high",
		"backup":            backupValues(),
	}
}

// backupValues sets every value of backup:, as a values file would (its
// numbers are float64 to Helm).
func backupValues() map[string]any {
	return map[string]any{
		"endpoint":        "s3.eu-central-1.amazonaws.com",
		"bucket":          "my-backups",
		"region":          "eu-central-1",
		"secretName":      "backup-credentials",
		"caKey":           "ca.crt",
		"archiveTimeout":  "5m",
		"schedule":        "0 3 * * *",
		"scheduleSpread":  "30m",
		"retentionFull":   float64(3),
		"verify":          false,
		"timeout":         "2h",
		"archivingImages": []any{"registry.example.com/spilo:1", "registry.example.com/spilo:2"},
	}
}

// backupArgs are the flags backupValues give, in the chart's order.
var backupArgs = []any{"--backup-s3-endpoint=s3.eu-central-1.amazonaws.com", "--backup-s3-bucket=my-backups",
	"--backup-s3-region=eu-central-1", "--backup-s3-secret=backup-credentials", "--backup-s3-ca-key=ca.crt",
	"--archive-timeout=5m", "--backup-schedule=0 3 * * *", "--backup-schedule-spread=30m", "--backup-timeout=2h",
	"--backup-retention-full=3", "--backup-verify=false",
	"--archiving-images=registry.example.com/spilo:1,registry.example.com/spilo:2"}

// operatorArgs renders the chart with values and returns the args of the
// operator's container.
func operatorArgs(t *testing.T, values map[string]any) []any {
	t.Helper()
	dep, ok := chartObjects(t, "", values)["apps/v1/Deployment/"+namespace+"/pgloop-operator"]
	if !ok {
		t.Fatal("no Deployment rendered")
	}
	containers, _, err := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if err != nil || len(containers) != 1 {
		t.Fatalf("containers %v: %v", containers, err)
	}
	args, _ := containers[0].(map[string]any)["args"].([]any)
	return args
}

// TestChartBackupValues: the backup values become exactly their flags,
// each only when set; with the defaults, or values left empty or null,
// none.
func TestChartBackupValues(t *testing.T) {
	defaults := []any{"operator", "--leader-elect=true", "--log-format=json"}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   []any
	}{
		{name: "defaults", want: defaults},
		{name: "empty and null", values: map[string]any{"backup": map[string]any{"endpoint": "", "bucket": "",
			"retentionFull": nil, "verify": nil, "archivingImages": []any{}}}, want: defaults},
		{name: "everything", values: map[string]any{"backup": backupValues()}, want: append(slices.Clone(defaults), backupArgs...)},
		{name: "a bucket only", values: map[string]any{"backup": map[string]any{"bucket": "b"}},
			want: append(slices.Clone(defaults), "--backup-s3-bucket=b")},
		// 0 and true are values, not "unset": written as given.
		{name: "zero and true", values: map[string]any{"backup": map[string]any{"retentionFull": 0, "verify": true}},
			want: append(slices.Clone(defaults), "--backup-retention-full=0", "--backup-verify=true")},
		{name: "before extraArgs", values: map[string]any{"backup": map[string]any{"bucket": "b"}, "extraArgs": []any{"--backup-s3-bucket=c"}},
			want: append(slices.Clone(defaults), "--backup-s3-bucket=b", "--backup-s3-bucket=c")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, operatorArgs(t, tc.values)); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
		})
	}
}

// TestChartBackupValuesFile: a values file as a user writes it (YAML, so
// Helm's own decoding of numbers and booleans) gives the same flags.
func TestChartBackupValuesFile(t *testing.T) {
	values, err := common.ReadValues([]byte(`backup:
  endpoint: s3.eu-central-1.amazonaws.com
  bucket: my-backups
  region: eu-central-1
  secretName: backup-credentials
  caKey: ca.crt
  archiveTimeout: 5m
  schedule: "0 3 * * *"
  scheduleSpread: 30m
  retentionFull: 3
  verify: false
  timeout: 2h
  archivingImages: [registry.example.com/spilo:1, registry.example.com/spilo:2]
`))
	if err != nil {
		t.Fatal(err)
	}
	want := append([]any{"operator", "--leader-elect=true", "--log-format=json"}, backupArgs...)
	if diff := cmp.Diff(want, operatorArgs(t, values.AsMap())); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
}

// TestChartValues renders the chart with every value set and checks each
// one where it belongs.
func TestChartValues(t *testing.T) {
	everything := everything()
	objs := chartObjects(t, "v9.9.9", everything)
	get := func(key string) *unstructured.Unstructured {
		t.Helper()
		u, ok := objs[key]
		if !ok {
			t.Fatalf("no %s among %v", key, keys(objs))
		}
		return u
	}
	field := func(u *unstructured.Unstructured, path ...string) any {
		t.Helper()
		v, ok, err := unstructured.NestedFieldNoCopy(u.Object, path...)
		if err != nil || !ok {
			t.Fatalf("%s: no %s (%v)", objectKey(u), strings.Join(path, "."), err)
		}
		return v
	}
	check := func(what string, got, want any) {
		t.Helper()
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", what, diff)
		}
	}
	stripHelmLabels(t, objs, "9.9.9", "v9.9.9")

	dep := get("apps/v1/Deployment/" + namespace + "/pgloop-operator")
	pod := []string{"spec", "template", "spec"}
	containers := field(dep, append(pod, "containers")...).([]any)
	c := containers[0].(map[string]any)
	check("replicas", field(dep, "spec", "replicas"), float64(3))
	check("image", c["image"], "registry.example.com/pgloop:v9.9.9")
	check("imagePullPolicy", c["imagePullPolicy"], "Always")
	check("args", c["args"], slices.Concat([]any{"operator", "--leader-elect=true", "--log-format=text", "--log-level=debug",
		"--namespace=team-a,team-b"}, backupArgs, []any{"--workers=32", "--spilo-image=spilo:x y"}))
	check("env", c["env"], []any{
		map[string]any{"name": "POD_NAMESPACE", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.namespace"}}},
		map[string]any{"name": "PGLOOP_MEMORY_LIMIT", "valueFrom": map[string]any{"resourceFieldRef": map[string]any{"resource": "limits.memory"}}},
		map[string]any{"name": "PGLOOP_RESYNC_PERIOD", "value": "5m"},
	})
	// Helm merges maps of values with the defaults: the limit on CPU stays
	// (values.yaml says how to drop it).
	check("resources", c["resources"], map[string]any{"requests": map[string]any{"cpu": "200m", "memory": "256Mi"},
		"limits": map[string]any{"cpu": "1", "memory": "2Gi"}})
	check("serviceAccountName", field(dep, append(pod, "serviceAccountName")...), "mine")
	check("imagePullSecrets", field(dep, append(pod, "imagePullSecrets")...), everything["imagePullSecrets"])
	check("priorityClassName", field(dep, append(pod, "priorityClassName")...), "high")
	check("nodeSelector", field(dep, append(pod, "nodeSelector")...), everything["nodeSelector"])
	check("tolerations", field(dep, append(pod, "tolerations")...), everything["tolerations"])
	check("affinity", field(dep, append(pod, "affinity")...), everything["affinity"])
	check("pod annotations", field(dep, "spec", "template", "metadata", "annotations"), map[string]any{
		"prometheus.io/scrape": "true", "prometheus.io/port": "8080", "prometheus.io/path": "/metrics", "example.com/a": "b"})
	check("pod labels", field(dep, "spec", "template", "metadata", "labels"), map[string]any{
		"app.kubernetes.io/name": "pgloop", "app.kubernetes.io/component": "operator", "team": "db"})
	check("selector", field(dep, "spec", "selector"), map[string]any{"matchLabels": map[string]any{
		"app.kubernetes.io/name": "pgloop", "app.kubernetes.io/component": "operator"}})

	// serviceAccount.create false: the bindings name the existing one.
	if _, ok := objs["v1/ServiceAccount/"+namespace+"/mine"]; ok {
		t.Error("serviceAccount.create false rendered a ServiceAccount")
	}
	subject := []any{map[string]any{"kind": "ServiceAccount", "name": "mine", "namespace": namespace}}
	check("leader election subjects", field(get("rbac.authorization.k8s.io/v1/RoleBinding/"+namespace+"/pgloop-leader-election"), "subjects"), subject)

	// watchNamespaces: the ClusterRole bound in each namespace, not
	// cluster-wide; the cluster-scoped resources it names granted apart.
	if _, ok := objs["rbac.authorization.k8s.io/v1/ClusterRoleBinding//pgloop-operator"]; ok {
		t.Error("watchNamespaces set, but the ClusterRoleBinding pgloop-operator is rendered")
	}
	for _, ns := range []string{"team-a", "team-b"} {
		rb := get("rbac.authorization.k8s.io/v1/RoleBinding/" + ns + "/pgloop-operator")
		check(ns+" roleRef", field(rb, "roleRef"), map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "pgloop-operator"})
		check(ns+" subjects", field(rb, "subjects"), subject)
	}
	crb := get("rbac.authorization.k8s.io/v1/ClusterRoleBinding//pgloop-operator-cluster")
	check("cluster roleRef", field(crb, "roleRef"), map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "pgloop-operator-cluster"})
	check("cluster subjects", field(crb, "subjects"), subject)
	clusterRules := field(get("rbac.authorization.k8s.io/v1/ClusterRole//pgloop-operator-cluster"), "rules").([]any)
	for _, r := range field(get("rbac.authorization.k8s.io/v1/ClusterRole//pgloop-operator"), "rules").([]any) {
		rule := r.(map[string]any)
		for _, res := range rule["resources"].([]any) {
			if clusterScoped[res.(string)] && !slices.ContainsFunc(clusterRules, func(c any) bool { return cmp.Equal(c, rule) }) {
				t.Errorf("rule %v names the cluster-scoped %s, which a RoleBinding does not grant, and pgloop-operator-cluster lacks it", rule, res)
			}
		}
	}
	ns := get("v1/Namespace//" + namespace)
	check("namespace labels", ns.GetLabels(), map[string]string{"app.kubernetes.io/name": "pgloop",
		"app.kubernetes.io/component": "operator", "pod-security.kubernetes.io/enforce": "restricted"})
}

// clusterScoped are the cluster-scoped resources of the built-in API
// groups a rule might name.
var clusterScoped = map[string]bool{
	"namespaces": true, "nodes": true, "persistentvolumes": true, "storageclasses": true, "csidrivers": true,
	"csinodes": true, "volumeattachments": true, "clusterroles": true, "clusterrolebindings": true,
	"customresourcedefinitions": true, "priorityclasses": true, "ingressclasses": true, "runtimeclasses": true,
	"mutatingwebhookconfigurations": true, "validatingwebhookconfigurations": true, "apiservices": true,
	"certificatesigningrequests": true, "tokenreviews": true, "subjectaccessreviews": true, "selfsubjectaccessreviews": true,
}

// TestChartPackage packages the chart as a release would and loads the
// package back: the version is stamped, the image is the release's, and
// the same input makes the same bytes.
func TestChartPackage(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var sums [2][]byte
	for i := range sums {
		path, err := packageChart(chartDir, "v1.2.3", t.TempDir(), at)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(path) != "pgloop-1.2.3.tgz" {
			t.Errorf("package %s, want pgloop-1.2.3.tgz", path)
		}
		if sums[i], err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
		ch, err := loader.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if ch.Metadata.Version != "1.2.3" || ch.Metadata.AppVersion != "v1.2.3" {
			t.Errorf("packaged version %s, appVersion %s", ch.Metadata.Version, ch.Metadata.AppVersion)
		}
		if len(ch.CRDObjects()) != 1 {
			t.Errorf("packaged chart has %d CRDs, want 1", len(ch.CRDObjects()))
		}
		manifest, err := renderChart(ch, namespace, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(manifest, `image: "ghcr.io/pgloop/pgloop:v1.2.3"`) {
			t.Errorf("packaged chart does not run the release's image:\n%s", manifest)
		}
	}
	if !bytes.Equal(sums[0], sums[1]) {
		t.Error("two packages of the same chart differ")
	}
	if _, err := packageChart(chartDir, "not a version", t.TempDir(), at); err == nil {
		t.Error("packaged a chart of version \"not a version\"")
	}
}

// TestChartResourcesNull: null drops a default of a merged map, as
// values.yaml tells.
func TestChartResourcesNull(t *testing.T) {
	objs := chartObjects(t, "", map[string]any{"resources": map[string]any{"limits": map[string]any{"cpu": nil}}})
	dep := objs[deploymentKey]
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	got := containers[0].(map[string]any)["resources"]
	want := map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "128Mi"}, "limits": map[string]any{"memory": "1Gi"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
}
