package eventloop

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/pgloop/pgloop/pkg/reqclass"
)

func TestRunPlanSteps(t *testing.T) {
	errA := errors.New("a failed")
	errB := errors.New("b failed")
	type stepSpec struct {
		name   string
		always bool
		err    error
		panics bool
	}
	tests := []struct {
		name      string
		cancelled bool // the plan's context is cancelled before it starts
		steps     []stepSpec
		wantRan   []string
		wantErr   error  // errors.Is target; nil for success
		wantMsg   string // the error's text
		wantPanic bool
	}{{
		name:    "steps run in order",
		steps:   []stepSpec{{name: "a"}, {name: "b"}, {name: "c"}},
		wantRan: []string{"a", "b", "c"},
	}, {
		name:    "the first error stops the plan and is wrapped with its step",
		steps:   []stepSpec{{name: "a"}, {name: "b", err: errB}, {name: "c"}},
		wantRan: []string{"a", "b"},
		wantErr: errB,
		wantMsg: "step b: b failed",
	}, {
		name:    "Always steps run after an error, which stays the first",
		steps:   []stepSpec{{name: "a", err: errA}, {name: "b"}, {name: "status", always: true, err: errB}, {name: "d"}},
		wantRan: []string{"a", "status"},
		wantErr: errA,
		wantMsg: "step a: a failed",
	}, {
		name:      "a panic is the step's error",
		steps:     []stepSpec{{name: "a", panics: true}, {name: "b"}, {name: "status", always: true}},
		wantRan:   []string{"a", "status"},
		wantMsg:   "step a: panic: step a",
		wantPanic: true,
	}, {
		name:      "a panic in an Always step is reported, the first error kept",
		steps:     []stepSpec{{name: "a", err: errA}, {name: "status", always: true, panics: true}},
		wantRan:   []string{"a", "status"},
		wantErr:   errA,
		wantMsg:   "step a: a failed",
		wantPanic: true,
	}, {
		name:      "a cancelled plan runs only its Always steps",
		cancelled: true,
		steps:     []stepSpec{{name: "a"}, {name: "status", always: true}},
		wantRan:   []string{"status"},
		wantErr:   context.Canceled,
		wantMsg:   "step a: context canceled",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(newRecorder(nil), Options{Clock: testingclock.NewFakeClock(t0), Log: quietLogger()})
			var ran []string
			p := &Plan{ID: 1}
			for _, s := range tt.steps {
				p.Steps = append(p.Steps, Step{Name: s.name, Always: s.always, Run: func(context.Context) error {
					ran = append(ran, s.name)
					if s.panics {
						panic("step " + s.name)
					}
					return s.err
				}})
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancelled {
				cancel()
			}
			j := job{key: "ns/c", plan: p, ctx: ctx}
			if !l.runPlan(&j) {
				t.Fatal("the plan paused with no other cluster waiting")
			}
			err, panicErr := j.err, j.panicErr
			if !slices.Equal(ran, tt.wantRan) {
				t.Errorf("ran %q, want %q", ran, tt.wantRan)
			}
			switch {
			case tt.wantMsg == "" && err != nil:
				t.Errorf("err %v, want nil", err)
			case tt.wantMsg != "" && (err == nil || err.Error() != tt.wantMsg):
				t.Errorf("err %v, want %q", err, tt.wantMsg)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Errorf("err %v is not %v", err, tt.wantErr)
			}
			var pe *PanicError
			if got := errors.As(panicErr, &pe); got != tt.wantPanic {
				t.Errorf("panic error %v, want one: %v", panicErr, tt.wantPanic)
			}
		})
	}
}

// A step's context has the deadline of its own Timeout or of the default,
// by the loop's clock.
func TestStepDeadline(t *testing.T) {
	fc := testingclock.NewFakeClock(t0)
	l := New(newRecorder(nil), Options{Clock: fc, StepTimeout: 7 * time.Second, Log: quietLogger()})
	var got []time.Duration
	p := plan(1,
		step("default", func(ctx context.Context) error {
			d, _ := ctx.Deadline()
			got = append(got, d.Sub(t0))
			return nil
		}),
		Step{Name: "own", Timeout: time.Minute, Run: func(ctx context.Context) error {
			d, _ := ctx.Deadline()
			got = append(got, d.Sub(t0))
			return ctx.Err()
		}},
	)
	if j := (job{key: "ns/c", plan: p, ctx: context.Background()}); !l.runPlan(&j) || j.err != nil {
		t.Fatal(j.err)
	}
	if want := []time.Duration{7 * time.Second, time.Minute}; !slices.Equal(got, want) {
		t.Errorf("deadlines %v, want %v", got, want)
	}
	if n := fc.Waiters(); n != 0 {
		t.Errorf("%d step deadlines left armed, want 0", n)
	}
}

