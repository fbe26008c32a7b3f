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
	"k8s.io/apimachinery/pkg/watch"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// TestAcknowledge measures how soon pgloop says Running once Patroni has
// done what an edit asks (issue 32): a parameter Patroni applies with a
// reload, one that takes a restart of each member, and a rollout whose
// primary's pod is replaced after a switchover. Each edit is made a few
// times; the figures (edit → applied, applied → Running) are logged for
// docs/performance.md. Nothing here is timed: the test checks the order
// (Running only once the value is in effect on every member, the last
// restart done, every pod replaced and Ready) on real Patroni and
// PostgreSQL. The pods' watch and the cluster's are not ordered with each
// other: "last pod Ready → Running" may come out a hair below zero.
func TestAcknowledge(t *testing.T) {
	ns := env.Namespace(t)
	ctx := Context(t, 20*time.Minute)
	const name = "ack"

	env.StartOperator(t, "ack", []string{ns})
	env.CreateCluster(t, ns, name, 2, OnProcessNode, func(pg *v1.Postgresql) {
		pg.Spec.PostgreSQL.Parameters["work_mem"] = "4MB"
	})
	inEffect(ctx, t, ns, name, 2)
	pods := podUIDs(ctx, t, ns, name)
	const rounds = 3

	t.Run("a reloadable parameter", func(t *testing.T) {
		var toApplied, toRunning []time.Duration
		for i := range rounds {
			value := fmt.Sprintf("%dMB", 5+i)
			edited, running := edit(ctx, t, ns, name, fmt.Sprintf(`{"spec":{"postgresql":{"parameters":{"work_mem":%q}}}}`, value))
			var applied time.Time
			for _, p := range pods {
				if got := show(ctx, t, ns, p.name, "work_mem"); got != value {
					t.Errorf("pod %s: Running with SHOW work_mem = %s, want %s", p.name, got, value)
				}
				applied = later(applied, sqlTime(ctx, t, ns, p.name, "pg_conf_load_time()"))
			}
			if !applied.Before(running) {
				t.Errorf("Running seen at %v, before the last member reloaded at %v", running, applied)
			}
			toApplied, toRunning = append(toApplied, applied.Sub(edited)), append(toRunning, running.Sub(applied))
			t.Logf("work_mem %s: applied on every member %v after the edit, Running %v after that",
				value, applied.Sub(edited).Round(time.Millisecond), running.Sub(applied).Round(time.Millisecond))
		}
		t.Logf("reload: edit → applied %v; applied → Running %v", rounded(toApplied), rounded(toRunning))
		samePods(ctx, t, ns, name, pods)
	})

	t.Run("a parameter that takes a restart", func(t *testing.T) {
		var toRestarted, toRunning []time.Duration
		for i := range rounds {
			value := fmt.Sprint(110 + 10*i)
			edited, running := edit(ctx, t, ns, name, fmt.Sprintf(`{"spec":{"postgresql":{"parameters":{"max_connections":%q}}}}`, value))
			var restarted time.Time
			for _, p := range pods {
				if got := show(ctx, t, ns, p.name, "max_connections"); got != value {
					t.Errorf("pod %s: Running with SHOW max_connections = %s, want %s", p.name, got, value)
				}
				at := postmasterStart(ctx, t, ns, p.name)
				if !at.After(edited) {
					t.Errorf("pod %s: PostgreSQL not restarted since the edit (started %v)", p.name, at)
				}
				restarted = later(restarted, at)
			}
			if !restarted.Before(running) {
				t.Errorf("Running seen at %v, before the last member restarted at %v", running, restarted)
			}
			toRestarted, toRunning = append(toRestarted, restarted.Sub(edited)), append(toRunning, running.Sub(restarted))
			t.Logf("max_connections %s: the last member restarted %v after the edit, Running %v after that",
				value, restarted.Sub(edited).Round(time.Millisecond), running.Sub(restarted).Round(time.Millisecond))
		}
		t.Logf("restart: edit → last member restarted %v; restarted → Running %v", rounded(toRestarted), rounded(toRunning))
		samePods(ctx, t, ns, name, pods)
	})

	t.Run("a rollout with a switchover", func(t *testing.T) {
		var toPromoted, toDeleted, toRunning []time.Duration
		for i := range rounds {
			before := inEffect(ctx, t, ns, name, 2)
			old := podUIDs(ctx, t, ns, name)
			w := watchPods(ctx, t, ns, name)
			edited, running := edit(ctx, t, ns, name, fmt.Sprintf(`{"spec":{"podAnnotations":{"ack":"r%d"}}}`, i))
			tl := w.stop()
			promoted, deleted, ready := tl.promoted(before.Status.Primary), tl.deleted[before.Status.Primary], tl.lastReady()
			if promoted.IsZero() || deleted.IsZero() || ready.IsZero() {
				t.Fatalf("rollout %d: no switchover then deletion of %s seen (promoted %v, deleted %v, last Ready %v)",
					i+1, before.Status.Primary, promoted, deleted, ready)
			}
			// Running comes once every pod is new and Ready: the pods'
			// watch and the cluster's are not ordered with each other,
			// so the check is on the pods as they are once Running.
			if deleted.Before(promoted) {
				t.Errorf("rollout %d: %s deleted at %v, before another pod was promoted at %v", i+1, before.Status.Primary, deleted, promoted)
			}
			pods, err := env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: cluster.LabelClusterName + "=" + name})
			if err != nil {
				t.Fatal(err)
			}
			for j := range pods.Items {
				p := &pods.Items[j]
				if !podReady(p) || slices.ContainsFunc(old, func(o podID) bool { return o.uid == p.UID }) {
					t.Errorf("rollout %d: Running with pod %s (%s) not replaced or not Ready", i+1, p.Name, p.UID)
				}
			}
			toPromoted = append(toPromoted, promoted.Sub(edited))
			toDeleted, toRunning = append(toDeleted, deleted.Sub(promoted)), append(toRunning, running.Sub(ready))
			t.Logf("rollout %d: the replica promoted %v after the edit; the former primary's pod deleted %v after that; Running %v after the last pod Ready",
				i+1, promoted.Sub(edited).Round(time.Millisecond), deleted.Sub(promoted).Round(time.Millisecond), running.Sub(ready).Round(time.Millisecond))
		}
		t.Logf("switchover: edit → promoted %v; promoted → former primary's pod deleted %v; last pod Ready → Running %v",
			rounded(toPromoted), rounded(toDeleted), rounded(toRunning))
	})
}

