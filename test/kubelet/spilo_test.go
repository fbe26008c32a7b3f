package kubelet

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// The golden files take -update; another test file of the package may
// define the flag first (package variables initialise before init).
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite the golden files under testdata/")
	}
}

func updateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// fakeEnvLookup serves Secrets and ConfigMaps from maps keyed
// "namespace/name"; err, when set, is every call's answer.
type fakeEnvLookup struct {
	secrets, configMaps map[string]map[string]string
	err                 error
}

func (f fakeEnvLookup) SecretKey(namespace, name, key string) (string, bool, error) {
	return f.key(f.secrets, namespace, name, key)
}

func (f fakeEnvLookup) ConfigMapKey(namespace, name, key string) (string, bool, error) {
	return f.key(f.configMaps, namespace, name, key)
}

func (f fakeEnvLookup) key(objs map[string]map[string]string, namespace, name, key string) (string, bool, error) {
	if f.err != nil {
		return "", false, f.err
	}
	v, ok := objs[namespace+"/"+name][key]
	return v, ok, nil
}

// fakeEnvDataLookup also lists keys, for envFrom.
type fakeEnvDataLookup struct{ fakeEnvLookup }

func (f fakeEnvDataLookup) SecretData(namespace, name string) (map[string]string, bool, error) {
	d, ok := f.secrets[namespace+"/"+name]
	return d, ok, f.err
}

func (f fakeEnvDataLookup) ConfigMapData(namespace, name string) (map[string]string, bool, error) {
	d, ok := f.configMaps[namespace+"/"+name]
	return d, ok, f.err
}

