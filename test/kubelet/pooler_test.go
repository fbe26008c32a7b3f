package kubelet

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/pgloop/pgloop/pkg/pooler"
)

// poolerSecret is the pooler user's Secret of poolerPod's cluster.
var poolerSecret = PoolerTestSecret("db")

// PoolerTestSecret names the pooler user's Secret of a cluster, which
// PoolerTestPod reads.
func PoolerTestSecret(clusterName string) string {
	return "pooler." + clusterName + ".credentials.postgresql.pgloop.dev"
}

// PoolerTestPod is a connection-pooler pod of a cluster for its master or
// replica Service (role "master" or "replica"), as pgloop will generate it
// (the pod contract in docs/testbed.md). TestKubelet, outside the package,
// runs one too.
func PoolerTestPod(namespace, clusterName, role string) *corev1.Pod {
	host, name := clusterName, clusterName+"-pooler"
	if role == "replica" {
		host, name = clusterName+"-repl", clusterName+"-pooler-repl"
	}
	env := []corev1.EnvVar{
		{Name: "PGHOST", Value: host},
		{Name: "PGPORT", Value: "5432"},
		{Name: "PGUSER", Value: "pooler"},
		{Name: "PGSCHEMA", Value: "pooler"},
		{Name: "PGPASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: PoolerTestSecret(clusterName)}, Key: "password",
		}}},
		{Name: "CONNECTION_POOLER_PORT", Value: "5432"},
		{Name: "CONNECTION_POOLER_MODE", Value: "transaction"},
		{Name: "CONNECTION_POOLER_DEFAULT_SIZE", Value: "20"},
		{Name: "CONNECTION_POOLER_MIN_SIZE", Value: "10"},
		{Name: "CONNECTION_POOLER_RESERVE_SIZE", Value: "10"},
		{Name: "CONNECTION_POOLER_MAX_CLIENT_CONN", Value: "10000"},
		{Name: "CONNECTION_POOLER_MAX_DB_CONN", Value: "60"},
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name + "-5d8f7c9b4-x2x7q",
			Labels: map[string]string{
				"application":       "db-connection-pooler",
				"connection-pooler": name,
				"cluster-name":      clusterName,
			},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  PoolerContainer,
			Image: "registry.opensource.zalan.do/acid/pgbouncer:master-32",
			Ports: []corev1.ContainerPort{{Name: "pgbouncer", ContainerPort: 5432, Protocol: corev1.ProtocolTCP}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("pgbouncer")},
			}},
			Env: env,
		}}},
	}
}

// poolerPod is PoolerTestPod of cluster "db" in namespace "ns", with a UID.
func poolerPod(role string) *corev1.Pod {
	pod := PoolerTestPod("ns", "db", role)
	pod.UID = "5f0c1e2a-0000-4000-8000-000000000001"
	return pod
}

func TestIsPooler(t *testing.T) {
	spilo := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres"}}}}
	sidecar := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: PoolerContainer}, {Name: "postgres"}}}}
	other := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pgbouncer"}}}}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"pooler", poolerPod("master"), true},
		{"replica pooler", poolerPod("replica"), true},
		{"spilo", spilo, false},
		// The container run is "postgres" when there is one.
		{"pooler beside postgres", sidecar, false},
		{"another name", other, false},
		{"no container", &corev1.Pod{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := isPooler(tc.pod); got != tc.want {
				t.Errorf("isPooler = %v, want %v", got, tc.want)
			}
		})
	}
}

