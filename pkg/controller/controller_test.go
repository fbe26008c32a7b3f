package controller

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// world is the test's stand-in for the informers' caches and the API: it
// serves facts and records what the effects did. The loop calls it from its
// goroutine and its workers; the test from its own.
type world struct {
	mu       sync.Mutex
	facts    map[string]fsm.Facts
	stored   map[string]*v1.PostgresqlStatus
	written  map[string]*v1.PostgresqlStatus
	ensures  map[string]int
	cleanups map[string]int
	// ensure, when set for a cluster, runs inside its ensure step.
	ensure map[string]func(ctx context.Context) error
	// status, when set for a cluster, runs first in its status step: the
	// status is written only when it returns nil.
	status map[string]func() error
	// statusCalls counts the status steps run, written or not.
	statusCalls map[string]int
	// log records ensure starts, state writes and pod replacements, in
	// order.
	log []string
	// replaced lists the pods each cluster's plans replaced, in order.
	replaced map[string][]string
	// rolling and waiting are what the controller's OnRollouts said
	// last; maxRolling the most rolling it said.
	rolling, waiting, maxRolling int
	// changed gets a token after every status write.
	changed chan struct{}
}

func newWorld() *world {
	return &world{
		facts: map[string]fsm.Facts{}, stored: map[string]*v1.PostgresqlStatus{},
		written: map[string]*v1.PostgresqlStatus{}, ensures: map[string]int{}, cleanups: map[string]int{},
		ensure: map[string]func(context.Context) error{}, changed: make(chan struct{}, 1),
		status: map[string]func() error{}, statusCalls: map[string]int{}, replaced: map[string][]string{},
	}
}

func (w *world) Observe(key string) (fsm.Facts, *v1.PostgresqlStatus) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f, ok := w.facts[key]
	if !ok {
		return fsm.Facts{Gone: true}, nil
	}
	return f, w.stored[key]
}

func (w *world) set(key string, f fsm.Facts) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.facts[key] = f
}

func (w *world) state(key string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st := w.written[key]; st != nil {
		return st.State
	}
	return ""
}

func (w *world) Steps(key string, p *fsm.Plan) []eventloop.Step {
	var steps []eventloop.Step
	if p.Status != nil {
		st := p.Status
		steps = append(steps, eventloop.Step{Name: "status", Run: func(context.Context) error {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.statusCalls[key]++
			if fn := w.status[key]; fn != nil {
				if err := fn(); err != nil {
					return err
				}
			}
			if prev := w.written[key]; prev == nil || prev.State != st.State {
				w.log = append(w.log, key+" "+st.State)
			}
			w.written[key] = st
			select {
			case w.changed <- struct{}{}:
			default:
			}
			return nil
		}})
	}
	if p.Ensure {
		steps = append(steps, eventloop.Step{Name: "ensure", Run: func(ctx context.Context) error {
			w.mu.Lock()
			w.ensures[key]++
			w.log = append(w.log, key+" ensure")
			fn := w.ensure[key]
			w.mu.Unlock()
			if fn != nil {
				return fn(ctx)
			}
			return nil
		}})
	}
	if pods := p.ReplacePods; len(pods) > 0 {
		steps = append(steps, eventloop.Step{Name: "replacePod", Run: func(context.Context) error {
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, pod := range pods {
				w.replaced[key] = append(w.replaced[key], pod.Name)
				w.log = append(w.log, key+" replace "+pod.Name)
			}
			return nil
		}})
	}
	if p.Cleanup {
		steps = append(steps, eventloop.Step{Name: "cleanup", Run: func(context.Context) error {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.cleanups[key]++
			return nil
		}})
	}
	return steps
}

// quiet logs at Info, as the operator does, into nowhere.
func quiet() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return logrus.NewEntry(l)
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

type harness struct {
	t    *testing.T
	w    *world
	clk  *clocktesting.FakeClock
	ctrl *Controller
	loop *eventloop.Loop
	ctx  context.Context
}

func start(t *testing.T, w *world, cfg fsm.Config, workers int) *harness {
	t.Helper()
	return startWith(t, w, cfg, workers, nil)
}

// startWith is start with setup run on the controller and the loop before
// the loop runs.
func startWith(t *testing.T, w *world, cfg fsm.Config, workers int, setup func(*Controller, *eventloop.Loop)) *harness {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	ctrl := New(cfg, w, w, clk, quiet())
	loop := eventloop.New(ctrl, eventloop.Options{Clock: clk, Workers: workers, StepTimeout: 30 * time.Second, Log: quiet()})
	if setup != nil {
		setup(ctrl, loop)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("loop: %v", err)
		}
	})
	return &harness{t: t, w: w, clk: clk, ctrl: ctrl, loop: loop, ctx: ctx}
}

