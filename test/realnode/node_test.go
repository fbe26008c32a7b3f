package realnode

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/test/e2e"
	"github.com/pgloop/pgloop/test/pgtest"
	"github.com/pgloop/pgloop/test/testbed"
)

// TestNodeRunsContainers checks the node itself with pgloop's instance
// image and no operator: a non-root pod writes its volume, a Service name
// resolves in another pod and reaches it through kube-proxy, an in-cluster
// client reaches the apiserver through the kubernetes Service and verifies
// it with the ServiceAccount's CA, and logs, exec and port-forward go
// through the apiserver to the kubelet.
func TestNodeRunsContainers(t *testing.T) {
	ctx := e2e.Context(t, 5*time.Minute)
	cs := env.Kube
	ns := env.Namespace(t)

	// The pods' ServiceAccount may read pods: the in-cluster client's call.
	_, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "default-view"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default", Namespace: ns}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web := podOf(ns, "web", "sh", "-c", "echo written-by-$(id -u) > /data/f && exec python3 -u -m http.server 8080 -d /data")
	web.Labels = map[string]string{"app": "web"}
	web.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	web.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	web.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
		HTTPGet: &corev1.HTTPGetAction{Path: "/f", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1}
	client := podOf(ns, "client", "sleep", "infinity")
	for _, p := range []*corev1.Pod{web, client} {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var pods []*corev1.Pod
	for _, name := range []string{"web", "client"} {
		p, err := testbed.WaitForPod(ctx, cs, ns, name, testbed.PodReady)
		if err != nil {
			t.Fatalf("pod %s: %v", name, err)
		}
		pods = append(pods, p)
	}
	for _, p := range pods {
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil || !netip.MustParsePrefix("10.200.0.0/24").Contains(ip) {
			t.Errorf("pod %s has IP %q: want one of the node's bridge, 10.200.0.0/24", p.Name, p.Status.PodIP)
		}
		if id := p.Status.ContainerStatuses[0].ContainerID; !strings.HasPrefix(id, "containerd://") {
			t.Errorf("pod %s's container is %q: want a containerd container", p.Name, id)
		}
	}

	// From the host, as the operator reaches pods: the pod's own address.
	if body := get(t, fmt.Sprintf("http://%s:8080/f", pods[0].Status.PodIP)); body != "written-by-101\n" {
		t.Errorf("the file the pod wrote in its volume, read from the host: %q, want %q", body, "written-by-101\n")
	}
	// From a pod: the Service's name through cluster DNS, its address
	// through kube-proxy.
	fetch := fmt.Sprintf("import urllib.request; print(urllib.request.urlopen('http://web.%s.svc.cluster.local/f').read().decode(), end='')", ns)
	out, _, err := pgtest.Exec(ctx, env.Plane.Config, cs, ns, "client", "", "python3", "-c", fetch)
	if err != nil || out != "written-by-101\n" {
		t.Errorf("the Service web, by name from another pod: %q, %v", out, err)
	}
	// An in-cluster client: the kubernetes Service, the ServiceAccount's
	// token and CA (kube-root-ca.crt), as Patroni's Kubernetes store uses
	// them.
	list := fmt.Sprintf("from kubernetes import client, config; config.load_incluster_config(); "+
		"print(sorted(p.metadata.name for p in client.CoreV1Api().list_namespaced_pod(%q).items))", ns)
	out, _, err = pgtest.Exec(ctx, env.Plane.Config, cs, ns, "client", "", "python3", "-c", list)
	if err != nil || strings.TrimSpace(out) != "['client', 'web']" {
		t.Errorf("an in-cluster client listing the namespace's pods: %q, %v", out, err)
	}
	if logs, err := pgtest.Logs(ctx, cs, ns, "web", ""); err != nil || !strings.Contains(logs, "GET /f") {
		t.Errorf("logs of web: %q, %v; want its requests", logs, err)
	}
	port, stop, err := pgtest.PortForward(ctx, env.Plane.Config, cs, ns, "web", 8080)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if body := get(t, fmt.Sprintf("http://127.0.0.1:%d/f", port)); body != "written-by-101\n" {
		t.Errorf("through port-forward: %q", body)
	}
}

// podOf is a pod of pgloop's instance image running cmd as postgres, as
// pgloop's own pods run, with nothing else.
func podOf(ns, name string, cmd ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: ptr.To[int64](101), RunAsGroup: ptr.To[int64](103), FSGroup: ptr.To[int64](103), RunAsNonRoot: ptr.To(true),
			},
			TerminationGracePeriodSeconds: ptr.To[int64](2),
			Containers: []corev1.Container{{
				Name: "main", Image: cluster.DefaultImage, Command: cmd,
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false)},
			}},
		},
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
	}
	return string(b)
}

// instanceImage is pgloop's instance image, which the node loads from
// bin/pgloop-instance-image.tar; zalandoImage is the zalando operator's
// default image, which the node names it too: the zalando-made clusters of
// the adoption tests run pgloop's image, which reads Spilo's environment.
var (
	instanceImage = cluster.DefaultImage
	zalandoImage  = "ghcr.io/zalando/spilo-18:4.1-p2"
)
