package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/testbed"
)

// A FailedCreate Warning older than the cluster's newest pod, as an API
// server restart leaves behind (the StatefulSet controller's "connection
// refused" while it made a pod it made after all), is no reason for a
// Running cluster to be Degraded at once when a pod goes missing later: the
// pod made again within the loss grace is no transition (issue 34; before,
// each such gap within 10 minutes of the Event was a Running -> Degraded
// -> Running flap: 35 in 80 s in issue 15's chaos run).
func TestStaleFailedCreateNoFlap(t *testing.T) {
	ctx := Context(t, 3*time.Minute)
	ns := env.Namespace(t)
	env.StartLabeller(t, ns)
	env.StartOperator(t, "operator", []string{ns}, "--loss-grace", "60s")
	const name = "flap"
	env.CreateCluster(t, ns, name, 2)
	running := func(pg *v1.Postgresql) bool {
		return pg.Status.State == fsm.Running && pg.Status.ReadyInstances == 2
	}
	if _, err := env.WaitCluster(ctx, ns, name, "Running with 2 Ready", running); err != nil {
		t.Fatal(err)
	}
	sts, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	replica := cluster.PodName(name, 1)
	pod, err := env.Kube.CoreV1().Pods(ns).Get(ctx, replica, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The Warning the StatefulSet controller writes, one second older than
	// the newest pod: its cause went away, since the pod was made.
	at := metav1.NewTime(pod.CreationTimestamp.Add(-time.Second))
	msg := fmt.Sprintf("create Pod %s in StatefulSet %s failed error: Post \"https://127.0.0.1:6443/api/v1/namespaces/%s/pods\": dial tcp 127.0.0.1:6443: connect: connection refused", replica, name, ns)
	_, err = env.Kube.CoreV1().Events(ns).Create(ctx, &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: name + ".stale-failedcreate"},
		InvolvedObject: corev1.ObjectReference{Kind: "StatefulSet", APIVersion: "apps/v1", Namespace: ns, Name: name,
			UID: sts.UID, ResourceVersion: sts.ResourceVersion},
		Reason: "FailedCreate", Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "statefulset-controller"},
		FirstTimestamp: at, LastTimestamp: at, Count: 1,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The replica goes missing for a moment, and comes back: as often as
	// it takes pgloop to see the gap (on kwok the StatefulSet controller
	// makes the pod again within milliseconds), at most 3 times.
	for trial := 1; ; trial++ {
		watch := watchStatuses(t, ns, name)
		gone, err := env.Kube.CoreV1().Pods(ns).Get(ctx, replica, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := env.Kube.CoreV1().Pods(ns).Delete(ctx, replica, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		if _, err := testbed.WaitForPod(ctx, env.Kube, ns, replica, func(p *corev1.Pod) (bool, error) {
			if p.UID == gone.UID || p.DeletionTimestamp != nil {
				return false, nil
			}
			return testbed.PodReady(p)
		}); err != nil {
			t.Fatal(err)
		}
		pg, err := env.WaitCluster(ctx, ns, name, "Running with 2 Ready again", func(pg *v1.Postgresql) bool {
			return running(pg) && pg.Status.Reason == fsm.ReasonReady
		})
		if err != nil {
			t.Fatal(err)
		}
		seen := watch()
		t.Logf("trial %d: replica made again and the cluster Ready %v after the deletion; statuses seen: %v; %s",
			trial, time.Since(deleted).Round(time.Millisecond), seen, Summary(pg))
		gap := false
		for _, s := range seen {
			if s.state != fsm.Running {
				t.Fatalf("the cluster went %s while its replica was made again (statuses %v): a stale FailedCreate ended the loss grace", s.state, seen)
			}
			gap = gap || s.reason != fsm.ReasonReady
		}
		if gap {
			return
		}
		if trial == 3 {
			t.Fatalf("pgloop never saw the replica missing or not Ready in %d trials (statuses %v): the test shows nothing", trial, seen)
		}
	}
}

// observed is a state and reason a cluster's status had.
type observed struct{ state, reason string }

func (o observed) String() string { return o.state + "/" + o.reason }

// watchStatuses watches cluster ns/name from now on; the function it
// returns stops the watch and returns every state and reason the cluster
// had, in order, those at the start first.
func watchStatuses(t *testing.T, ns, name string) func() []observed {
	t.Helper()
	ctx, cancel := context.WithCancel(Context(t, 5*time.Minute))
	var (
		mu     sync.Mutex
		states []observed
	)
	synced := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = testbed.WaitFor(ctx, env.Clusters(ns, name), func(pg *v1.Postgresql) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			if len(states) == 0 {
				close(synced)
			}
			if o := (observed{pg.Status.State, pg.Status.Reason}); len(states) == 0 || states[len(states)-1] != o {
				states = append(states, o)
			}
			return false, nil
		})
	}()
	select {
	case <-synced:
	case <-ctx.Done():
		t.Fatalf("no watch of %s/%s: %v", ns, name, ctx.Err())
	}
	return func() []observed {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(states)
	}
}