// idle waits until the loop has nothing left to do at the fake clock's time.
func (h *harness) idle() {
	h.t.Helper()
	if err := h.loop.WaitIdle(h.ctx); err != nil {
		h.t.Fatalf("loop never idle: %v", err)
	}
}

func (h *harness) wantState(key, state string) {
	h.t.Helper()
	if got := h.w.state(key); got != state {
		h.t.Fatalf("%s: written state %q, want %q", key, got, state)
	}
}

func ready(gen int64) fsm.Facts {
	return fsm.Facts{Generation: gen, Desired: 2, Ready: 2, Primary: "p-0", ObjectsCurrent: true}
}

func starting(gen int64) fsm.Facts {
	return fsm.Facts{Generation: gen, Desired: 2, ObjectsCurrent: true}
}

func TestLifecycle(t *testing.T) {
	w := newWorld()
	h := start(t, w, fsm.DefaultConfig(), 4)
	w.set("ns/a", starting(1))
	h.loop.Notify("ns/a", "spec")
	h.idle()
	h.wantState("ns/a", fsm.Creating)
	if w.ensures["ns/a"] != 1 {
		t.Errorf("ensures %d, want 1", w.ensures["ns/a"])
	}
	// Pods become Ready: a pod event moves it on, no polling.
	w.set("ns/a", ready(1))
	h.loop.Notify("ns/a", "pods")
	h.idle()
	h.wantState("ns/a", fsm.Running)
	// A spec edit, converged at once.
	w.set("ns/a", ready(2))
	h.loop.Notify("ns/a", "spec")
	h.idle()
	h.wantState("ns/a", fsm.Running)
	st := w.written["ns/a"]
	if st.ObservedGeneration != 2 || len(st.History) != 4 || st.History[2].To != fsm.Updating {
		t.Errorf("status after the edit: generation %d history %+v", st.ObservedGeneration, st.History)
	}
	// Deletion: cleanup, then the cluster is forgotten once it is gone.
	f := ready(2)
	f.Deleting = true
	w.set("ns/a", f)
	h.loop.Notify("ns/a", "spec")
	h.idle()
	if w.cleanups["ns/a"] != 1 {
		t.Fatalf("cleanups %d, want 1", w.cleanups["ns/a"])
	}
	if h.ctrl.Len() != 0 {
		t.Errorf("controller still holds %d machines", h.ctrl.Len())
	}
	if s := h.loop.Stats(); s.Timers != 0 {
		t.Errorf("%d timers left after delete", s.Timers)
	}
}

// The plans of a user's actions, and of the rest of a create, reach the
// loop urgent, the others as background work; the rest of a create also
// continues begun work (eventloop.Plan.Continues).
func TestPlanUrgency(t *testing.T) {
	w := newWorld()
	c := New(fsm.DefaultConfig(), w, w, clocktesting.NewFakeClock(t0), quiet())
	deleting := ready(2)
	deleting.Deleting = true
	var last uint64 // the latest plan
	for _, step := range []struct {
		what   string
		facts  fsm.Facts
		done   bool  // the latest plan reports, rather than a spec signal
		err    error // its error
		urgent bool
		cont   bool
	}{
		{what: "created", facts: starting(1), urgent: true},
		{what: "pods Ready while the create's ensure runs", facts: ready(1), urgent: false},
		{what: "the create's ensure done: the create's end", facts: ready(1), done: true, urgent: true, cont: true},
		{what: "spec edited", facts: ready(2), urgent: true},
		{what: "the edit's ensure failed", facts: ready(2), done: true, err: errors.New("forbidden"), urgent: false},
		{what: "deleted", facts: deleting, urgent: true},
	} {
		w.set("ns/a", step.facts)
		ev := eventloop.Event{Key: "ns/a", Kind: eventloop.Signal, Name: "spec", At: t0}
		if step.done {
			ev = eventloop.Event{Key: "ns/a", Kind: eventloop.PlanDone, PlanID: last, Err: step.err, At: t0}
		}
		out := c.Handle(ev)
		if out.Plan == nil {
			t.Fatalf("%s: no plan", step.what)
		}
		last = out.Plan.ID
		if out.Plan.Urgent != step.urgent || out.Plan.Continues != step.cont {
			t.Errorf("%s: plan urgent %v, continues %v; want %v, %v", step.what, out.Plan.Urgent, out.Plan.Continues, step.urgent, step.cont)
		}
	}
}

