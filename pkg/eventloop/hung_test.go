package eventloop

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"
)

// hungWorld is a handler whose stuck clusters (stuck, isStuck) hang in
// their step "call" (until its deadline) while hang is set; every other
// step answers at once. Each Signal makes a plan of one step named by
// the signal ("call" or another name).
type hungWorld struct {
	*recorder
	hang    atomic.Bool
	entered chan string // a hung step began
	nextID  atomic.Uint64
}

func newHungWorld() *hungWorld {
	w := &hungWorld{entered: make(chan string, 100)}
	w.hang.Store(true)
	w.recorder = newRecorder(func(ev Event) Outcome {
		if ev.Kind != Signal {
			return Outcome{}
		}
		key := ev.Key
		return Outcome{Plan: plan(w.nextID.Add(1), step(ev.Name, func(ctx context.Context) error {
			if !isStuck(key) || ev.Name != "call" || !w.hang.Load() {
				return nil
			}
			w.entered <- key
			<-ctx.Done()
			return ctx.Err()
		}))}
	})
	return w
}

// startHung starts a loop of 2 workers (none kept for urgent plans), 2
// places in the hung lane, SlowAfter 3s and steps of 30s, whose plans run
// on goroutines of their own through Exec, so that WaitIdle waits for the
// loop alone while steps hang.
func startHung(t *testing.T, w *hungWorld) *testLoop {
	return startLoop(t, w, Options{Workers: 2, UrgentWorkers: -1, HungWorkers: 2, SlowAfter: 3 * time.Second,
		StepTimeout: 30 * time.Second, Exec: func(_ string, work func()) { go work() }})
}

// stuck is the key of the i-th stuck cluster, alone in its namespace, as
// one namespace's plans hold all the workers but one at most
// (flowWorkers): the stuck clusters fill the pool only as several.
func stuck(i int) string { return fmt.Sprintf("stuck%d/h", i) }

func isStuck(key string) bool { return strings.HasPrefix(key, "stuck") }

func doneOf(key string) func([]Event) bool {
	return func(evs []Event) bool { return len(only(evs, is(key, PlanDone))) > 0 }
}

func countDone(evs []Event, key string) int { return len(only(evs, is(key, PlanDone))) }

// eachDone is a cond for waitUntil: the stuck clusters 0 to k-1
// have each seen n PlanDones.
func eachDone(k, n int) func([]Event) bool {
	return func(evs []Event) bool {
		for i := range k {
			if countDone(evs, stuck(i)) != n {
				return false
			}
		}
		return true
	}
}

