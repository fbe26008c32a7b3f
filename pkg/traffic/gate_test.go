package traffic

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/reqclass"
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
	r.clk.Step(defaultUrgentHold / 2)
	r.stays("bg1", "bg2", "u1", "watch", "list", "u2", "bg3")
	r.clk.Step(defaultUrgentHold / 2)
	r.arrived("bg1", "bg2", "u1", "watch", "list", "u2", "bg3", "ev1")
	r.waiters(0)

	// Over: background requests go at once again.
	r.send(ctx, "bg4", reqclass.Background, http.MethodPut, statusPath)
	r.arrived("bg1", "bg2", "u1", "watch", "list", "u2", "bg3", "ev1", "bg4")

	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.held) != 2 || r.held[1] != defaultUrgentHold {
		t.Errorf("held %v, want 2 requests, the second for the hold %v", r.held, defaultUrgentHold)
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
	r.clk.Step(defaultUrgentHold)
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
	r.clk.Step(defaultMaxHeld / 2)
	r.send(ctx, "bg3", reqclass.Background, http.MethodPut, statusPath)
	r.waiters(3)
	r.stays("u1")
	r.clk.Step(defaultMaxHeld / 2)
	r.arrived("u1", "bg1")
	r.waiters(2)
	// bg2 is overdue too, but goes a hold after bg1, bg1 in flight or not.
	r.stays("u1", "bg1")
	r.clk.Step(defaultUrgentHold)
	r.arrived("u1", "bg1", "bg2")
	// bg3's own time comes later.
	r.inner.end("bg1")
	r.clk.Step(defaultMaxHeld/2 - defaultUrgentHold - time.Millisecond)
	r.stays("u1", "bg1", "bg2")
	r.clk.Step(time.Millisecond)
	r.arrived("u1", "bg1", "bg2", "bg3")
	r.waiters(0)

	r.mu.Lock()
	defer r.mu.Unlock()
	if want := []time.Duration{defaultMaxHeld, defaultMaxHeld + defaultUrgentHold, defaultMaxHeld}; !slices.Equal(r.held, want) {
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
	step, release := eventloop.WithStepDeadline(context.Background(), r.clk, defaultMaxHeld/4)
	defer release()
	r.send(step, "bg1", reqclass.Background, http.MethodPut, statusPath)
	r.waiters(1)
	r.clk.Step(defaultMaxHeld / 2)
	r.stays("u1")
	if err := step.Err(); err != nil {
		t.Fatalf("the step ended while its request was held: %v", err)
	}
	r.clk.Step(defaultMaxHeld / 2)
	r.arrived("u1", "bg1")
	if d, _ := step.Deadline(); !d.Equal(r.clk.Now().Add(defaultMaxHeld / 4)) {
		t.Errorf("deadline %v once let go, want all of its %v from now", d, defaultMaxHeld/4)
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