func TestTimeoutIsATimer(t *testing.T) {
	w := newWorld()
	cfg := fsm.DefaultConfig()
	h := start(t, w, cfg, 4)
	f := starting(1)
	f.StuckReason, f.Stuck = "Unschedulable", "0/3 nodes are available: 3 Insufficient cpu"
	w.set("ns/stuck", f)
	h.loop.Notify("ns/stuck", "spec")
	h.idle()
	h.wantState("ns/stuck", fsm.Creating)
	h.clk.Step(cfg.CreateTimeout - time.Second)
	h.idle()
	h.wantState("ns/stuck", fsm.Creating)
	h.clk.Step(2 * time.Second)
	h.idle()
	h.wantState("ns/stuck", fsm.Degraded)
	if got := w.written["ns/stuck"].Message; got != f.Stuck {
		t.Errorf("message %q, want the concrete cause", got)
	}
	// The cause goes away: a pod event brings it back at once.
	w.set("ns/stuck", ready(1))
	h.loop.Notify("ns/stuck", "pods")
	h.idle()
	h.wantState("ns/stuck", fsm.Running)
}

// TestResumeFromStatus restarts the controller on a stored status: the
// timeout fires at the deadline the previous process set, not a new one.
func TestResumeFromStatus(t *testing.T) {
	w := newWorld()
	cfg := fsm.DefaultConfig()
	deadline := t0.Add(3 * time.Minute)
	w.stored["ns/a"] = &v1.PostgresqlStatus{State: fsm.Creating, Epoch: 4, ObservedGeneration: 1,
		Timers: []v1.Timer{{Name: fsm.TimerTimeout, Deadline: metav1.NewTime(deadline), Epoch: 4}}}
	w.set("ns/a", starting(1))
	h := start(t, w, cfg, 4)
	h.loop.Notify("ns/a", "spec")
	h.idle()
	h.wantState("ns/a", fsm.Creating)
	if w.ensures["ns/a"] != 1 {
		t.Errorf("resume did not re-plan the ensure effects")
	}
	h.clk.Step(3 * time.Minute)
	h.idle()
	h.wantState("ns/a", fsm.Degraded)
}

// TestHungEffectsDoNotDelayOtherClusters: cluster A's ensure hangs until
// its deadline; B, created afterwards in another namespace, reaches
// Running first, by the order of what happened, not by wall time. (With
// the 2 workers here, one namespace's plans hold one at most: a cluster of
// A's namespace would wait for A's plan to be detached, after SlowAfter,
// on a clock this test does not move.)
func TestHungEffectsDoNotDelayOtherClusters(t *testing.T) {
	w := newWorld()
	cfg := fsm.DefaultConfig()
	h := start(t, w, cfg, 2)
	aStarted := make(chan struct{})
	w.ensure["ns/a"] = func(ctx context.Context) error {
		close(aStarted)
		<-ctx.Done()
		return ctx.Err()
	}
	w.set("ns/a", starting(1))
	h.loop.Notify("ns/a", "spec")
	w.set("other/b", starting(1))
	h.loop.Notify("other/b", "spec")
	h.loop.Notify("other/b", "pods")
	// B's pods become Ready while A's ensure still hangs.
	w.set("other/b", ready(1))
	h.loop.Notify("other/b", "pods")
	for w.state("other/b") != fsm.Running {
		select {
		case <-h.ctx.Done():
			t.Fatalf("b never Running while a's effects hang")
		case <-w.changed:
		}
	}
	// A's status step may not have run yet (another worker): nil is fine.
	w.mu.Lock()
	aStatus := w.written["ns/a"]
	w.mu.Unlock()
	if aStatus != nil && aStatus.Reason == fsm.ReasonEffectsFailed {
		t.Fatal("a's ensure finished before b was Running")
	}
	// Now A's step deadline passes: its plan fails and it retries. The
	// deadline is armed on the fake clock when the step starts, so the
	// clock moves only once it has (on two busy cores it may not yet have).
	select {
	case <-aStarted:
	case <-h.ctx.Done():
		t.Fatal("a's ensure never started")
	}
	h.clk.Step(30 * time.Second)
	h.idle()
	w.mu.Lock()
	defer w.mu.Unlock()
	if got := w.written["ns/a"]; got.Reason != fsm.ReasonEffectsFailed || !strings.Contains(got.Message, "deadline exceeded") {
		t.Errorf("a after its deadline: %s %q", got.Reason, got.Message)
	}
}

