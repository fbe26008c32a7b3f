package eventloop

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// A producer is never blocked, even while every executor slot is busy with
// a slow effect and the loop itself is busy: the inbox takes 100k signals
// from several goroutines and merges them.
func TestNotifyNeverBlocks(t *testing.T) {
	const (
		workers   = 2
		producers = 8
		perProd   = 12500
		clusters  = 10
	)
	names := []string{"spec", "pods", "svc"}
	release := make(chan struct{})
	started := make(chan string, workers+1)
	g := newGate()
	rec := newRecorder(func(ev Event) Outcome {
		switch {
		case g.handle(ev):
		case ev.Kind == Signal && strings.HasPrefix(ev.Key, "slow"):
			return Outcome{Plan: plan(1, step("slow", func(context.Context) error {
				started <- ev.Key
				<-release // ignores its context: as slow as it gets
				return nil
			}))}
		}
		return Outcome{}
	})
	l := startLoop(t, rec, Options{Workers: workers})

	for i := range workers + 1 {
		l.Notify(fmt.Sprintf("slow%d/c", i), "start") // namespaces of their own: one's plans never fill the pool
	}
	for range workers {
		recv(t, started, "a slow plan to start")
	}
	// Every worker is busy, one plan waits for a worker, and the loop is
	// held inside Handle.
	g.hold(t, l)

	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProd {
				l.Notify(fmt.Sprintf("c/%d", (p+i)%clusters), names[i%len(names)])
			}
		})
	}
	returned := make(chan struct{})
	go func() { wg.Wait(); close(returned) }()
	recv(t, returned, "every Notify to return")

	distinct := clusters * len(names)
	st := l.Stats()
	if st.InboxDepth != distinct {
		t.Errorf("inbox depth %d, want %d (one per cluster and signal name)", st.InboxDepth, distinct)
	}
	if want := uint64(producers*perProd - distinct); st.Coalesced != want {
		t.Errorf("coalesced %d, want %d", st.Coalesced, want)
	}

	g.open()
	close(release)
	l.waitIdle(t)
	seen := map[string]int{}
	for _, ev := range rec.snapshot() {
		if strings.HasPrefix(ev.Key, "c/") {
			seen[ev.Key+" "+ev.Name]++
		}
	}
	if len(seen) != distinct {
		t.Errorf("handler saw %d distinct signals, want %d", len(seen), distinct)
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("signal %s delivered %d times, want once", k, n)
		}
	}
	if st := l.Stats(); st.PlansRun != workers+1 {
		t.Errorf("plans run %d, want %d", st.PlansRun, workers+1)
	}
}

// One cluster whose effect hangs until its deadline does not delay another
// cluster's transition. The order of events is asserted with a fake clock
// that only the test moves: B is handled (and, with a worker free, its plan
// done) while A's step is still hanging at t0.
func TestHungEffectDoesNotDelayOtherClusters(t *testing.T) {
	const timeout = 10 * time.Second
	tests := []struct {
		name      string
		workers   int
		slowAfter time.Duration
		// before is what must happen before the clock reaches A's deadline.
		before func(Event) bool
		want   []string
	}{{
		name:    "a worker is free: B's plan completes before A's deadline",
		workers: 2,
		before:  is("b", PlanDone),
		want:    []string{"a signal go", "b signal go", "b planDone", "a planDone"},
	}, {
		// With the hung lane, B's plan starts after SlowAfter
		// (TestHungStepsLeaveTheWorkers); without it, after A's deadline.
		name:      "the only worker hangs, no hung lane: B's transition still happens before A's deadline, its plan after",
		workers:   1,
		slowAfter: -1,
		before:    is("b", Signal),
		want:      []string{"a signal go", "b signal go", "a planDone", "b planDone"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			aStarted := make(chan struct{})
			rec := newRecorder(func(ev Event) Outcome {
				if ev.Kind != Signal {
					return Outcome{}
				}
				if ev.Key == "a" {
					return Outcome{Plan: plan(1, step("hang", func(ctx context.Context) error {
						close(aStarted)
						<-ctx.Done()
						return ctx.Err()
					}))}
				}
				return Outcome{Plan: plan(2, step("quick", ok))}
			})
			l := startLoop(t, rec, Options{Workers: tt.workers, StepTimeout: timeout, SlowAfter: tt.slowAfter})

			l.Notify("a", "go")
			recv(t, aStarted, "A's step to start") // its deadline is armed
			l.Notify("b", "go")
			evs := rec.waitUntil(t, "B progresses", has(tt.before))
			if slices.ContainsFunc(evs, is("a", PlanDone)) {
				t.Fatalf("A's plan finished before its deadline: %v", brief(evs))
			}
			for _, ev := range evs {
				if !ev.At.Equal(t0) {
					t.Errorf("%s at %v: the clock moved", brief([]Event{ev})[0], ev.At.Sub(t0))
				}
			}

			l.clock.Step(timeout)
			l.waitIdle(t)
			evs = rec.snapshot()
			if got := brief(evs); !slices.Equal(got, tt.want) {
				t.Errorf("events %q, want %q", got, tt.want)
			}
			for _, ev := range only(evs, is("a", PlanDone)) {
				if !errors.Is(ev.Err, context.DeadlineExceeded) || !strings.Contains(ev.Err.Error(), "step hang") {
					t.Errorf("A's result %v, want step hang: context deadline exceeded", ev.Err)
				}
			}
			for _, ev := range only(evs, is("b", PlanDone)) {
				if ev.Err != nil {
					t.Errorf("B's result %v, want nil", ev.Err)
				}
			}
		})
	}
}