// TestHungStepsLeaveTheWorkers: four clusters whose steps hang take both
// workers and wait for them; a healthy cluster's plan queued after them
// starts once the hung ones have each held a worker for SlowAfter (not
// for their 30 s deadline).
// Once their step has hung, the hung clusters' plans with it run in the
// hung lane and a healthy plan starts at once; a cluster whose step
// answers again is back on the workers.
func TestHungStepsLeaveTheWorkers(t *testing.T) {
	w := newHungWorld()
	l := startHung(t, w)
	for i := range 4 {
		l.Notify(stuck(i), "call")
	}
	for range 2 {
		recv(t, w.entered, "a hung step to begin")
	}
	l.Notify("ns/a", "call")
	l.waitIdle(t)
	if st := l.Stats(); st.PlansRunning != 2 || st.PlansWaiting != 3 {
		t.Fatalf("before SlowAfter: %d plans running, %d waiting; want 2 and 3", st.PlansRunning, st.PlansWaiting)
	}
	// SlowAfter: the two hung plans leave the workers, the next two
	// plans start: the stuck clusters 2 and 3, whose namespaces took
	// their turns before ns's.
	l.clock.Step(3 * time.Second)
	for range 2 {
		recv(t, w.entered, "a hung step to begin on a freed worker")
	}
	l.waitIdle(t)
	// They too leave the workers after SlowAfter: ns/a's plan starts.
	l.clock.Step(3 * time.Second)
	w.waitUntil(t, "ns/a's plan is done", doneOf("ns/a"))
	l.waitIdle(t)
	st := l.Stats()
	// The stuck clusters 2 and 3 waited 3s each, ns/a 6s.
	if st.WorkerWaits != 3 || st.WorkerWait != 12*time.Second || st.HungWaits != 0 {
		t.Errorf("waits for a worker: %d, %v in all, %d for the hung lane; want 3, 12s and 0", st.WorkerWaits, st.WorkerWait, st.HungWaits)
	}
	if st.PlansDetached != 4 || st.PlansSlow != 4 || st.PlansRunning != 4 || st.HungClusters != 0 {
		t.Fatalf("after the hung steps' SlowAfter: %d detached, %d slow, %d running, %d hung clusters; want 4, 4, 4 and 0",
			st.PlansDetached, st.PlansSlow, st.PlansRunning, st.HungClusters)
	}

	// Their deadlines: each hung cluster now has a slow step.
	l.clock.Step(30 * time.Second)
	w.waitUntil(t, "the hung plans are done", eachDone(4, 1))
	l.waitIdle(t)
	for _, ev := range only(w.snapshot(), func(ev Event) bool { return ev.Kind == PlanDone && ev.Key != "ns/a" }) {
		if !errors.Is(ev.Err, context.DeadlineExceeded) {
			t.Errorf("%s: plan error %v, want its deadline", ev.Key, ev.Err)
		}
	}
	if st := l.Stats(); st.HungClusters != 4 || st.PlansRunning != 0 {
		t.Fatalf("after the deadlines: %d hung clusters, %d plans running; want 4 and 0", st.HungClusters, st.PlansRunning)
	}

	// Again: their plans with the slow step take the hung lane's two
	// places and wait for them; none takes a worker, and a healthy
	// plan runs at once, the clock standing still.
	for i := range 4 {
		l.Notify(stuck(i), "call")
	}
	for range 2 {
		recv(t, w.entered, "a hung step to begin in the hung lane")
	}
	l.Notify("ns/a", "call")
	w.waitUntil(t, "ns/a's second plan is done", func(evs []Event) bool { return countDone(evs, "ns/a") == 2 })
	l.waitIdle(t)
	if st := l.Stats(); st.PlansHung != 2 || st.PlansRunning != 2 || st.PlansWaiting != 2 || st.PlansDetached != 4 {
		t.Fatalf("hung clusters again: %d plans in the hung lane, %d running, %d waiting, %d detached; want 2, 2, 2 and 4",
			st.PlansHung, st.PlansRunning, st.PlansWaiting, st.PlansDetached)
	}
	// They answer again: the two hung steps leave their places after
	// SlowAfter and end at their deadline; the two waiting plans run in
	// the hung lane and answer at once, which takes them off it.
	w.hang.Store(false)
	l.clock.Step(3 * time.Second)
	w.waitUntil(t, "the two waiting plans are done", func(evs []Event) bool {
		return len(only(evs, func(ev Event) bool { return ev.Kind == PlanDone && isStuck(ev.Key) })) == 6
	})
	l.waitIdle(t)
	l.clock.Step(27 * time.Second)
	w.waitUntil(t, "the second round is done", eachDone(4, 2))
	l.waitIdle(t)
	if st := l.Stats(); st.HungClusters != 2 || st.PlansRunning != 0 {
		t.Fatalf("after two answered: %d hung clusters, %d plans running; want 2 and 0", st.HungClusters, st.PlansRunning)
	}
	// The other two answer in the hung lane, then run on the workers.
	for i := range 4 {
		l.Notify(stuck(i), "call")
	}
	w.waitUntil(t, "the third round is done", eachDone(4, 3))
	l.waitIdle(t)
	if st := l.Stats(); st.HungClusters != 0 || st.PlansDetached != 6 {
		t.Fatalf("after all answered: %d hung clusters, %d detached; want 0 and 6", st.HungClusters, st.PlansDetached)
	}
}

