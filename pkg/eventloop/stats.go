package eventloop

import (
	"strconv"
	"sync/atomic"
	"time"
)

// String returns the kind's name as it appears in logs.
func (k Kind) String() string {
	switch k {
	case Signal:
		return "signal"
	case TimerFired:
		return "timerFired"
	case PlanDone:
		return "planDone"
	case Panicked:
		return "panicked"
	case paused:
		return "paused"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Stats is a snapshot of the loop's counters (totals since New) and gauges
// (current values), for metrics and for tests.
type Stats struct {
	// InboxDepth is the number of events waiting for the loop.
	InboxDepth int
	// Clusters is the number of clusters the loop keeps state for (an
	// epoch, timers or plans).
	Clusters int
	// Timers is the number of timers waiting for their deadline.
	Timers int
	// PlansRunning and PlansWaiting are plans in flight (until their
	// PlanDone is dispatched) and plans waiting for their cluster's plan
	// or for a free worker.
	PlansRunning, PlansWaiting int
	// PlansHung is how many of PlansRunning hold a place of the hung lane
	// (hung.go), PlansSlow how many ran past SlowAfter and hold neither a
	// place nor a worker; HungClusters is how many clusters have a step
	// that was slow, whose plans with it start in the hung lane.
	PlansHung, PlansSlow, HungClusters int
	// DetachAfter is how long a plan may now hold a worker or a place of
	// the hung lane before it is detached: SlowAfter, or more while the
	// steps that succeed take long (hung.go).
	DetachAfter time.Duration

	// Dispatched counts events handed to the Handler.
	Dispatched uint64
	// Coalesced counts Signals merged into one already waiting.
	Coalesced uint64
	// StaleTimers counts TimerFired events dropped at dispatch: their
	// epoch had passed, or the timer was set again or cancelled after it
	// fired.
	StaleTimers uint64
	// TimersDropped counts timers removed before firing (or before their
	// event was dispatched) by an epoch change or Forget.
	TimersDropped uint64
	// PlansRun and PlansFailed count plans that ran to the end, and those
	// of them that reported an error.
	PlansRun, PlansFailed uint64
	// PlansUrgent and PlansBackground count plans started from the urgent
	// and from the background ring of the run queue.
	PlansUrgent, PlansBackground uint64
	// PlansSuperseded counts waiting plans replaced by a newer one.
	PlansSuperseded uint64
	// PlansCancelled counts running plans cancelled by CancelInFlight and
	// waiting plans dropped by CancelInFlight or Forget.
	PlansCancelled uint64
	// Panics counts panics recovered in Handle and in steps.
	Panics uint64
	// PlansDetached counts plans that held a worker or a place of the
	// hung lane for SlowAfter and went on holding neither.
	PlansDetached uint64
	// WorkerWaits counts plans that waited for a worker (none was free,
	// or only those kept for urgent plans), and WorkerWait is how long
	// they waited in all; HungWaits and HungWait the same for the places
	// of the hung lane.
	WorkerWaits, HungWaits uint64
	WorkerWait, HungWait   time.Duration

	// LagLast is how long the last dispatched event waited in the inbox,
	// and LagMax the longest wait seen, by the loop's clock.
	LagLast, LagMax time.Duration
}

// counters are the Stats kept by the loop and the workers, read by Stats
// from any goroutine.
type counters struct {
	dispatched      atomic.Uint64
	staleTimers     atomic.Uint64
	timersDropped   atomic.Uint64
	plansRun        atomic.Uint64
	plansFailed     atomic.Uint64
	plansUrgent     atomic.Uint64
	plansBackground atomic.Uint64
	plansSuperseded atomic.Uint64
	plansCancelled  atomic.Uint64
	panics          atomic.Uint64
	plansDetached   atomic.Uint64
	// waits and waitNanos count the plans that waited for a worker
	// ([0]) or a place of the hung lane ([1]), and how long in all.
	waits, waitNanos [2]atomic.Uint64
	lagLast          atomic.Int64
	lagMax           atomic.Int64

	// Gauges of loop-owned state, published after each batch of events
	// and when the inbox is found empty.
	clusters     atomic.Int64
	timers       atomic.Int64
	plansRunning atomic.Int64
	plansWaiting atomic.Int64
	plansHung    atomic.Int64
	plansSlow    atomic.Int64
	hungClusters atomic.Int64
	detachAfter  atomic.Int64
}

// publish copies the loop-owned gauges where Stats can read them. It runs
// on the loop goroutine.
func (l *Loop) publish() {
	l.st.clusters.Store(int64(len(l.clusters)))
	l.st.timers.Store(int64(len(l.timers)))
	l.st.plansRunning.Store(int64(l.inflight + l.hungInflight + l.detached))
	l.st.plansWaiting.Store(int64(l.nWaiting))
	l.st.plansHung.Store(int64(l.hungInflight))
	l.st.plansSlow.Store(int64(l.detached))
	l.st.hungClusters.Store(int64(l.hungClusters))
}

// Stats returns a snapshot of the loop's counters and gauges. It is safe
// to call from any goroutine. The loop-owned gauges (Clusters, Timers,
// PlansRunning, PlansWaiting) are as of the loop's last batch of events;
// after WaitIdle they are exact.
func (l *Loop) Stats() Stats {
	depth, merged := l.in.stats()
	return Stats{
		InboxDepth:      depth,
		Clusters:        int(l.st.clusters.Load()),
		Timers:          int(l.st.timers.Load()),
		PlansRunning:    int(l.st.plansRunning.Load()),
		PlansWaiting:    int(l.st.plansWaiting.Load()),
		PlansHung:       int(l.st.plansHung.Load()),
		PlansSlow:       int(l.st.plansSlow.Load()),
		HungClusters:    int(l.st.hungClusters.Load()),
		DetachAfter:     time.Duration(l.st.detachAfter.Load()),
		Dispatched:      l.st.dispatched.Load(),
		Coalesced:       merged,
		StaleTimers:     l.st.staleTimers.Load(),
		TimersDropped:   l.st.timersDropped.Load(),
		PlansRun:        l.st.plansRun.Load(),
		PlansFailed:     l.st.plansFailed.Load(),
		PlansUrgent:     l.st.plansUrgent.Load(),
		PlansBackground: l.st.plansBackground.Load(),
		PlansSuperseded: l.st.plansSuperseded.Load(),
		PlansCancelled:  l.st.plansCancelled.Load(),
		Panics:          l.st.panics.Load(),
		PlansDetached:   l.st.plansDetached.Load(),
		WorkerWaits:     l.st.waits[0].Load(),
		HungWaits:       l.st.waits[1].Load(),
		WorkerWait:      time.Duration(l.st.waitNanos[0].Load()),
		HungWait:        time.Duration(l.st.waitNanos[1].Load()),
		LagLast:         time.Duration(l.st.lagLast.Load()),
		LagMax:          time.Duration(l.st.lagMax.Load()),
	}
}
