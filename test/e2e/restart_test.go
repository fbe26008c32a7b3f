package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/testbed"
)

// restartTimeout is the operator's --create-timeout and --update-timeout
// in the restart suite: long enough for the kill and the restart to happen
// well inside it, short enough to see the stuck cluster's deadline pass.
const restartTimeout = 45 * time.Second

// restartDowntime is how long no operator runs between the kill and the
// restart.
const restartDowntime = 15 * time.Second

// restartNodeLabel is carried only by the node the restart suite adds: the
// pods that require it wait for that node.
const restartNodeLabel = "e2e.pgloop.dev/restart-node"

// requireNodeLabel makes a cluster's pods require a node labelled key=true.
func requireNodeLabel(key string) func(*v1.Postgresql) {
	return func(pg *v1.Postgresql) {
		pg.Spec.NodeAffinity = &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"},
				}}}},
			},
		}
	}
}

// timerOf returns the status timer name, or nil.
func timerOf(pg *v1.Postgresql, name string) *v1.Timer {
	for i := range pg.Status.Timers {
		if pg.Status.Timers[i].Name == name {
			return &pg.Status.Timers[i]
		}
	}
	return nil
}

// SIGKILL the operator while one cluster is Creating and another is in the
// middle of a rollout: a new operator resumes both from their status, with
// the timeout deadlines the first one set, and both converge once they can.
// A third cluster that can never converge reaches Degraded at its original
// deadline, not at one counted from the restart.
func TestRestartResumesFromStatus(t *testing.T) {
	ns := env.Namespace(t)
	var nodeAdded string
	t.Cleanup(func() {
		if nodeAdded != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := env.Kube.CoreV1().Nodes().Delete(ctx, nodeAdded, metav1.DeleteOptions{}); IgnoreNotFound(err) != nil {
				t.Errorf("while deleting node %s: %v", nodeAdded, err)
			}
		}
	})
	env.StartLabeller(t, ns)
	flags := []string{"--create-timeout", restartTimeout.String(), "--update-timeout", restartTimeout.String()}
	first := env.StartOperator(t, "first", []string{ns}, flags...)
	ctx := Context(t, 3*restartTimeout+stepDeadline)

	// 1. forever can never schedule; creating waits for the node this test
	// adds later; rolling runs, then its pods are told to move to that
	// node, so the first replaced pod waits for it: a rollout in flight.
	env.CreateCluster(t, ns, "forever", 1, requireNodeLabel(testbed.ImpossibleNodeLabel))
	env.CreateCluster(t, ns, "creating", 1, requireNodeLabel(restartNodeLabel))
	env.CreateCluster(t, ns, "rolling", 2)
	env.MustState(ctx, t, ns, "rolling", fsm.Running)
	if _, err := env.UpdateCluster(ctx, ns, "rolling", requireNodeLabel(restartNodeLabel)); err != nil {
		t.Fatal(err)
	}
	var replaced *corev1.Pod // the first pod of the rollout, waiting for its node
	mustPods(ctx, t, ns, "rolling", func(pods []*corev1.Pod) bool {
		for _, p := range pods {
			if ok, _ := testbed.PodUnschedulable(p); ok && p.Spec.Affinity != nil && p.Spec.Affinity.NodeAffinity != nil {
				replaced = p
				return true
			}
		}
		return false
	})

	before := map[string]*v1.Postgresql{}
	for name, state := range map[string]string{"forever": fsm.Creating, "creating": fsm.Creating, "rolling": fsm.Updating} {
		pg, err := env.WaitCluster(ctx, ns, name, state+" with a timeout timer", func(pg *v1.Postgresql) bool {
			return pg.Status.State == state && pg.Status.ObservedGeneration >= pg.Generation && timerOf(pg, fsm.TimerTimeout) != nil
		})
		if err != nil {
			t.Fatal(err)
		}
		before[name] = pg
	}

	// 2. Crash, some downtime, and a new process. The downtime makes a
	// deadline counted afresh from the restart differ from the original
	// one by more than the tolerance below; it is spent checking that no
	// cluster changes while no operator runs.
	first.Kill()
	killed := time.Now()
	if err := assertQuiet(ctx, ns, restartDowntime); err != nil {
		t.Fatal(err)
	}
	for name := range before {
		// What the dead operator left is what the new one starts from.
		pg, err := env.PG.Postgresqls(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before[name] = pg
		t.Logf("%s at the kill: %s", name, Summary(pg))
	}
	second := env.StartOperator(t, "second", []string{ns}, flags...)
	restarted := time.Now()
	for name := range before {
		if err := second.WaitLog(ctx, fmt.Sprintf("cluster=%s/%s", ns, name)); err != nil {
			t.Fatal(err)
		}
	}

	// 3. The new operator took each cluster up where it was: same state,
	// same epoch, same deadline.
	for name, old := range before {
		pg, err := env.PG.Postgresqls(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		oldTimer, newTimer := timerOf(old, fsm.TimerTimeout), timerOf(pg, fsm.TimerTimeout)
		switch {
		case pg.Status.State != old.Status.State || pg.Status.Epoch != old.Status.Epoch:
			t.Errorf("%s after the restart: %s; before: %s", name, Summary(pg), Summary(old))
		case newTimer == nil || !newTimer.Deadline.Equal(&oldTimer.Deadline) || newTimer.Epoch != oldTimer.Epoch:
			t.Errorf("%s: timeout timer %+v after the restart, %+v before", name, newTimer, oldTimer)
		}
	}

	// 4. The node the pods wait for: creating and rolling converge.
	nodeAdded = "restart-node"
	if _, err := env.Plane.AddNode(ctx, nodeAdded, corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}, map[string]string{restartNodeLabel: "true"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"creating", "rolling"} {
		pg := env.MustState(ctx, t, ns, name, fsm.Running)
		deadline := timerOf(before[name], fsm.TimerTimeout).Deadline
		t.Logf("%s Running %v after the restart (its timeout was %v away at the restart): %s",
			name, time.Since(restarted).Round(time.Millisecond), deadline.Sub(restarted).Round(time.Second), Summary(pg))
	}
	sts, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, cluster.StatefulSetName("rolling"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hash := sts.Spec.Template.Annotations[cluster.AnnotationPodTemplateHash]
	pods := mustPods(ctx, t, ns, "rolling", func(pods []*corev1.Pod) bool {
		if !ReadyPods(2)(pods) {
			return false
		}
		for _, p := range pods {
			if p.Annotations[cluster.AnnotationPodTemplateHash] != hash || p.Spec.NodeName != nodeAdded {
				return false
			}
		}
		return true
	})
	assertOneMaster(t, pods)
	for _, p := range pods {
		// The new operator went on with the rollout; it did not start it
		// over.
		if p.Name == replaced.Name && p.UID != replaced.UID {
			t.Errorf("pod %s, replaced before the kill (uid %s), was replaced again (uid %s)", p.Name, uidOf(replaced.UID), uidOf(p.UID))
		}
	}

	// 5. forever times out at the deadline the first operator set.
	deadline := timerOf(before["forever"], fsm.TimerTimeout).Deadline.Time
	pg, err := env.WaitCluster(ctx, ns, "forever", "Degraded", func(pg *v1.Postgresql) bool { return pg.Status.State == fsm.Degraded })
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	reset := restarted.Add(restartTimeout)
	t.Logf("forever Degraded at deadline %+.1fs (killed %v before the deadline, restarted %v after the kill; a deadline counted from the restart would be %+.1fs): %s",
		at.Sub(deadline).Seconds(), deadline.Sub(killed).Round(time.Second), restarted.Sub(killed).Round(time.Millisecond),
		reset.Sub(deadline).Seconds(), Summary(pg))
	// Deadlines are stored to the second.
	const early, late = time.Second, 8 * time.Second
	if at.Before(deadline.Add(-early)) || at.After(deadline.Add(late)) {
		t.Errorf("forever Degraded at %v, want at its original deadline %v (-%v/+%v)", at.Format(time.RFC3339Nano), deadline.Format(time.RFC3339), early, late)
	}
}

// assertQuiet watches the clusters of ns for d and returns an error if any
// of them changes.
func assertQuiet(ctx context.Context, ns string, d time.Duration) error {
	list, err := env.PG.Postgresqls(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	w, err := env.PG.Postgresqls(ns).Watch(wctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				// The watch ended early (it may): the rest of the window
				// goes unobserved rather than failing the test.
				<-wctx.Done()
				return nil
			}
			if pg, isPG := ev.Object.(*v1.Postgresql); isPG {
				return fmt.Errorf("cluster %s changed (%s) while no operator ran: %s", pg.Name, ev.Type, Summary(pg))
			}
		}
	}
}
