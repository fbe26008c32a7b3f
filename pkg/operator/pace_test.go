package operator

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/pgloop/pgloop/pkg/eventloop"
)

// A write answered slowly halves the window once per round: only a write
// sent after the last cut cuts again. Writes answered in time grow it by
// one per window, background ones only; it stays within 1 and the most.
func TestPacerAIMD(t *testing.T) {
	p := newPacer()
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }

	p.observe(at(0), at(10), ms(10), true) // the first write sets the baseline
	if p.window != paceMaxWindow || p.baseline() != ms(10) {
		t.Fatalf("after the first write: window %v baseline %v, want %d and 10ms", p.window, p.baseline(), paceMaxWindow)
	}
	p.observe(at(20), at(44), ms(24), false) // 24ms <= 2 × 10ms + 5ms: in time
	if p.window != paceMaxWindow {
		t.Errorf("a write in time cut the window to %v", p.window)
	}
	p.observe(at(20), at(70), ms(50), false) // slow: cut
	if p.window != paceMaxWindow/2 || p.cuts != 1 {
		t.Fatalf("after a slow write: window %v cuts %d, want %d and 1", p.window, p.cuts, paceMaxWindow/2)
	}
	p.observe(at(30), at(90), ms(60), true) // sent before the cut: same round
	if p.window != paceMaxWindow/2 {
		t.Errorf("a write of the round already cut cut again: window %v", p.window)
	}
	for i := range 10 { // each sent after the last cut: the window falls to 1
		sent := at(100 + 100*i)
		p.observe(sent, sent.Add(ms(80)), ms(80), true)
	}
	if p.window != 1 || !p.allows(0) || p.allows(1) {
		t.Fatalf("after 10 more slow rounds: window %v, want 1 (one request always goes)", p.window)
	}
	// Background writes in time: +1 per window's worth.
	sent := at(2000)
	for range 3 { // 1 → 2 → 2.5 → 2.83
		p.observe(sent, sent.Add(ms(10)), ms(10), true)
	}
	if p.window < 2.8 || p.window > 2.9 || !p.allows(1) || p.allows(2) {
		t.Errorf("after 3 writes in time from 1: window %v, want about 2.83", p.window)
	}
	before := p.window
	p.observe(sent, sent.Add(ms(10)), ms(10), false)
	if p.window != before {
		t.Errorf("an urgent write grew the window from %v to %v", before, p.window)
	}
	for range 10000 {
		p.observe(sent, sent.Add(ms(10)), ms(10), true)
	}
	if p.window != paceMaxWindow {
		t.Errorf("window %v after many writes in time, want at most %d", p.window, paceMaxWindow)
	}
}

// The baseline is the least latency of the current epoch and the one
// before: an API server slower for good is the new baseline two epochs
// later, and no longer counts as congested.
func TestPacerBaselineFollows(t *testing.T) {
	p := newPacer()
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	p.observe(t0, t0.Add(ms(10)), ms(10), true)
	slow := func(at time.Time) { p.observe(at, at.Add(ms(40)), ms(40), true) }
	slow(t0.Add(time.Second))
	if p.cuts != 1 {
		t.Fatalf("40ms against a 10ms baseline: %d cuts, want 1", p.cuts)
	}
	slow(t0.Add(paceBaselineEpoch + time.Second))   // epoch 2: 10ms still the epoch before's
	slow(t0.Add(2*paceBaselineEpoch + time.Second)) // epoch 3: the baseline is 40ms
	cuts := p.cuts
	slow(t0.Add(2*paceBaselineEpoch + 2*time.Second))
	if p.baseline() != ms(40) || p.cuts != cuts {
		t.Errorf("two epochs of 40ms writes: baseline %v, cuts %d → %d; want 40ms and no more cuts", p.baseline(), cuts, p.cuts)
	}
}

// With pacing on, background requests beyond the window wait in the gate,
// urgent ones never; a slow write cuts the window, and a write in time lets
// the next waiter go.
func TestGatePaces(t *testing.T) {
	r := newGateRig(t, -1) // no hold for urgent traffic: only the pacer
	r.gate.pacing(nil)
	ctx := context.Background()

	r.send(ctx, "bg1", eventloop.Background, http.MethodPut, statusPath)
	r.arrived("bg1")
	r.clk.Step(10 * time.Millisecond)
	r.inner.end("bg1")
	if err := r.wait("bg1"); err != nil {
		t.Fatal(err)
	}
	r.send(ctx, "bg2", eventloop.Background, http.MethodPut, statusPath)
	r.send(ctx, "bg3", eventloop.Background, http.MethodPut, statusPath)
	r.arrived("bg1", "bg2", "bg3")
	r.clk.Step(100 * time.Millisecond) // both slow against 10ms
	r.inner.end("bg2")
	r.inner.end("bg3")
	for _, n := range []string{"bg2", "bg3"} {
		if err := r.wait(n); err != nil {
			t.Fatal(err)
		}
	}
	r.gate.mu.Lock()
	r.gate.pace.window = 1 // as after six slow rounds
	r.gate.mu.Unlock()

	r.send(ctx, "bg4", eventloop.Background, http.MethodPut, statusPath)
	r.arrived("bg1", "bg2", "bg3", "bg4")
	r.send(ctx, "bg5", eventloop.Background, http.MethodPut, statusPath)
	r.waiters(1)
	r.send(ctx, "u1", eventloop.Urgent, http.MethodPost, podsPath)
	r.send(ctx, "get", eventloop.Background, http.MethodGet, podsPath) // reads are paced, not measured
	r.arrived("bg1", "bg2", "bg3", "bg4", "u1")
	r.clk.Step(10 * time.Millisecond)
	r.inner.end("u1")
	if err := r.wait("u1"); err != nil {
		t.Fatal(err)
	}
	r.stays("bg1", "bg2", "bg3", "bg4", "u1") // an urgent write in time grows nothing
	r.inner.end("bg4")                        // in time: 1 → 2, and bg5 and the read go
	r.arrived("bg1", "bg2", "bg3", "bg4", "u1", "bg5", "get")
	r.waiters(0)
	r.gate.mu.Lock()
	defer r.gate.mu.Unlock()
	if r.gate.pace.cuts != 1 || r.gate.pace.window != 2 {
		t.Errorf("cuts %d window %v, want 1 cut (bg2 and bg3 were one round) and a window of 2", r.gate.pace.cuts, r.gate.pace.window)
	}
}