// A cancelled plan whose deadline then passes still reports Canceled: the
// first cause wins.
func TestStepCancelledThenExpired(t *testing.T) {
	fc := testingclock.NewFakeClock(t0)
	l := New(newRecorder(nil), Options{Clock: fc, StepTimeout: time.Second, Log: quietLogger()})
	ctx, cancel := context.WithCancel(context.Background())
	p := plan(1, step("wait", func(ctx context.Context) error {
		cancel()
		<-ctx.Done()
		fc.Step(time.Second) // the deadline passes after the cancellation
		return ctx.Err()
	}))
	err := runAll(t, l, ctx, p)
	if !errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v, want context.Canceled only", err)
	}
}

// plainClock hides the fake clock's AfterFunc: the executor falls back to a
// timer watched by a goroutine.
type plainClock struct{ clock.WithTicker }

func TestStepDeadlineWithoutAfterFunc(t *testing.T) {
	fc := testingclock.NewFakeClock(t0)
	l := New(newRecorder(nil), Options{Clock: plainClock{fc}, StepTimeout: time.Second, Log: quietLogger()})
	p := plan(1,
		step("quick", ok), // its deadline is released
		step("hang", func(ctx context.Context) error {
			fc.Step(time.Second)
			<-ctx.Done()
			return ctx.Err()
		}))
	err := runAll(t, l, context.Background(), p)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v, want context.DeadlineExceeded", err)
	}
}

// runAll runs p's steps on the calling goroutine, as a worker would with
// no other cluster waiting, and returns the plan's error.
func runAll(t *testing.T, l *Loop, ctx context.Context, p *Plan) error {
	t.Helper()
	j := job{key: "ns/c", plan: p, ctx: ctx}
	if !l.runPlan(&j) {
		t.Fatal("the plan paused with no other cluster waiting")
	}
	return j.err
}

// A cluster whose plan has 1,000 steps delays another cluster's first step
// by one step, not by its plan: with one worker, the long plan pauses
// between two steps while the other waits, and finishes afterwards, its
// steps in order, reported once.
func TestLongPlanYieldsBetweenSteps(t *testing.T) {
	const n = 1000
	var mu sync.Mutex
	var ran []string
	record := func(name string) {
		mu.Lock()
		ran = append(ran, name)
		mu.Unlock()
	}
	started, release := make(chan struct{}), make(chan struct{})
	rec := newRecorder(func(ev Event) Outcome {
		if ev.Kind != Signal {
			return Outcome{}
		}
		if ev.Key == "small" {
			return Outcome{Plan: plan(1, step("small", func(context.Context) error { record("small"); return nil }))}
		}
		p := plan(1)
		for i := range n {
			name := fmt.Sprintf("big %d", i)
			p.Steps = append(p.Steps, step(name, func(context.Context) error {
				record(name)
				if i == 0 {
					close(started)
					<-release
				}
				return nil
			}))
		}
		return Outcome{Plan: p}
	})
	l := startLoop(t, rec, Options{Workers: 1})
	l.Notify("big", "go")
	recv(t, started, "the long plan's first step")
	l.Notify("small", "go")
	// The loop has queued small's plan, no worker being free.
	deadline := time.Now().Add(guard)
	for !l.contended.Load() {
		if time.Now().After(deadline) {
			t.Fatal("small's plan never waited for the worker")
		}
		runtime.Gosched()
	}
	close(release)
	l.waitIdle(t)

	mu.Lock()
	defer mu.Unlock()
	if i := slices.Index(ran, "small"); i != 1 {
		t.Errorf("small's step ran after %d of big's steps, want 1 (the one running when it came)", i)
	}
	var big []string
	for _, name := range ran {
		if name != "small" {
			big = append(big, name)
		}
	}
	for i, name := range big {
		if want := fmt.Sprintf("big %d", i); name != want {
			t.Fatalf("big's step %d is %q, want %q", i, name, want)
		}
	}
	if len(big) != n {
		t.Errorf("big ran %d steps, want %d", len(big), n)
	}
	if done := only(rec.snapshot(), is("big", PlanDone)); len(done) != 1 || done[0].Err != nil {
		t.Errorf("big's results %+v, want one success", done)
	}
}