func TestPanicInEffectIsRecorded(t *testing.T) {
	w := newWorld()
	h := start(t, w, fsm.DefaultConfig(), 2)
	w.ensure["ns/a"] = func(context.Context) error { panic("nil map write") }
	w.set("ns/a", starting(1))
	w.set("ns/b", starting(1))
	h.loop.Notify("ns/a", "spec")
	h.loop.Notify("ns/b", "spec")
	h.idle()
	h.wantState("ns/a", fsm.Degraded)
	h.wantState("ns/b", fsm.Creating)
	if st := w.written["ns/a"]; st.Reason != fsm.ReasonPanic {
		t.Errorf("a: reason %q message %q", st.Reason, st.Message)
	}
	if h.loop.Stats().Panics == 0 {
		t.Error("panic not counted")
	}
}

// TestFailingStatusWritesBackOff: while the API server refuses a Running
// cluster's status writes, the writes are retried with the retry timer's
// backoff, not as fast as the loop gets their failures back (which would
// spend the client rate limiter every other cluster shares); once it
// accepts them again, the latest status is written and the cluster is
// Running again, having been Degraded once.
func TestFailingStatusWritesBackOff(t *testing.T) {
	w := newWorld()
	cfg := fsm.DefaultConfig()
	h := start(t, w, cfg, 4)
	w.set("ns/a", ready(1))
	h.loop.Notify("ns/a", "spec")
	h.idle()
	h.wantState("ns/a", fsm.Running)

	// The API server goes away; a switchover changes the status.
	down := true
	w.mu.Lock()
	before := w.statusCalls["ns/a"]
	w.status["ns/a"] = func() error {
		// A hot loop would never let the loop idle: end it after many
		// writes, so the test fails on the count, not on its deadline.
		if down && w.statusCalls["ns/a"]-before < 500 {
			return errors.New("update status of postgresql ns/a: connect: connection refused")
		}
		return nil
	}
	w.mu.Unlock()
	moved := ready(1)
	moved.Primary = "p-1"
	w.set("ns/a", moved)
	h.loop.Notify("ns/a", "pods")
	h.idle()
	const outage = 10 * time.Minute
	for elapsed := time.Duration(0); elapsed < outage; elapsed += time.Second {
		h.clk.Step(time.Second)
		h.idle()
	}
	w.mu.Lock()
	calls := w.statusCalls["ns/a"] - before
	down = false
	w.mu.Unlock()
	// Delays doubling (at least) from RetryBase: the failed write, the
	// Degraded transition's, then one per retry.
	maxCalls := 2
	for d := cfg.RetryBase; d < outage; d *= 2 {
		maxCalls++
	}
	t.Logf("%d status writes in %s of outage (at most %d)", calls, outage, maxCalls)
	if calls < 3 || calls > maxCalls {
		t.Fatalf("%d status writes in %s of outage, want 3 to %d", calls, outage, maxCalls)
	}

	// The API server is back: the next retry writes the latest status.
	w.mu.Lock()
	before = w.statusCalls["ns/a"]
	w.mu.Unlock()
	written := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.statusCalls["ns/a"] - before
	}
	for elapsed := time.Duration(0); written() == 0 && elapsed <= cfg.RetryMax; elapsed += time.Second {
		h.clk.Step(time.Second)
		h.idle()
	}
	h.wantState("ns/a", fsm.Running)
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.written["ns/a"]
	if st.Primary != "p-1" || st.State != fsm.Running {
		t.Errorf("written %s with primary %q, want the latest: Running, p-1", st.State, st.Primary)
	}
	var history []string
	for _, tr := range st.History {
		history = append(history, tr.Event+" "+tr.From+"->"+tr.To)
	}
	want := []string{"create Pending->Creating", "podsReady Creating->Running", "primaryChanged Running->Running",
		"effectsFailed Running->Degraded", "podsReady Degraded->Running"}
	if !slices.Equal(history, want) {
		t.Errorf("history\n got %q\nwant %q", history, want)
	}
}

