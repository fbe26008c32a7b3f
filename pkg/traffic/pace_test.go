package traffic

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/pgloop/pgloop/pkg/reqclass"
)

// A round of writes (paceRound sent since the last cut) whose median is
// slow halves the window; a few hung writes among quick ones do not, and
// writes sent before the last cut count in no round. Background writes in
// time grow it by one per window; it stays within 1 and the most.
func TestPacerAIMD(t *testing.T) {
	p := newPacer()
	now := time.Unix(1000, 0)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	write := func(took time.Duration, background bool) { // sent now, answered took later
		p.observe(now, now.Add(took), took, background)
		now = now.Add(took)
	}

	write(ms(10), true) // the first write sets the baseline: 10ms, slow beyond 25ms
	if p.window != paceMaxWindow || p.baseline() != ms(10) {
		t.Fatalf("after the first write: window %v baseline %v, want %d and 10ms", p.window, p.baseline(), paceMaxWindow)
	}
	for i := range paceRound { // a round: 3 hung writes (sent 30s ago, beside the others), 5 in time
		if i < 3 {
			p.observe(now.Add(-30*time.Second), now, 30*time.Second, false)
		} else {
			write(ms(24), false)
		}
	}
	if p.cuts != 0 || p.window != paceMaxWindow {
		t.Fatalf("3 hung writes of 8: %d cuts, window %v; want none", p.cuts, p.window)
	}
	sent := now
	for range paceRound {
		write(ms(50), false)
	}
	if p.cuts != 1 || p.window != paceMaxWindow/2 {
		t.Fatalf("a round of slow writes: %d cuts, window %v; want 1 and %d", p.cuts, p.window, paceMaxWindow/2)
	}
	for range 2 * paceRound { // sent before the cut: its round was judged
		p.observe(sent, now, ms(60), true)
	}
	if p.cuts != 1 || p.window != paceMaxWindow/2 || len(p.round) != 0 {
		t.Errorf("writes sent before the cut: %d cuts, window %v, round %d; want them ignored", p.cuts, p.window, len(p.round))
	}
	for range 10 * paceRound {
		write(ms(80), true)
	}
	if p.window != 1 || !p.allows(0) || p.allows(1) {
		t.Fatalf("after 10 more slow rounds: window %v, want 1 (one request always goes)", p.window)
	}
	for range 3 { // 1 → 2 → 2.5 → 2.83
		write(ms(10), true)
	}
	if p.window < 2.8 || p.window > 2.9 || !p.allows(1) || p.allows(2) {
		t.Errorf("after 3 background writes in time from 1: window %v, want about 2.83", p.window)
	}
	before := p.window
	write(ms(10), false)
	if p.window != before {
		t.Errorf("an urgent write grew the window from %v to %v", before, p.window)
	}
	for range 10000 {
		write(ms(10), true)
	}
	if p.window != paceMaxWindow {
		t.Errorf("window %v after many writes in time, want at most %d", p.window, paceMaxWindow)
	}
}

// The baseline is the least latency of the current epoch and the one
// before: an API server slower for good is the new baseline two epochs
// later, and its writes no longer count as slow.
func TestPacerBaselineFollows(t *testing.T) {
	p := newPacer()
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	p.observe(t0, t0.Add(ms(10)), ms(10), true)
	round := func(at time.Time) {
		for i := range paceRound {
			sent := at.Add(time.Duration(i) * time.Millisecond)
			p.observe(sent, sent.Add(ms(40)), ms(40), true)
		}
	}
	round(t0.Add(time.Second))
	if p.cuts != 1 {
		t.Fatalf("writes of 40ms against a 10ms baseline: %d cuts, want 1", p.cuts)
	}
	round(t0.Add(paceBaselineEpoch + time.Second))   // epoch 2: 10ms is still the epoch before's
	round(t0.Add(2*paceBaselineEpoch + time.Second)) // epoch 3: the baseline is 40ms
	cuts := p.cuts
	round(t0.Add(2*paceBaselineEpoch + 2*time.Second))
	if p.baseline() != ms(40) || p.cuts != cuts {
		t.Errorf("two epochs of 40ms writes: baseline %v, cuts %d → %d; want 40ms and no more cuts", p.baseline(), cuts, p.cuts)
	}
}

// With pacing on, background requests beyond the window wait in the gate,
// urgent ones never; a background write in time grows the window and lets
// the next waiters go.
func TestGatePaces(t *testing.T) {
	r := newGateRig(t, -1) // no hold for urgent traffic: only the pacer
	r.gate.Pacing(nil)
	ctx := context.Background()

	r.send(ctx, "bg1", reqclass.Background, http.MethodPut, statusPath)
	r.arrived("bg1")
	r.clk.Step(10 * time.Millisecond)
	r.inner.end("bg1") // the baseline: 10ms
	if err := r.wait("bg1"); err != nil {
		t.Fatal(err)
	}
	r.gate.mu.Lock()
	r.gate.pace.window = 1 // as after six slow rounds
	r.gate.mu.Unlock()

	r.send(ctx, "bg2", reqclass.Background, http.MethodPut, statusPath)
	r.arrived("bg1", "bg2")
	r.send(ctx, "bg3", reqclass.Background, http.MethodPut, statusPath)
	r.waiters(1)
	r.send(ctx, "u1", reqclass.Urgent, http.MethodPost, podsPath)
	r.send(ctx, "get", reqclass.Background, http.MethodGet, podsPath) // reads are paced, not measured
	r.arrived("bg1", "bg2", "u1")
	r.clk.Step(10 * time.Millisecond)
	r.inner.end("u1")
	if err := r.wait("u1"); err != nil {
		t.Fatal(err)
	}
	r.stays("bg1", "bg2", "u1") // an urgent write in time grows nothing
	r.inner.end("bg2")          // in time: 1 → 2, and bg3 and the read go
	r.arrived("bg1", "bg2", "u1", "bg3", "get")
	r.waiters(0)
	r.gate.mu.Lock()
	defer r.gate.mu.Unlock()
	if r.gate.pace.window != 2 {
		t.Errorf("window %v, want 2", r.gate.pace.window)
	}
}