// TestExecRunsPlansWhenTold checks Options.Exec: the loop hands each plan's
// work to Exec instead of running it, WaitIdle does not wait for work Exec
// holds, Workers still bounds what is handed out, and the plan reports
// only once Exec runs the work.
func TestExecRunsPlansWhenTold(t *testing.T) {
	var (
		mu   sync.Mutex
		held []func()
		keys []string
		ran  []string
	)
	exec := func(key string, work func()) {
		mu.Lock()
		defer mu.Unlock()
		held, keys = append(held, work), append(keys, key)
	}
	rec := newRecorder(func(ev Event) Outcome {
		if ev.Kind != Signal {
			return Outcome{}
		}
		return Outcome{Plan: plan(1, step("s", func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			ran = append(ran, ev.Key)
			return nil
		}))}
	})
	l := startLoop(t, rec, Options{Exec: exec, Workers: 1})
	l.Notify("ns/a", "spec")
	l.Notify("ns/b", "spec")
	l.waitIdle(t)
	take := func() func() {
		mu.Lock()
		defer mu.Unlock()
		if len(held) != 1 || len(ran) != 0 {
			t.Fatalf("held %d plans (%v), ran %v; want one held (Workers: 1), none run", len(held), keys, ran)
		}
		w := held[0]
		held = held[:0]
		return w
	}
	take()()
	rec.waitUntil(t, "ns/a's PlanDone", has(is("ns/a", PlanDone)))
	l.waitIdle(t)
	mu.Lock()
	if !slices.Equal(keys, []string{"ns/a", "ns/b"}) || !slices.Equal(ran, []string{"ns/a"}) {
		t.Errorf("handed %v, ran %v; want [ns/a ns/b], [ns/a]", keys, ran)
	}
	ran = ran[:0]
	mu.Unlock()
	take()()
	rec.waitUntil(t, "ns/b's PlanDone", has(is("ns/b", PlanDone)))
}

// The workers kept for urgent plans: background plans fill the rest of the
// pool and wait, and a user's action still starts at once, on a kept
// worker; the kept workers never run a background plan.
func TestUrgentWorkersKept(t *testing.T) {
	const workers, kept = 8, 2
	release := make(chan struct{})
	var mu sync.Mutex
	running, bgMax := map[string]bool{}, 0
	hold := func(key string, urgent bool) *Plan {
		p := plan(1, step("hold", func(context.Context) error {
			mu.Lock()
			running[key] = true
			n := 0
			for k := range running {
				if k[0] == 'b' {
					n++
				}
			}
			bgMax = max(bgMax, n)
			mu.Unlock()
			<-release
			mu.Lock()
			delete(running, key)
			mu.Unlock()
			return nil
		}))
		p.Urgent = urgent
		return p
	}
	rec := newRecorder(func(ev Event) Outcome {
		if ev.Kind != Signal {
			return Outcome{}
		}
		return Outcome{Plan: hold(ev.Key, ev.Name == "urgent")}
	})
	l := startLoop(t, rec, Options{Workers: workers, UrgentWorkers: kept})
	for i := range 3 * workers {
		l.Notify(fmt.Sprintf("bg/c%02d", i), "background")
	}
	isRunning := func(n int, prefix string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			c := 0
			for k := range running {
				if k[:len(prefix)] == prefix {
					c++
				}
			}
			return c == n
		}
	}
	waitFor(t, isRunning(workers-kept, "bg/"), "the background plans to fill the pool but the kept workers")
	l.Notify("user/a", "urgent")
	l.Notify("user/b", "urgent")
	waitFor(t, isRunning(kept, "user/"), "both urgent plans to start while background plans wait")
	l.Notify("user/c", "urgent") // the pool is full: it waits for a worker
	close(release)
	l.waitIdle(t)
	st := l.Stats()
	if st.PlansRun != 3*workers+3 || st.PlansUrgent != 3 || st.PlansBackground != 3*workers {
		t.Errorf("stats %+v, want %d plans run: 3 urgent, %d background", st, 3*workers+3, 3*workers)
	}
	if bgMax > workers-kept {
		t.Errorf("%d background plans ran at once, want at most %d: the kept workers took some", bgMax, workers-kept)
	}
}

