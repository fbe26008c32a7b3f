package traffic

import (
	"slices"
	"time"
)

// The pacer's constants (docs/design.md §3, "Pacing background requests").
const (
	// paceMaxWindow is the most background requests the pacer lets be in
	// flight: more than the executor's workers and the Event writers
	// together, so an API server at its idle latency is never paced.
	paceMaxWindow = 64
	// paceSlowFactor and paceSlowSlack say when a write is slow: it took
	// more than paceSlowFactor times the baseline plus paceSlowSlack. The
	// slack keeps a baseline of a few milliseconds from calling a
	// millisecond of jitter congestion.
	paceSlowFactor = 2
	paceSlowSlack  = 5 * time.Millisecond
	// paceBaselineEpoch is how long a minimum of the writes' latency
	// counts: the baseline is the least latency of the current epoch and
	// the one before, so it follows an API server that got slower for
	// good (another tenant, a bigger etcd) within two epochs.
	paceBaselineEpoch = 30 * time.Second
	// paceRound is how many writes sent since the last cut make a round:
	// the window is cut when the median of a round's writes is slow, so a
	// few hung writes (a cluster whose calls hang for its deadline) among
	// healthy ones do not cut it.
	paceRound = 8
)

// pacer paces the requests of background work by what they cost the API
// server, as TCP paces a sender by the network's delay: a window of
// background requests in flight that grows by one per window of writes
// answered at the API server's baseline latency (additive increase) and
// halves when a write, urgent or background, is answered slowly
// (multiplicative decrease), at most once per round: only a write sent
// after the last cut can cut again. The baseline is the least latency of a
// write seen lately, so no rate or latency of this machine is built in: a
// fleet rollout that loads the server shrinks its own window until the
// server answers at about its idle latency again, which is what a user's
// action then meets. The window never falls below one request, so
// background work always goes on.
//
// Only writes are measured: their cost is alike (one object, validation,
// etcd), where a list's latency grows with what it lists. Its methods are
// called with the request gate's mutex held.
type pacer struct {
	window  float64 // background requests that may be in flight
	minPrev time.Duration
	minCur  time.Duration
	epoch   time.Time // when the current epoch of minCur began
	cutAt   time.Time // the last decrease
	round   []time.Duration
	// cuts counts the decreases, for metrics and tests.
	cuts int
}

func newPacer() *pacer { return &pacer{window: paceMaxWindow} }

// allows reports whether one more background request may go, with
// inFlight already in flight.
func (p *pacer) allows(inFlight int) bool { return inFlight < int(p.window) }

// baseline is the least latency of a write in this epoch and the one
// before, 0 before the first write.
func (p *pacer) baseline() time.Duration {
	switch {
	case p.minPrev == 0:
		return p.minCur
	case p.minCur == 0:
		return p.minPrev
	}
	return min(p.minPrev, p.minCur)
}

// slow is the latency above which a write is slow: paceSlowFactor times
// the baseline plus paceSlowSlack.
func (p *pacer) slow() time.Duration { return paceSlowFactor*p.baseline() + paceSlowSlack }

// observe records a write sent at sent and answered took later, at now;
// background says whether it was background work's.
func (p *pacer) observe(sent, now time.Time, took time.Duration, background bool) {
	took = max(took, time.Nanosecond) // 0 is "none yet" below
	if now.Sub(p.epoch) >= paceBaselineEpoch {
		p.minPrev, p.minCur, p.epoch = p.minCur, 0, now
	}
	base, slow := p.baseline(), p.slow()
	if p.minCur == 0 || took < p.minCur {
		p.minCur = took
	}
	if base == 0 || sent.Before(p.cutAt) {
		return
	}
	if took <= slow && background {
		p.window = min(paceMaxWindow, p.window+1/p.window)
	}
	p.round = append(p.round, took)
	if len(p.round) < paceRound {
		return
	}
	slices.Sort(p.round)
	median := p.round[len(p.round)/2]
	p.round = p.round[:0]
	if median > slow {
		p.window = max(1, p.window/2)
		p.cutAt = now
		p.cuts++
	}
}
