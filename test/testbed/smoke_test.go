package testbed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/pgloop/pgloop/test/testbed"
)

// envChild makes the test binary a plane-holding child for
// TestKilledParentLeavesNoProcess instead of running tests.
const envChild = "PGLOOP_TESTBED_CHILD"

// deadline bounds each test: generous, for two busy cores.
const deadline = 2 * time.Minute

// plane is shared by the smoke tests; each works in its own namespace.
var plane *testbed.Plane

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		runChild()
		return
	}
	p, err := testbed.Start(context.Background(), testbed.Options{ObjectStore: true, Log: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: starting the control plane: %v\n", err)
		os.Exit(1)
	}
	plane = p
	logFootprint(p)
	code := m.Run()
	if err := p.Healthy(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: a process of the plane died during the tests: %v\n", err)
		code = 1
	}
	began := time.Now()
	if err := p.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: stopping the plane: %v\n", err)
		code = 1
	}
	fmt.Fprintf(os.Stderr, "testbed: stopped in %v\n", time.Since(began).Round(time.Millisecond))
	os.Exit(code)
}

// logFootprint records the start-up time and each process's memory, the
// figures docs/testbed.md reports.
func logFootprint(p *testbed.Plane) {
	var parts []string
	var total int64
	for _, proc := range p.Processes() {
		rss, err := proc.RSS()
		if err != nil {
			parts = append(parts, fmt.Sprintf("%s ?(%v)", proc.Name, err))
			continue
		}
		total += rss
		parts = append(parts, fmt.Sprintf("%s %d MiB", proc.Name, rss>>20))
	}
	fmt.Fprintf(os.Stderr, "testbed: started in %v; RSS %s; total %d MiB\n",
		p.StartupTime.Round(time.Millisecond), strings.Join(parts, ", "), total>>20)
}

// childReport is what runChild tells its parent.
type childReport struct {
	Dir       string
	Processes []testbed.Process
}