func TestReservedWorkers(t *testing.T) {
	for _, tt := range []struct{ urgent, workers, want int }{
		{0, 16, DefaultUrgentWorkers},
		{-1, 16, 0},
		{3, 16, 3},
		{8, 16, 4}, // a quarter at most
		{0, 4, 1},
		{0, 3, 0}, // too small a pool to keep any
		{1, 1, 0},
	} {
		if got := reservedWorkers(tt.urgent, tt.workers); got != tt.want {
			t.Errorf("reservedWorkers(%d, %d) = %d, want %d", tt.urgent, tt.workers, got, tt.want)
		}
	}
}

// Urgent plans may take every worker, the kept ones and the rest: then a
// background plan still gets its turn within maxUrgentStreak urgent starts,
// as with no worker kept (a regression: the workers kept for urgent plans
// once starved background ones whenever urgent plans filled the pool; the
// simulator's seed 568, stuck clusters' retries).
func TestUrgentWorkersDoNotStarveBackground(t *testing.T) {
	const workers, limit = 4, 40
	tokens := make(chan struct{})
	var mu sync.Mutex
	var starts []string
	var nextID atomic.Uint64
	hold := func(key string, urgent bool) *Plan {
		p := plan(nextID.Add(1), step("hold", func(ctx context.Context) error {
			mu.Lock()
			starts = append(starts, key)
			mu.Unlock()
			select {
			case <-tokens:
			case <-ctx.Done():
			}
			return nil
		}))
		p.Urgent = urgent
		return p
	}
	rec := newRecorder(func(ev Event) Outcome {
		switch {
		case ev.Kind == Signal:
			return Outcome{Plan: hold(ev.Key, ev.Name == "urgent")}
		case ev.Kind == PlanDone && ev.Key[0] == 'u' && nextID.Load() < limit:
			return Outcome{Plan: hold(ev.Key, true)} // the next retry at once
		}
		return Outcome{}
	})
	l := startLoop(t, rec, Options{Workers: workers, UrgentWorkers: 1})
	for _, key := range keys("u", workers+2) { // flows of their own: one's plans never fill the pool
		l.Notify(key, "urgent")
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(starts) }
	waitFor(t, func() bool { return count() == workers }, "urgent plans to take every worker")
	l.Notify("b/c", "background")
	rec.waitUntil(t, "the background plan to be queued", has(func(ev Event) bool { return ev.Key == "b/c" }))
	queuedAt := count()
	for i := 0; i < limit; i++ {
		n := count()
		tokens <- struct{}{}
		waitFor(t, func() bool { return count() > n || nextID.Load() >= limit }, "a plan to start after one ended")
		mu.Lock()
		started := slices.Contains(starts, "b/c")
		mu.Unlock()
		if started || nextID.Load() >= limit {
			break
		}
	}
	close(tokens)
	l.waitIdle(t)
	mu.Lock()
	defer mu.Unlock()
	at := slices.Index(starts, "b/c")
	if at < 0 {
		t.Fatalf("the background plan never started among %d urgent plans: %q", len(starts), starts)
	}
	if ahead := at - queuedAt; ahead > maxUrgentStreak {
		t.Errorf("%d urgent plans started ahead of the background one, want at most %d: %q", ahead, maxUrgentStreak, starts[queuedAt:at+1])
	}
}

