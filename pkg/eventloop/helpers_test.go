package eventloop

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	testingclock "k8s.io/utils/clock/testing"
)

// guard bounds every wait in these tests. It only turns a hang into a
// failure: no assertion depends on how long anything takes.
const guard = 30 * time.Second

// t0 is the fake clock's start.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// recorder is a Handler that records every event in order, then asks fn
// (if set) for the Outcome. Tests wait on it with waitUntil.
type recorder struct {
	mu      sync.Mutex
	events  []Event
	changed chan struct{}
	fn      func(Event) Outcome
}

func newRecorder(fn func(Event) Outcome) *recorder {
	return &recorder{changed: make(chan struct{}, 1), fn: fn}
}

func (r *recorder) Handle(ev Event) Outcome {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
	if r.fn != nil {
		return r.fn(ev)
	}
	return Outcome{}
}

// snapshot returns a copy of the events seen so far.
func (r *recorder) snapshot() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// waitUntil blocks until cond holds for the events seen so far.
func (r *recorder) waitUntil(t *testing.T, what string, cond func([]Event) bool) []Event {
	t.Helper()
	timeout := time.NewTimer(guard)
	defer timeout.Stop()
	for {
		if evs := r.snapshot(); cond(evs) {
			return evs
		}
		select {
		case <-r.changed:
		case <-timeout.C:
			t.Fatalf("timed out waiting until %s; events: %v", what, brief(r.snapshot()))
		}
	}
}

// has is a cond for waitUntil: some event matches.
func has(match func(Event) bool) func([]Event) bool {
	return func(evs []Event) bool {
		for _, ev := range evs {
			if match(ev) {
				return true
			}
		}
		return false
	}
}

func is(key string, kind Kind) func(Event) bool {
	return func(ev Event) bool { return ev.Key == key && ev.Kind == kind }
}

// brief renders events as "key kind name" for failure messages and order
// assertions.
func brief(evs []Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Key + " " + ev.Kind.String()
		if ev.Name != "" {
			out[i] += " " + ev.Name
		}
	}
	return out
}

func only(evs []Event, match func(Event) bool) []Event {
	var out []Event
	for _, ev := range evs {
		if match(ev) {
			out = append(out, ev)
		}
	}
	return out
}

func quietLogger() *logrus.Logger {
	log := logrus.New()
	log.SetOutput(io.Discard)
	log.SetLevel(logrus.DebugLevel) // run the Debug paths too
	return log
}

// testLoop is a running Loop on a fake clock, stopped by t.Cleanup.
type testLoop struct {
	*Loop
	clock *testingclock.FakeClock
	stop  func() // cancels Run and waits for it to return
}

func startLoop(t *testing.T, h Handler, opts Options) *testLoop {
	t.Helper()
	fc := testingclock.NewFakeClock(t0)
	if opts.Clock == nil {
		opts.Clock = fc
	}
	if opts.Log == nil {
		opts.Log = quietLogger()
	}
	l := New(h, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(guard):
				t.Errorf("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return &testLoop{Loop: l, clock: fc, stop: stop}
}

func (l *testLoop) waitIdle(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if err := l.WaitIdle(ctx); err != nil {
		t.Fatalf("WaitIdle: %v", err)
	}
}

// recv receives from ch or fails the test.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(guard):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// gate is a cluster whose Signal blocks the loop goroutine inside Handle
// until released: while it is held, nothing is dispatched, which lets a
// test fill the inbox in a known state. Real handlers must never block.
type gate struct {
	entered chan struct{}
	release chan struct{}
}

const gateKey = "test/gate"

func newGate() *gate {
	return &gate{entered: make(chan struct{}), release: make(chan struct{})}
}

// handle blocks if ev is the gate's signal; it reports whether it was.
func (g *gate) handle(ev Event) bool {
	if ev.Key != gateKey || ev.Kind != Signal {
		return false
	}
	close(g.entered)
	<-g.release
	return true
}

// hold notifies the gate and waits until the loop is blocked in it.
func (g *gate) hold(t *testing.T, l *testLoop) {
	t.Helper()
	l.Notify(gateKey, "hold")
	recv(t, g.entered, "the loop to enter the gate")
}

func (g *gate) open() { close(g.release) }

func notGate(ev Event) bool { return ev.Key != gateKey }

func step(name string, run func(ctx context.Context) error) Step {
	return Step{Name: name, Run: run}
}

func plan(id uint64, steps ...Step) *Plan { return &Plan{ID: id, Steps: steps} }

func ok(context.Context) error { return nil }

// waitFor polls cond until it holds, for at most a minute; it may be
// called from a step (a worker goroutine): it reports a timeout with
// t.Errorf and returns.
func waitFor(t *testing.T, cond func() bool, what string) {
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Errorf("timed out waiting for %s", what)
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}