// edit patches the cluster and waits, on a watch, for it to run the new
// generation with its configuration applied; it returns when the patch was
// sent and when the watch showed Running.
func edit(ctx context.Context, t *testing.T, ns, name, patch string) (edited, running time.Time) {
	t.Helper()
	edited = time.Now()
	pg, err := env.MergePatchCluster(ctx, ns, name, patch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitCluster(ctx, ns, name, "ran the edit", func(cur *v1.Postgresql) bool {
		st := cur.Status
		done := st.State == fsm.Running && st.ObservedGeneration >= pg.Generation && st.ReadyInstances == 2 &&
			conditionTrue(cur, v1.ConditionConfigApplied)
		if done {
			running = time.Now()
		}
		return done
	}); err != nil {
		t.Fatal(err)
	}
	return edited, running
}

// sqlTime returns a timestamp PostgreSQL gives on pod (expr).
func sqlTime(ctx context.Context, t testing.TB, ns, pod, expr string) time.Time {
	t.Helper()
	var at time.Time
	if err := env.SQL(ctx, t, env.Pod(ctx, t, ns, pod)).QueryRow(ctx, "SELECT "+expr).Scan(&at); err != nil {
		t.Fatalf("pod %s: %s: %v", pod, expr, err)
	}
	return at
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// podTimeline is what a watch of a cluster's pods saw: when each pod name
// first carried the primary's role label, when a pod was deleted and when
// a pod (by UID) became Ready.
type podTimeline struct {
	primaryAt map[string]time.Time // pod name → first seen as the primary
	deleted   map[string]time.Time // pod name → deletion seen
	readyAt   map[string]time.Time // pod UID → first seen Ready
}

// promoted is when a pod other than from was first seen as the primary.
func (tl *podTimeline) promoted(from string) time.Time {
	var at time.Time
	for pod, seen := range tl.primaryAt {
		if pod != from && (at.IsZero() || seen.Before(at)) {
			at = seen
		}
	}
	return at
}

// lastReady is when the last pod to become Ready did.
func (tl *podTimeline) lastReady() time.Time {
	var at time.Time
	for _, seen := range tl.readyAt {
		at = later(at, seen)
	}
	return at
}

type podWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	tl     podTimeline
}

// watchPods records the timeline of the cluster's pods from now on.
func watchPods(ctx context.Context, t *testing.T, ns, name string) *podWatch {
	t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	w := &podWatch{cancel: cancel, done: make(chan struct{}),
		tl: podTimeline{primaryAt: map[string]time.Time{}, deleted: map[string]time.Time{}, readyAt: map[string]time.Time{}}}
	list, err := env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: cluster.LabelClusterName + "=" + name})
	if err != nil {
		t.Fatal(err)
	}
	ready := map[string]bool{}
	for i := range list.Items {
		ready[string(list.Items[i].UID)] = podReady(&list.Items[i])
	}
	wi, err := env.Kube.CoreV1().Pods(ns).Watch(wctx, metav1.ListOptions{LabelSelector: cluster.LabelClusterName + "=" + name,
		ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now := time.Now()
			w.mu.Lock()
			switch {
			case ev.Type == watch.Deleted || p.DeletionTimestamp != nil:
				if _, seen := w.tl.deleted[p.Name]; !seen {
					w.tl.deleted[p.Name] = now
				}
			case p.Labels[cluster.LabelRole] == "master" || p.Labels[cluster.LabelRole] == "primary":
				if _, seen := w.tl.primaryAt[p.Name]; !seen {
					w.tl.primaryAt[p.Name] = now
				}
			}
			if uid := string(p.UID); ev.Type != watch.Deleted && podReady(p) && !ready[uid] {
				ready[uid] = true
				w.tl.readyAt[uid] = now
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// stop ends the watch and returns what it saw.
func (w *podWatch) stop() podTimeline {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tl
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
