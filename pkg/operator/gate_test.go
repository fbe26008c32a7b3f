package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/reqclass"
)

// heldTransport is a RoundTripper whose requests stay in flight until the
// test ends them, and that records the order they arrived in.
type heldTransport struct {
	mu      sync.Mutex
	arrived []string
	release map[string]chan struct{}
}

func newHeldTransport() *heldTransport {
	return &heldTransport{release: map[string]chan struct{}{}}
}

func (h *heldTransport) ch(name string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.release[name]
	if !ok {
		c = make(chan struct{})
		h.release[name] = c
	}
	return c
}

func (h *heldTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	name := req.Header.Get("X-Test-Name")
	h.mu.Lock()
	h.arrived = append(h.arrived, name)
	h.mu.Unlock()
	<-h.ch(name)
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}

// end lets request name's response come.
func (h *heldTransport) end(name string) { close(h.ch(name)) }

func (h *heldTransport) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.arrived...)
}

// gateRig sends requests through a gate to a heldTransport, each on its own
// goroutine, and collects their errors.
type gateRig struct {
	t     *testing.T
	clk   *clocktesting.FakeClock
	gate  *requestGate
	inner *heldTransport
	rt    http.RoundTripper
	held  []time.Duration
	mu    sync.Mutex
	errs  map[string]chan error
}

func newGateRig(t *testing.T, limit int) *gateRig { return newGateRigMost(t, limit, 0) }

func newGateRigMost(t *testing.T, limit, most int) *gateRig {
	r := &gateRig{t: t, clk: clocktesting.NewFakeClock(time.Unix(1000, 0)), inner: newHeldTransport(), errs: map[string]chan error{}}
	r.gate = newRequestGate(limit, most, DefaultUrgentHold, DefaultMaxHeld, r.clk, func(d time.Duration) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.held = append(r.held, d)
	})
	r.rt = r.gate.wrap(r.inner)
	t.Cleanup(func() {
		// End whatever is still in flight, so no goroutine outlives the test.
		for name := range r.errs {
			select {
			case <-r.inner.ch(name):
			default:
				r.inner.end(name)
			}
		}
	})
	return r
}

