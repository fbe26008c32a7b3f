package eventloop

import "sync"

const (
	// maxIdleQueues bounds the drained per-cluster queues kept in the
	// queue map, so that a cluster whose events come and go does not pay a
	// map delete and insert each time; the oldest drained one is evicted.
	maxIdleQueues = 4096
	// maxFreeQueues bounds the evicted queues kept for reuse.
	maxFreeQueues = 64
	// maxReusedQueueCap is the largest backing array a reused queue keeps:
	// the memory of a one-off flood is given back.
	maxReusedQueueCap = 64
	// maxSignalScan is how many waiting signal names a cluster's queue
	// keeps in a slice, scanned on each post; past it they go in a map, so
	// a post stays O(1) whatever names the producers use.
	maxSignalScan = 8
	// maxUrgentTakes is how many events in a row the inbox takes from its
	// urgent lane while clusters wait in the other: under a stream of
	// urgent events, the others still get one turn in maxUrgentTakes+1.
	maxUrgentTakes = 16
)

// inbox holds the events waiting for the loop. Producers (informer
// handlers, executor workers, the loop itself) never block on it: a post
// takes the mutex for O(1) work and wakes the loop with a non-blocking send
// on a channel of capacity one.
//
// Events wait in one FIFO per cluster, and the clusters that have events
// wait in a ready ring: the loop takes one event per cluster per turn, so a
// cluster flooding events cannot starve the others. A cluster with an
// urgent event waiting (a user's action: Event.Urgent) is also in the
// urgent ring, served first: its events up to the urgent one go ahead of
// the other clusters' (a restart's resume of every cluster, a fleet's
// rollout), in its own order. Invariants:
//
//  1. a queue is in ready at most once (inReady), and is while it has
//     events; an entry whose queue was drained through the urgent ring is
//     skipped when popped;
//  2. a queue is in urgent at most once (inUrgent), and is while events
//     up to its last urgent one wait (taken < urgentUntil);
//  3. a queue in a ring is never evicted nor reused for another cluster.
type inbox struct {
	mu sync.Mutex
	// queues holds the clusters with events waiting (each also in ready,
	// exactly once) and up to maxIdleQueues drained ones (listed in idle).
	queues map[string]*keyQueue
	ready  ring[*keyQueue]
	urgent ring[*keyQueue]
	streak int // events taken in a row from urgent while ready had queues
	idle   ring[idleRef]
	free   []*keyQueue
	n      int // events waiting
	merged uint64
	idlers []chan struct{} // WaitIdle callers; see Loop.WaitIdle

	// wake has capacity one; a token means "look at the inbox".
	wake chan struct{}
}

// keyQueue is one cluster's events, oldest first.
type keyQueue struct {
	key    string
	events ring[Event]
	// signals, or signalSet once there are more than maxSignalScan, hold
	// the names of the Signals waiting in events: the ones a new Signal of
	// the same name is merged into.
	signals   []string
	signalSet map[string]struct{}
	// drained counts the times the queue was emptied; an idleRef from an
	// earlier time is stale.
	drained uint64
	// pushed and taken count the events queued and taken; urgentUntil is
	// pushed as it was after the last urgent event: the urgent ring
	// serves the queue while taken < urgentUntil.
	pushed, taken, urgentUntil uint64
	inReady, inUrgent          bool
}

// idleRef is a drained queue, in the order queues were drained.
type idleRef struct {
	q       *keyQueue
	drained uint64
}

func newInbox() *inbox {
	return &inbox{
		queues: make(map[string]*keyQueue),
		wake:   make(chan struct{}, 1),
	}
}

// post adds ev to its cluster's queue. A Signal whose name is already
// waiting for the cluster is merged into the waiting one (which keeps its
// place and its At); every other kind is always queued.
func (in *inbox) post(ev Event) {
	in.mu.Lock()
	wasEmpty := in.n == 0
	in.add(ev)
	in.mu.Unlock()
	in.wakeIf(wasEmpty)
}

// postPair adds two events of one cluster at once, so nobody (WaitIdle
// included) sees the first without the second: a plan's PlanDone and the
// Panicked that follows it.
func (in *inbox) postPair(a, b Event) {
	in.mu.Lock()
	wasEmpty := in.n == 0
	in.add(a)
	in.add(b)
	in.mu.Unlock()
	in.wakeIf(wasEmpty)
}

// add queues ev; in.mu is held.
func (in *inbox) add(ev Event) {
	q := in.queues[ev.Key]
	switch {
	case q == nil:
		q = in.newQueue(ev.Key)
		in.queues[ev.Key] = q
	case ev.Kind == Signal && q.hasSignal(ev.Name):
		// The waiting one stands for both: it is urgent if either is,
		// wherever it waits, so every waiting event goes first.
		in.merged++
		if ev.Urgent {
			in.markUrgent(q)
		}
		return
	}
	if !q.inReady {
		in.ready.push(q)
		q.inReady = true
	}
	if ev.Kind == Signal {
		q.addSignal(ev.Name)
	}
	q.events.push(ev)
	q.pushed++
	in.n++
	if ev.Urgent {
		in.markUrgent(q)
	}
}

// markUrgent puts q's waiting events, up to its last one, in the urgent
// lane; in.mu is held.
func (in *inbox) markUrgent(q *keyQueue) {
	q.urgentUntil = q.pushed
	if !q.inUrgent {
		in.urgent.push(q)
		q.inUrgent = true
	}
}

