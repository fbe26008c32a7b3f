package model

import (
	"container/heap"
	"slices"
	"time"
)

// sim is the virtual clock: a priority queue of actions ordered by time,
// then by the order they were scheduled, so that equal times run in a
// deterministic order.
type sim struct {
	now time.Duration
	seq uint64
	q   actionHeap
}

type action struct {
	at  time.Duration
	seq uint64
	fn  func()
}

// at schedules fn at time t (never before now).
func (s *sim) at(t time.Duration, fn func()) {
	t = max(t, s.now)
	s.seq++
	heap.Push(&s.q, action{at: t, seq: s.seq, fn: fn})
}

// run executes actions until none is left.
func (s *sim) run() {
	for s.q.Len() > 0 {
		a := heap.Pop(&s.q).(action)
		s.now = a.at
		a.fn()
	}
}

type actionHeap []action

func (h actionHeap) Len() int { return len(h) }
func (h actionHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h actionHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *actionHeap) Push(x any)   { *h = append(*h, x.(action)) }
func (h *actionHeap) Pop() any {
	old := *h
	n := len(old) - 1
	a := old[n]
	old[n] = action{}
	*h = old[:n]
	return a
}

// bucket is the API client's rate limiter, shared by everything a design
// does: a token bucket of Burst tokens refilled at QPS, granting requests in
// the order they are made (the generic cell rate algorithm, which is what a
// token bucket with reservations amounts to). QPS <= 0 means no limit.
type bucket struct {
	interval  time.Duration // one token
	tolerance time.Duration // (burst-1) tokens
	tat       time.Duration // theoretical arrival time of the next request
	end       time.Duration // calls granted before end are counted
	calls     int
}

func newBucket(qps float64, burst int, end time.Duration) *bucket {
	b := &bucket{end: end}
	if qps > 0 {
		b.interval = time.Duration(float64(time.Second) / qps)
		b.tolerance = time.Duration(max(burst-1, 0)) * b.interval
	}
	return b
}

// take reserves a token for a call made at now and returns when the call
// may go out.
func (b *bucket) take(now time.Duration) time.Duration {
	g := now
	if b.interval > 0 {
		tat := max(b.tat, now)
		g = max(now, tat-b.tolerance)
		b.tat = tat + b.interval
	}
	if g < b.end {
		b.calls++
	}
	return g
}

// Wait is one notification of a healthy cluster and what became of it.
type Wait struct {
	Cluster int
	Kind    Kind
	// At is when the notification was emitted (for pgloop's resync, when
	// its timer was due).
	At time.Duration
	// Start is when the operator began processing it: a legacy worker
	// popped it, or pgloop's loop dispatched it. Done is when the work it
	// asked for finished: the worker's event returned, or pgloop's plan
	// that covered it reported back to the loop.
	Start, Done time.Duration
	// Finished is false if it was never processed.
	Finished bool
}

// StartWait is how long the notification waited before processing began.
func (w Wait) StartWait() time.Duration { return w.Start - w.At }

// DoneWait is how long it took from the notification to done.
func (w Wait) DoneWait() time.Duration { return w.Done - w.At }

// Stats summarises a set of durations.
type Stats struct {
	P50, P99, Max time.Duration
}

// summarize returns nearest-rank percentiles of ds (sorted in place).
func summarize(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	slices.Sort(ds)
	rank := func(q float64) time.Duration {
		i := int(q*float64(len(ds))+0.999999999) - 1
		return ds[min(max(i, 0), len(ds)-1)]
	}
	return Stats{P50: rank(0.50), P99: rank(0.99), Max: ds[len(ds)-1]}
}

// Result is what one design did with one workload.
type Result struct {
	Design Design
	// Waits are the healthy clusters' notifications, in the order they were
	// emitted (for pgloop, its resync timers follow the workload's
	// notifications).
	Waits []Wait
	// Start and Done summarise Waits: how long until processing began, and
	// until done. User is the same for user actions only (new clusters and
	// spec edits), Start and Done for every notification.
	Start, Done, UserStart, UserDone Stats
	// Unfinished counts healthy notifications never processed (0 unless the
	// design loses events).
	Unfinished int
	// IntakeBlocked is how long, within the simulated duration, the shared
	// intake was blocked on a busy worker's queue (legacy only).
	IntakeBlocked time.Duration
	// CallsPerMinute is the API calls granted within the simulated
	// duration, per minute.
	CallsPerMinute float64
	// Merged counts notifications merged into a queued one.
	Merged int
}

func (r *Result) finish(b *bucket, d time.Duration) {
	var start, done, uStart, uDone []time.Duration
	for _, w := range r.Waits {
		if !w.Finished {
			r.Unfinished++
			continue
		}
		start = append(start, w.StartWait())
		done = append(done, w.DoneWait())
		if w.Kind == Add || w.Kind == Update {
			uStart = append(uStart, w.StartWait())
			uDone = append(uDone, w.DoneWait())
		}
	}
	r.Start, r.Done = summarize(start), summarize(done)
	r.UserStart, r.UserDone = summarize(uStart), summarize(uDone)
	if d > 0 {
		r.CallsPerMinute = float64(b.calls) / d.Minutes()
	}
}

// overlap is the length of [a, b) within [0, end).
func overlap(a, b, end time.Duration) time.Duration {
	a, b = max(a, 0), min(b, end)
	if b <= a {
		return 0
	}
	return b - a
}