// One namespace's plans hold at most flowWorkers of the workers, 3 of 4
// with one kept for urgent plans: while ten urgent plans of namespace a
// hold their workers (a burst of creates), a plan of namespace b starts at
// once on the fourth, at either priority, and the fourth worker stays free
// for b while a's plans wait. A plan of a that ends, or is detached after
// SlowAfter, lets the next of a's start.
func TestFlowBoundLeavesWorkersToOtherNamespaces(t *testing.T) {
	for _, bUrgent := range []bool{true, false} {
		t.Run(fmt.Sprintf("b urgent=%v", bUrgent), func(t *testing.T) {
			const workers, bound = 4, 3
			if got := flowWorkers(workers, reservedWorkers(0, workers)); got != bound {
				t.Fatalf("flowWorkers(%d workers) = %d, want %d", workers, got, bound)
			}
			a := keys("a/c", 10)
			release := map[string]chan struct{}{"b/c": make(chan struct{})}
			for _, key := range a {
				release[key] = make(chan struct{})
			}
			started := make(chan string, len(release))
			rec := newRecorder(func(ev Event) Outcome {
				if ev.Kind != Signal {
					return Outcome{}
				}
				p := plan(1, step("hold", func(ctx context.Context) error {
					started <- ev.Key
					select {
					case <-release[ev.Key]:
					case <-ctx.Done(): // the loop stops
					}
					return nil
				}))
				p.Urgent = ev.Name == "urgent"
				return Outcome{Plan: p}
			})
			// Exec runs each plan on a goroutine of its own, as the
			// workers do, and lets WaitIdle return while plans hold.
			l := startLoop(t, rec, Options{Workers: workers, Exec: func(_ string, work func()) { go work() }})
			// expect receives the starts of keys, in any order: plans
			// started together race to report.
			expect := func(what string, keys ...string) {
				t.Helper()
				var got []string
				for range keys {
					got = append(got, recv(t, started, what))
				}
				slices.Sort(got)
				if !slices.Equal(got, keys) {
					t.Fatalf("%q started, want %q", got, keys)
				}
			}
			holding := func(running, waiting int, what string) {
				t.Helper()
				l.waitIdle(t)
				if st := l.Stats(); st.PlansRunning != running || st.PlansWaiting != waiting {
					t.Fatalf("%s: %d plans running, %d waiting; want %d and %d", what, st.PlansRunning, st.PlansWaiting, running, waiting)
				}
			}

			for _, key := range a {
				l.Notify(key, "urgent")
			}
			expect("a's plans to take their workers", a[:bound]...)
			holding(bound, len(a)-bound, "a's burst")
			signal := "background"
			if bUrgent {
				signal = "urgent"
			}
			l.Notify("b/c", signal)
			expect("b's plan to start on the free worker", "b/c")
			holding(bound+1, len(a)-bound, "b's plan beside a's")
			if st := l.Stats(); st.WorkerWaits != 0 {
				t.Errorf("%d plans waited for a worker, want none: b's found one free", st.WorkerWaits)
			}

			// b's plan ends: a's plans still wait, the worker is b's.
			close(release["b/c"])
			rec.waitUntil(t, "b's PlanDone", has(is("b/c", PlanDone)))
			holding(bound, len(a)-bound, "b's plan done")
			// One of a's ends: the next of a's takes its worker.
			close(release[a[0]])
			expect("a's next plan to start", a[bound])
			holding(bound, len(a)-bound-1, "one of a's done")
			// a's three plans run past SlowAfter: detached, they hold no
			// worker, and the next three of a's start.
			l.clock.Step(DefaultSlowAfter)
			expect("a's next plans to start on the workers the detached ones left", a[bound+1:2*bound+1]...)
			l.waitIdle(t)
			if st := l.Stats(); st.PlansDetached != bound || st.PlansRunning != 2*bound || st.PlansWaiting != len(a)-2*bound-1 {
				t.Errorf("after SlowAfter: %d detached, %d running, %d waiting; want %d, %d and %d",
					st.PlansDetached, st.PlansRunning, st.PlansWaiting, bound, 2*bound, len(a)-2*bound-1)
			}
		})
	}
}