func TestResolveEnv(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "p-0", Namespace: "db", UID: "uid-1",
			Labels:      map[string]string{"app": "x"},
			Annotations: map[string]string{"note": "y"},
		},
		Spec: corev1.PodSpec{
			NodeName: "node-a", ServiceAccountName: "sa",
			Containers: []corev1.Container{
				{Name: "main", Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
				}},
				{Name: "side", Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
				}},
			},
		},
		Status: corev1.PodStatus{HostIP: "10.0.0.1", HostIPs: []corev1.HostIP{{IP: "10.0.0.1"}, {IP: "fd00::1"}}},
	}
	lookup := fakeEnvLookup{
		secrets:    map[string]map[string]string{"db/s": {"password": "secret", "A": "from-secret"}},
		configMaps: map[string]map[string]string{"db/cm": {"level": "debug", "A": "from-cm", "B": "b", "bad=key": "x"}},
	}
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}
	}
	res := func(container, name, divisor string) *corev1.EnvVarSource {
		r := &corev1.ResourceFieldSelector{ContainerName: container, Resource: name}
		if divisor != "" {
			r.Divisor = resource.MustParse(divisor)
		}
		return &corev1.EnvVarSource{ResourceFieldRef: r}
	}
	secret := func(name, key string, optional bool) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: ptr.To(optional)}}
	}
	configMap := func(name, key string, optional bool) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: ptr.To(optional)}}
	}

	tests := []struct {
		name    string
		env     []corev1.EnvVar
		envFrom []corev1.EnvFromSource
		lookup  Lookup
		want    map[string]string
		wantErr string
	}{
		{
			name: "values and $(VAR) expansion of earlier variables only",
			env: []corev1.EnvVar{
				{Name: "A", Value: "a"},
				{Name: "EMPTY"},
				{Name: "B", Value: "$(A)-$(C)-$(MISSING)"},
				{Name: "C", Value: "c"},
				{Name: "D", Value: "$$(A) $$ $x $( $(A"},
				{Name: "E", Value: "$(A)$(A)$"},
				{Name: "A", Value: "again-$(A)"},
			},
			want: map[string]string{
				"A": "again-a", "EMPTY": "", "B": "a-$(C)-$(MISSING)", "C": "c",
				"D": "$(A) $ $x $( $(A", "E": "aa$",
			},
		},
		{
			name: "fieldRef",
			env: []corev1.EnvVar{
				{Name: "NAME", ValueFrom: field("metadata.name")},
				{Name: "NS", ValueFrom: field("metadata.namespace")},
				{Name: "UID", ValueFrom: field("metadata.uid")},
				{Name: "LABEL", ValueFrom: field("metadata.labels['app']")},
				{Name: "NOLABEL", ValueFrom: field("metadata.labels['nope']")},
				{Name: "ANNOTATION", ValueFrom: field("metadata.annotations['note']")},
				{Name: "NODE", ValueFrom: field("spec.nodeName")},
				{Name: "SA", ValueFrom: field("spec.serviceAccountName")},
				{Name: "IP", ValueFrom: field("status.podIP")},
				{Name: "IPS", ValueFrom: field("status.podIPs")},
				{Name: "HOST", ValueFrom: field("status.hostIP")},
				{Name: "HOSTS", ValueFrom: field("status.hostIPs")},
				{Name: "URL", Value: "http://$(IP):8008"},
			},
			want: map[string]string{
				"NAME": "p-0", "NS": "db", "UID": "uid-1", "LABEL": "x", "NOLABEL": "", "ANNOTATION": "y",
				"NODE": "node-a", "SA": "sa", "IP": "127.1.0.9", "IPS": "127.1.0.9",
				"HOST": "10.0.0.1", "HOSTS": "10.0.0.1,fd00::1", "URL": "http://127.1.0.9:8008",
			},
		},
		{
			name:    "fieldRef not allowed in env",
			env:     []corev1.EnvVar{{Name: "L", ValueFrom: field("metadata.labels")}},
			wantErr: "env L: fieldRef metadata.labels: not a field",
		},
		{
			name:    "fieldRef of another apiVersion",
			env:     []corev1.EnvVar{{Name: "N", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v2", FieldPath: "metadata.name"}}}},
			wantErr: `unsupported apiVersion "v2"`,
		},
		{
			name: "resourceFieldRef with divisors, rounded up",
			env: []corev1.EnvVar{
				{Name: "CPU", ValueFrom: res("", "limits.cpu", "")},
				{Name: "CPU_M", ValueFrom: res("main", "limits.cpu", "1m")},
				{Name: "REQ_CPU", ValueFrom: res("", "requests.cpu", "")},
				{Name: "REQ_MEM", ValueFrom: res("", "requests.memory", "")},
				{Name: "MEM_MI", ValueFrom: res("", "limits.memory", "1Mi")},
				{Name: "MEM", ValueFrom: res("", "limits.memory", "")},
				{Name: "SIDE_MEM_GI", ValueFrom: res("side", "limits.memory", "1Gi")},
			},
			want: map[string]string{
				"CPU": "2", "CPU_M": "1500", "REQ_CPU": "1", "REQ_MEM": "0", "MEM_MI": "512",
				"MEM": "536870912", "SIDE_MEM_GI": "1",
			},
		},
		{
			name:    "resourceFieldRef of a limit the container does not set",
			env:     []corev1.EnvVar{{Name: "X", ValueFrom: res("side", "limits.cpu", "")}},
			wantErr: "env X: resourceFieldRef limits.cpu: container side sets no such limit",
		},
		{
			name:    "resourceFieldRef of an unknown container",
			env:     []corev1.EnvVar{{Name: "X", ValueFrom: res("nope", "limits.cpu", "")}},
			wantErr: `no container "nope"`,
		},
		{
			name: "secretKeyRef and configMapKeyRef, optional ones missing",
			env: []corev1.EnvVar{
				{Name: "PW", ValueFrom: secret("s", "password", false)},
				{Name: "LEVEL", ValueFrom: configMap("cm", "level", false)},
				{Name: "OPT_KEY", ValueFrom: secret("s", "nope", true)},
				{Name: "OPT_OBJ", ValueFrom: configMap("nope", "level", true)},
				{Name: "DSN", Value: "user:$(PW)@$(OPT_KEY)"},
			},
			want: map[string]string{"PW": "secret", "LEVEL": "debug", "DSN": "user:secret@$(OPT_KEY)"},
		},
		{
			name:    "missing secret key",
			env:     []corev1.EnvVar{{Name: "PW", ValueFrom: secret("s", "nope", false)}},
			wantErr: "env PW: secret db/s has no key nope",
		},
		{
			name:    "missing configmap",
			env:     []corev1.EnvVar{{Name: "LEVEL", ValueFrom: configMap("gone", "level", false)}},
			wantErr: "env LEVEL: configmap db/gone has no key level",
		},
		{
			name:    "lookup error",
			env:     []corev1.EnvVar{{Name: "PW", ValueFrom: secret("s", "password", true)}},
			lookup:  fakeEnvLookup{err: errors.New("cache not synced")},
			wantErr: "env PW: secret db/s key password: cache not synced",
		},
		{
			name: "envFrom with prefix; later sources and env win; invalid names skipped",
			envFrom: []corev1.EnvFromSource{
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}},
				{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}},
				{Prefix: "CM_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}},
				{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}, Optional: ptr.To(true)}},
			},
			env:    []corev1.EnvVar{{Name: "B", Value: "env-$(A)"}},
			lookup: fakeEnvDataLookup{lookup},
			want: map[string]string{
				"level": "debug", "A": "from-secret", "B": "env-from-secret", "password": "secret",
				"CM_level": "debug", "CM_A": "from-cm", "CM_B": "b",
			},
		},
		{
			name: "envFrom of a missing object",
			envFrom: []corev1.EnvFromSource{
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}}},
			},
			lookup:  fakeEnvDataLookup{lookup},
			wantErr: "envFrom configmap db/nope: not found",
		},
		{
			name: "envFrom needs a DataLookup",
			envFrom: []corev1.EnvFromSource{
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}},
			},
			wantErr: "envFrom, which needs a Lookup that lists an object's keys",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := pod.Spec.Containers[0].DeepCopy()
			c.Env, c.EnvFrom = tc.env, tc.envFrom
			l := tc.lookup
			if l == nil {
				l = lookup
			}
			got, err := ResolveEnv(pod, c, "127.1.0.9", l)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("got  %v\nwant %v", got, tc.want)
			}
		})
	}
}