// send starts request name, of priority p, method and path.
func (r *gateRig) send(ctx context.Context, name string, p reqclass.Priority, method, path string) {
	switch p {
	case reqclass.Urgent, reqclass.Background:
		ctx = reqclass.WithPriority(ctx, p)
	}
	req, err := http.NewRequestWithContext(ctx, method, "https://api.test"+path, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("X-Test-Name", name)
	errc := make(chan error, 1)
	r.errs[name] = errc
	go func() {
		_, err := r.rt.RoundTrip(req)
		errc <- err
	}()
}

// wait returns request name's error once its RoundTrip returned.
func (r *gateRig) wait(name string) error {
	r.t.Helper()
	select {
	case err := <-r.errs[name]:
		return err
	case <-time.After(10 * time.Second):
		r.t.Fatalf("request %s did not return", name)
		return nil
	}
}

// arrived waits until the inner transport has seen exactly the requests
// want, in any order: requests sent at once race to the gate.
func (r *gateRig) arrived(want ...string) {
	r.t.Helper()
	want = slices.Sorted(slices.Values(want))
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := slices.Sorted(slices.Values(r.inner.got()))
		if slices.Equal(got, want) {
			return
		}
		if len(got) > len(want) || time.Now().After(deadline) {
			r.t.Fatalf("requests at the server %v, want %v", got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// stays checks that the inner transport still has seen only want, after
// the goroutines had time to run: what the gate holds does not arrive.
func (r *gateRig) stays(want ...string) {
	r.t.Helper()
	time.Sleep(20 * time.Millisecond)
	r.arrived(want...)
}

// waiters waits until n requests wait in the gate.
func (r *gateRig) waiters(n int) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.gate.mu.Lock()
		got := len(r.gate.waiters)
		r.gate.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%d requests wait in the gate, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

const (
	podsPath   = "/api/v1/namespaces/ns/pods/p"
	statusPath = "/apis/pgloop.dev/v1/namespaces/ns/postgresqls/c/status"
	eventsPath = "/api/v1/namespaces/ns/events"
)

// Without urgent requests nothing is held, however many background
// requests are in flight.
func TestGateIdleHoldsNothing(t *testing.T) {
	r := newGateRig(t, 1)
	var names []string
	for i := range 20 {
		name := fmt.Sprintf("bg%02d", i)
		names = append(names, name)
		r.send(context.Background(), name, reqclass.Background, http.MethodPut, statusPath)
		r.arrived(names...)
	}
	for _, name := range names {
		r.inner.end(name)
		if err := r.wait(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if len(r.held) != 0 {
		t.Errorf("held %v, want none", r.held)
	}
}

// While an urgent request is in flight, and for the hold after it, at
// most limit background requests are in flight; the others go in the order
// they came, once urgent traffic is over. Urgent requests, watches and
// unmarked reads are never held; unmarked Event writes are background.
func TestGateUrgentFirst(t *testing.T) {
	r := newGateRig(t, 1)
	ctx := context.Background()
	r.send(ctx, "bg1", reqclass.Background, http.MethodPut, statusPath)
	r.send(ctx, "bg2", reqclass.Background, http.MethodPut, statusPath)
	r.arrived("bg1", "bg2")

	r.send(ctx, "u1", reqclass.Urgent, http.MethodPost, podsPath)
	r.arrived("bg1", "bg2", "u1")
	// Two background requests in flight, the limit is one: both wait.
	r.send(ctx, "bg3", reqclass.Background, http.MethodPut, statusPath)
	r.waiters(1)
	r.send(ctx, "ev1", reqclass.Unmarked, http.MethodPost, eventsPath)
	r.waiters(2)
	r.send(ctx, "watch", reqclass.Unmarked, http.MethodGet, "/api/v1/pods?watch=true")
	r.send(ctx, "list", reqclass.Unmarked, http.MethodGet, "/api/v1/pods")
	r.send(ctx, "u2", reqclass.Urgent, http.MethodPut, statusPath)
	r.arrived("bg1", "bg2", "u1", "watch", "list", "u2")

	// One background request ends: still one in flight, nobody goes.
	r.inner.end("bg1")
	if err := r.wait("bg1"); err != nil {
		t.Fatal(err)
	}
	r.stays("bg1", "bg2", "u1", "watch", "list", "u2")
	// The other ends: the first waiter goes, the second still waits.
	r.inner.end("bg2")
	r.arrived("bg1", "bg2", "u1", "watch", "list", "u2", "bg3")
	r.waiters(1)

	// Urgent traffic ends; the hold keeps the limit a while.
	r.inner.end("u1")
	r.inner.end("u2")
	if err := r.wait("u2"); err != nil {
		t.Fatal(err)
	}
	r.stays("bg1", "bg2", "u1", "watch", "list", "u2", "bg3")
	r.clk.Step(DefaultUrgentHold / 2)
	r.stays("bg1", "bg2", "u1", "watch", "list", "u2", "bg3")
	r.clk.Step(DefaultUrgentHold / 2)
	r.arrived("bg1", "bg2", "u1", "watch", "list", "u2", "bg3", "ev1")
	r.waiters(0)

	// Over: background requests go at once again.
	r.send(ctx, "bg4", reqclass.Background, http.MethodPut, statusPath)
	r.arrived("bg1", "bg2", "u1", "watch", "list", "u2", "bg3", "ev1", "bg4")

	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.held) != 2 || r.held[1] != DefaultUrgentHold {
		t.Errorf("held %v, want 2 requests, the second for the hold %v", r.held, DefaultUrgentHold)
	}
}

// With a limit of none (the default), no background request goes while
// urgent traffic goes on, even with none in flight.
func TestGateNoneWhileUrgent(t *testing.T) {
	r := newGateRig(t, DefaultBackgroundWhileUrgent)
	ctx := context.Background()
	r.send(ctx, "u1", reqclass.Urgent, http.MethodPost, podsPath)
	r.arrived("u1")
	r.send(ctx, "bg1", reqclass.Background, http.MethodPut, statusPath)
	r.waiters(1)
	r.inner.end("u1")
	if err := r.wait("u1"); err != nil {
		t.Fatal(err)
	}
	r.stays("u1")
	r.clk.Step(DefaultUrgentHold)
	r.arrived("u1", "bg1")
	r.waiters(0)
}

// A background request held for maxHeld goes although urgent traffic goes
// on, one every hold: users' actions slow the fleet's work, never stop it,
// and the fleet's work goes at a pace that leaves the API server to them.
func TestGateMaxHeld(t *testing.T) {
	r := newGateRig(t, 0)
	ctx := context.Background()
	r.send(ctx, "u1", reqclass.Urgent, http.MethodPost, podsPath)
	r.arrived("u1")
	r.send(ctx, "bg1", reqclass.Background, http.MethodPut, statusPath)
	r.waiters(1)
	r.send(ctx, "bg2", reqclass.Background, http.MethodPut, statusPath)
	r.waiters(2)
	r.clk.Step(DefaultMaxHeld / 2)
	r.send(ctx, "bg3", reqclass.Background, http.MethodPut, statusPath)
	r.waiters(3)
	r.stays("u1")
	r.clk.Step(DefaultMaxHeld / 2)
	r.arrived("u1", "bg1")
	r.waiters(2)
	// bg2 is overdue too, but goes a hold after bg1, bg1 in flight or not.
	r.stays("u1", "bg1")
	r.clk.Step(DefaultUrgentHold)
	r.arrived("u1", "bg1", "bg2")
	// bg3's own time comes later.
	r.inner.end("bg1")
	r.clk.Step(DefaultMaxHeld/2 - DefaultUrgentHold - time.Millisecond)
	r.stays("u1", "bg1", "bg2")
	r.clk.Step(time.Millisecond)
	r.arrived("u1", "bg1", "bg2", "bg3")
	r.waiters(0)

	r.mu.Lock()
	defer r.mu.Unlock()
	if want := []time.Duration{DefaultMaxHeld, DefaultMaxHeld + DefaultUrgentHold, DefaultMaxHeld}; !slices.Equal(r.held, want) {
		t.Errorf("held %v, want %v", r.held, want)
	}
}

// A held request whose context ends returns its error and takes no slot;

// A background request held in the gate longer than its step's deadline
// does not fail for it: the deadline stands still while it is held.
func TestGateHoldPausesStepDeadline(t *testing.T) {
	r := newGateRig(t, 0)
	r.send(context.Background(), "u1", reqclass.Urgent, http.MethodPost, podsPath)
	r.arrived("u1")
	step, release := eventloop.WithStepDeadline(context.Background(), r.clk, DefaultMaxHeld/4)
	defer release()
	r.send(step, "bg1", reqclass.Background, http.MethodPut, statusPath)
	r.waiters(1)
	r.clk.Step(DefaultMaxHeld / 2)
	r.stays("u1")
	if err := step.Err(); err != nil {
		t.Fatalf("the step ended while its request was held: %v", err)
	}
	r.clk.Step(DefaultMaxHeld / 2)
	r.arrived("u1", "bg1")
	if d, _ := step.Deadline(); !d.Equal(r.clk.Now().Add(DefaultMaxHeld / 4)) {
		t.Errorf("deadline %v once let go, want all of its %v from now", d, DefaultMaxHeld/4)
	}
	r.inner.end("u1")
	r.inner.end("bg1")
}

// a slot granted as its context ended passes on to the next waiter.
func TestGateHeldRequestCancelled(t *testing.T) {
	r := newGateRig(t, 1)
	ctx := context.Background()
	r.send(ctx, "u1", reqclass.Urgent, http.MethodPost, podsPath)
	r.send(ctx, "bg1", reqclass.Background, http.MethodPut, statusPath)
	r.arrived("u1", "bg1")

	cctx, cancel := context.WithCancel(ctx)
	r.send(cctx, "bg2", reqclass.Background, http.MethodPut, statusPath)
	r.waiters(1)
	r.send(ctx, "bg3", reqclass.Background, http.MethodPut, statusPath)
	r.waiters(2)
	cancel()
	if err := r.wait("bg2"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled held request: %v, want context.Canceled", err)
	}
	r.waiters(1)
	r.inner.end("bg1")
	r.arrived("u1", "bg1", "bg3")
	r.gate.mu.Lock()
	defer r.gate.mu.Unlock()
	if r.gate.background != 1 || r.gate.urgent != 1 {
		t.Errorf("in flight: %d background, %d urgent; want 1 and 1", r.gate.background, r.gate.urgent)
	}
}

// --background-requests bounds background requests at any time; without
// urgent traffic a waiter goes as soon as one ends. -1 for the limit while
// urgent means none: only that bound holds.
func TestGateMost(t *testing.T) {
	r := newGateRigMost(t, -1, 2)
	ctx := context.Background()
	r.send(ctx, "bg1", reqclass.Background, http.MethodPut, statusPath)
	r.send(ctx, "bg2", reqclass.Background, http.MethodPut, statusPath)
	r.arrived("bg1", "bg2")
	r.send(ctx, "bg3", reqclass.Background, http.MethodPut, statusPath)
	r.waiters(1)
	r.send(ctx, "u1", reqclass.Urgent, http.MethodPost, podsPath)
	r.arrived("bg1", "bg2", "u1")
	r.inner.end("bg1")
	r.arrived("bg1", "bg2", "u1", "bg3")
	r.waiters(0)
}

// The operator's clients go through the gate with each request's priority
// taken from its context, as the executor marks it.
func TestClientsGated(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.URL.Path
		<-release
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s"}}`)
	}))
	defer srv.Close()
	defer close(release)
	cfg := DefaultConfig()
	held := make(chan time.Duration, 10)
	cl, err := newClients(&rest.Config{Host: srv.URL}, &cfg, gateObservers{held: func(d time.Duration) { held <- d }})
	if err != nil {
		t.Fatal(err)
	}
	get := func(p reqclass.Priority, name string) {
		go func() {
			ctx := reqclass.WithPriority(context.Background(), p)
			_, _ = cl.kube.CoreV1().Secrets("ns").Get(ctx, name, metav1.GetOptions{})
		}()
	}
	get(reqclass.Urgent, "urgent")
	<-arrived
	get(reqclass.Background, "bg1")
	<-arrived
	get(reqclass.Background, "bg2") // one background in flight already: held
	select {
	case p := <-arrived:
		t.Fatalf("%s reached the server while an urgent request and a background one were in flight", p)
	case <-time.After(100 * time.Millisecond):
	}
}
