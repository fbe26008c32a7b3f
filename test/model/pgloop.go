package model

import "time"

// Timers of pgloop's state machine (docs/fsm.md).
const (
	timerTimeout = "timeout"
	timerRetry   = "retry"
	timerResync  = "resync"
)

type loopEventKind int

const (
	signal loopEventKind = iota
	timerFired
	planDone
)

// loopEvent is an event in pgloop's inbox.
type loopEvent struct {
	kind loopEventKind
	// waits are the healthy notifications a signal carries (merged ones
	// included); for a plan's result, the ones its plan covered.
	waits []int
	// timer and epoch identify a fired timer; id is its setting.
	timer string
	epoch int
	id    uint64
	due   time.Duration
}

// plan is a plan of effects and the healthy notifications it answers.
type plan struct {
	waits []int
}

// pcluster is what pgloop keeps for one cluster: its inbox queue, its
// machine's state (reduced to what matters here) and its executor record.
type pcluster struct {
	id    int
	stuck bool

	events  []loopEvent
	inReady bool

	running bool // healthy: Running state; not to confuse with inFlight
	epoch   int
	timers  map[string]uint64
	retry   time.Duration

	inFlight bool
	waiting  *plan
	queued   bool
}

type loopSim struct {
	s   sim
	p   Params
	w   *Workload
	api *bucket
	res Result

	clusters map[int]*pcluster
	ready    []*pcluster // clusters with events, in turn order
	busy     bool        // the loop is dispatching an event

	runq     []*pcluster // clusters with a waiting plan, in order
	inflight int         // plans started whose result is not dispatched
	timerSeq uint64
}

func runPgloop(p Params, w *Workload) Result {
	l := &loopSim{p: p, w: w, clusters: map[int]*pcluster{}}
	l.api = newBucket(p.QPS, p.Burst, w.Duration)
	l.res.Design = Pgloop
	// pgloop's informers have no resync period: each cluster has its own
	// resync timer, so the informer resyncs never reach it.
	receives := func(n Notification) bool { return n.Kind != Resync }
	var waitIdx []int
	l.res.Waits, waitIdx = w.healthyWaits(receives)
	for i, n := range w.Events {
		if !receives(n) {
			continue
		}
		l.s.at(n.At, func() {
			l.post(l.cluster(n.Cluster), loopEvent{kind: signal, waits: []int{waitIdx[i]}})
		})
	}
	l.s.run()
	l.res.finish(l.api, w.Duration)
	return l.res
}

func (l *loopSim) cluster(id int) *pcluster {
	c := l.clusters[id]
	if c == nil {
		c = &pcluster{id: id, stuck: l.w.Stuck[id], timers: map[string]uint64{}}
		l.clusters[id] = c
	}
	return c
}

// post puts an event in the inbox; it never blocks. A signal merges into
// a signal of the same cluster still waiting (keeping its place); timers
// and plan results are always queued.
func (l *loopSim) post(c *pcluster, ev loopEvent) {
	if ev.kind == signal {
		for i := range c.events {
			if c.events[i].kind == signal {
				c.events[i].waits = append(c.events[i].waits, ev.waits...)
				l.res.Merged++
				return
			}
		}
	}
	c.events = append(c.events, ev)
	if !c.inReady {
		c.inReady = true
		l.ready = append(l.ready, c)
	}
	if !l.busy {
		l.dispatchNext()
	}
}

// dispatchNext takes one event of the next cluster in turn and spends the
// loop's cost on it; clusters with more events go to the back.
func (l *loopSim) dispatchNext() {
	if len(l.ready) == 0 {
		l.busy = false
		return
	}
	c := l.ready[0]
	l.ready[0] = nil
	l.ready = l.ready[1:]
	ev := c.events[0]
	c.events = c.events[1:]
	if len(c.events) > 0 {
		l.ready = append(l.ready, c)
	} else {
		c.inReady = false
	}
	l.busy = true
	l.s.at(l.s.now+l.p.LoopCost, func() {
		l.handle(c, ev)
		l.dispatchNext()
	})
}

