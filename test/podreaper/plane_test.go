package podreaper_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/pgloop/pgloop/test/testbed"
)

// The plane test's size: go test ./podreaper/ -run TestPlane -kwok
// runs it on kwok's pod-delete stage instead, to compare.
var (
	sets   = flag.Int("sets", 20, "one-replica StatefulSets the plane test rolls at once")
	rounds = flag.Int("rounds", 3, "times the plane test deletes each StatefulSet's pod")
	window = flag.Duration("window", 2*time.Second, "how long each new pod must stay, Ready and not deleted")
	kwok   = flag.Bool("kwok", false, "run the plane test with kwok's pod-delete stage, not the reaper")
)

// TestPlane deletes the pod of one-replica StatefulSets on a kwok node
// again and again, each time once the StatefulSet's new pod of the same
// name is Ready, and checks that every new pod (a new UID) becomes Ready
// and that no pod is deleted by anyone but the test: kwok's pod-delete
// stage, lagging, deleted the new pod by the old one's name.
func TestPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	p, err := testbed.Start(ctx, testbed.Options{Nodes: 1, KwokPodDelete: *kwok})
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Healthy(); err != nil {
			t.Errorf("the plane: %v", err)
		}
		if err := p.Stop(); err != nil {
			t.Errorf("stopping the plane: %v", err)
		}
	})
	checkKwokStages(t, p, *kwok)
	ns := p.Namespace(t)

	var wg sync.WaitGroup
	for i := range *sets {
		name := fmt.Sprintf("db%d", i)
		sts := testbed.StatefulSet(ns, name, 1)
		// A grace period, as the operator's pods have: the apiserver
		// then keeps a deleted pod until the reaper (or kwok's stage)
		// deletes it; with testbed's 0 it deletes it at once.
		sts.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
		if _, err := p.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating StatefulSet %s: %v", name, err)
		}
		wg.Go(func() {
			if err := roll(ctx, t, p, ns, name); err != nil {
				t.Errorf("StatefulSet %s: %v", name, err)
			}
		})
	}
	wg.Wait()
}

// roll waits for the StatefulSet's pod to be Ready, then deletes it
// *rounds times, each time once the new pod is Ready and has stayed so for
// *window, watching every pod of the StatefulSet throughout.
func roll(ctx context.Context, t *testing.T, p *testbed.Plane, ns, name string) error {
	if _, err := testbed.WaitForStatefulSet(ctx, p.Client, ns, name, testbed.StatefulSetReady); err != nil {
		return err
	}
	pods := p.Client.CoreV1().Pods(ns)
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		return err
	}
	if len(list.Items) != 1 {
		return fmt.Errorf("%d pods, want 1", len(list.Items))
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: "app=" + name, ResourceVersion: list.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	o := &observer{w: w, ours: map[types.UID]bool{}}
	cur := list.Items[0]
	for round := range *rounds {
		o.ours[cur.UID] = true
		if err := pods.Delete(ctx, cur.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cur.UID}}); err != nil {
			return fmt.Errorf("round %d: deleting pod %s (uid %s): %w", round, cur.Name, cur.UID, err)
		}
		next, err := o.until(ctx, func(pod *corev1.Pod) bool {
			ready, _ := testbed.PodReady(pod)
			return !o.ours[pod.UID] && ready
		})
		if err != nil {
			return fmt.Errorf("round %d: waiting for a new pod Ready after deleting uid %s: %w", round, cur.UID, err)
		}
		// The window: the new pod must stay, with no deletionTimestamp.
		wctx, cancel := context.WithTimeout(ctx, *window)
		_, err = o.until(wctx, func(*corev1.Pod) bool { return false })
		stayed := o.err == nil && wctx.Err() != nil && ctx.Err() == nil
		cancel()
		if !stayed {
			return fmt.Errorf("round %d: the window of pod uid %s: %w", round, next.UID, err)
		}
		t.Logf("%s round %d: pod uid %s replaced by %s, which stayed %v", name, round, cur.UID, next.UID, *window)
		cur = *next
	}
	return nil
}

// observer reads the watch of one StatefulSet's pods and fails on a pod
// deleted by anyone but the test.
type observer struct {
	w    watch.Interface
	ours map[types.UID]bool // the pods the test deleted
	err  error              // the first pod deleted by someone else
}

// until reads events until one is a pod that cond holds for (returned),
// a pod not the test's is being deleted or gone (o.err, returned), or ctx
// ends (its error).
func (o *observer) until(ctx context.Context, cond func(*corev1.Pod) bool) (*corev1.Pod, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case ev, ok := <-o.w.ResultChan():
			if !ok {
				return nil, fmt.Errorf("the watch ended")
			}
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				return nil, fmt.Errorf("watch event %s: %v", ev.Type, ev.Object)
			}
			if !o.ours[pod.UID] && (ev.Type == watch.Deleted || pod.DeletionTimestamp != nil) {
				o.err = fmt.Errorf("pod %s uid %s (%s) deleted by someone else (%s)", pod.Name, pod.UID, pod.Status.Phase, ev.Type)
				return nil, o.err
			}
			if cond(pod) {
				return pod, nil
			}
		}
	}
}

// checkKwokStages checks that kwok was given its pod-delete stage only
// when asked for.
func checkKwokStages(t *testing.T, p *testbed.Plane, kwokDeletes bool) {
	t.Helper()
	for _, proc := range p.Processes() {
		if proc.Name != "kwok" {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(proc.PID), "cmdline"))
		if err != nil {
			t.Fatal(err)
		}
		args := string(cmdline)
		if given := strings.Contains(args, "/pod-delete.yaml"); given != kwokDeletes {
			t.Errorf("kwok given pod-delete.yaml: %v, want %v", given, kwokDeletes)
		}
		if !strings.Contains(args, "/pod-ready.yaml") {
			t.Error("kwok not given its other pod stages")
		}
		return
	}
	t.Fatal("no kwok process")
}