// TestLossGraceIsATimer: through the loop, on a fake clock. A switchover
// (no primary for a moment, then the former primary restarting as a
// replica) keeps the cluster Running; a loss that lasts is Degraded when
// the lossGrace timer fires, at its deadline, also after a restart of the
// operator in between.
func TestLossGraceIsATimer(t *testing.T) {
	cfg := fsm.DefaultConfig()
	noPrimary := ready(1)
	noPrimary.Primary, noPrimary.NoPrimary = "", "no member holds Patroni's leader lock (p-leader)"
	moved := ready(1)
	moved.Primary = "p-1"
	rejoining := moved
	rejoining.Ready = 1

	history := func(w *world, key string) []string {
		w.mu.Lock()
		defer w.mu.Unlock()
		var out []string
		for _, tr := range w.written[key].History {
			out = append(out, tr.Event+" "+tr.From+"->"+tr.To)
		}
		return out
	}
	running := []string{"create Pending->Creating", "podsReady Creating->Running"}
	pods := func(h *harness, key string, f fsm.Facts) {
		h.w.set(key, f)
		h.loop.Notify(key, "pods")
		h.idle()
	}

	t.Run("switchover", func(t *testing.T) {
		w := newWorld()
		h := start(t, w, cfg, 4)
		pods(h, "ns/a", ready(1))
		h.wantState("ns/a", fsm.Running)
		for _, f := range []fsm.Facts{noPrimary, moved, rejoining} {
			pods(h, "ns/a", f)
			h.clk.Step(time.Second)
			h.idle()
			h.wantState("ns/a", fsm.Running)
		}
		pods(h, "ns/a", moved)
		if s := h.loop.Stats(); s.Timers != 1 {
			t.Errorf("%d timers pending after the switchover, want resync alone", s.Timers)
		}
		h.clk.Step(cfg.LossGrace)
		h.idle()
		h.wantState("ns/a", fsm.Running)
		want := append(slices.Clone(running), "primaryChanged Running->Running")
		if got := history(w, "ns/a"); !slices.Equal(got, want) {
			t.Errorf("history %q, want %q", got, want)
		}
	})

	t.Run("a loss that lasts, across a restart", func(t *testing.T) {
		w := newWorld()
		h := start(t, w, cfg, 4)
		pods(h, "ns/a", ready(1))
		lost := ready(1)
		lost.Ready = 1
		pods(h, "ns/a", lost)
		h.wantState("ns/a", fsm.Running)
		w.mu.Lock()
		st := w.written["ns/a"].DeepCopy()
		w.mu.Unlock()
		if st.Reason != fsm.ReasonPodsNotReady || st.ReadyInstances != 1 {
			t.Fatalf("during the grace: reason %q ready %d", st.Reason, st.ReadyInstances)
		}
		h.clk.Step(cfg.LossGrace / 2)
		h.idle()

		// A new operator process resumes from the written status.
		w2 := newWorld()
		w2.stored["ns/a"], w2.facts["ns/a"] = st, lost
		h2 := start(t, w2, cfg, 4)
		h2.clk.SetTime(h.clk.Now())
		h2.loop.Notify("ns/a", "spec")
		h2.idle()
		h2.clk.Step(cfg.LossGrace/2 - time.Second)
		h2.idle()
		// Nothing to write yet: the status is the stored one, Running.
		if got := w2.state("ns/a"); got != "" && got != fsm.Running {
			t.Fatalf("written state %q before the grace's deadline", got)
		}
		h2.clk.Step(time.Second)
		h2.idle()
		h2.wantState("ns/a", fsm.Degraded)
		want := append(slices.Clone(running), "podsLost Running->Degraded")
		if got := history(w2, "ns/a"); !slices.Equal(got, want) {
			t.Errorf("history %q, want %q", got, want)
		}
		if got := w2.written["ns/a"].Reason; got != fsm.ReasonPodsNotReady {
			t.Errorf("Degraded with reason %q, want %s", got, fsm.ReasonPodsNotReady)
		}
	})
}

