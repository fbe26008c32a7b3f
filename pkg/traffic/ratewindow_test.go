package traffic

import (
	"testing"
	"time"
)

// rateRig feeds a rateWindow rounds of answers at a given rate.
type rateRig struct {
	t   *testing.T
	f   rateWindow
	now time.Time
}

// round feeds one whole round at the window the rate window sizes:
// max(paceRound, 2w) answers at perSecond after the last round's end,
// writes waiting at each when saturated (a round that is not begins
// again at each answer). It returns the window.
func (r *rateRig) round(perSecond float64, saturated bool) int {
	r.t.Helper()
	w := r.f.size(1)
	if r.f.began.IsZero() {
		r.f.observe(r.now, w, true)
	}
	gap := time.Duration(float64(time.Second) / perSecond)
	for range max(paceRound, 2*w) {
		r.now = r.now.Add(gap)
		r.f.observe(r.now, w, saturated)
	}
	return w
}

// The rate window is the pacer's until a round of writes that waited
// measures a rate; then it cycles through the best window, a quarter
// more, the best and a quarter less, takes a larger window that got more
// than rateGain more done or a smaller one about as quick as the best
// rate, ignores rounds nothing waited in, and hands back to the pacer
// after two epochs with none.
func TestRateWindow(t *testing.T) {
	r := &rateRig{t: t, now: time.Unix(1000, 0)}
	if got := r.f.size(64); got != 64 {
		t.Errorf("window %d with no round and the pacer's at 64, want 64", got)
	}
	if got := r.f.size(0.5); got != 1 {
		t.Errorf("window %d with no round and the pacer's at 0.5, want 1", got)
	}
	r.f.best = 8 // as if the pacer's window was 8 at the first round
	steps := []struct {
		rate      float64
		saturated bool
		window    int // the round's
		best      int // after it
	}{
		{10, true, 8, 8},    // the best; next: a quarter more
		{12, true, 10, 10},  // more than 10 % quicker: the best
		{12, true, 10, 10},  // the best again; next: a quarter less
		{11.5, true, 8, 8},  // within 10 % of 12 with fewer: the best
		{11, true, 8, 8},    // next: a quarter more
		{11.8, true, 10, 8}, // not 10 % more than 12
		{11, true, 8, 8},    // next: a quarter less
		{30, false, 6, 8},   // nothing waited: no round
		{9, true, 6, 8},     // 10 % slower than 12 with fewer: not the best
		{11, true, 8, 8},    // the cycle went on
	}
	for i, s := range steps {
		w := r.round(s.rate, s.saturated)
		if w != s.window || r.f.best != s.best {
			t.Errorf("round %d (%v/s, waiting %v): window %d, best %d after it; want %d, %d", i, s.rate, s.saturated, w, r.f.best, s.window, s.best)
		}
	}
	// The largest window tried is paceMaxWindow.
	r.f.best, r.f.phase = paceMaxWindow, 1
	if got := r.f.size(1); got != paceMaxWindow {
		t.Errorf("window %d a quarter above a best of %d, want at most %d", got, paceMaxWindow, paceMaxWindow)
	}
	r.f.best, r.f.phase = 8, 0
	// Two epochs with no round: the pacer's window again.
	r.now = r.now.Add(paceBaselineEpoch)
	r.f.observe(r.now, 8, false)
	r.now = r.now.Add(paceBaselineEpoch)
	r.f.observe(r.now, 8, false)
	if got := r.f.size(3); got != 3 {
		t.Errorf("window %d after two epochs with no round, want the pacer's 3", got)
	}
}
