package testbed

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The ways a real cluster gets stuck, as objects. Each builder is pure; the
// smoke test shows the symptom each one produces, and later suites reuse them
// to put an operator in front of that symptom.

const (
	// image is never pulled: kwok plays the kubelet.
	image = "registry.k8s.io/pause:3.10"
	// ImpossibleNodeLabel is a node label no node of the plane has.
	ImpossibleNodeLabel = "pgloop.io/no-such-node"
	// OversizedCPU is more CPU than any node the plane makes by default.
	OversizedCPU = "1M"
)

// CreateNamespace creates a namespace named after prefix and waits for its
// default ServiceAccount, without which the apiserver refuses pods.
func CreateNamespace(ctx context.Context, cs kubernetes.Interface, prefix string) (string, error) {
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("while creating a namespace: %w", err)
	}
	if _, err := WaitFor(ctx, ServiceAccounts(cs, ns.Name, "default"), func(*corev1.ServiceAccount) (bool, error) { return true, nil }); err != nil {
		return "", fmt.Errorf("while waiting for the default ServiceAccount of %s: %w", ns.Name, err)
	}
	return ns.Name, nil
}

// Namespace creates a namespace for test t, deleted when t ends.
func (p *Plane) Namespace(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns, err := CreateNamespace(ctx, p.Client, sanitize(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
			t.Errorf("while deleting namespace %s: %v", ns, err)
		}
	})
	return ns
}

// sanitize turns a test name into a namespace name prefix.
func sanitize(name string) string {
	const maxLen = 40
	out := make([]byte, 0, len(name))
	for _, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			out = append(out, c)
		case c >= 'A' && c <= 'Z':
			out = append(out, c+'a'-'A')
		case len(out) > 0 && out[len(out)-1] != '-':
			out = append(out, '-')
		}
	}
	if len(out) > maxLen {
		out = out[:maxLen]
	}
	for len(out) > 0 && out[len(out)-1] == '-' {
		out = out[:len(out)-1]
	}
	if len(out) == 0 {
		return "test"
	}
	return string(out)
}

// Pod returns a pod of one container asking for 100m CPU and 64Mi.
func Pod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
		Spec:       podSpec(),
	}
}

func podSpec() corev1.PodSpec {
	return corev1.PodSpec{
		Containers: []corev1.Container{{
			Name:  "main",
			Image: image,
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("100m"),
				corev1.ResourceMemory: resource.MustParse("64Mi"),
			}},
		}},
		// No kubelet runs the container, so nothing is gained by waiting.
		TerminationGracePeriodSeconds: ptr.To[int64](0),
	}
}

// UnschedulablePod returns a pod whose nodeSelector no node satisfies: it
// stays Pending, PodScheduled=False, reason Unschedulable, message "didn't
// match Pod's node affinity/selector".
func UnschedulablePod(ns, name string) *corev1.Pod {
	pod := Pod(ns, name)
	pod.Spec.NodeSelector = map[string]string{ImpossibleNodeLabel: "true"}
	return pod
}

// OversizedPod returns a pod asking for more CPU than any node has: it stays
// Pending, PodScheduled=False, reason Unschedulable, message "Insufficient cpu".
func OversizedPod(ns, name string) *corev1.Pod {
	pod := Pod(ns, name)
	pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse(OversizedCPU)
	return pod
}

// StatefulSet returns a StatefulSet of replicas pods, each with a 1Gi claim
// "data" from the default StorageClass, and its headless Service's name set
// to name (create the Service with HeadlessService if DNS names matter).
func StatefulSet(ns, name string, replicas int32) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	spec := podSpec()
	spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(replicas),
			ServiceName: name,
			Selector:    &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       spec,
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceStorage: resource.MustParse("1Gi"),
					}},
				},
			}},
		},
	}
}

// HeadlessService returns the headless Service of StatefulSet(ns, name, …).
func HeadlessService(ns, name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{"app": name},
			Ports:     []corev1.ServicePort{{Name: "postgres", Port: 5432}},
		},
	}
}

// NoPodsQuota returns a ResourceQuota allowing no pod in ns: the StatefulSet
// controller then records FailedCreate events ("exceeded quota").
func NoPodsQuota(ns, name string) *corev1.ResourceQuota {
	return &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}},
	}
}

// CreateQuota creates quota and waits until the quota controller has
// computed its usage: until then admission refuses pods for another reason
// ("status unknown for quota").
func CreateQuota(ctx context.Context, cs kubernetes.Interface, quota *corev1.ResourceQuota) (*corev1.ResourceQuota, error) {
	created, err := cs.CoreV1().ResourceQuotas(quota.Namespace).Create(ctx, quota, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("while creating ResourceQuota %s/%s: %w", quota.Namespace, quota.Name, err)
	}
	return WaitFor(ctx, ResourceQuotas(cs, created.Namespace, created.Name), func(q *corev1.ResourceQuota) (bool, error) {
		for res := range q.Spec.Hard {
			if _, ok := q.Status.Hard[res]; !ok {
				return false, nil
			}
			if _, ok := q.Status.Used[res]; !ok {
				return false, nil
			}
		}
		return true, nil
	})
}