// next pops the queue whose event goes next: the urgent ring's first,
// unless maxUrgentTakes were taken from it in a row while other clusters
// waited; nil when no event waits. in.mu is held.
func (in *inbox) next() *keyQueue {
	for {
		switch {
		case in.urgent.len() > 0 && (in.streak < maxUrgentTakes || in.ready.len() == 0):
			q := in.urgent.pop()
			q.inUrgent = false
			if q.events.len() == 0 || q.taken >= q.urgentUntil {
				// Its urgent events were taken through ready (2).
				in.drainedIfOut(q)
				continue
			}
			in.streak++
			return q
		case in.ready.len() > 0:
			q := in.ready.pop()
			q.inReady = false
			in.streak = 0
			if q.events.len() == 0 {
				// Drained through the urgent ring (1).
				in.drainedIfOut(q)
				continue
			}
			return q
		default:
			return nil
		}
	}
}

// wakeIf wakes the loop on the empty -> non-empty edge: the loop only
// sleeps after it found the inbox empty, so the rest are spared a channel
// operation.
func (in *inbox) wakeIf(wasEmpty bool) {
	if wasEmpty {
		in.poke()
	}
}

// poke wakes the loop without ever blocking.
func (in *inbox) poke() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// take moves up to limit events into *dst, one per cluster per turn, and
// returns how many it moved.
func (in *inbox) take(dst *[]Event, limit int) int {
	in.mu.Lock()
	taken := 0
	for taken < limit {
		q := in.next()
		if q == nil {
			break
		}
		ev := q.events.pop()
		q.taken++
		if ev.Kind == Signal {
			q.removeSignal(ev.Name)
		}
		*dst = append(*dst, ev)
		taken++
		if q.events.len() > 0 {
			if !q.inReady {
				in.ready.push(q)
				q.inReady = true
			}
			if q.taken < q.urgentUntil && !q.inUrgent {
				in.urgent.push(q)
				q.inUrgent = true
			}
			continue
		}
		in.drainedIfOut(q)
	}
	in.n -= taken
	in.mu.Unlock()
	return taken
}

// drainedIfOut lists q as idle once it is empty and in no ring: a drained
// queue still in a ring is listed when that ring pops it (3).
func (in *inbox) drainedIfOut(q *keyQueue) {
	if q.events.len() > 0 || q.inReady || q.inUrgent {
		return
	}
	in.drained(q)
}

// drained lists q as idle and evicts the oldest idle queue past the bound.
func (in *inbox) drained(q *keyQueue) {
	q.drained++
	in.idle.push(idleRef{q: q, drained: q.drained})
	if in.idle.len() <= maxIdleQueues {
		return
	}
	old := in.idle.pop()
	if old.q.drained != old.drained || old.q.events.len() > 0 || old.q.inReady || old.q.inUrgent {
		return // refilled since: in use, or listed again later
	}
	delete(in.queues, old.q.key)
	in.release(old.q)
}

// takeIdle reports whether the inbox is empty and, when it is, moves the
// WaitIdle callers into *dst.
func (in *inbox) takeIdle(dst *[]chan struct{}) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.n > 0 {
		return false
	}
	*dst = append(*dst, in.idlers...)
	clear(in.idlers)
	in.idlers = in.idlers[:0]
	return true
}

func (in *inbox) addIdle(ch chan struct{}) {
	in.mu.Lock()
	in.idlers = append(in.idlers, ch)
	in.mu.Unlock()
	in.poke()
}

// stats returns the depth and the number of merged signals.
func (in *inbox) stats() (depth int, merged uint64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.n, in.merged
}

func (in *inbox) newQueue(key string) *keyQueue {
	if n := len(in.free); n > 0 {
		q := in.free[n-1]
		in.free[n-1] = nil
		in.free = in.free[:n-1]
		q.key = key
		return q
	}
	return &keyQueue{key: key}
}

// release keeps an evicted queue for reuse. Its signal names are already
// gone: every waiting Signal was taken.
func (in *inbox) release(q *keyQueue) {
	if len(in.free) >= maxFreeQueues || len(q.events.buf) > maxReusedQueueCap {
		return
	}
	q.key = ""
	q.pushed, q.taken, q.urgentUntil = 0, 0, 0
	in.free = append(in.free, q)
}

func (q *keyQueue) hasSignal(name string) bool {
	if q.signalSet != nil {
		_, ok := q.signalSet[name]
		return ok
	}
	for _, n := range q.signals {
		if n == name {
			return true
		}
	}
	return false
}

func (q *keyQueue) addSignal(name string) {
	switch {
	case q.signalSet != nil:
		q.signalSet[name] = struct{}{}
	case len(q.signals) < maxSignalScan:
		q.signals = append(q.signals, name)
	default:
		q.signalSet = make(map[string]struct{}, 2*maxSignalScan)
		for _, n := range q.signals {
			q.signalSet[n] = struct{}{}
		}
		q.signalSet[name] = struct{}{}
		clear(q.signals)
		q.signals = q.signals[:0]
	}
}

func (q *keyQueue) removeSignal(name string) {
	if q.signalSet != nil {
		delete(q.signalSet, name)
		if len(q.signalSet) == 0 {
			q.signalSet = nil // back to the cheap slice
		}
		return
	}
	for i, n := range q.signals {
		if n == name {
			last := len(q.signals) - 1
			q.signals[i] = q.signals[last]
			q.signals[last] = ""
			q.signals = q.signals[:last]
			return
		}
	}
}
