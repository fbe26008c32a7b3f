package operator

import "time"

// rateGain is how much more a second a larger window must have got
// answered to count as better than a smaller one: less is noise.
const rateGain = 0.1

// rateFloor keeps a write window from falling below the window that got
// the most writes answered a second lately, while writes waited for it.
//
// Why: the pacer (pace.go) cuts a window when its writes are slow against
// the least latency seen, which is the right call when more in flight
// only waits in the API server. But the server serves some kinds more a
// second with more in flight, each then slower: Service creates, 146 a
// second with one in flight and 216 with two on an idle plane. On a busy
// plane every write of a burst is slow against one alone, and the
// latency rule held the ClusterIP creates' window at 1 through a burst of
// 10,000; the creates that left pgloop's queue without a place (at half
// their deadline, before it was paused) made more in flight, and the
// pods went up a third quicker (docs/scale.md). So each round of writes
// answered while others waited measures a rate at its window, and the
// window with the best rate of the current and the last epoch (that of
// the pacer's baseline, 30 s) is a floor under the pacer's. Every other
// round tries one more than the floor, so the floor climbs while a larger
// window gets more done, and it stays at the smallest window that got
// about as much as the best (within rateGain): past the knee, more in
// flight only waits in the server, and a fair turn is one write of it.
type rateFloor struct {
	began   time.Time // the current round's beginning; zero: none yet
	window  int       // the largest window in effect at its answers
	n       int       // writes answered in the round
	explore bool      // the next round tries one more than the floor
	epoch   time.Time
	best    [2]ratedWindow // of the current epoch, and of the one before
}

// ratedWindow is a window and the writes a second a round at it got
// answered.
type ratedWindow struct {
	window int
	rate   float64
}

// better reports whether r beats b: more than rateGain more a second, or
// about as many with a smaller window.
func (r ratedWindow) better(b ratedWindow) bool {
	switch {
	case b.window == 0:
		return true
	case r.rate > b.rate*(1+rateGain):
		return true
	case r.window < b.window:
		return r.rate*(1+rateGain) >= b.rate
	}
	return false
}

// observe counts a write answered at now, with window the window in
// effect as it was sent and answered, and waiting whether other writes of
// the kind waited for a place. A round is max(paceRound, 2 × its window)
// answers in a row with writes waiting, after the one that began it.
func (f *rateFloor) observe(now time.Time, window int, waiting bool) {
	if now.Sub(f.epoch) >= paceBaselineEpoch {
		f.best[1], f.best[0], f.epoch = f.best[0], ratedWindow{}, now
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
		r := ratedWindow{window: f.window, rate: float64(f.n) / took.Seconds()}
		if r.better(f.best[0]) {
			f.best[0] = r
		}
	}
	f.began, f.window, f.n = now, 0, 0
	f.explore = !f.explore
}

// floor is the window the best of the two epochs' rounds had (1 with
// none), one more every other round.
func (f *rateFloor) floor() int {
	b := f.best[0]
	if f.best[1].better(b) {
		b = f.best[1]
	}
	w := max(1, b.window)
	if f.explore {
		w++
	}
	return w
}