// poolerEnv resolves poolerPod's environment as the kubelet does.
func poolerEnv(t *testing.T, pod *corev1.Pod) map[string]string {
	t.Helper()
	lookup := fakeEnvLookup{secrets: map[string]map[string]string{
		"ns/" + poolerSecret: {"username": "pooler", "password": `pw"with"quotes`},
	}}
	env, err := ResolveEnv(pod, &pod.Spec.Containers[0], "127.1.9.2", lookup)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// TestPoolerTestPodContract: the environment of PoolerTestPod, resolved
// as the kubelet does, is one `pgloop pooler` takes.
func TestPoolerTestPodContract(t *testing.T) {
	for _, role := range []string{"master", "replica"} {
		s, err := pooler.ParseSettings(poolerEnv(t, poolerPod(role)))
		if err != nil {
			t.Fatalf("%s: %v", role, err)
		}
		if s.Password != `pw"with"quotes` || s.Mode != "transaction" {
			t.Errorf("%s: %+v", role, s)
		}
	}
}

func TestServiceUpstreams(t *testing.T) {
	selector := map[string]string{"application": "spilo", "cluster-name": "db", "spilo-role": "master"}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"},
		Spec: corev1.ServiceSpec{Selector: selector, Ports: []corev1.ServicePort{{
			Name: "postgresql", Port: 5432, TargetPort: intstr.FromInt32(5432),
		}}},
	}
	pod := func(name, ip string, ready bool, change func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: selector},
			Status:     corev1.PodStatus{PodIP: ip},
		}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
		if change != nil {
			change(p)
		}
		return p
	}
	pods := []*corev1.Pod{
		pod("db-1", "127.1.9.4", true, nil),
		pod("db-0", "127.1.9.3", false, nil), // a killed leader still labelled master
		pod("db-2", "127.1.9.6", true, func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }),
		pod("db-3", "", true, nil),
		pod("other", "127.1.9.7", true, func(p *corev1.Pod) { p.Namespace = "elsewhere" }),
		pod("replica", "127.1.9.8", true, func(p *corev1.Pod) {
			p.Labels = map[string]string{"application": "spilo", "cluster-name": "db", "spilo-role": "replica"}
		}),
	}
	slice := &discoveryv1.EndpointSlice{
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("postgresql"), Port: ptr.To[int32](5432)}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.245.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"10.245.0.8"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
		},
	}
	named := svc.DeepCopy()
	named.Spec.Ports[0].TargetPort = intstr.FromString("postgresql")
	namedPod := pod("db-1", "127.1.9.4", true, func(p *corev1.Pod) {
		p.Spec.Containers = []corev1.Container{{Ports: []corev1.ContainerPort{{Name: "postgresql", ContainerPort: 6543}}}}
	})
	notReady := svc.DeepCopy()
	notReady.Spec.PublishNotReadyAddresses = true

	for _, tc := range []struct {
		name   string
		svc    *corev1.Service
		slices []*discoveryv1.EndpointSlice
		pods   []*corev1.Pod
		want   []Upstream
	}{
		{"from the selector: ready, with an IP, not terminating", svc, nil, pods, []Upstream{{"127.1.9.4", 5432}}},
		{"not ready published", notReady, nil, pods[:2], []Upstream{{"127.1.9.3", 5432}, {"127.1.9.4", 5432}}},
		{"EndpointSlices first", svc, []*discoveryv1.EndpointSlice{slice}, pods, []Upstream{{"10.245.0.9", 5432}}},
		{"named target port", named, nil, []*corev1.Pod{namedPod, pods[0]}, []Upstream{{"127.1.9.4", 6543}}},
		{"none ready", svc, nil, pods[1:], nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ServiceUpstreams(tc.svc, 5432, tc.slices, tc.pods)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := ServiceUpstreams(svc, 6432, nil, pods); err == nil || !strings.Contains(err.Error(), "no port 6432") {
		t.Errorf("a port the Service lacks: %v", err)
	}
}

func TestChooseUpstream(t *testing.T) {
	a, b := Upstream{"127.1.9.3", 5432}, Upstream{"127.1.9.4", 5432}
	for _, tc := range []struct {
		name     string
		current  Upstream
		ready    []Upstream
		want     Upstream
		wantSome bool
	}{
		{"first start", Upstream{}, []Upstream{a, b}, a, true},
		{"current kept", b, []Upstream{a, b}, b, true},
		{"current gone", b, []Upstream{a}, a, true},
		{"none", a, nil, Upstream{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := chooseUpstream(tc.current, tc.ready)
			if got != tc.want || ok != tc.wantSome {
				t.Errorf("got %v %v, want %v %v", got, ok, tc.want, tc.wantSome)
			}
		})
	}
}

func TestReadinessPort(t *testing.T) {
	c := poolerPod("master").Spec.Containers[0]
	c.Ports[0].ContainerPort = 6432
	if got := readinessPort(&c, 5432); got != 6432 {
		t.Errorf("named port: %d, want 6432", got)
	}
	c.ReadinessProbe.TCPSocket.Port = intstr.FromInt32(7000)
	if got := readinessPort(&c, 5432); got != 7000 {
		t.Errorf("numbered port: %d, want 7000", got)
	}
	c.ReadinessProbe = nil
	if got := readinessPort(&c, 5432); got != 5432 {
		t.Errorf("no probe: %d, want 5432", got)
	}
}
