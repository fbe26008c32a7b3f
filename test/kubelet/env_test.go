package kubelet

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
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