// A step that reports its deadline its own way (here a derived context's
// Canceled) still reports DeadlineExceeded.
func TestStepDeadlineReportedAsDeadlineExceeded(t *testing.T) {
	started := make(chan struct{})
	rec := newRecorder(func(ev Event) Outcome {
		if ev.Kind != Signal {
			return Outcome{}
		}
		return Outcome{Plan: plan(1, Step{Name: "derived", Timeout: time.Minute, Run: func(ctx context.Context) error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			close(started)
			<-ctx.Done()
			return fmt.Errorf("call: %w", context.Cause(ctx))
		}})}
	})
	l := startLoop(t, rec, Options{StepTimeout: time.Hour})
	l.Notify("a", "go")
	recv(t, started, "the step to start")
	l.clock.Step(time.Minute) // the step's own Timeout, not StepTimeout
	l.waitIdle(t)
	res := only(rec.snapshot(), is("a", PlanDone))
	if len(res) != 1 || !errors.Is(res[0].Err, context.DeadlineExceeded) {
		t.Fatalf("results %v, want one with context.DeadlineExceeded", res)
	}
}

// timerScript is what the scripted cluster's handler returns for a Signal
// name; its epoch is remembered and returned for every other event.
type timerScript struct {
	epoch  int64
	timers []TimerOp
}

func at(d time.Duration) time.Time { return t0.Add(d) }

func set(name string, d time.Duration) TimerOp { return TimerOp{Name: name, Deadline: at(d)} }

