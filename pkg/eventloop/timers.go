package eventloop

import (
	"container/heap"
	"time"
)

// timer is one pending timer of a cluster. It sits in the loop's heap until
// its deadline, then stays in its cluster's state, marked fired, until its
// TimerFired event is dispatched: setting or cancelling the timer in the
// meantime (or an epoch change) replaces that cluster state entry, which makes the
// event already in the inbox stale.
type timer struct {
	key      string
	name     string
	deadline time.Time
	epoch    int64
	seq      uint64 // order of setting; breaks ties between equal deadlines
	index    int    // position in the heap; -1 once popped
	fired    bool
}

// timerHeap orders timers by deadline, then by the order they were set.
// Only the loop goroutine touches it.
type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }

func (h timerHeap) Less(i, j int) bool {
	if h[i].deadline.Equal(h[j].deadline) {
		return h[i].seq < h[j].seq
	}
	return h[i].deadline.Before(h[j].deadline)
}

func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.index = len(*h)
	*h = append(*h, t)
}

func (h *timerHeap) Pop() any {
	old := *h
	n := len(old) - 1
	t := old[n]
	old[n] = nil
	t.index = -1
	*h = old[:n]
	return t
}

// setTimer applies one TimerOp to the cluster's timers, in the cluster's
// current epoch.
func (l *Loop) setTimer(rec *clusterState, op TimerOp) {
	t := rec.timers[op.Name]
	if op.Cancel {
		if t != nil {
			l.removeTimer(rec, t)
		}
		return
	}
	l.timerSeq++
	if t != nil && t.index >= 0 {
		// Replace in place: no allocation for a re-armed timer.
		t.deadline, t.epoch, t.seq = op.Deadline, rec.epoch, l.timerSeq
		heap.Fix(&l.timers, t.index)
		return
	}
	t = &timer{
		key:      rec.key,
		name:     op.Name,
		deadline: op.Deadline,
		epoch:    rec.epoch,
		seq:      l.timerSeq,
	}
	if rec.timers == nil {
		rec.timers = make(map[string]*timer)
	}
	rec.timers[op.Name] = t
	heap.Push(&l.timers, t)
}

func (l *Loop) removeTimer(rec *clusterState, t *timer) {
	if t.index >= 0 {
		heap.Remove(&l.timers, t.index)
	}
	delete(rec.timers, t.name)
}

// dropTimers removes every timer of the cluster, pending or fired and not
// yet delivered.
func (l *Loop) dropTimers(rec *clusterState) {
	if len(rec.timers) == 0 {
		return
	}
	for _, t := range rec.timers {
		if t.index >= 0 {
			heap.Remove(&l.timers, t.index)
		}
	}
	l.st.timersDropped.Add(uint64(len(rec.timers)))
	clear(rec.timers)
}

// fireDue moves every timer whose deadline is not after now from the heap to
// the inbox, in deadline order.
func (l *Loop) fireDue(now time.Time) {
	for len(l.timers) > 0 && !l.timers[0].deadline.After(now) {
		t := heap.Pop(&l.timers).(*timer)
		t.fired = true
		l.in.post(Event{Key: t.key, Kind: TimerFired, Name: t.name, Epoch: t.epoch, At: now})
	}
}

// liveTimer reports whether a TimerFired event is still wanted: its cluster
// is in the epoch the timer was set in (the first defence, redundant with
// the eager drop on epoch change, kept on purpose) and the timer was neither
// set again nor cancelled since it fired. On success the timer is consumed.
func (l *Loop) liveTimer(rec *clusterState, ev *Event) bool {
	if rec == nil || ev.Epoch != rec.epoch {
		return false
	}
	t := rec.timers[ev.Name]
	if t == nil || !t.fired || t.epoch != ev.Epoch {
		return false
	}
	delete(rec.timers, ev.Name)
	return true
}

// nextDue returns the earliest deadline of the loop's own: a timer's, or
// the moment the oldest plan holding a worker is to be detached
// (hung.go); false when there is none.
func (l *Loop) nextDue() (next time.Time, ok bool) {
	if len(l.timers) > 0 {
		next, ok = l.timers[0].deadline, true
	}
	if d, _, dok := l.nextDetach(); dok && (!ok || d.Before(next)) {
		next, ok = d, true
	}
	return next, ok
}

// armWake makes the loop's clock timer fire at the earliest deadline
// (nextDue) and returns its channel (nil when nothing is pending). due is
// true when that deadline has already passed: the caller fires the timers
// instead of sleeping.
func (l *Loop) armWake(now time.Time) (c <-chan time.Time, due bool) {
	next, ok := l.nextDue()
	if !ok {
		l.stopWake()
		return nil, false
	}
	if !next.After(now) {
		return nil, true
	}
	if l.wake != nil && l.wakeAt.Equal(next) {
		return l.wake.C(), false
	}
	d := next.Sub(now)
	if l.wake == nil {
		l.wake = l.clock.NewTimer(d)
	} else {
		l.stopWake()
		l.wake.Reset(d)
	}
	l.wakeAt = next
	return l.wake.C(), false
}

// stopWake stops the clock timer and empties its channel, so a Reset never
// finds a stale tick (the fake clock's send would block on a full channel).
func (l *Loop) stopWake() {
	if l.wake == nil || l.wakeAt.IsZero() {
		return
	}
	if !l.wake.Stop() {
		select {
		case <-l.wake.C():
		default:
		}
	}
	l.wakeAt = time.Time{}
}