// Test fixtures of a pod pgloop created, as the process kubelet sees it.
const (
	testPodIP       = "127.1.254.2"
	testSuPassword  = "su-secret"
	testReplPasswd  = "repl-secret"
	testDataVolume  = "/var/lib/pgk/pv/pv-0001"
	testShmVolume   = "/var/lib/pgk/pods/uid-0001/volumes/dshm"
	testSocketDir   = "/tmp/pgk-0001"
	testKubeconfig  = "/var/lib/pgk/pods/uid-0001/kubeconfig"
	testKubeContext = "pgloop-pod"
	testBinDir      = "/usr/lib/postgresql/15/bin"
)

// loadSpiloSample reads manifests/samples/<name>.yaml as a cluster in
// namespace db, on the PostgreSQL version installed here.
func loadSpiloSample(t *testing.T, name string) *v1.Postgresql {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "manifests", "samples", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pg := &v1.Postgresql{}
	if err := yaml.NewYAMLOrJSONDecoder(f, 4096).Decode(pg); err != nil {
		t.Fatalf("decode sample %s: %v", name, err)
	}
	pg.Namespace = "db"
	pg.UID = "cluster-uid"
	pg.Spec.PostgreSQL.Version = "15"
	if errs := pg.Validate(); len(errs) > 0 {
		t.Fatalf("sample %s is invalid: %v", name, errs.ToAggregate())
	}
	return pg
}

// operatorPod returns pod 0 of the StatefulSet pgloop builds for pg, as the
// StatefulSet controller creates it, and a Lookup holding its Secrets.
func operatorPod(pg *v1.Postgresql) (*corev1.Pod, Lookup) {
	sts := cluster.StatefulSet(pg, cluster.Options{})
	tmpl := sts.Spec.Template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        sts.Name + "-0",
			Namespace:   sts.Namespace,
			UID:         "uid-0001",
			Labels:      tmpl.Labels,
			Annotations: tmpl.Annotations,
		},
		Spec: tmpl.Spec,
	}
	pod.Spec.Hostname = pod.Name
	pod.Spec.Subdomain = sts.Spec.ServiceName
	pod.Spec.NodeName = "pgk-0"
	lookup := fakeEnvLookup{secrets: map[string]map[string]string{
		pg.Namespace + "/" + cluster.SecretName(cluster.SuperuserName, pg.Name):       {cluster.SecretPasswordKey: testSuPassword},
		pg.Namespace + "/" + cluster.SecretName(cluster.ReplicationUserName, pg.Name): {cluster.SecretPasswordKey: testReplPasswd},
	}}
	return pod, lookup
}

func testHost() Host {
	return Host{
		PodIP:       testPodIP,
		Mounts:      map[string]string{cluster.DataMountPath: testDataVolume, "/dev/shm": testShmVolume},
		SocketDir:   testSocketDir,
		BinDir:      testBinDir,
		Kubeconfig:  testKubeconfig,
		KubeContext: testKubeContext,
	}
}

// operatorEnv resolves the Spilo container's environment of pg's pod 0.
func operatorEnv(t *testing.T, pg *v1.Postgresql) (*corev1.Pod, map[string]string) {
	t.Helper()
	pod, lookup := operatorPod(pg)
	env, err := ResolveEnv(pod, &pod.Spec.Containers[0], testPodIP, lookup)
	if err != nil {
		t.Fatal(err)
	}
	return pod, env
}