func TestTimers(t *testing.T) {
	type action struct {
		notify string        // a script entry to run, or
		step   time.Duration // how far to move the clock
	}
	tests := []struct {
		name          string
		script        map[string]timerScript
		actions       []action
		want          []string // "name@offset" of delivered TimerFired
		wantDropped   uint64
		wantRemaining int
	}{{
		name:    "timers fire in deadline order",
		script:  map[string]timerScript{"set": {1, []TimerOp{set("c", 3*time.Second), set("a", time.Second), set("b", 2*time.Second)}}},
		actions: []action{{notify: "set"}, {step: time.Second}, {step: time.Second}, {step: time.Second}},
		want:    []string{"a@1s", "b@2s", "c@3s"},
	}, {
		name:    "timers due together fire in deadline order",
		script:  map[string]timerScript{"set": {1, []TimerOp{set("c", 3*time.Second), set("a", time.Second), set("b", 2*time.Second)}}},
		actions: []action{{notify: "set"}, {step: time.Hour}},
		want:    []string{"a@1h0m0s", "b@1h0m0s", "c@1h0m0s"},
	}, {
		name:    "equal deadlines fire in the order set",
		script:  map[string]timerScript{"set": {1, []TimerOp{set("y", time.Second), set("x", time.Second)}}},
		actions: []action{{notify: "set"}, {step: time.Second}},
		want:    []string{"y@1s", "x@1s"},
	}, {
		name: "a timer set again replaces the pending one",
		script: map[string]timerScript{
			"set":   {1, []TimerOp{set("t", time.Second)}},
			"reset": {1, []TimerOp{set("t", 5*time.Second)}},
		},
		actions:       []action{{notify: "set"}, {notify: "reset"}, {step: 2 * time.Second}, {step: 3 * time.Second}},
		want:          []string{"t@5s"},
		wantRemaining: 0,
	}, {
		name: "a cancelled timer does not fire",
		script: map[string]timerScript{
			"set":    {1, []TimerOp{set("t", time.Second), set("u", 2*time.Second)}},
			"cancel": {1, []TimerOp{{Name: "t", Cancel: true}, {Name: "unknown", Cancel: true}}},
		},
		actions: []action{{notify: "set"}, {notify: "cancel"}, {step: time.Hour}},
		want:    []string{"u@1h0m0s"},
	}, {
		name:    "a deadline in the past fires at once",
		script:  map[string]timerScript{"set": {1, []TimerOp{set("past", -time.Second), set("now", 0)}}},
		actions: []action{{notify: "set"}},
		want:    []string{"past@0s", "now@0s"},
	}, {
		name: "an epoch change drops the timers of the old epoch",
		script: map[string]timerScript{
			"set":  {1, []TimerOp{set("old", time.Second), set("older", time.Hour)}},
			"bump": {2, []TimerOp{set("new", 2*time.Second)}},
		},
		actions:     []action{{notify: "set"}, {notify: "bump"}, {step: 2 * time.Hour}},
		want:        []string{"new@2h0m0s"},
		wantDropped: 2,
	}, {
		name: "the zero Outcome is epoch 0 and drops the timers",
		script: map[string]timerScript{
			"set":  {1, []TimerOp{set("t", time.Second)}},
			"zero": {},
		},
		actions:     []action{{notify: "set"}, {notify: "zero"}, {step: time.Hour}},
		wantDropped: 1,
	}, {
		name:          "timers not yet due stay pending",
		script:        map[string]timerScript{"set": {1, []TimerOp{set("soon", time.Second), set("later", time.Hour)}}},
		actions:       []action{{notify: "set"}, {step: time.Minute}},
		want:          []string{"soon@1m0s"},
		wantRemaining: 1,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var epoch int64 // only touched on the loop goroutine
			rec := newRecorder(func(ev Event) Outcome {
				if ev.Kind == Signal {
					s := tt.script[ev.Name]
					epoch = s.epoch
					return Outcome{Epoch: epoch, Timers: s.timers}
				}
				return Outcome{Epoch: epoch}
			})
			l := startLoop(t, rec, Options{})
			for _, a := range tt.actions {
				if a.notify != "" {
					l.Notify("c", a.notify)
				} else {
					l.clock.Step(a.step)
				}
				l.waitIdle(t)
			}
			var got []string
			for _, ev := range only(rec.snapshot(), is("c", TimerFired)) {
				got = append(got, fmt.Sprintf("%s@%v", ev.Name, ev.At.Sub(t0)))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("fired %q, want %q", got, tt.want)
			}
			st := l.Stats()
			if st.TimersDropped != tt.wantDropped || st.Timers != tt.wantRemaining || st.StaleTimers != 0 {
				t.Errorf("dropped %d pending %d stale %d, want %d, %d and 0",
					st.TimersDropped, st.Timers, st.StaleTimers, tt.wantDropped, tt.wantRemaining)
			}
		})
	}
}

// A timer that has fired but whose event still waits in the inbox is not
// delivered when, before it is dispatched, the cluster's epoch changes or
// the timer is set again: the second defence against stale timers.
func TestFiredTimerMadeStaleBeforeDispatch(t *testing.T) {
	tests := []struct {
		name      string
		then      timerScript // the Outcome of the signal queued ahead of the firing
		want      []string
		wantStale uint64
	}{{
		name:      "epoch changed",
		then:      timerScript{epoch: 2},
		wantStale: 1,
	}, {
		name:      "set again",
		then:      timerScript{epoch: 1, timers: []TimerOp{set("t", 2*time.Second)}},
		want:      []string{"t@2s"},
		wantStale: 1,
	}, {
		name:      "cancelled",
		then:      timerScript{epoch: 1, timers: []TimerOp{{Name: "t", Cancel: true}}},
		wantStale: 1,
	}, {
		name: "unchanged",
		then: timerScript{epoch: 1},
		want: []string{"t@1s"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate()
			var epoch int64
			rec := newRecorder(func(ev Event) Outcome {
				if g.handle(ev) {
					return Outcome{}
				}
				switch {
				case ev.Kind == Signal && ev.Name == "set":
					epoch = 1
					return Outcome{Epoch: 1, Timers: []TimerOp{set("t", time.Second)}}
				case ev.Kind == Signal && ev.Name == "then":
					epoch = tt.then.epoch
					return Outcome{Epoch: epoch, Timers: tt.then.timers}
				}
				return Outcome{Epoch: epoch}
			})
			l := startLoop(t, rec, Options{})
			l.Notify("c", "set")
			l.waitIdle(t)

			// With the loop held, queue the signal, then let the timer
			// come due: the loop fires it behind the signal.
			g.hold(t, l)
			l.Notify("c", "then")
			l.clock.Step(time.Second)
			g.open()
			l.waitIdle(t)
			l.clock.Step(time.Second)
			l.waitIdle(t)

			var got []string
			for _, ev := range only(rec.snapshot(), is("c", TimerFired)) {
				got = append(got, fmt.Sprintf("%s@%v", ev.Name, ev.At.Sub(t0)))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("fired %q, want %q", got, tt.want)
			}
			if st := l.Stats(); st.StaleTimers != tt.wantStale {
				t.Errorf("stale timers %d, want %d", st.StaleTimers, tt.wantStale)
			}
		})
	}
}