// A plan's steps run under a context marked with the plan's priority, so
// that what they send can be ordered by it (the operator's request gate);
// contexts of no plan are Unmarked.
func TestPlanContextPriority(t *testing.T) {
	var mu sync.Mutex
	got := map[string]reqclass.Priority{}
	rec := newRecorder(func(ev Event) Outcome {
		if ev.Kind != Signal {
			return Outcome{}
		}
		p := plan(1, step("look", func(ctx context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			got[ev.Key] = reqclass.PriorityOf(ctx)
			return nil
		}))
		p.Urgent = ev.Name == "urgent"
		return Outcome{Plan: p}
	})
	l := startLoop(t, rec, Options{Workers: 4})
	l.Notify("ns/user", "urgent")
	l.Notify("ns/resync", "background")
	l.waitIdle(t)
	mu.Lock()
	defer mu.Unlock()
	want := map[string]reqclass.Priority{"ns/user": reqclass.Urgent, "ns/resync": reqclass.Background}
	if !maps.Equal(got, want) {
		t.Errorf("priorities %v, want %v", got, want)
	}
	if p := reqclass.PriorityOf(context.Background()); p != reqclass.Unmarked {
		t.Errorf("PriorityOf(context.Background()) = %v, want Unmarked", p)
	}
}

// A step's deadline stands still while paused (a write waiting in the
// operator's queue), pauses nest, and the clock goes on with what was
// left once the last is resumed.
func TestPauseDeadline(t *testing.T) {
	if _, ok := PauseDeadline(context.Background()); ok {
		t.Error("paused the deadline of a context that belongs to no step")
	}
	for _, clk := range []struct {
		name string
		wrap func(*testingclock.FakeClock) clock.WithTicker
	}{
		{"AfterFunc", func(fc *testingclock.FakeClock) clock.WithTicker { return fc }},
		{"timer", func(fc *testingclock.FakeClock) clock.WithTicker { return plainClock{fc} }},
	} {
		t.Run(clk.name, func(t *testing.T) {
			fc := testingclock.NewFakeClock(t0)
			l := New(newRecorder(nil), Options{Clock: clk.wrap(fc), StepTimeout: 10 * time.Second, Log: quietLogger()})
			var errs []string
			check := func(ctx context.Context, what string, want error, deadline time.Duration) {
				if want != nil { // the timer fallback cancels from a goroutine
					select {
					case <-ctx.Done():
					case <-time.After(time.Minute):
					}
				}
				if err := ctx.Err(); !errors.Is(err, want) && err != want {
					errs = append(errs, fmt.Sprintf("%s: err %v, want %v", what, err, want))
				}
				if d, _ := ctx.Deadline(); want == nil && !d.Equal(t0.Add(deadline)) {
					errs = append(errs, fmt.Sprintf("%s: deadline t0+%v, want t0+%v", what, d.Sub(t0), deadline))
				}
			}
			p := plan(1, step("paused", func(ctx context.Context) error {
				fc.Step(4 * time.Second)
				outer, ok := PauseDeadline(ctx)
				if !ok {
					return errors.New("not paused")
				}
				inner, _ := PauseDeadline(reqclass.WithWriteClass(ctx, "x")) // a derived context pauses the same step
				fc.Step(time.Minute)
				check(ctx, "paused a minute", nil, 64*time.Second+6*time.Second)
				outer()
				outer() // a second call does nothing
				fc.Step(time.Minute)
				check(ctx, "one pause of two resumed", nil, 124*time.Second+6*time.Second)
				inner()
				fc.Step(5 * time.Second)
				check(ctx, "resumed, 1 s left", nil, 130*time.Second)
				if _, ok := PauseDeadline(ctx); !ok {
					return errors.New("a second pause refused")
				}
				fc.Step(time.Hour)
				return nil // ends paused: the step's end releases it all
			}), step("tighter", func(ctx context.Context) error {
				tight, cancel := context.WithDeadline(ctx, fc.Now().Add(time.Second))
				defer cancel()
				if _, ok := PauseDeadline(tight); ok {
					errs = append(errs, "paused a context with an earlier deadline of its own")
				}
				return nil
			}), step("runs out", func(ctx context.Context) error {
				resume, _ := PauseDeadline(ctx)
				fc.Step(time.Minute)
				resume()
				fc.Step(10 * time.Second)
				check(ctx, "resumed and run out", context.DeadlineExceeded, 0)
				return nil
			}))
			if err := runAll(t, l, context.Background(), p); err != nil {
				t.Fatal(err)
			}
			for _, e := range errs {
				t.Error(e)
			}
			if n := fc.Waiters(); n != 0 && clk.name == "AfterFunc" {
				t.Errorf("%d step deadlines left armed, want 0", n)
			}
		})
	}
}
