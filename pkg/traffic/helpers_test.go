package traffic

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

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
	gate  *Gate
	inner *heldTransport
	rt    http.RoundTripper
	held  []time.Duration
	mu    sync.Mutex
	errs  map[string]chan error
}

func newGateRig(t *testing.T, limit int) *gateRig { return newGateRigMost(t, limit, 0) }

func newGateRigMost(t *testing.T, limit, most int) *gateRig {
	r := &gateRig{t: t, clk: clocktesting.NewFakeClock(time.Unix(1000, 0)), inner: newHeldTransport(), errs: map[string]chan error{}}
	r.gate = newGate(limit, most, defaultUrgentHold, defaultMaxHeld, r.clk, func(d time.Duration) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.held = append(r.held, d)
	})
	r.rt = r.gate.Wrap(r.inner)
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
	case <-time.After(time.Minute):
		r.t.Fatalf("request %s did not return", name)
		return nil
	}
}

// arrived waits until the inner transport has seen exactly the requests
// want, in any order: requests sent at once race to the gate.
func (r *gateRig) arrived(want ...string) {
	r.t.Helper()
	want = slices.Sorted(slices.Values(want))
	deadline := time.Now().Add(time.Minute)
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
	deadline := time.Now().Add(time.Minute)
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

// okTransport answers every request 200.
type okTransport struct{}

func (okTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}