// At most one plan per cluster is in flight; a newer plan waits and
// supersedes the one already waiting; clusters run plans in parallel.
func TestOnePlanInFlightPerCluster(t *testing.T) {
	var (
		inFlight = map[string]*atomic.Int32{"a": {}, "b": {}}
		maxSeen  atomic.Int32
		started  = make(chan string, 10)
		release  = map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	)
	rec := newRecorder(func(ev Event) Outcome {
		if ev.Kind != Signal {
			return Outcome{}
		}
		var id uint64
		fmt.Sscan(ev.Name, &id)
		key := ev.Key
		return Outcome{Plan: plan(id, step("work", func(context.Context) error {
			n := inFlight[key].Add(1)
			defer inFlight[key].Add(-1)
			for m := maxSeen.Load(); n > m && !maxSeen.CompareAndSwap(m, n); m = maxSeen.Load() {
			}
			started <- fmt.Sprintf("%s %d", key, id)
			<-release[key]
			return nil
		}))}
	})
	l := startLoop(t, rec, Options{Workers: 4})

	l.Notify("a", "1")
	l.Notify("b", "1")
	got := []string{recv(t, started, "a plan to start"), recv(t, started, "a plan to start")}
	slices.Sort(got)
	if want := []string{"a 1", "b 1"}; !slices.Equal(got, want) {
		t.Fatalf("started %q, want %q in parallel", got, want)
	}
	l.Notify("a", "2")
	l.Notify("a", "3") // supersedes 2, still waiting
	rec.waitUntil(t, "a's signal 3 is handled", has(func(ev Event) bool { return ev.Key == "a" && ev.Name == "3" }))
	close(release["a"])
	close(release["b"])
	l.waitIdle(t)

	var ids []uint64
	for _, ev := range only(rec.snapshot(), is("a", PlanDone)) {
		ids = append(ids, ev.PlanID)
	}
	if want := []uint64{1, 3}; !slices.Equal(ids, want) {
		t.Errorf("a's plans done %v, want %v (2 superseded)", ids, want)
	}
	if m := maxSeen.Load(); m != 1 {
		t.Errorf("max plans in flight for one cluster %d, want 1", m)
	}
	st := l.Stats()
	if st.PlansSuperseded != 1 || st.PlansRun != 3 || st.PlansRunning != 0 || st.PlansWaiting != 0 {
		t.Errorf("stats %+v, want 1 superseded, 3 run, none running or waiting", st)
	}
}

func TestCancelInFlight(t *testing.T) {
	tests := []struct {
		name          string
		cancel        Outcome
		wantDone      []uint64
		wantCancelled uint64
	}{{
		name:          "cancels the running plan and drops the waiting one",
		cancel:        Outcome{CancelInFlight: true},
		wantDone:      []uint64{1},
		wantCancelled: 2,
	}, {
		name:          "then runs the plan given with it",
		cancel:        Outcome{CancelInFlight: true, Plan: plan(3, step("after", ok))},
		wantDone:      []uint64{1, 3},
		wantCancelled: 2,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			started := make(chan struct{})
			rec := newRecorder(func(ev Event) Outcome {
				if ev.Kind != Signal {
					return Outcome{}
				}
				switch ev.Name {
				case "run":
					return Outcome{Plan: plan(1, step("wait", func(ctx context.Context) error {
						close(started)
						<-ctx.Done()
						return ctx.Err()
					}))}
				case "queue":
					return Outcome{Plan: plan(2, step("never", func(context.Context) error {
						panic("a dropped plan ran")
					}))}
				}
				return tt.cancel
			})
			l := startLoop(t, rec, Options{})
			l.Notify("a", "run")
			recv(t, started, "the plan to start")
			l.Notify("a", "queue")
			l.Notify("a", "cancel")
			l.waitIdle(t)

			var ids []uint64
			for _, ev := range only(rec.snapshot(), is("a", PlanDone)) {
				ids = append(ids, ev.PlanID)
				if ev.PlanID == 1 && !errors.Is(ev.Err, context.Canceled) {
					t.Errorf("plan 1 result %v, want context.Canceled", ev.Err)
				}
			}
			if !slices.Equal(ids, tt.wantDone) {
				t.Errorf("plans done %v, want %v", ids, tt.wantDone)
			}
			if st := l.Stats(); st.PlansCancelled != tt.wantCancelled || st.Panics != 0 {
				t.Errorf("cancelled %d panics %d, want %d and 0", st.PlansCancelled, st.Panics, tt.wantCancelled)
			}
		})
	}
}

