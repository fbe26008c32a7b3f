package kubelet

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// operatorContainer is manifests/operator's container, as the API server
// holds it.
func operatorContainer() *corev1.Container {
	return &corev1.Container{
		Name:  "operator",
		Image: "ghcr.io/pgloop/pgloop:latest",
		Args:  []string{"operator", "--leader-elect=true", "--log-format=json"},
		Env: []corev1.EnvVar{{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}},
		Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}}},
	}
}

func TestContainerArgv(t *testing.T) {
	env := map[string]string{"NS": "ops", "LEVEL": "debug"}
	for _, tc := range []struct {
		name          string
		command, args []string
		want          []string
		err           string
	}{
		{name: "entrypoint and args", args: []string{"operator", "--namespace=$(NS)"},
			want: []string{"/store/pgloop", "operator", "--namespace=ops"}},
		{name: "command names the entrypoint", command: []string{"/pgloop", "operator"}, args: []string{"--log-level", "$(LEVEL)"},
			want: []string{"/store/pgloop", "operator", "--log-level", "debug"}},
		{name: "escaped and undefined references stay", args: []string{"$$(NS)", "$(MISSING)"},
			want: []string{"/store/pgloop", "$(NS)", "$(MISSING)"}},
		{name: "no entrypoint but the image's", command: []string{"/bin/sh", "-c", "true"}, err: `exec "/bin/sh": no such file in the image, which holds only /pgloop`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &corev1.Container{Command: tc.command, Args: tc.args}
			got, err := containerArgv(c, env, "/build/pgloop", "/store/pgloop")
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("argv = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestHealthAddr(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*corev1.Container)
		env    map[string]string
		argv   []string
		want   string
	}{
		{name: "the probes' named port", want: "127.9.0.2:8080"},
		{name: "a numbered port", change: func(c *corev1.Container) {
			c.ReadinessProbe.HTTPGet.Port = intstr.FromInt32(9090)
		}, want: "127.9.0.2:9090"},
		{name: "liveness only", change: func(c *corev1.Container) { c.ReadinessProbe = nil }, want: "127.9.0.2:8080"},
		{name: "set in the environment", env: map[string]string{HealthAddrEnv: ":7000"}},
		{name: "set as a flag", argv: []string{"/pgloop", "operator", "--health-addr", ":7000"}},
		{name: "set as a flag with =", argv: []string{"/pgloop", "operator", "--health-addr=:7000"}},
		{name: "no http probe", change: func(c *corev1.Container) { c.ReadinessProbe, c.LivenessProbe = nil, nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := operatorContainer()
			if tc.change != nil {
				tc.change(c)
			}
			argv := tc.argv
			if argv == nil {
				argv = []string{"/pgloop", "operator"}
			}
			got, ok := healthAddr(c, tc.env, argv, "127.9.0.2")
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("healthAddr = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}

func TestContainerUser(t *testing.T) {
	pod := func(ps *corev1.PodSecurityContext) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{SecurityContext: ps}}
	}
	for _, tc := range []struct {
		name     string
		pod      *corev1.PodSecurityContext
		c        *corev1.SecurityContext
		uid, gid uint32
		groups   []uint32
		err      string
	}{
		{name: "manifests/operator: the pod's", pod: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532)},
			c: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}, uid: 65532, gid: 65532},
		{name: "the container's wins", pod: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), FSGroup: ptr.To[int64](2000), SupplementalGroups: []int64{3000}},
			c: &corev1.SecurityContext{RunAsUser: ptr.To[int64](1001), RunAsGroup: ptr.To[int64](1002)}, uid: 1001, gid: 1002, groups: []uint32{2000, 3000}},
		{name: "none: root, as the image sets no user"},
		{name: "runAsNonRoot as root", c: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}, err: "runAsNonRoot and image will run as root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &corev1.Container{Name: "c", SecurityContext: tc.c}
			uid, gid, groups, err := containerUser(pod(tc.pod), c)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || uid != tc.uid || gid != tc.gid || !reflect.DeepEqual(groups, tc.groups) {
				t.Errorf("user = %d:%d %v, %v; want %d:%d %v", uid, gid, groups, err, tc.uid, tc.gid, tc.groups)
			}
		})
	}
}

func TestAPIServerHostPort(t *testing.T) {
	host, port, err := apiServerHostPort(&rest.Config{Host: "https://127.0.0.1:38613"})
	if err != nil || host != "127.0.0.1" || port != "38613" {
		t.Errorf("= %s, %s, %v; want 127.0.0.1, 38613", host, port, err)
	}
	if _, port, _ := apiServerHostPort(&rest.Config{Host: "https://api.example"}); port != "443" {
		t.Errorf("default port %s, want 443", port)
	}
}

func TestContainerMounts(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "scratch")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "kube-api-access-x", VolumeSource: corev1.VolumeSource{Projected: kubeAPIAccess()}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "certs"}}},
		{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}},
	}}}
	in := &instance{
		prep:  &prepared{mounts: map[string]string{"/scratch": empty, "/certs": filepath.Join(dir, "certs")}},
		image: &imageState{volumes: []projectedVolume{{name: "kube-api-access-x", dir: filepath.Join(dir, "token")}}},
	}
	c := &corev1.Container{VolumeMounts: []corev1.VolumeMount{
		{Name: "kube-api-access-x", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
		{Name: "scratch", MountPath: "/scratch"},
		{Name: "certs", MountPath: "/certs", ReadOnly: true},
	}}
	got, err := in.containerMounts(pod, c)
	if err != nil {
		t.Fatal(err)
	}
	want := []initMount{
		{Source: filepath.Join(dir, "token"), Target: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
		{Source: empty, Target: "/scratch"},
		{Source: filepath.Join(dir, "certs"), Target: "/certs", ReadOnly: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mounts = %+v, want %+v", got, want)
	}
	fi, err := os.Stat(empty)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o777 {
		t.Errorf("emptyDir mode %v, want 0777 as a kubelet makes it", fi.Mode())
	}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "host", MountPath: "/host"})
	if _, err := in.containerMounts(pod, c); err == nil || !strings.Contains(err.Error(), "volume mount host: a volume of a kind not supported here") {
		t.Errorf("hostPath mount: %v", err)
	}
}
