package traffic

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/reqclass"
)

// windowRig sends writes through WriteWindows to a heldTransport, each on
// its own goroutine (gateRig's send, wait and arrived).
type windowRig struct {
	*gateRig
	w       *WriteWindows
	windows map[string]float64
}

func newWindowRig(t *testing.T) *windowRig {
	g := newGateRig(t, 0)
	r := &windowRig{gateRig: g, windows: map[string]float64{}}
	r.w = newWriteWindows(g.clk, func(verb, resource, class string, w float64) {
		g.mu.Lock()
		defer g.mu.Unlock()
		r.windows[kindKey(verb, resource, class)] = w
	})
	g.rt = r.w.Wrap(g.inner)
	return r
}

// setWindow makes the window of a kind n writes, and keeps it so: the
// pacer takes no write sent before its last cut into account, and the
// rig's cut is an hour ahead of its clock.
func (r *windowRig) setWindow(verb, resource string, n float64) {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	p := r.w.kind(verb, resource, "").pace
	p.window, p.cutAt = n, r.clk.Now().Add(time.Hour)
}

// noPlacesHeld checks that no write of kind holds a place, once every
// write has returned.
func (r *windowRig) noPlacesHeld(kind string) {
	r.t.Helper()
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if k := r.w.kinds[kind]; k.inFlight != 0 {
		r.t.Errorf("%d places of %s held with nothing in flight, want 0", k.inFlight, kind)
	}
}