// Forget drops the cluster's timers at once and the rest when its last
// plan is done; that plan's result is still delivered.
func TestForget(t *testing.T) {
	release := make(chan struct{})
	rec := newRecorder(func(ev Event) Outcome {
		switch {
		case ev.Kind == Signal && ev.Name == "up":
			return Outcome{Epoch: 1, Timers: []TimerOp{set("t", time.Minute)}}
		case ev.Kind == Signal && ev.Name == "gone":
			return Outcome{Epoch: 1, Forget: true, Plan: plan(9, step("cleanup", func(context.Context) error {
				<-release
				return nil
			}))}
		}
		return Outcome{Epoch: 1}
	})
	l := startLoop(t, rec, Options{})
	l.Notify("a", "up")
	l.waitIdle(t)
	if st := l.Stats(); st.Clusters != 1 || st.Timers != 1 {
		t.Fatalf("stats %+v, want 1 cluster with 1 timer", st)
	}
	l.Notify("a", "gone")
	rec.waitUntil(t, "gone is handled", has(func(ev Event) bool { return ev.Name == "gone" }))
	close(release)
	l.waitIdle(t)
	// The cleanup's result is delivered; the record goes once its Outcome
	// is applied (the Forget still pending: it set no timer or plan).
	if got := brief(rec.snapshot()); !slices.Equal(got, []string{"a signal up", "a signal gone", "a planDone"}) {
		t.Errorf("events %q", got)
	}
	if st := l.Stats(); st.Clusters != 0 {
		t.Errorf("clusters %d after the forgotten cluster's plan, want 0", st.Clusters)
	}
	l.clock.Step(time.Hour)
	l.waitIdle(t)
	if fired := only(rec.snapshot(), is("a", TimerFired)); len(fired) != 0 {
		t.Errorf("timer of a forgotten cluster fired: %v", brief(fired))
	}
	if st := l.Stats(); st.TimersDropped != 1 || st.Timers != 0 {
		t.Errorf("dropped %d pending %d, want 1 and 0", st.TimersDropped, st.Timers)
	}
}

func TestForgetLeavesNoState(t *testing.T) {
	epochs := map[string]int64{} // the handler's state, on the loop goroutine
	rec := newRecorder(func(ev Event) Outcome {
		switch {
		case ev.Kind == Signal && ev.Name == "up":
			epochs[ev.Key] = 3
			return Outcome{Epoch: 3, Timers: []TimerOp{set("t", time.Minute)}, Plan: plan(1, step("x", ok))}
		case ev.Kind == Signal && ev.Name == "gone":
			delete(epochs, ev.Key)
			return Outcome{Epoch: 4, Forget: true}
		}
		return Outcome{Epoch: epochs[ev.Key]} // zero for a forgotten cluster
	})
	l := startLoop(t, rec, Options{})
	for i := range 100 {
		l.Notify(fmt.Sprintf("c/%d", i), "up")
	}
	l.waitIdle(t)
	if st := l.Stats(); st.Clusters != 100 {
		t.Fatalf("clusters %d, want 100", st.Clusters)
	}
	for i := range 100 {
		l.Notify(fmt.Sprintf("c/%d", i), "gone")
	}
	l.waitIdle(t)
	if st := l.Stats(); st.Clusters != 0 || st.Timers != 0 {
		t.Errorf("after Forget: %d clusters, %d timers, want none", st.Clusters, st.Timers)
	}
}

// A panic in Handle is contained: the loop goes on, other clusters
// progress, the handler gets a Panicked event, and a panic while handling
// that is only logged.
func TestPanicInHandleIsContained(t *testing.T) {
	log, hook := logtest.NewNullLogger()
	g := newGate()
	rec := newRecorder(func(ev Event) Outcome {
		switch {
		case g.handle(ev):
		case ev.Key == "bad" && ev.Kind == Signal:
			panic("boom")
		case ev.Key == "worse":
			panic("always") // also on Panicked
		}
		return Outcome{}
	})
	l := startLoop(t, rec, Options{Log: log})
	g.hold(t, l) // so that the three signals are dispatched together
	l.Notify("bad", "spec")
	l.Notify("worse", "spec")
	l.Notify("good", "spec")
	g.open()
	l.waitIdle(t)
	l.Notify("good", "again") // the loop still runs
	l.waitIdle(t)

	evs := only(rec.snapshot(), notGate)
	want := []string{"bad signal spec", "worse signal spec", "good signal spec", "bad panicked", "worse panicked", "good signal again"}
	if got := brief(evs); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	for _, ev := range only(evs, is("bad", Panicked)) {
		var pe *PanicError
		if !errors.As(ev.Err, &pe) || pe.Value != "boom" || len(pe.Stack) == 0 {
			t.Errorf("Panicked err %v, want a *PanicError for boom with a stack", ev.Err)
		}
	}
	if st := l.Stats(); st.Panics != 3 {
		t.Errorf("panics %d, want 3", st.Panics)
	}
	var logged []string
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.ErrorLevel {
			logged = append(logged, fmt.Sprint(e.Data["cluster"]))
		}
	}
	if want := []string{"bad", "worse", "worse"}; !slices.Equal(logged, want) {
		t.Errorf("errors logged for clusters %q, want %q", logged, want)
	}
}

