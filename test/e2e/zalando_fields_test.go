package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// TestZalandoFields creates a cluster with zalando's load balancer, shm
// volume, init container and sidecar fields set, and checks the objects
// the apiserver stored and the pods made from them: the master Service is
// a LoadBalancer open to the given ranges, the replica Service stays
// ClusterIP, the pods have no /dev/shm volume and carry the init container
// and the sidecar. Turning the load balancer off makes the Service ClusterIP
// again (the apiserver refuses one that keeps its node ports), and the
// cluster is Running for that generation.
func TestZalandoFields(t *testing.T) {
	ns := env.Namespace(t)
	env.StartLabeller(t, ns)
	env.StartOperator(t, "operator", []string{ns})
	const name = "zalando"
	ranges := []string{"10.0.0.0/8", "fd01::/48"}
	ctx := Context(t, 2*stepDeadline)

	env.CreateCluster(t, ns, name, 2, func(pg *v1.Postgresql) {
		pg.Spec.EnableMasterLoadBalancer = ptr.To(true)
		pg.Spec.AllowedSourceRanges = ranges
		pg.Spec.EnableShmVolume = ptr.To(false)
		pg.Spec.InitContainers = []corev1.Container{{Name: "prepare", Image: "busybox:1.37", Command: []string{"true"}}}
		pg.Spec.Sidecars = []v1.Sidecar{{Name: "exporter", Image: "example.com/exporter:1",
			Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9187, Protocol: corev1.ProtocolTCP}}}}
	})
	env.MustState(ctx, t, ns, name, fsm.Running)
	pods := mustPods(ctx, t, ns, name, ReadyPods(2))

	services := env.Kube.CoreV1().Services(ns)
	master, err := services.Get(ctx, cluster.MasterServiceName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if master.Spec.Type != corev1.ServiceTypeLoadBalancer || !slices.Equal(master.Spec.LoadBalancerSourceRanges, ranges) {
		t.Errorf("master Service is %s with ranges %q, want LoadBalancer with %q", master.Spec.Type, master.Spec.LoadBalancerSourceRanges, ranges)
	}
	if master.Spec.Ports[0].NodePort == 0 {
		t.Errorf("the apiserver allocated no node port to the load balancer: %+v", master.Spec.Ports)
	}
	replica, err := services.Get(ctx, cluster.ReplicaServiceName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if replica.Spec.Type != corev1.ServiceTypeClusterIP || replica.Spec.LoadBalancerSourceRanges != nil {
		t.Errorf("replica Service is %s with ranges %q, want ClusterIP without", replica.Spec.Type, replica.Spec.LoadBalancerSourceRanges)
	}

	sts, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, cluster.StatefulSetName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkPod := func(what string, spec corev1.PodSpec) {
		t.Helper()
		for _, v := range spec.Volumes {
			if v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory {
				t.Errorf("%s has a memory volume %s with enableShmVolume false", what, v.Name)
			}
		}
		var names []string
		for _, c := range spec.Containers {
			names = append(names, c.Name)
			for _, m := range c.VolumeMounts {
				if m.MountPath == "/dev/shm" {
					t.Errorf("%s: container %s mounts /dev/shm with enableShmVolume false", what, c.Name)
				}
			}
		}
		if !slices.Equal(names, []string{cluster.ContainerName, "exporter"}) {
			t.Errorf("%s has containers %q, want postgres and the sidecar", what, names)
		}
		if len(spec.InitContainers) != 1 || spec.InitContainers[0].Name != "prepare" {
			t.Errorf("%s has init containers %+v, want prepare", what, spec.InitContainers)
		}
	}
	checkPod("the StatefulSet's pod template", sts.Spec.Template.Spec)
	for _, p := range pods {
		checkPod("pod "+p.Name, p.Spec)
		// kwok plays the init container as completed, then the pod Ready.
		if len(p.Status.InitContainerStatuses) != 1 || p.Status.InitContainerStatuses[0].State.Terminated == nil {
			t.Errorf("pod %s: init container status %+v, want one terminated", p.Name, p.Status.InitContainerStatuses)
		}
	}

	// The load balancer off: ClusterIP again, without node ports or ranges.
	edited, err := env.MergePatchCluster(ctx, ns, name, `{"spec":{"enableMasterLoadBalancer":false}}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitCluster(ctx, ns, name, "Running after the load balancer is off", func(pg *v1.Postgresql) bool {
		return pg.Status.State == fsm.Running && pg.Status.ObservedGeneration >= edited.Generation
	}); err != nil {
		t.Fatal(err)
	}
	// Running for the generation may be written while the Service's
	// update is still in flight (the state machine does not wait for
	// in-place updates of Services), so the Service is awaited.
	isClusterIP := func(svc *corev1.Service) bool {
		return svc.Spec.Type == corev1.ServiceTypeClusterIP && svc.Spec.LoadBalancerSourceRanges == nil &&
			svc.Spec.Ports[0].NodePort == 0 && svc.Spec.ExternalTrafficPolicy == ""
	}
	if master, err = services.Get(ctx, cluster.MasterServiceName(name), metav1.GetOptions{}); err == nil && !isClusterIP(master) {
		t.Logf("Running for generation %d while the master Service is still %s", edited.Generation, master.Spec.Type)
	}
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		master, err = services.Get(ctx, cluster.MasterServiceName(name), metav1.GetOptions{})
		return err == nil && isClusterIP(master), nil
	})
	if err != nil {
		t.Fatalf("master Service after the load balancer is off: %s, ranges %q, ports %+v; want ClusterIP without ranges or node ports",
			master.Spec.Type, master.Spec.LoadBalancerSourceRanges, master.Spec.Ports)
	}
	env.MustState(ctx, t, ns, name, fsm.Running)
	mustPods(ctx, t, ns, name, ReadyPods(2))
}