// withoutLocale makes the host lack every locale but C.UTF-8 for the test,
// so the output does not depend on the machine's locales.
func withoutLocale(t *testing.T, have bool) {
	saved := installedLocale
	installedLocale = func(name string) bool { return have || normalizeLocale(name) == "c.utf8" }
	t.Cleanup(func() { installedLocale = saved })
}

func requireBinDir(t *testing.T) {
	t.Helper()
	requireInstalled(t, filepath.Join(testBinDir, "postgres"))
}

func TestResolveEnvOperatorPod(t *testing.T) {
	pg := loadSpiloSample(t, "minimal")
	pod, env := operatorEnv(t, pg)
	want := map[string]string{
		"SCOPE":                         pg.Name,
		"PGROOT":                        cluster.PGRoot,
		"POD_IP":                        testPodIP,
		"POD_NAMESPACE":                 "db",
		"PGUSER_SUPERUSER":              "postgres",
		"PGPASSWORD_SUPERUSER":          testSuPassword,
		"PGUSER_STANDBY":                "standby",
		"PGPASSWORD_STANDBY":            testReplPasswd,
		"PGVERSION":                     "15",
		"DCS_ENABLE_KUBERNETES_API":     "true",
		"KUBERNETES_SCOPE_LABEL":        "cluster-name",
		"KUBERNETES_ROLE_LABEL":         "spilo-role",
		"KUBERNETES_LEADER_LABEL_VALUE": "master",
		"KUBERNETES_LABELS":             `{"application":"spilo"}`,
		"KUBERNETES_USE_CONFIGMAPS":     "true",
		"SPILO_CONFIGURATION":           cluster.SpiloConfiguration(pg),
	}
	if !maps.Equal(env, want) {
		t.Errorf("env of %s:\ngot  %v\nwant %v", pod.Name, env, want)
	}
}

// TestPatroniConfigGolden renders the Patroni configuration of pod 0 of
// each sample cluster and compares it with testdata/spilo/<sample>.json. A
// change to the pod spec pgloop generates shows here. Run
// `go test ./kubelet -run TestPatroniConfigGolden -update` after an intended
// change and review the diff.
func TestPatroniConfigGolden(t *testing.T) {
	requireBinDir(t)
	withoutLocale(t, false)
	for _, name := range []string{"minimal", "full"} {
		t.Run(name, func(t *testing.T) {
			pod, env := operatorEnv(t, loadSpiloSample(t, name))
			got, extraEnv, err := PatroniConfig(pod, env, testHost())
			if err != nil {
				t.Fatal(err)
			}
			wantEnv := []string{"KUBECONFIG=" + testKubeconfig, "PATRONI_KUBERNETES_CONTEXT=" + testKubeContext}
			if !reflect.DeepEqual(extraEnv, wantEnv) {
				t.Errorf("extra env %v, want %v", extraEnv, wantEnv)
			}
			path := filepath.Join("testdata", "spilo", name+".json")
			if updateGolden() {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test ./kubelet -run TestPatroniConfigGolden -update creates it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs (go test ./kubelet -run TestPatroniConfigGolden -update rewrites it)\ngot:\n%s", path, got)
			}
		})
	}
}

// TestPatroniConfigSanity checks what must hold on this machine whatever
// the cluster: only the pod IP is bound, every path is a host path, and no
// Spilo image script is referenced.
func TestPatroniConfigSanity(t *testing.T) {
	requireBinDir(t)
	for _, name := range []string{"minimal", "full"} {
		t.Run(name, func(t *testing.T) {
			pod, env := operatorEnv(t, loadSpiloSample(t, name))
			out, _, err := PatroniConfig(pod, env, testHost())
			if err != nil {
				t.Fatal(err)
			}
			var cfg map[string]any
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatalf("not JSON: %v", err)
			}
			for _, bad := range []string{"0.0.0.0", `"*:`, `":80`, "/scripts/", "/run/certs", "/home/postgres", `"/run/postgresql`} {
				if bytes.Contains(out, []byte(bad)) {
					t.Errorf("config contains %s", bad)
				}
			}
			for _, c := range []struct {
				path []string
				want any
			}{
				{[]string{"name"}, pod.Name},
				{[]string{"namespace"}, "db"},
				{[]string{"restapi", "listen"}, testPodIP + ":8008"},
				{[]string{"restapi", "connect_address"}, testPodIP + ":8008"},
				{[]string{"postgresql", "listen"}, testPodIP + ":5432"},
				{[]string{"postgresql", "connect_address"}, testPodIP + ":5432"},
				{[]string{"postgresql", "data_dir"}, testDataVolume + "/pgroot/pgdata"},
				{[]string{"postgresql", "bin_dir"}, testBinDir},
				{[]string{"postgresql", "pgpass"}, testSocketDir + "/pgpass"},
				{[]string{"postgresql", "parameters", "unix_socket_directories"}, testSocketDir},
				{[]string{"postgresql", "authentication", "superuser", "password"}, testSuPassword},
				{[]string{"postgresql", "authentication", "replication", "password"}, testReplPasswd},
				{[]string{"kubernetes", "use_endpoints"}, false},
			} {
				if got := sectionValue(cfg, c.path...); got != c.want {
					t.Errorf("%s = %v, want %v", strings.Join(c.path, "."), got, c.want)
				}
			}
		})
	}
}