var errKaboom = errors.New("kaboom")

// A panic in a step fails its plan with a *PanicError, lets Always steps
// run, is followed by a Panicked event, and leaves the worker and the
// loop running.
func TestPanicInStepIsContained(t *testing.T) {
	var cleanedUp atomic.Bool
	var l *testLoop
	g := newGate()
	rec := newRecorder(func(ev Event) Outcome {
		if g.handle(ev) || ev.Kind != Signal {
			return Outcome{}
		}
		if ev.Key == "bad" {
			return Outcome{Plan: plan(7,
				step("explode", func(context.Context) error {
					// The loop may start bad's plan before it has
					// queued good's: wait for that, or bad would
					// see no cluster waiting and not pause.
					waitFor(t, func() bool { return l.Stats().PlansWaiting > 0 }, "good's plan to wait")
					panic(errKaboom)
				}),
				step("skipped", func(context.Context) error { panic("skipped step ran") }),
				Step{Name: "status", Always: true, Run: func(context.Context) error { cleanedUp.Store(true); return nil }},
			)}
		}
		return Outcome{Plan: plan(1, step("fine", ok))}
	})
	l = startLoop(t, rec, Options{Workers: 1})
	g.hold(t, l) // so that both signals are dispatched before any result
	l.Notify("bad", "go")
	l.Notify("good", "go")
	g.open()
	l.waitIdle(t)

	evs := only(rec.snapshot(), notGate)
	// One worker: bad's plan pauses after its first step, good waiting,
	// and good's one step goes before bad's status step.
	want := []string{"bad signal go", "good signal go", "good planDone", "bad planDone", "bad panicked"}
	if got := brief(evs); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	for _, ev := range only(evs, func(ev Event) bool { return ev.Key == "bad" && ev.Kind != Signal }) {
		var pe *PanicError
		if !errors.As(ev.Err, &pe) || !errors.Is(ev.Err, errKaboom) ||
			!strings.Contains(ev.Err.Error(), "step explode: panic: kaboom") || ev.PlanID != 7 {
			t.Errorf("%s: err %v plan %d, want step explode's *PanicError for plan 7", ev.Kind, ev.Err, ev.PlanID)
		}
	}
	if !cleanedUp.Load() {
		t.Error("the Always step did not run after the panic")
	}
	if st := l.Stats(); st.Panics != 1 || st.PlansFailed != 1 || st.PlansRun != 2 {
		t.Errorf("stats %+v, want 1 panic, 1 failed of 2 run", st)
	}
}

// Signals of one name for a cluster merge while they wait, different names
// do not, and a cluster flooding events does not starve the others.
func TestCoalescingAndFairness(t *testing.T) {
	g := newGate()
	rec := newRecorder(func(ev Event) Outcome {
		g.handle(ev)
		return Outcome{}
	})
	l := startLoop(t, rec, Options{})
	g.hold(t, l)
	for i := range 1000 {
		l.Notify("flood", fmt.Sprint(i)) // 1000 names: nothing to merge
		l.Notify("a", "spec")
		l.Notify("a", "pods")
	}
	l.Notify("b", "spec")
	g.open()
	l.waitIdle(t)

	evs := only(rec.snapshot(), notGate)
	if n := len(evs); n != 1003 {
		t.Fatalf("dispatched %d events, want 1003", n)
	}
	if got, want := brief(evs[:5]), []string{"flood signal 0", "a signal spec", "b signal spec", "flood signal 1", "a signal pods"}; !slices.Equal(got, want) {
		t.Errorf("first events %q, want %q: clusters take turns", got, want)
	}
	if st := l.Stats(); st.Coalesced != 2*999 {
		t.Errorf("coalesced %d, want %d", st.Coalesced, 2*999)
	}
}

