package model

import "time"

// eventType is the legacy operator's event type: its FIFO key is
// "<EVENT>-<UID>", so events of one type for one cluster merge while
// queued, and different types queue one after another.
type eventType int

const (
	evAdd eventType = iota
	evUpdate
	evSync // startup and resync alike
)

func typeOf(k Kind) eventType {
	switch k {
	case Add:
		return evAdd
	case Update:
		return evUpdate
	}
	return evSync
}

type itemKey struct {
	cluster int
	typ     eventType
}

// item is one entry of a worker's FIFO: an event and the notifications
// merged into it (indices into the Waits, -1 for a stuck cluster's).
type item struct {
	key   itemKey
	waits []int
}

// worker is a legacy worker (or, per cluster, a goroutine) with its FIFO.
type worker struct {
	queue  []*item
	queued map[itemKey]*item
	// busy is true while an event is processed: the FIFO's lock is held.
	busy bool
	cur  *item
}

// legacy simulates the legacy operator, or with perCluster set the
// goroutine-per-cluster proposal: a worker per cluster and an intake that
// never blocks.
type legacy struct {
	s          sim
	p          Params
	w          *Workload
	perCluster bool
	api        *bucket
	res        Result
	waitIdx    []int

	workers []*worker
	assign  map[int]*worker
	next    int // sticky round-robin

	// intake is the single informer handler goroutine's backlog:
	// notifications (indices into w.Events) in the order they came.
	intake       []int
	head         int
	blockedOn    *worker
	blockedSince time.Duration
}

func runLegacy(p Params, w *Workload, perCluster bool) Result {
	l := &legacy{p: p, w: w, perCluster: perCluster, assign: map[int]*worker{}}
	l.api = newBucket(p.QPS, p.Burst, w.Duration)
	l.res.Design = Legacy
	if perCluster {
		l.res.Design = GoroutinePerCluster
	} else {
		l.workers = make([]*worker, max(p.Workers, 1))
		for i := range l.workers {
			l.workers[i] = &worker{queued: map[itemKey]*item{}}
		}
	}
	l.res.Waits, l.waitIdx = w.healthyWaits(func(Notification) bool { return true })
	for i, n := range w.Events {
		l.s.at(n.At, func() {
			l.intake = append(l.intake, i)
			if l.blockedOn == nil {
				l.runIntake()
			}
		})
	}
	l.s.run()
	l.res.finish(l.api, w.Duration)
	return l.res
}

// workerFor pins a cluster to a worker the first time it is seen.
func (l *legacy) workerFor(c int) *worker {
	if w := l.assign[c]; w != nil {
		return w
	}
	var w *worker
	if l.perCluster {
		w = &worker{queued: map[itemKey]*item{}}
	} else {
		w = l.workers[l.next%len(l.workers)]
		l.next++
	}
	l.assign[c] = w
	return w
}

// runIntake hands notifications to their workers in order. In the legacy
// design an Add to a worker whose FIFO lock is held (it is processing)
// blocks the intake until that event is done: nothing behind it moves,
// whatever cluster it is for.
func (l *legacy) runIntake() {
	for l.head < len(l.intake) {
		i := l.intake[l.head]
		n := l.w.Events[i]
		w := l.workerFor(n.Cluster)
		if !l.perCluster && w.busy {
			l.blockedOn, l.blockedSince = w, l.s.now
			return
		}
		l.head++
		l.add(w, itemKey{cluster: n.Cluster, typ: typeOf(n.Kind)}, l.waitIdx[i])
		if !w.busy {
			l.start(w)
		}
	}
}

// add queues an event, merging it into a queued one of the same key.
func (l *legacy) add(w *worker, k itemKey, wait int) {
	if it := w.queued[k]; it != nil {
		it.waits = append(it.waits, wait)
		l.res.Merged++
		return
	}
	it := &item{key: k, waits: []int{wait}}
	w.queued[k] = it
	w.queue = append(w.queue, it)
}

// start pops the worker's next event and processes it.
func (l *legacy) start(w *worker) {
	it := w.queue[0]
	w.queue[0] = nil
	w.queue = w.queue[1:]
	delete(w.queued, it.key)
	w.busy, w.cur = true, it
	now := l.s.now
	for _, i := range it.waits {
		if i >= 0 {
			l.res.Waits[i].Start = now
		}
	}
	if l.w.Stuck[it.key.cluster] && (it.key.typ != evSync || !l.p.StuckSyncQuick) {
		// The event waits for pods that never become ready: it returns at
		// its timeout, polling the API meanwhile.
		end := now + l.p.Timeout
		if l.p.PollInterval > 0 {
			var poll func()
			poll = func() {
				g := l.api.take(l.s.now)
				if next := max(l.s.now+l.p.PollInterval, g+l.p.CallLatency); next < end {
					l.s.at(next, poll)
				}
			}
			if now+l.p.PollInterval < end {
				l.s.at(now+l.p.PollInterval, poll)
			}
		}
		l.s.at(end, func() { l.finish(w) })
		return
	}
	l.s.at(now+l.p.Service, func() { l.call(w, 0) })
}

// call makes the event's i-th API call, or finishes it after the last.
func (l *legacy) call(w *worker, i int) {
	if i >= l.p.Calls {
		l.finish(w)
		return
	}
	g := l.api.take(l.s.now)
	l.s.at(g+l.p.CallLatency, func() { l.call(w, i+1) })
}

// finish ends the worker's event and releases its FIFO lock. A blocked
// intake waiting on this lock gets it first (a mutex waited on this long
// is handed over), then the worker pops its next event.
func (l *legacy) finish(w *worker) {
	now := l.s.now
	for _, i := range w.cur.waits {
		if i >= 0 {
			l.res.Waits[i].Done = now
			l.res.Waits[i].Finished = true
		}
	}
	w.busy, w.cur = false, nil
	if l.blockedOn == w {
		l.res.IntakeBlocked += overlap(l.blockedSince, now, l.w.Duration)
		l.blockedOn = nil
		l.runIntake()
	}
	if !w.busy && len(w.queue) > 0 {
		l.start(w)
	}
}