// TestHungLaneAnyNumber: with 40 clusters whose steps have hung, many
// more than the workers and the hung lane's places, every healthy
// cluster's plan starts at once, with the clock standing still: no
// healthy plan waits for a hung one, whatever their number. Their first
// hangs, before they are known, detach from the workers at most
// detachFactor*Workers at a time (8 here): the others hold their worker
// until a detached one ends, so all 40 first plans end within a few
// rounds of their deadline, not at once.
func TestHungLaneAnyNumber(t *testing.T) {
	w := newHungWorld()
	l := startHung(t, w)
	const k = 40
	for i := range k {
		l.Notify(stuck(i), "call")
	}
	most := drainHung(t, l, w, k, nil)
	if most != detachFactor*2 {
		t.Errorf("at most %d plans detached at once, want %d (detachFactor × Workers)", most, detachFactor*2)
	}
	l.waitIdle(t)
	if st := l.Stats(); st.HungClusters != k {
		t.Fatalf("%d hung clusters, want %d", st.HungClusters, k)
	}
	for i := range k {
		l.Notify(stuck(i), "call")
	}
	for i := range 10 {
		l.NotifyUrgent(fmt.Sprintf("ns%d/a", i), "call")
	}
	w.waitUntil(t, "the healthy plans are done", func(evs []Event) bool {
		return len(only(evs, func(ev Event) bool { return ev.Kind == PlanDone && !isStuck(ev.Key) })) == 10
	})
	l.waitIdle(t)
	if st := l.Stats(); st.PlansHung != 2 || st.PlansWaiting != k-2 {
		t.Fatalf("%d plans in the hung lane, %d waiting; want 2 and %d", st.PlansHung, st.PlansWaiting, k-2)
	}
}

// drainHung steps the clock of l by SlowAfter (3s) until w has seen n
// plans done in all, and returns the most plans detached at once; each
// step, with the loop idle, calls each (when not nil) with the loop's
// stats.
func drainHung(t *testing.T, l *testLoop, w *hungWorld, n int, each func(Stats)) (most int) {
	t.Helper()
	done := func() int {
		return len(only(w.snapshot(), func(ev Event) bool { return ev.Kind == PlanDone }))
	}
	for i := 0; done() < n; i++ {
		if i > 300 {
			t.Fatalf("%d of %d plans done after %d steps of SlowAfter", done(), n, i)
		}
		l.waitIdle(t)
		st := l.Stats()
		most = max(most, st.PlansSlow)
		if each != nil {
			each(st)
		}
		l.clock.Step(3 * time.Second)
		time.Sleep(time.Millisecond) // the plans' goroutines see their deadline
	}
	return most
}

// TestHungLaneDetachBound: the plans of clusters known to hang, in the
// hung lane, are detached from its places at most
// detachFactor*HungWorkers at a time too (8 here), the others holding
// their place until a detached one ends: however many clusters hang,
// what pgloop has in flight stays bounded by its lanes' places (at
// 10,000 clusters, 534 plans ran detached beside 16 workers before this
// bound). The lanes wait apart: with the hung lane at its bound, a plan
// that hangs on a worker is still detached from it at SlowAfter.
func TestHungLaneDetachBound(t *testing.T) {
	w := newHungWorld()
	l := startHung(t, w)
	const k = 40
	for i := range k {
		l.Notify(stuck(i), "call")
	}
	drainHung(t, l, w, k, nil)
	l.waitIdle(t)
	if st := l.Stats(); st.HungClusters != k {
		t.Fatalf("%d hung clusters, want %d", st.HungClusters, k)
	}
	for i := range k {
		l.Notify(stuck(i), "call")
	}
	const fresh = "stuck-fresh/h" // hangs, not known to: its plan takes a worker
	notified := false
	most := drainHung(t, l, w, 2*k+1, func(st Stats) {
		if st.PlansHung > 2 {
			t.Errorf("%d plans in the hung lane's 2 places", st.PlansHung)
		}
		if !notified && st.PlansSlow == detachFactor*2 {
			// The hung lane is at its bound: a plan that hangs on a
			// worker must not wait for it.
			l.Notify(fresh, "call")
			notified = true
		}
	})
	if !notified {
		t.Fatalf("the hung lane never had %d plans detached", detachFactor*2)
	}
	if most != detachFactor*2+1 {
		t.Errorf("at most %d plans detached at once, want %d: detachFactor × HungWorkers from the hung lane, and the worker's hung plan beside them", most, detachFactor*2+1)
	}
}