// handle is the state machine's transition and the loop applying its
// outcome: timers on the heap, plans to the executor. It never waits.
func (l *loopSim) handle(c *pcluster, ev loopEvent) {
	now := l.s.now
	switch ev.kind {
	case signal:
		l.started(ev.waits)
		// A new spec (or the first sight of a cluster): Creating or
		// Updating, a new epoch, a timeout for the stuck ones.
		l.newEpoch(c)
		c.running = false
		if c.stuck {
			l.setTimer(c, timerTimeout, now+l.p.Timeout)
		}
		l.submit(c, &plan{waits: ev.waits})
	case timerFired:
		if ev.epoch != c.epoch || c.timers[ev.timer] != ev.id {
			return // stale: the epoch changed or the timer was set again
		}
		delete(c.timers, ev.timer)
		switch ev.timer {
		case timerTimeout: // Creating/Updating -> Degraded
			l.newEpoch(c)
			c.retry = l.p.RetryBase
			l.setTimer(c, timerRetry, now+c.retry)
			l.submit(c, &plan{})
		case timerRetry:
			c.retry = min(2*c.retry, l.p.RetryMax)
			l.setTimer(c, timerRetry, now+c.retry)
			l.submit(c, &plan{})
		case timerResync:
			l.res.Waits = append(l.res.Waits, Wait{Cluster: c.id, Kind: Resync, At: ev.due})
			w := len(l.res.Waits) - 1
			l.started([]int{w})
			l.setTimer(c, timerResync, now+l.p.Resync)
			l.submit(c, &plan{waits: []int{w}})
		}
	case planDone:
		c.inFlight = false
		l.inflight--
		for _, i := range ev.waits {
			if i >= 0 {
				l.res.Waits[i].Done = now
				l.res.Waits[i].Finished = true
			}
		}
		if !c.stuck && !c.running && c.waiting == nil {
			// podsReady: Running, a new epoch with its resync timer.
			l.newEpoch(c)
			c.running = true
			l.setTimer(c, timerResync, now+l.p.Resync)
		}
		if c.waiting != nil && !c.queued {
			c.queued = true
			l.runq = append(l.runq, c)
		}
		l.schedule()
	}
}

func (l *loopSim) started(waits []int) {
	for _, i := range waits {
		if i >= 0 {
			l.res.Waits[i].Start = l.s.now
		}
	}
}

// newEpoch drops the cluster's timers.
func (l *loopSim) newEpoch(c *pcluster) {
	c.epoch++
	clear(c.timers)
}

// setTimer arms a timer in the cluster's epoch. When it fires it is posted
// to the inbox as an event; it is dispatched only if still current. No
// timer is armed past the end of the workload, so the run drains.
func (l *loopSim) setTimer(c *pcluster, name string, due time.Duration) {
	if due >= l.w.Duration {
		delete(c.timers, name)
		return
	}
	l.timerSeq++
	id, epoch := l.timerSeq, c.epoch
	c.timers[name] = id
	l.s.at(due, func() {
		if c.epoch == epoch && c.timers[name] == id {
			l.post(c, loopEvent{kind: timerFired, timer: name, epoch: epoch, id: id, due: due})
		}
	})
}

// submit makes p the cluster's next plan; a plan still waiting is
// superseded (its notifications are answered by the newer plan).
func (l *loopSim) submit(c *pcluster, p *plan) {
	if c.waiting != nil {
		p.waits = append(c.waiting.waits, p.waits...)
	}
	c.waiting = p
	if !c.inFlight && !c.queued {
		c.queued = true
		l.runq = append(l.runq, c)
	}
	l.schedule()
}

// schedule starts waiting plans while executor slots are free, at most one
// plan in flight per cluster.
func (l *loopSim) schedule() {
	for l.inflight < max(l.p.Executors, 1) && len(l.runq) > 0 {
		c := l.runq[0]
		l.runq[0] = nil
		l.runq = l.runq[1:]
		c.queued = false
		p := c.waiting
		if p == nil {
			continue
		}
		c.waiting = nil
		c.inFlight = true
		l.inflight++
		l.s.at(l.s.now+l.p.Service, func() { l.step(c, p, 0) })
	}
}

// step makes the plan's i-th API call; after the last one, a stuck
// cluster's plan may hang until its step deadline; then the result goes
// to the inbox.
func (l *loopSim) step(c *pcluster, p *plan, i int) {
	if i < l.p.Calls {
		g := l.api.take(l.s.now)
		l.s.at(g+l.p.CallLatency, func() { l.step(c, p, i+1) })
		return
	}
	hang := time.Duration(0)
	if c.stuck {
		hang = min(l.p.StuckHang, l.p.StepTimeout)
	}
	l.s.at(l.s.now+hang, func() {
		l.post(c, loopEvent{kind: planDone, waits: p.waits})
	})
}
