package traffic

import "time"

// rateGain is how much more a second a larger window must have got
// answered to count as better than a smaller one: less is noise.
const rateGain = 0.1

// rateWindow sizes a write window by the writes a second the API server
// answers, when writes wait for the window (the server, not the demand,
// sets the rate): a hill climb around the smallest window that gets about
// the most done.
//
// Why: the pacer (pace.go) cuts a window when its writes are slow against
// the least latency seen lately, which is right when more in flight only
// waits in the API server. But the server answers some kinds more a
// second with more in flight, each then slower: Service creates, 146 a
// second with one in flight and 216 with two on an idle plane. Through a
// burst of 10,000 on this busy plane the latency rule alone held the
// ClusterIP creates' window at 1 (every write of a burst is slow against
// one alone), and the pods went up a third slower than when creates
// escaped the window; with a rate floor under it the window then crept to
// 48 with no more done a second (8 a second, each 8.8 s), as the least
// latency lately crept up with it (docs/scale.md, "Steps that never fail
// for pgloop's queue").
//
// So each round of writes answered while others waited (max(paceRound, 2
// × the window) in a row) measures a rate at its window, and rounds cycle
// through the best window, one a quarter larger, the best, and one a
// quarter smaller. A round more than rateGain quicker than the best rate
// of the current and the last epoch (the pacer's, 30 s) makes its window
// the best; so does a smaller window within rateGain of it. The window
// climbs while a larger one gets more done and comes down while a smaller
// one gets as much: past the knee, more in flight only waits in the
// server, where a fair turn is one write of it. With no such round for
// two epochs (nothing waits) the pacer's window rules again.
type rateWindow struct {
	began  time.Time // the current round's beginning; zero: none
	window int       // the largest window in effect at its answers
	n      int       // writes answered in it
	phase  int       // of the cycle: best, larger, best, smaller
	best   int       // the window that got the most done; 0: none
	epoch  time.Time
	peak   [2]float64 // the best rate of the current epoch, and the last
}

// observe counts a write answered at now, with window the window in
// effect when it was answered, and waiting whether other writes of the
// kind waited for a place. A round is max(paceRound, 2 × its window)
// answers in a row with writes waiting, after the one that began it.
func (f *rateWindow) observe(now time.Time, window int, waiting bool) {
	if now.Sub(f.epoch) >= paceBaselineEpoch {
		f.peak[1], f.peak[0], f.epoch = f.peak[0], 0, now
		if f.peak[1] == 0 {
			f.best = 0 // two epochs with no round: forget
		}
	}
	if f.began.IsZero() || !waiting {
		// Nothing waited: the writes a second are what was asked, not
		// what the server could answer. A round begins again.
		f.began, f.window, f.n = now, 0, 0
		return
	}
	f.n++
	f.window = max(f.window, window)
	if f.n < max(paceRound, 2*f.window) {
		return
	}
	if took := now.Sub(f.began); took > 0 {
		f.rate(f.window, float64(f.n)/took.Seconds())
	}
	f.began, f.window, f.n = now, 0, 0
	f.phase = (f.phase + 1) % 4
}

// rate takes in a round's rate at window w.
func (f *rateWindow) rate(w int, r float64) {
	peak := max(f.peak[0], f.peak[1])
	switch {
	case f.best == 0, r > peak*(1+rateGain):
		f.best = w
	case w < f.best && r*(1+rateGain) >= peak:
		f.best = w
	}
	f.peak[0] = max(f.peak[0], r)
}

// size is the window: the pacer's (pace) with no best yet, else the best
// or, every other round, a quarter more or less than it; at most
// paceMaxWindow.
func (f *rateWindow) size(pace float64) int {
	if f.best == 0 {
		return max(1, int(pace))
	}
	step := max(1, f.best/4)
	switch f.phase {
	case 1:
		return min(paceMaxWindow, f.best+step)
	case 3:
		return max(1, f.best-step)
	}
	return f.best
}
