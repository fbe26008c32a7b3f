package operator

import (
	"testing"
	"time"
)

// floorRig feeds a rateFloor rounds of answers at a given rate.
type floorRig struct {
	t   *testing.T
	f   rateFloor
	now time.Time
}

// round feeds one whole round at window w: max(paceRound, 2w) answers
// at perSecond after the last round's end, writes waiting at each when
// saturated (a round that is not begins again at each answer).
func (r *floorRig) round(w int, perSecond float64, saturated bool) {
	r.t.Helper()
	if r.f.began.IsZero() {
		r.f.observe(r.now, w, true)
	}
	n := max(paceRound, 2*w)
	gap := time.Duration(float64(time.Second) / perSecond)
	for range n {
		r.now = r.now.Add(gap)
		r.f.observe(r.now, w, saturated)
	}
}

// A window's floor climbs while a larger window gets more than rateGain
// more writes a second answered, tries one more every other round, stays
// at the smallest window about as quick as the best, ignores rounds
// nothing waited in, and forgets after two epochs.
func TestRateFloor(t *testing.T) {
	r := &floorRig{t: t, now: time.Unix(1000, 0)}
	if got := r.f.floor(); got != 1 {
		t.Fatalf("floor %d with no round, want 1", got)
	}
	steps := []struct {
		what      string
		window    int
		rate      float64
		saturated bool
		floor     int // after the round
	}{
		{"one in flight, 5/s", 1, 5, true, 2},                    // best 1, exploring 2
		{"two in flight, 8/s", 2, 8, true, 2},                    // best 2, not exploring
		{"two again, 8/s", 2, 8, true, 3},                        // exploring 3
		{"three, 8.4/s: not rateGain more", 3, 8.4, true, 2},     // best stays 2
		{"three, 20/s but nothing waited", 3, 20, false, 2},      // ignored
		{"three, 10/s", 3, 10, true, 4},                          // best 3, exploring 4
		{"two, 9.5/s: about as quick, smaller", 2, 9.5, true, 2}, // best 2
	}
	for _, s := range steps {
		r.round(s.window, s.rate, s.saturated)
		if got := r.f.floor(); got != s.floor {
			t.Errorf("after %s: floor %d, want %d (best %+v)", s.what, got, s.floor, r.f.best)
		}
	}
	// Two epochs with no saturated round forget the best.
	r.now = r.now.Add(paceBaselineEpoch)
	r.round(1, 5, false)
	r.now = r.now.Add(paceBaselineEpoch)
	r.round(1, 5, false)
	if b := r.f.best; b[0].window != 0 || b[1].window != 0 {
		t.Errorf("best %+v after two idle epochs, want none", b)
	}
}