// TestRolloutBudget: five clusters need a rollout of the pods that run
// PostgreSQL at once (an upgrade of pgloop changed their pod template),
// with a budget of two. At most two roll at once; the others wait, with
// the reason RolloutQueued and no timeout, and start as slots free, in the
// order they started waiting: when a cluster finishes (Running), or is
// deleted.
func TestRolloutBudget(t *testing.T) {
	w := newWorld()
	cfg := fsm.DefaultConfig()
	h := startWith(t, w, cfg, 4, func(c *Controller, l *eventloop.Loop) {
		c.SetRolloutBudget(2, l.Notify)
		c.OnRollouts = func(rolling, waiting int) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.rolling, w.waiting, w.maxRolling = rolling, waiting, max(w.maxRolling, rolling)
		}
	})
	keys := []string{"ns/a", "ns/b", "ns/c", "ns/d", "ns/e"}
	pods := func(key string, f fsm.Facts) {
		h.w.set(key, f)
		h.loop.Notify(key, "pods")
		h.idle()
	}
	for _, key := range keys {
		pods(key, ready(1))
		h.wantState(key, fsm.Running)
	}
	// The StatefulSets have the new template: every pod is outdated, the
	// replica p-1 is the first to replace. The clusters see it in order.
	outdated := ready(1)
	outdated.ObjectsCurrent, outdated.Outdated = false, 2
	outdated.Replace, outdated.ReplaceRunning = []fsm.PodRef{{Name: "p-1", UID: "u-1"}}, true
	for _, key := range keys {
		pods(key, outdated)
		h.wantState(key, fsm.Updating)
	}
	// the primary is next: the replica was made anew.
	next := outdated
	next.Outdated, next.RolloutStarted = 1, true
	next.Replace = []fsm.PodRef{{Name: "p-0", UID: "u-0"}}
	deleted := outdated
	deleted.Deleting = true

	w.mu.Lock()
	defer w.mu.Unlock()
	check := func(step string, rolling []string, waiting int) {
		t.Helper()
		var got []string
		for _, key := range keys {
			if st := w.written[key]; st.State == fsm.Updating && st.Reason != fsm.ReasonRolloutQueued && len(w.replaced[key]) > 0 {
				got = append(got, key)
			}
		}
		if !slices.Equal(got, rolling) || w.rolling != len(rolling) || w.waiting != waiting {
			t.Fatalf("%s: rolling %v (%d), %d waiting; want %v, %d waiting", step, got, w.rolling, w.waiting, rolling, waiting)
		}
		for _, key := range keys {
			st := w.written[key]
			if st == nil || slices.Contains(rolling, key) || st.State != fsm.Updating {
				continue
			}
			if st.Reason != fsm.ReasonRolloutQueued || !strings.Contains(st.Message, "at most 2 clusters") {
				t.Errorf("%s: %s waits with reason %s %q", step, key, st.Reason, st.Message)
			}
			if slices.ContainsFunc(st.Timers, func(tm v1.Timer) bool { return tm.Name == fsm.TimerTimeout }) {
				t.Errorf("%s: %s waits with a timeout pending", step, key)
			}
		}
	}
	unlocked := func(fn func()) {
		w.mu.Unlock()
		defer w.mu.Lock()
		fn()
	}
	check("upgrade seen", []string{"ns/a", "ns/b"}, 3)
	// A waiting cluster's own events do not let it jump the line.
	unlocked(func() { pods("ns/e", outdated) })
	check("e looked again", []string{"ns/a", "ns/b"}, 3)

	// a replaces its primary next, holding its slot, then is Running.
	unlocked(func() { pods("ns/a", next) })
	check("a's next step", []string{"ns/a", "ns/b"}, 3)
	unlocked(func() { pods("ns/a", ready(1)) })
	if got := w.written["ns/a"].State; got != fsm.Running {
		t.Fatalf("a %s after its rollout, want Running", got)
	}
	check("a Running", []string{"ns/b", "ns/c"}, 2)
	if st := w.written["ns/c"]; !slices.ContainsFunc(st.Timers, func(tm v1.Timer) bool { return tm.Name == fsm.TimerTimeout }) {
		t.Errorf("c rolls without its timeout: %+v", st.Timers)
	}

	// b is deleted mid-rollout: its slot goes to d.
	unlocked(func() { pods("ns/b", deleted) })
	check("b deleted", []string{"ns/c", "ns/d"}, 1)

	// c finishes, e rolls; then d and e finish.
	unlocked(func() { pods("ns/c", ready(1)) })
	check("c Running", []string{"ns/d", "ns/e"}, 0)
	unlocked(func() {
		pods("ns/d", ready(1))
		pods("ns/e", ready(1))
	})
	check("all Running", nil, 0)

	var order []string
	for _, l := range w.log {
		if key, ok := strings.CutSuffix(l, " replace p-1"); ok {
			order = append(order, key)
		}
	}
	if want := keys; !slices.Equal(order, want) {
		t.Errorf("rollouts started in the order %v, want %v", order, want)
	}
	if w.maxRolling != 2 {
		t.Errorf("at most %d clusters rolled at once, want 2", w.maxRolling)
	}
}