// TestPatroniConfigValidates runs Patroni's own validator on the
// configuration of the sample clusters.
func TestPatroniConfigValidates(t *testing.T) {
	requireBinDir(t)
	const python, patroni = "/usr/bin/python3", "/usr/bin/patroni"
	requireInstalled(t, python, patroni)
	for _, name := range []string{"minimal", "full", "clone"} {
		t.Run(name, func(t *testing.T) {
			var pg *v1.Postgresql
			if name == "clone" {
				// The minimal sample as a clone to a time: Patroni's
				// custom bootstrap method.
				pg = loadSpiloSample(t, "minimal")
				pg.Spec.DockerImage = cluster.DefaultArchivingImage
				pg.Spec.Backup = &v1.Backup{S3: &v1.BackupS3{Endpoint: "127.0.0.1:8333", Bucket: "pgloop", SecretName: "s3"}}
				pg.Spec.Clone = &v1.CloneSpec{Cluster: "src", UID: "uid", Timestamp: "2017-12-19T12:40:33+01:00"}
			} else {
				pg = loadSpiloSample(t, name)
			}
			pod, lookup := operatorPod(pg)
			lookup.(fakeEnvLookup).secrets[pg.Namespace+"/s3"] = map[string]string{
				v1.BackupAccessKeyIDKey: "key", v1.BackupSecretAccessKeyKey: "secret"}
			env, err := ResolveEnv(pod, &pod.Spec.Containers[0], testPodIP, lookup)
			if err != nil {
				t.Fatal(err)
			}
			h := testHost()
			dir := t.TempDir()
			h.Mounts[cluster.DataMountPath] = filepath.Join(dir, "pgdata")
			out, _, err := PatroniConfig(pod, env, h)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, "patroni.yml")
			if err := os.WriteFile(file, out, 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(python, patroni, "--validate-config", file)
			// Patroni reads PATRONI_* from its environment: keep it clean.
			cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
			res, err := cmd.CombinedOutput()
			if err != nil || len(bytes.TrimSpace(res)) > 0 {
				t.Errorf("patroni --validate-config: %v\n%s\nconfig:\n%s", err, res, out)
			}
		})
	}
}