// waiting waits until n writes of the kind wait for a place.
func (r *windowRig) waiting(kind string, n int) {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		r.w.mu.Lock()
		got := 0
		if k := r.w.kinds[kind]; k != nil {
			for _, q := range []*nsQueue{&k.urgent, &k.rest} {
				for _, ws := range q.byNS {
					got += len(ws)
				}
			}
		}
		r.w.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%d writes of %s wait, want %d", got, kind, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func svcPath(ns string) string { return "/api/v1/namespaces/" + ns + "/services" }

// finish ends request name and checks it returned without error.
func (r *windowRig) finish(name string) {
	r.t.Helper()
	r.inner.end(name)
	if err := r.wait(name); err != nil {
		r.t.Errorf("%s: %v", name, err)
	}
}

// A full window holds the writes of its kind, and no other kind's; the
// writes that wait go by namespace in turns, not in the order they came:
// another namespace's write waits for one write of a burst, not for the
// burst.
func TestWriteWindowsTurnsByNamespace(t *testing.T) {
	r := newWindowRig(t)
	r.setWindow("create", "services", 1)
	r.send(context.Background(), "a0", reqclass.Urgent, http.MethodPost, svcPath("a"))
	r.arrived("a0")
	for i, name := range []string{"a1", "a2", "a3"} {
		r.send(context.Background(), name, reqclass.Urgent, http.MethodPost, svcPath("a"))
		r.waiting("create services", i+1)
	}
	r.send(context.Background(), "b0", reqclass.Urgent, http.MethodPost, svcPath("b"))
	r.waiting("create services", 4)
	// Another kind, and reads, are not held by this one's window.
	r.send(context.Background(), "secret", reqclass.Urgent, http.MethodPost, "/api/v1/namespaces/a/secrets")
	r.send(context.Background(), "get", reqclass.Urgent, http.MethodGet, "/api/v1/namespaces/a/services/x")
	r.arrived("a0", "secret", "get")
	r.finish("secret")
	r.finish("get")

	r.finish("a0")
	r.arrived("a0", "secret", "get", "a1")
	r.finish("a1")
	r.arrived("a0", "secret", "get", "a1", "b0")
	r.finish("b0")
	r.arrived("a0", "secret", "get", "a1", "b0", "a2")
	r.finish("a2")
	r.arrived("a0", "secret", "get", "a1", "b0", "a2", "a3")
	r.finish("a3")
	got := r.inner.got()
	if want := []string{"a1", "b0", "a2", "a3"}; !equalTail(got, want) {
		t.Errorf("order at the server %v, want it to end %v", got, want)
	}
}

func equalTail(got, want []string) bool {
	if len(got) < len(want) {
		return false
	}
	got = got[len(got)-len(want):]
	for i := range want {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// A user's action's writes go ahead of background work's waiting for the
// same window.
func TestWriteWindowsUrgentFirst(t *testing.T) {
	r := newWindowRig(t)
	r.setWindow("update", "postgresqls/status", 1)
	r.send(context.Background(), "first", reqclass.Background, http.MethodPut, statusPath)
	r.arrived("first")
	r.send(context.Background(), "bg", reqclass.Background, http.MethodPut, statusPath)
	r.waiting("update postgresqls/status", 1)
	r.send(context.Background(), "urgent", reqclass.Urgent, http.MethodPut, statusPath)
	r.waiting("update postgresqls/status", 2)
	r.finish("first")
	r.arrived("first", "urgent")
	r.finish("urgent")
	r.arrived("first", "urgent", "bg")
	r.finish("bg")
}

// A write that holds its place for writeDetachAfter goes on without it:
// one hung write (a webhook holding a namespace's creates) does not stop
// the others of its kind.
func TestWriteWindowsDetachHung(t *testing.T) {
	r := newWindowRig(t)
	r.setWindow("create", "services", 1)
	r.send(context.Background(), "hung", reqclass.Urgent, http.MethodPost, svcPath("a"))
	r.arrived("hung")
	r.send(context.Background(), "next", reqclass.Urgent, http.MethodPost, svcPath("b"))
	r.waiting("create services", 1)
	r.clk.Step(writeDetachAfter - time.Millisecond)
	r.stays("hung")
	r.clk.Step(time.Millisecond)
	r.arrived("hung", "next")
	r.finish("next")
	r.finish("hung")
	r.noPlacesHeld("create services")
}

// A write that gives up waiting (its context ends) leaves its place in the
// queue, and the next waiter goes when a place frees.
func TestWriteWindowsCancelledWaiter(t *testing.T) {
	r := newWindowRig(t)
	r.setWindow("create", "services", 1)
	r.send(context.Background(), "a0", reqclass.Urgent, http.MethodPost, svcPath("a"))
	r.arrived("a0")
	ctx, cancel := context.WithCancel(context.Background())
	r.send(ctx, "gone", reqclass.Urgent, http.MethodPost, svcPath("a"))
	r.send(context.Background(), "b0", reqclass.Urgent, http.MethodPost, svcPath("b"))
	r.waiting("create services", 2)
	cancel()
	if err := r.wait("gone"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled waiter: %v, want context.Canceled", err)
	}
	r.waiting("create services", 1)
	r.finish("a0")
	r.arrived("a0", "b0")
	r.finish("b0")
}

// Writes of no plan (leader election) and writes of Events' priority are
// told apart: the first are never held, Events are (background).
func TestWriteWindowsUnmarked(t *testing.T) {
	r := newWindowRig(t)
	r.setWindow("update", "leases", 1)
	r.send(context.Background(), "l1", reqclass.Unmarked, http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/x/leases/l")
	r.send(context.Background(), "l2", reqclass.Unmarked, http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/x/leases/l")
	r.arrived("l1", "l2")
	r.finish("l1")
	r.finish("l2")
	r.setWindow("create", "events", 1)
	r.send(context.Background(), "e1", reqclass.Unmarked, http.MethodPost, eventsPath)
	r.arrived("l1", "l2", "e1")
	r.send(context.Background(), "e2", reqclass.Unmarked, http.MethodPost, eventsPath)
	r.waiting("create events", 1)
	r.finish("e1")
	r.arrived("l1", "l2", "e1", "e2")
	r.finish("e2")
}

// The window of a kind follows its latency: writes answered far slower
// than the least seen halve it, each round, down to one; it is reported.
func TestWriteWindowsFollowLatency(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	var got []float64
	w := newWriteWindows(clk, func(verb, resource, class string, win float64) {
		if verb != "create" || resource != "services" || class != "" {
			t.Errorf("window of %s %s (class %q), want create services of no class", verb, resource, class)
		}
		got = append(got, win)
	})
	write := func(took time.Duration) {
		s, err := w.acquire(context.Background(), "create", "services", "", "a", true)
		if err != nil {
			t.Fatal(err)
		}
		clk.Step(took)
		w.done(s)
	}
	write(time.Millisecond) // the baseline
	for range 8 * 10 {
		write(100 * time.Millisecond)
	}
	if len(got) == 0 || got[len(got)-1] != 1 {
		t.Fatalf("windows reported %v, want them to end at 1", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] != max(1, got[i-1]/2) {
			t.Errorf("window went from %v to %v, want halved", got[i-1], got[i])
		}
	}
	// Answered in time again, it grows back.
	for range 8 {
		write(time.Millisecond)
	}
	if last := got[len(got)-1]; last <= 1 {
		t.Errorf("window %v after writes in time, want above 1", last)
	}
}

func TestRequestNamespace(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/team-a/services":                    "team-a",
		"/apis/pgloop.dev/v1/namespaces/b/postgresqls/c/status": "b",
		"/api/v1/namespaces":                                    "",
		"/apis/storage.k8s.io/v1/storageclasses":                "",
	} {
		if got := requestNamespace(path); got != want {
			t.Errorf("requestNamespace(%q) = %q, want %q", path, got, want)
		}
	}
}

// A write marked with a class (reqclass.WithWriteClass: a headless
// Service's) has a window of its own: it is not held by its kind's
// full window, and its latency, far below the others', does not make
// them look slow.
func TestWriteWindowsClasses(t *testing.T) {
	r := newWindowRig(t)
	r.setWindow("create", "services", 1)
	r.send(context.Background(), "a0", reqclass.Urgent, http.MethodPost, svcPath("a"))
	r.arrived("a0")
	headless := reqclass.WithWriteClass(context.Background(), "headless")
	r.send(headless, "h0", reqclass.Urgent, http.MethodPost, svcPath("a"))
	r.arrived("a0", "h0")
	r.finish("h0")
	r.finish("a0")

	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	w := newWriteWindows(clk, nil)
	write := func(class string, took time.Duration) {
		s, err := w.acquire(context.Background(), "create", "services", class, "a", false)
		if err != nil {
			t.Fatal(err)
		}
		clk.Step(took)
		w.done(s)
	}
	for range 8 * 10 {
		write("headless", 20*time.Millisecond)
		write("", 200*time.Millisecond)
	}
	for _, class := range []string{"", "headless"} {
		if k := w.kinds[kindKey("create", "services", class)]; k.pace.window != paceMaxWindow || k.pace.cuts != 0 {
			t.Errorf("class %q: window %v after %d cuts, want %d and none: each class has its own baseline",
				class, k.pace.window, k.pace.cuts, paceMaxWindow)
		}
	}
	// One window for both, the ClusterIP creates would have cut it.
	w = newWriteWindows(clk, nil)
	for range 8 * 10 {
		write("", 20*time.Millisecond)
		write("", 200*time.Millisecond)
	}
	if k := w.kinds[kindKey("create", "services", "")]; k.pace.cuts == 0 || k.pace.window > 4 {
		t.Errorf("one window for both: %v after %d cuts, want it cut to 4 or less", k.pace.window, k.pace.cuts)
	}
}

// newHeldServicesRig is a rig whose Service creates' window is 1, held
// by a0, an urgent create of namespace a: with a baseline of a minute, a0
// holds its place 40 minutes before it detaches.
func newHeldServicesRig(t *testing.T) *windowRig {
	r := newWindowRig(t)
	r.setWindow("create", "services", 1)
	r.w.mu.Lock()
	r.w.kind("create", "services", "").pace.minCur = time.Minute
	r.w.mu.Unlock()
	r.send(context.Background(), "a0", reqclass.Urgent, http.MethodPost, svcPath("a"))
	r.arrived("a0")
	return r
}

// A write that has waited for a place half of what its deadline left goes
// on without one, and the place it never took is not given back: the
// next waiter still waits for the write holding it.
func TestWriteWindowsWaitBoundedByDeadline(t *testing.T) {
	// a0 holds its place 40 minutes, past the half hour "late" waits.
	r := newHeldServicesRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	r.send(ctx, "late", reqclass.Urgent, http.MethodPost, svcPath("b"))
	r.send(context.Background(), "c0", reqclass.Urgent, http.MethodPost, svcPath("c"))
	r.waiting("create services", 2)
	r.clk.Step(29 * time.Minute)
	r.stays("a0")
	r.clk.Step(time.Minute)
	r.arrived("a0", "late")
	r.waiting("create services", 1)
	r.finish("late")
	r.stays("a0", "late")
	r.finish("a0")
	r.arrived("a0", "late", "c0")
	r.finish("c0")
	r.noPlacesHeld("create services")
}

// A write of a step waits for its place as long as it takes: its step's
// deadline stands still meanwhile, and runs again, with what was left,
// once the write goes.
func TestWriteWindowsWaitPausesStepDeadline(t *testing.T) {
	r := newHeldServicesRig(t)
	step, release := eventloop.WithStepDeadline(context.Background(), r.clk, 30*time.Second)
	defer release()
	r.clk.Step(10 * time.Second)
	r.send(step, "b0", reqclass.Urgent, http.MethodPost, svcPath("b"))
	r.waiting("create services", 1)
	r.clk.Step(30 * time.Minute)
	r.stays("a0")
	if err := step.Err(); err != nil {
		t.Fatalf("the step ended while its write waited: %v", err)
	}
	r.finish("a0")
	r.arrived("a0", "b0")
	if d, _ := step.Deadline(); !d.Equal(r.clk.Now().Add(20 * time.Second)) {
		t.Errorf("deadline %v once the write went, want the 20 s left from now (%v)", d, r.clk.Now().Add(20*time.Second))
	}
	r.clk.Step(20 * time.Second)
	if err := step.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the step's deadline did not run again: err %v", err)
	}
	r.finish("b0")
}

// Every windowed write is told to onWait with its kind and priority: 0
// for one that found a place free, else how long it waited for one (the
// operator's pgloop_api_write_wait_seconds_total).
func TestWriteWindowsTellWaits(t *testing.T) {
	r := newWindowRig(t)
	type wait struct {
		kind   string
		urgent bool
		d      time.Duration
	}
	var waits []wait
	r.w.onWait = func(verb, resource, class string, urgent bool, d time.Duration) {
		r.mu.Lock()
		defer r.mu.Unlock()
		waits = append(waits, wait{kindKey(verb, resource, class), urgent, d})
	}
	r.setWindow("create", "services", 1)
	r.send(context.Background(), "a0", reqclass.Urgent, http.MethodPost, svcPath("a"))
	r.arrived("a0")
	r.send(context.Background(), "b0", reqclass.Background, http.MethodPost, svcPath("b"))
	r.waiting("create services", 1)
	r.clk.Step(2 * time.Second)
	r.finish("a0")
	r.arrived("a0", "b0")
	r.finish("b0")
	r.mu.Lock()
	defer r.mu.Unlock()
	want := []wait{{"create services", true, 0}, {"create services", false, 2 * time.Second}}
	if len(waits) != len(want) || waits[0] != want[0] || waits[1] != want[1] {
		t.Errorf("waits told %+v, want %+v", waits, want)
	}
}