// TestSlowAfterNever: SlowAfter < 0 keeps a hung step on its worker
// until its deadline, as the executor did before the hung lane.
func TestSlowAfterNever(t *testing.T) {
	w := newHungWorld()
	l := startLoop(t, w, Options{Workers: 1, SlowAfter: -1, StepTimeout: 30 * time.Second,
		Exec: func(_ string, work func()) { go work() }})
	l.Notify(stuck(0), "call")
	recv(t, w.entered, "the hung step to begin")
	l.Notify("ns/a", "call")
	l.waitIdle(t)
	l.clock.Step(29 * time.Second)
	l.waitIdle(t)
	if st := l.Stats(); st.PlansDetached != 0 || st.PlansWaiting != 1 {
		t.Fatalf("%d detached, %d waiting; want 0 and 1", st.PlansDetached, st.PlansWaiting)
	}
	l.clock.Step(time.Second)
	w.waitUntil(t, "ns/a's plan is done", doneOf("ns/a"))
}

// TestWaitsCountOnlyWaits: plans that find a worker free are not counted
// as waiting for one, on the real clock too (time passes between their
// queueing and their start, however little).
func TestWaitsCountOnlyWaits(t *testing.T) {
	w := newHungWorld()
	l := startLoop(t, w, Options{Workers: 4, Clock: clock.RealClock{}})
	for i := range 3 {
		l.Notify(fmt.Sprintf("ns/a%d", i), "call")
		w.waitUntil(t, "its plan is done", func(evs []Event) bool { return countDone(evs, fmt.Sprintf("ns/a%d", i)) == 1 })
	}
	l.waitIdle(t)
	if st := l.Stats(); st.WorkerWaits != 0 || st.WorkerWait != 0 || st.PlansRun != 3 {
		t.Errorf("%d plans run, %d waited for a worker (%v); want 3, 0 and 0s", st.PlansRun, st.WorkerWaits, st.WorkerWait)
	}
}

// The detach threshold follows the steps that succeed on workers:
// SlowAfter while they are quick, detachFactor times their median once
// minStepTimes of them are slow (an API server slow for everyone), back to
// SlowAfter when they are quick again. Failed steps (a hung cluster's, at
// their deadline) and the hung lane's do not move it, and a job judges its
// failed steps slow by the threshold it was handed with.
func TestDetachFollowsTheAPI(t *testing.T) {
	l := New(newRecorder(func(Event) Outcome { return Outcome{} }), Options{SlowAfter: time.Second})
	times := func(n int, d time.Duration) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = d
		}
		return out
	}
	l.noteTimes(times(minStepTimes-1, 3*time.Second))
	if l.detachAfter != time.Second {
		t.Fatalf("with %d steps known: threshold %v, want SlowAfter (1s)", minStepTimes-1, l.detachAfter)
	}
	l.noteTimes(times(1, 3*time.Second))
	if l.detachAfter != 12*time.Second || l.Stats().DetachAfter != 12*time.Second {
		t.Fatalf("steps of 3s: threshold %v (stats %v), want 12s", l.detachAfter, l.Stats().DetachAfter)
	}
	l.noteTimes(times(stepTimesKept/2+1, 10*time.Millisecond))
	if l.detachAfter != time.Second {
		t.Errorf("most steps quick again: threshold %v, want SlowAfter", l.detachAfter)
	}

	j := &job{slowAfter: 12 * time.Second, onWorker: true}
	j.timed("ensure", 5*time.Second, errors.New("refused"))
	j.timed("status", 13*time.Second, context.DeadlineExceeded)
	j.timed("events", 2*time.Second, nil)
	if !slices.Equal(j.slow, []string{"status"}) || !slices.Equal(j.took, []time.Duration{2 * time.Second}) {
		t.Errorf("slow %v took %v; want [status] (failed past 12s) and [2s] (the step that succeeded)", j.slow, j.took)
	}
	hung := &job{slowAfter: time.Second}
	hung.timed("ensure", time.Minute, context.DeadlineExceeded)
	if !slices.Equal(hung.slow, []string{"ensure"}) || len(hung.took) != 0 {
		t.Errorf("in the hung lane: slow %v took %v; want [ensure] and no time kept", hung.slow, hung.took)
	}
	off := &job{onWorker: true}
	off.timed("ensure", time.Minute, context.DeadlineExceeded)
	if len(off.slow) != 0 || len(off.took) != 0 {
		t.Errorf("with the hung lane off: slow %v took %v, want none", off.slow, off.took)
	}
}