func TestPatroniConfigCases(t *testing.T) {
	requireBinDir(t)
	pg := loadSpiloSample(t, "minimal")
	pod, baseEnv := operatorEnv(t, pg)

	oldData := t.TempDir()
	writeVersion := func(dir, v string) {
		if err := os.MkdirAll(filepath.Join(dir, "pgroot", "pgdata"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "pgroot", "pgdata", "PG_VERSION"), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeVersion(oldData, "14")
	sameData := t.TempDir()
	writeVersion(sameData, "15")

	// expect is a path of keys and the wanted value; nil wants the key
	// absent.
	type expect struct {
		path []string
		want any
	}
	p := func(s ...string) []string { return s }
	tests := []struct {
		name    string
		env     map[string]string // set; "" deletes
		host    func(*Host)
		locale  bool
		want    []expect
		wantErr string
	}{
		{
			name: "Spilo's defaults",
			want: []expect{
				{p("bootstrap", "dcs", "ttl"), 30.0},
				{p("bootstrap", "dcs", "postgresql", "use_pg_rewind"), true},
				{p("bootstrap", "dcs", "postgresql", "use_slots"), true},
				{p("bootstrap", "dcs", "postgresql", "parameters", "max_connections"), 100.0},
				{p("bootstrap", "dcs", "postgresql", "parameters", "wal_retrieve_retry_interval"), nil},
				{p("bootstrap", "dcs", "postgresql", "parameters", "ssl"), nil},
				{p("bootstrap", "post_init"), nil},
				{p("bootstrap", "initdb"), []any{map[string]any{"encoding": "UTF8"}, map[string]any{"locale": "C.UTF-8"}, "data-checksums"}},
				{p("postgresql", "parameters", "shared_buffers"), "16MB"},
				{p("postgresql", "parameters", "shared_preload_libraries"), "pg_stat_statements"},
				{p("postgresql", "parameters", "pg_stat_statements.track_utility"), "off"},
				{p("postgresql", "parameters", "bg_mon.listen_address"), nil},
				{p("postgresql", "parameters", "extwlist.extensions"), nil},
				{p("postgresql", "parameters", "ssl"), nil},
				{p("postgresql", "parameters", "ssl_cert_file"), nil},
				{p("postgresql", "callbacks"), nil},
				{p("postgresql", "basebackup_fast_xlog"), nil},
				{p("postgresql", "create_replica_method"), []any{"basebackup"}},
				{p("postgresql", "authentication", "rewind"), map[string]any{"username": "postgres", "password": testSuPassword}},
				{p("postgresql", "pg_hba"), []any{
					"local all all trust",
					"host all all 127.0.0.1/32 md5",
					"host all all ::1/128 md5",
					"local replication standby trust",
					"host replication standby all md5",
					"host all all all md5",
				}},
				{p("kubernetes", "bypass_api_service"), nil},
				{p("kubernetes", "leader_label_value"), nil},
				{p("kubernetes", "pod_ip"), nil},
			},
		},
		{
			name:   "locale installed",
			locale: true,
			want:   []expect{{p("bootstrap", "initdb"), []any{map[string]any{"encoding": "UTF8"}, map[string]any{"locale": "en_US.UTF-8"}, "data-checksums"}}},
		},
		{
			name: "SPILO_CONFIGURATION merges maps and replaces lists and values",
			env: map[string]string{"SPILO_CONFIGURATION": `{
				"bootstrap": {"dcs": {"ttl": 10, "retry_timeout": null, "postgresql": {"parameters": {"wal_retrieve_retry_interval": "1s", "max_connections": "42"}}}},
				"postgresql": {"parameters": {"shared_buffers": "32MB", "ssl": "on", "ssl_cert_file": "/x"},
				  "pg_hba": ["local all all trust", "hostssl replication standby all md5", "hostnossl all all all reject", "hostssl all all all cert", "hostssl  all all 10.0.0.0/8 md5"],
				  "callbacks": {"on_start": "/scripts/x"}}}`},
			want: []expect{
				{p("bootstrap", "dcs", "ttl"), 10.0},
				{p("bootstrap", "dcs", "loop_wait"), 10.0},
				{p("bootstrap", "dcs", "retry_timeout"), 10.0},
				{p("bootstrap", "dcs", "postgresql", "use_slots"), true},
				{p("bootstrap", "dcs", "postgresql", "parameters", "wal_retrieve_retry_interval"), "1s"},
				{p("bootstrap", "dcs", "postgresql", "parameters", "max_connections"), "42"},
				{p("bootstrap", "dcs", "postgresql", "parameters", "max_wal_senders"), 10.0},
				{p("postgresql", "parameters", "shared_buffers"), "32MB"},
				{p("postgresql", "parameters", "log_destination"), "csvlog"},
				{p("postgresql", "parameters", "ssl"), nil},
				{p("postgresql", "parameters", "ssl_cert_file"), nil},
				{p("postgresql", "callbacks"), nil},
				{p("postgresql", "pg_hba"), []any{"local all all trust", "host replication standby all md5", "host  all all 10.0.0.0/8 md5"}},
				{p("bootstrap", "pg_hba"), []any{"local all all trust", "host replication standby all md5", "host  all all 10.0.0.0/8 md5"}},
			},
		},
		{
			name: "a bootstrap.pg_hba without replication gets Spilo's line",
			env:  map[string]string{"SPILO_CONFIGURATION": `{"bootstrap": {"pg_hba": ["hostssl all all all md5"]}}`},
			want: []expect{{p("bootstrap", "pg_hba"), []any{"host replication standby all md5", "host all all all md5"}}},
		},
		{
			name: "the user's libraries, kept when installed",
			env: map[string]string{"SPILO_CONFIGURATION": `{"postgresql": {"parameters": {
				"shared_preload_libraries": "pg_stat_statements, pg_cron,auto_explain,$libdir/passwordcheck",
				"cron.database_name": "app", "auto_explain.log_min_duration": "1s"}}}`},
			want: []expect{
				{p("postgresql", "parameters", "shared_preload_libraries"), "pg_stat_statements,auto_explain,$libdir/passwordcheck"},
				{p("postgresql", "parameters", "cron.database_name"), nil},
				{p("postgresql", "parameters", "auto_explain.log_min_duration"), "1s"},
			},
		},
		{
			name: "listen and paths of SPILO_CONFIGURATION are translated",
			env: map[string]string{"SPILO_CONFIGURATION": `{"restapi": {"listen": "0.0.0.0:8009"},
				"postgresql": {"listen": "*:5433", "parameters": {"log_directory": "/home/postgres/pgdata/logs"}}}`},
			want: []expect{
				{p("restapi", "listen"), testPodIP + ":8009"},
				{p("postgresql", "listen"), testPodIP + ":5433"},
				{p("postgresql", "parameters", "log_directory"), testDataVolume + "/logs"},
			},
		},
		{
			name:    "a data directory on no volume",
			env:     map[string]string{"SPILO_CONFIGURATION": `{"postgresql": {"data_dir": "/var/lib/postgresql/data"}}`},
			wantErr: "postgresql.data_dir: /var/lib/postgresql/data is on no mounted volume",
		},
		{
			name:    "PGVERSION of other binaries",
			env:     map[string]string{"PGVERSION": "17"},
			wantErr: "PGVERSION asks for PostgreSQL 17, but the binaries in /usr/lib/postgresql/15/bin are PostgreSQL 15",
		},
		{
			name:    "a data directory of another version",
			host:    func(h *Host) { h.Mounts[cluster.DataMountPath] = oldData },
			wantErr: "the data directory's PG_VERSION asks for PostgreSQL 14",
		},
		{
			name: "a data directory of this version wins over PGVERSION",
			env:  map[string]string{"PGVERSION": "17"},
			host: func(h *Host) { h.Mounts[cluster.DataMountPath] = sameData },
			want: []expect{{p("postgresql", "data_dir"), sameData + "/pgroot/pgdata"}},
		},
		{
			name:    "SPILO_CONFIGURATION's bin_dir",
			env:     map[string]string{"SPILO_CONFIGURATION": `{"postgresql": {"bin_dir": "/usr/lib/postgresql/16/bin"}}`},
			wantErr: "SPILO_CONFIGURATION's postgresql.bin_dir asks for PostgreSQL 16",
		},
		{
			name: "Endpoints on a routable pod IP",
			env:  map[string]string{"KUBERNETES_USE_CONFIGMAPS": "", "POD_IP": "10.245.0.5"},
			host: func(h *Host) { h.PodIP = "10.245.0.5" },
			want: []expect{
				{p("kubernetes", "use_endpoints"), true},
				{p("kubernetes", "pod_ip"), "10.245.0.5"},
				{p("kubernetes", "ports"), []any{map[string]any{"name": "postgresql", "port": 5432.0}}},
				{p("postgresql", "listen"), "10.245.0.5:5432"},
			},
		},
		{
			name:    "Endpoints on a loopback pod IP",
			env:     map[string]string{"KUBERNETES_USE_CONFIGMAPS": ""},
			wantErr: "which the API server rejects for loopback addresses",
		},
		{
			name: "an admin user and the default namespace",
			env:  map[string]string{"PGPASSWORD_ADMIN": "adm", "POD_NAMESPACE": "default"},
			want: []expect{
				{p("bootstrap", "users"), map[string]any{"admin": map[string]any{"password": "adm", "options": []any{"createrole", "createdb"}}}},
				{p("namespace"), nil},
			},
		},
		{name: "another leader label", env: map[string]string{"KUBERNETES_LEADER_LABEL_VALUE": "primary"}, wantErr: "always labels the leader master"},
		{name: "an unknown KUBERNETES_ variable", env: map[string]string{"KUBERNETES_TMP_ROLE_LABEL": "x"}, wantErr: "KUBERNETES_TMP_ROLE_LABEL"},
		{name: "no Kubernetes store", env: map[string]string{"DCS_ENABLE_KUBERNETES_API": ""}, wantErr: "DCS_ENABLE_KUBERNETES_API is empty"},
		{name: "a clone", env: map[string]string{"CLONE_METHOD": "CLONE_WITH_BASEBACKUP"}, wantErr: "cloning"},
		{name: "a standby cluster", env: map[string]string{"STANDBY_HOST": "elsewhere"}, wantErr: "STANDBY_HOST is set"},
		{name: "POD_IP of another pod", env: map[string]string{"POD_IP": "127.1.254.3"}, wantErr: "POD_IP=127.1.254.3 differs"},
		{name: "labels that are not JSON", env: map[string]string{"KUBERNETES_LABELS": "application=spilo"}, wantErr: "KUBERNETES_LABELS"},
		{name: "SPILO_CONFIGURATION not JSON", env: map[string]string{"SPILO_CONFIGURATION": "postgresql: {}"}, wantErr: "SPILO_CONFIGURATION is not JSON"},
		{name: "SPILO_CONFIGURATION not a map", env: map[string]string{"SPILO_CONFIGURATION": "[1]"}, wantErr: "should contain a map"},
		{name: "wildcard pod IP", host: func(h *Host) { h.PodIP = "0.0.0.0" }, wantErr: "wildcard"},
		{name: "the host's loopback address", host: func(h *Host) { h.PodIP = "127.0.0.1" }, wantErr: "host's own loopback"},
		{name: "a long socket directory", host: func(h *Host) { h.SocketDir = "/" + strings.Repeat("s", 100) }, wantErr: "too long"},
		{
			name:    "a wildcard connect address",
			env:     map[string]string{"RESTAPI_CONNECT_ADDRESS": "0.0.0.0"},
			wantErr: `restapi.connect_address "0.0.0.0:8008" is not an address`,
		},
		{name: "no context", host: func(h *Host) { h.KubeContext = "" }, wantErr: "context"},
		{
			name: "a clone's restore method kept",
			env: map[string]string{"SPILO_CONFIGURATION": `{"bootstrap":{"method":"pgloop_restore","pgloop_restore":` +
				`{"command":"pgbackrest --stanza=src --repo1-path=/pgloop/db/src/uid restore --type=time \"--target=2017-12-19 11:40:33+00\"",` +
				`"keep_existing_recovery_conf":true,"no_params":true}}}`},
			want: []expect{
				{p("bootstrap", "method"), "pgloop_restore"},
				{p("bootstrap", "pgloop_restore", "command"), `pgbackrest --stanza=src --repo1-path=/pgloop/db/src/uid restore --type=time "--target=2017-12-19 11:40:33+00"`},
				{p("bootstrap", "pgloop_restore", "keep_existing_recovery_conf"), true},
				{p("bootstrap", "pgloop_restore", "no_params"), true},
			},
		},
		{
			name: "a bootstrap command naming a container path",
			env: map[string]string{"SPILO_CONFIGURATION": `{"bootstrap":{"method":"restore","restore":` +
				`{"command":"pgbackrest restore --pg1-path=/home/postgres/pgdata/pgroot/pgdata"}}}`},
			wantErr: "bootstrap.restore.command names /home/postgres/pgdata/pgroot/pgdata, a path of the container's volumes",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			withoutLocale(t, tc.locale)
			env := maps.Clone(baseEnv)
			for k, v := range tc.env {
				if v == "" {
					delete(env, k)
				} else {
					env[k] = v
				}
			}
			h := testHost()
			if tc.host != nil {
				tc.host(&h)
			}
			out, _, err := PatroniConfig(pod, env, h)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var cfg map[string]any
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			for _, e := range tc.want {
				if got := sectionValue(cfg, e.path...); !reflect.DeepEqual(got, e.want) {
					t.Errorf("%s = %s, want %s", strings.Join(e.path, "."), jsonString(got), jsonString(e.want))
				}
			}
		})
	}
}

func jsonString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func TestSpiloDeepUpdate(t *testing.T) {
	tests := []struct {
		name       string
		user, base string
		want       string
	}{
		{"maps merge key by key", `{"a": {"x": 1}, "c": 3}`, `{"a": {"y": 2}, "b": 2}`, `{"a": {"x": 1, "y": 2}, "b": 2, "c": 3}`},
		{"the user's value wins", `{"a": "user"}`, `{"a": "spilo"}`, `{"a": "user"}`},
		{"the user's list replaces", `{"a": [1]}`, `{"a": [2, 3]}`, `{"a": [1]}`},
		{"null keeps Spilo's", `{"a": null}`, `{"a": {"x": 1}}`, `{"a": {"x": 1}}`},
		{"a map over a value wins", `{"a": {"x": 1}}`, `{"a": 2}`, `{"a": {"x": 1}}`},
		{"a value over a map wins", `{"a": 1}`, `{"a": {"x": 2}}`, `{"a": 1}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var user, base, want any
			for _, d := range []struct {
				s string
				v *any
			}{{tc.user, &user}, {tc.base, &base}, {tc.want, &want}} {
				if err := json.Unmarshal([]byte(d.s), d.v); err != nil {
					t.Fatal(err)
				}
			}
			if got := deepUpdate(user, base); !reflect.DeepEqual(got, want) {
				t.Errorf("got %s, want %s", jsonString(got), tc.want)
			}
		})
	}
}