// runChild starts a plane, reports it as JSON on stdout, and waits to be
// killed.
func runChild() {
	p, err := testbed.Start(context.Background(), testbed.Options{Nodes: 1, ObjectStore: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(childReport{Dir: p.Dir, Processes: p.Processes()}); err != nil {
		os.Exit(1)
	}
	select {}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	t.Cleanup(cancel)
	return ctx
}

// A StatefulSet with a volumeClaimTemplate gets its pods scheduled, Running
// and Ready, and its claims Bound.
func TestStatefulSetRunsWithVolumes(t *testing.T) {
	t.Parallel()
	ctx, ns, cs := testContext(t), plane.Namespace(t), plane.Client
	const name = "db"

	if _, err := cs.CoreV1().Services(ns).Create(ctx, testbed.HeadlessService(ns, name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sts, err := cs.AppsV1().StatefulSets(ns).Create(ctx, testbed.StatefulSet(ns, name, 2), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testbed.WaitForStatefulSet(ctx, cs, ns, name, testbed.StatefulSetReady); err != nil {
		t.Fatal(err)
	}

	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set(sts.Spec.Selector.MatchLabels).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 2 {
		t.Fatalf("got %d pods, want 2", len(pods.Items))
	}
	for _, pod := range pods.Items {
		if ready, _ := testbed.PodReady(&pod); !ready || pod.Spec.NodeName == "" {
			t.Errorf("pod %s: phase %s, node %q, ready %v; want Running and Ready on a node",
				pod.Name, pod.Status.Phase, pod.Spec.NodeName, ready)
		}
	}

	pvcs, err := cs.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pvcs.Items) != 2 {
		t.Fatalf("got %d claims, want 2", len(pvcs.Items))
	}
	for _, pvc := range pvcs.Items {
		if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
			t.Errorf("claim %s: phase %s, volume %q; want Bound to a volume", pvc.Name, pvc.Status.Phase, pvc.Spec.VolumeName)
			continue
		}
		if sc := pvc.Spec.StorageClassName; sc == nil || *sc != testbed.StorageClassName {
			t.Errorf("claim %s: class %v, want the default %s", pvc.Name, sc, testbed.StorageClassName)
		}
	}
}

// A pod whose nodeSelector no node satisfies stays Pending, Unschedulable.
func TestUnsatisfiableNodeSelectorIsUnschedulable(t *testing.T) {
	t.Parallel()
	ctx, ns, cs := testContext(t), plane.Namespace(t), plane.Client

	pod, err := cs.CoreV1().Pods(ns).Create(ctx, testbed.UnschedulablePod(ns, "nowhere"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err = testbed.WaitForPod(ctx, cs, ns, pod.Name, testbed.PodUnschedulable)
	if err != nil {
		t.Fatal(err)
	}
	assertPendingUnschedulable(t, pod, "didn't match Pod's node affinity/selector")
}

// A pod asking for more CPU than any node has stays Pending, Unschedulable.
func TestOversizedPodIsUnschedulable(t *testing.T) {
	t.Parallel()
	ctx, ns, cs := testContext(t), plane.Namespace(t), plane.Client

	pod, err := cs.CoreV1().Pods(ns).Create(ctx, testbed.OversizedPod(ns, "huge"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err = testbed.WaitForPod(ctx, cs, ns, pod.Name, testbed.PodUnschedulable)
	if err != nil {
		t.Fatal(err)
	}
	assertPendingUnschedulable(t, pod, "Insufficient cpu")
}

func assertPendingUnschedulable(t *testing.T, pod *corev1.Pod, message string) {
	t.Helper()
	if pod.Status.Phase != corev1.PodPending || pod.Spec.NodeName != "" {
		t.Errorf("pod %s: phase %s on node %q, want Pending on none", pod.Name, pod.Status.Phase, pod.Spec.NodeName)
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && !strings.Contains(c.Message, message) {
			t.Errorf("pod %s: PodScheduled message %q, want it to mention %q", pod.Name, c.Message, message)
		}
	}
}

// A ResourceQuota allowing no pod makes the StatefulSet controller fail to
// create them, and say so in a FailedCreate event.
func TestQuotaBlocksStatefulSetPods(t *testing.T) {
	t.Parallel()
	ctx, ns, cs := testContext(t), plane.Namespace(t), plane.Client
	const name = "db"

	if _, err := testbed.CreateQuota(ctx, cs, testbed.NoPodsQuota(ns, "no-pods")); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, testbed.StatefulSet(ns, name, 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev, err := testbed.WaitForEvent(ctx, cs, ns, "StatefulSet", name, "FailedCreate")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ev.Message, "exceeded quota") {
		t.Errorf("FailedCreate message %q, want it to mention %q", ev.Message, "exceeded quota")
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("got %d pods despite the quota, want 0", len(pods.Items))
	}
}

// A deleted pod of a kwok node, with a grace period (no kubelet confirms
// its end), is gone: the pod reaper deletes it.
func TestDeletedPodIsGone(t *testing.T) {
	t.Parallel()
	ctx, ns := testContext(t), plane.Namespace(t)
	deleteGracefulPod(ctx, t, plane, ns, "graceful")
}

// deleteGracefulPod creates a pod with a 30 s grace period, waits for it
// to be Ready, deletes it and waits until it is gone.
func deleteGracefulPod(ctx context.Context, t *testing.T, p *testbed.Plane, ns, name string) {
	t.Helper()
	pod := testbed.Pod(ns, name)
	grace := int64(30)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	pods := p.Client.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready, err := testbed.WaitForPod(ctx, p.Client, ns, name, testbed.PodReady)
	if err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: ready.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s/%s not gone: %v", ns, name, ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("pod %s/%s: the watch ended", ns, name)
			}
			if ev.Type == watch.Deleted {
				return
			}
		}
	}
}