// The lag is how long an event waited in the inbox by the loop's clock.
func TestLagAndObserve(t *testing.T) {
	g := newGate()
	var mu sync.Mutex
	lags := map[Kind][]time.Duration{}
	var names []string
	rec := newRecorder(func(ev Event) Outcome {
		g.handle(ev)
		return Outcome{}
	})
	l := startLoop(t, rec, Options{Observe: func(k Kind, name string, lag time.Duration) {
		mu.Lock()
		lags[k] = append(lags[k], lag)
		names = append(names, name)
		mu.Unlock()
	}})
	g.hold(t, l)
	l.Notify("a", "spec")
	l.clock.Step(5 * time.Second)
	l.Notify("a", "spec") // merged: the lag counts from the first
	g.open()
	l.waitIdle(t)
	st := l.Stats()
	if st.LagMax != 5*time.Second || st.LagLast != 5*time.Second || st.Dispatched != 2 {
		t.Errorf("lag last %v max %v dispatched %d, want 5s, 5s, 2", st.LagLast, st.LagMax, st.Dispatched)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []time.Duration{0, 5 * time.Second}; !slices.Equal(lags[Signal], want) {
		t.Errorf("observed %v, want %v", lags[Signal], want)
	}
	if !slices.Equal(names, []string{"hold", "spec"}) { // the gate's signal, then the merged one
		t.Errorf("observed names %q, want the signal's", names)
	}
}

// Run returns when its context is cancelled, after the plan in flight has
// been cancelled and its step returned, and leaves no clock timer behind.
func TestRunStops(t *testing.T) {
	started := make(chan struct{})
	var stepReturned atomic.Bool
	rec := newRecorder(func(ev Event) Outcome {
		if ev.Kind != Signal {
			return Outcome{}
		}
		if ev.Name == "timer" {
			return Outcome{Epoch: 1, Timers: []TimerOp{set("t", time.Hour)}}
		}
		return Outcome{Epoch: 1, Plan: plan(1, step("wait", func(ctx context.Context) error {
			defer stepReturned.Store(true)
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}))}
	})
	l := startLoop(t, rec, Options{Workers: 3})
	l.Notify("a", "timer")
	l.waitIdle(t) // the loop's clock timer is armed
	l.Notify("a", "plan")
	recv(t, started, "the step to start") // its deadline is armed
	if l.clock.Waiters() != 2 {
		t.Fatalf("fake clock waiters %d, want 2 (the loop's timer, the step's deadline)", l.clock.Waiters())
	}

	l.stop() // cancels Run and waits for it to return
	if !stepReturned.Load() {
		t.Error("Run returned before the running step did")
	}
	if n := l.clock.Waiters(); n != 0 {
		t.Errorf("fake clock waiters %d after Run, want 0", n)
	}
	if err := l.WaitIdle(context.Background()); !errors.Is(err, ErrStopped) {
		t.Errorf("WaitIdle after Run: %v, want ErrStopped", err)
	}
	if err := l.Run(context.Background()); err == nil {
		t.Error("second Run: nil error, want one")
	}
	l.Notify("a", "late") // still never blocks
}

// Events posted before Run wait for it.
func TestNotifyBeforeRun(t *testing.T) {
	rec := newRecorder(nil)
	l := New(rec, Options{Log: quietLogger()})
	l.Notify("a", "spec")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(context.Background(), guard)
	defer wcancel()
	if err := l.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := recv(t, done, "Run to return"); err != nil {
		t.Fatal(err)
	}
	if got := brief(rec.snapshot()); !slices.Equal(got, []string{"a signal spec"}) {
		t.Errorf("events %q", got)
	}
}

// An Outcome that sets a timer or a plan without Forget, while a Forget
// waits for the cluster's plan, cancels the Forget: the cluster (e.g.
// re-created under the same name) keeps its new state.
func TestForgetCancelledByNewState(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	rec := newRecorder(func(ev Event) Outcome {
		switch {
		case ev.Kind == Signal && ev.Name == "cleanup":
			return Outcome{Epoch: 1, Forget: true, Plan: plan(1, step("cleanup", func(context.Context) error {
				close(started)
				<-release
				return nil
			}))}
		case ev.Kind == Signal && ev.Name == "recreated":
			return Outcome{Epoch: 2, Timers: []TimerOp{set("timeout", time.Minute)}}
		}
		return Outcome{Epoch: 2}
	})
	l := startLoop(t, rec, Options{})
	l.Notify("a", "cleanup")
	recv(t, started, "the cleanup to start")
	l.Notify("a", "recreated")
	rec.waitUntil(t, "recreated is handled", has(func(ev Event) bool { return ev.Name == "recreated" }))
	close(release)
	l.waitIdle(t)
	l.clock.Step(time.Minute)
	l.waitIdle(t)
	want := []string{"a signal cleanup", "a signal recreated", "a planDone", "a timerFired timeout"}
	if got := brief(rec.snapshot()); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if st := l.Stats(); st.Clusters != 1 {
		t.Errorf("clusters %d, want 1", st.Clusters)
	}
}

// A plan waiting for a free worker can be dropped (CancelInFlight or
// Forget); it never runs and its cluster's state goes once it is gone.
func TestDropPlanWaitingForWorker(t *testing.T) {
	for _, drop := range []Outcome{{CancelInFlight: true}, {Forget: true}} {
		t.Run(fmt.Sprintf("%+v", drop), func(t *testing.T) {
			started := make(chan struct{})
			release := make(chan struct{})
			rec := newRecorder(func(ev Event) Outcome {
				switch {
				case ev.Kind != Signal:
				case ev.Key == "busy":
					return Outcome{Plan: plan(1, step("hold", func(context.Context) error {
						close(started)
						<-release
						return nil
					}))}
				case ev.Name == "plan":
					return Outcome{Plan: plan(2, step("never", func(context.Context) error {
						panic("a dropped plan ran")
					}))}
				case ev.Name == "drop":
					return drop
				}
				return Outcome{}
			})
			l := startLoop(t, rec, Options{Workers: 1})
			l.Notify("busy", "go")
			recv(t, started, "the only worker to be busy")
			l.Notify("b", "plan")
			l.Notify("b", "drop")
			rec.waitUntil(t, "drop is handled", has(func(ev Event) bool { return ev.Name == "drop" }))
			close(release)
			l.waitIdle(t)
			st := l.Stats()
			if st.PlansRun != 1 || st.PlansCancelled != 1 || st.Panics != 0 || st.Clusters != 0 || st.PlansWaiting != 0 {
				t.Errorf("stats %+v, want 1 run, 1 cancelled, no panic, no state left", st)
			}
		})
	}
}

// TestWaitIdleArmsWake checks that when WaitIdle returns, the loop's
// wake-up for its next timer is armed on the clock: a caller that steps a
// fake clock to the next thing due (test/sim reads it off the clock) finds
// it, and the timer fires at its deadline, not at the next step after. The
// clock is slow to make a timer, so that a WaitIdle returning before the
// loop armed it would be seen.
func TestWaitIdleArmsWake(t *testing.T) {
	fc := testingclock.NewFakeClock(t0)
	rec := newRecorder(func(ev Event) Outcome {
		if ev.Kind != Signal {
			return Outcome{Epoch: 1}
		}
		return Outcome{Epoch: 1, Timers: []TimerOp{{Name: "retry", Deadline: t0.Add(time.Second)}}}
	})
	l := startLoop(t, rec, Options{Clock: slowTimerClock{fc}})
	l.Notify("ns/a", "spec")
	l.waitIdle(t)
	if !fc.HasWaiters() {
		t.Fatal("WaitIdle returned before the wake-up for the timer was armed")
	}
	fc.Step(time.Second)
	l.waitIdle(t)
	if evs := only(rec.snapshot(), is("ns/a", TimerFired)); len(evs) != 1 || !evs[0].At.Equal(t0.Add(time.Second)) {
		t.Errorf("timer events %v; want one, fired at its deadline", brief(evs))
	}
}

// slowTimerClock is a fake clock that takes a while to make a timer.
type slowTimerClock struct{ *testingclock.FakeClock }

func (c slowTimerClock) NewTimer(d time.Duration) clock.Timer {
	time.Sleep(20 * time.Millisecond)
	return c.FakeClock.NewTimer(d)
}

// An urgent event that arrives while the loop dispatches a batch waits for
// the rest of that batch only: with a thousand plain events queued (an
// operator's restart resuming every cluster, each dispatch a transition),
// a user's create is dispatched after at most 8 of them (batchSize).
func TestUrgentEventWaitsOneBatch(t *testing.T) {
	g := newGate()
	var l *testLoop
	rec := newRecorder(func(ev Event) Outcome {
		if g.handle(ev) {
			return Outcome{}
		}
		if ev.Key == "ns/c0" {
			// Mid-batch: the loop took c0 and the events after it.
			l.NotifyUrgent("ns/user", "created")
		}
		return Outcome{}
	})
	l = startLoop(t, rec, Options{})
	g.hold(t, l)
	const plain = 1000
	for i := range plain {
		l.Notify(fmt.Sprintf("ns/c%d", i), "resume")
	}
	g.open()
	evs := only(rec.waitUntil(t, "every event dispatched", func(evs []Event) bool {
		return len(evs) == plain+2
	}), notGate)
	at := slices.IndexFunc(evs, func(ev Event) bool { return ev.Key == "ns/user" })
	// 8: the batch, a few milliseconds of resume transitions on a busy
	// machine (at 64, a restart's resume held a create back 85 ms).
	if at < 0 || at > 8 {
		t.Errorf("the urgent event was dispatched after %d plain ones, want at most 8 (one batch)", at)
	}
}
