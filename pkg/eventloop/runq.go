package eventloop

import "strings"

// maxUrgentStreak is how many plans in a row the run queue takes from its
// urgent lane while background plans wait; the next one is a background
// plan. It bounds starvation: under a constant stream of urgent plans, the
// background plan at the head of its lane starts within maxUrgentStreak+1
// starts: background work gets at least one start in five.
const maxUrgentStreak = 4

// queue names the lane of the run queue that holds a cluster state, if any.
type queue uint8

const (
	notQueued queue = iota
	inBackground
	inUrgent
)

// runQueue holds the clusters whose waiting plan starts when a worker is
// free, in two lanes: urgent plans (a user's action) go ahead of background
// ones (timers, rollout steps, status writes), so the spec change of one
// cluster does not wait behind the resyncs of a thousand others.
//
// Within a lane, clusters are grouped in flows, one per namespace (flowOf),
// and the flows take turns, one plan each; within a flow, its clusters take
// turns in the order they came, those whose work has begun (a paused plan,
// a plan that continues a create: flow.ahead) before the others. A cluster whose plans follow one another
// goes to the back of its flow after each. So a thousand clusters created
// at once in a few namespaces delay a cluster of another namespace by one
// plan (one step, as plans pause between steps while clusters wait) per
// busy namespace, not by their thousand: as the API server's Priority and
// Fairness shares a priority level among flows, a tenant's burst is shared
// out among its own clusters. Clusters of one namespace share its flow's
// turns as they did the whole lane's before flows.
//
// Turns share out the order of starts, not the workers: a namespace whose
// plans each hold a worker for seconds (200 creates at once, each Service
// create waiting for a ClusterIP on a loaded API server) would still hold
// every worker, and another namespace's cluster would wait for one to free
// at each step. So the workers' run queue also bounds the workers one
// flow's plans hold at once, in both lanes together (holds, flowWorkers):
// a flow at its bound is skipped in its turns, keeping its place, and the
// workers it leaves free start the other namespaces' steps at once.
//
// Invariants (TestRunQueue checks them after every operation):
//  1. A cluster state is queued in at most one lane, the one rec.queued names,
//     and has exactly one live entry there, the one whose seq is rec.seq,
//     in the flow its flowOf names (in its ahead ring or its entries). A flow's live counts its live entries,
//     a lane's live those of its flows.
//  2. The flows map holds the flows with a live entry; each of them is in
//     the turns ring exactly once. promote moves a cluster state from the
//     background lane to the urgent one: a flow's ring of entries cannot
//     remove from its middle, so the old entry stays, stale (its seq is
//     not the cluster state's any more), and is skipped when popped. A
//     flow left with stale entries only leaves the map at once, and the
//     ring when a pop reaches it: a cluster state of its namespace queued
//     meanwhile starts a new flow at the back of the turns, as if the old
//     one were gone.
//  3. A lane with no live entry holds no flow at all: stale entries never
//     outlive the live ones.
//  4. streak counts the cluster states taken in a row from the urgent lane while
//     a background cluster state waited; it never exceeds maxUrgentStreak, at
//     which the next pop takes from the background lane if a flow there is
//     under its bound.
//  5. holds counts, by flow name, the plans holding a worker (none of the
//     hung lane's), and no count is above its bound: pop takes no cluster
//     state of a flow at it, and returns nil when every flow with a live
//     entry is at it.
type runQueue struct {
	urgent, background lane
	seq                uint64 // of the last entry pushed
	streak             int
	holds              flowHolds
}

// flowHolds counts the plans of each flow that hold a worker, to bound
// them: the Loop counts a plan when it takes a worker (Loop.handed) and
// when it gives it back, done, paused between two steps or detached
// (Loop.freed). Counts are kept by flow name, not in the lanes' flows,
// which exist only while a cluster state of theirs waits.
type flowHolds struct {
	n     map[string]int // no zero count
	bound int            // 0: none (the hung lane's run queue)
}

// flowWorkers is how many of workers the plans of one flow may hold at
// once, reserved of them being kept for urgent plans: all but the
// reserved ones, or all but one when none is, and at least one.
//
// Why a bound that leaves workers idle, not only turns: a worker that
// frees goes to the flow whose turn it is, but another namespace's step
// still waits for one to free, and a plan of a burst holds its worker for
// seconds (bench-scale's namespaces phase: 200 creates in one namespace
// held all 16 workers, 2 to 10 s each, and a cluster of another namespace
// waited 100 to 700 ms at each step). Only workers kept out of one
// namespace's reach start another's step at once; one is enough for that,
// as a step is short and its worker soon free again. Why the reserved
// ones: they are already what the pool keeps from background work, so the
// bound costs one namespace alone (the common operator, a single tenant)
// none of its background capacity, and its urgent plans only the workers
// kept for them; with more namespaces busy, the reserve is the other
// namespaces' whatever their priority. A background plan of another
// namespace still waits while background plans fill their share
// (Options.UrgentWorkers): the bound is on flows, not on that share.
func flowWorkers(workers, reserved int) int {
	return max(1, workers-max(1, reserved))
}

// full reports whether the plans of flow name hold as many workers as
// they may.
func (h *flowHolds) full(name string) bool {
	return h.bound > 0 && h.n[name] >= h.bound
}

// hold counts a plan of the cluster key that took a worker.
func (h *flowHolds) hold(key string) {
	if h.n == nil {
		h.n = make(map[string]int)
	}
	h.n[flowOf(key)]++
}

// release counts back a plan of the cluster key that gave its worker back.
func (h *flowHolds) release(key string) {
	name := flowOf(key)
	if h.n[name]--; h.n[name] == 0 {
		delete(h.n, name)
	}
}

// lane is one priority of the run queue: its flows, in the order they take
// turns.
type lane struct {
	turns ring[*flow]
	flows map[string]*flow
	live  int
}

// flow is the queued clusters of one namespace, in the order they take
// turns: those whose work has begun (ahead) before the others (entries).
type flow struct {
	name string
	// ahead holds the clusters whose work has begun: a plan paused between
	// two steps, or a plan that continues what the cluster's earlier plans
	// began (Plan.Continues: a create whose pods are Ready, told Running).
	// Their turns come before those of the clusters whose work has not:
	// within a namespace, begun work is finished before more is begun.
	// Without it, a burst of 10,000 creates (bench-scale, 100 namespaces)
	// had each create's Running write queued behind every create of its
	// namespace not begun yet, and its pauses between steps behind them
	// too: 9,524 pods Ready and 1,675 clusters told Running at 42 min, all
	// Running together at the end.
	ahead   ring[entry]
	entries ring[entry]
	live    int
}

// begun reports whether rec's work has begun: it goes ahead in its flow.
func begun(rec *clusterState) bool { return rec.paused != nil || rec.continues }

// entry is a cluster state's place in a flow; live while the cluster state's seq is its.
type entry struct {
	rec *clusterState
	seq uint64
}

// flowOf is the flow of a cluster's key: its namespace, the part before
// the first '/'; a key without one is a flow of its own.
func flowOf(key string) string {
	if i := strings.IndexByte(key, '/'); i >= 0 {
		return key[:i]
	}
	return key
}

// waiting counts the cluster states queued in either lane (no stale entry).
func (q *runQueue) waiting() int { return q.urgent.live + q.background.live }

// push queues a cluster state that is in no lane, at the end of its flow in the
// urgent lane or in the background one.
func (q *runQueue) push(rec *clusterState, urgent bool) {
	q.seq++
	rec.seq = q.seq
	if urgent {
		rec.queued = inUrgent
		q.urgent.push(rec)
		return
	}
	rec.queued = inBackground
	q.background.push(rec)
}

// promote moves a cluster state queued in the background lane to the end of its
// flow in the urgent lane.
func (q *runQueue) promote(rec *clusterState) {
	q.background.remove(rec)
	q.push(rec, true)
}

// requeue moves a queued cluster state whose work has now begun (begun)
// ahead in its flow, in the lane it is queued in.
func (q *runQueue) requeue(rec *clusterState) {
	urgent := rec.queued == inUrgent
	if urgent {
		q.urgent.remove(rec)
	} else {
		q.background.remove(rec)
	}
	q.push(rec, urgent)
}

// pop takes the cluster state whose plan starts next, and says from which
// lane; nil when neither lane has a flow with a live entry under its
// bound. It takes from the urgent lane first, except that after
// maxUrgentStreak urgent cluster states in a row it takes a background one
// if one may start. A lane whose every flow with a live entry is at its
// bound is passed over for the other.
func (q *runQueue) pop() (rec *clusterState, urgent bool) {
	backgroundFirst := q.streak >= maxUrgentStreak || q.urgent.live == 0
	if backgroundFirst {
		if rec = q.background.pop(&q.holds); rec != nil {
			q.streak = 0
			return rec, false
		}
	}
	if rec = q.urgent.pop(&q.holds); rec != nil {
		// At maxUrgentStreak only when the background flows with a live
		// entry are all at their bound: the streak stays there, so the
		// next pop tries them first.
		q.streak = min(q.streak+1, maxUrgentStreak)
		if q.background.live == 0 {
			q.streak = 0
		}
		return rec, true
	}
	if !backgroundFirst {
		if rec = q.background.pop(&q.holds); rec != nil {
			q.streak = 0
			return rec, false
		}
	}
	return nil, false
}

// popUrgent takes the cluster state whose urgent plan starts next, nil when
// no flow of the urgent lane with a live entry is under its bound: what a
// worker kept for urgent plans takes (Options.UrgentWorkers). A
// background plan could not have had that worker, so the streak does not
// count it.
func (q *runQueue) popUrgent() *clusterState {
	return q.urgent.pop(&q.holds)
}

// hold counts a plan of rec that took a worker; release counts it back
// when it gives the worker back (flowHolds).
func (q *runQueue) hold(rec *clusterState)    { q.holds.hold(rec.key) }
func (q *runQueue) release(rec *clusterState) { q.holds.release(rec.key) }

// push adds rec's entry at the end of its flow, and the flow at the end of
// the turns if it had no live entry.
func (l *lane) push(rec *clusterState) {
	name := flowOf(rec.key)
	f := l.flows[name]
	if f == nil {
		if l.flows == nil {
			l.flows = make(map[string]*flow)
		}
		f = &flow{name: name}
		l.flows[name] = f
		l.turns.push(f)
	}
	if begun(rec) {
		f.ahead.push(entry{rec: rec, seq: rec.seq})
	} else {
		f.entries.push(entry{rec: rec, seq: rec.seq})
	}
	f.live++
	l.live++
}

// remove makes rec's live entry stale; rec must be queued in the lane.
func (l *lane) remove(rec *clusterState) {
	f := l.flows[flowOf(rec.key)]
	if f.live--; f.live == 0 {
		delete(l.flows, f.name)
	}
	l.left()
}

// pop takes the first live entry of the first flow in the turns that is
// under its bound in h, nil when there is none; that flow goes to the back
// of the turns if it has more. The flows at their bound before it keep
// their place, and take their turn first once under it; those with stale
// entries only leave the turns. It costs O(flows) at worst: it looks at
// each flow once, and each flow it takes out of the turns moves those at
// their bound before it, two at most (flowWorkers: each holds half the
// workers or more).
func (l *lane) pop(h *flowHolds) *clusterState {
	for i := 0; i < l.turns.len(); {
		f := l.turns.at(i)
		switch {
		case f.live == 0:
			l.turns.take(i) // stale entries only (remove)
			continue
		case h.full(f.name):
			i++
			continue
		}
		l.turns.take(i)
		e := f.next()
		if f.live--; f.live > 0 {
			l.turns.push(f)
		} else {
			delete(l.flows, f.name)
		}
		e.rec.queued = notQueued
		l.left()
		return e.rec
	}
	return nil
}

// next pops the flow's first live entry, of those ahead first; the flow
// must have one. Stale entries before it go.
func (f *flow) next() entry {
	for f.ahead.len() > 0 {
		if e := f.ahead.pop(); e.seq == e.rec.seq {
			return e
		}
	}
	for {
		if e := f.entries.pop(); e.seq == e.rec.seq {
			return e
		}
	}
}

// left counts one live entry less, and drops the flows once no live entry
// remains: they hold stale entries only.
func (l *lane) left() {
	if l.live--; l.live > 0 {
		return
	}
	for l.turns.len() > 0 {
		l.turns.pop()
	}
}
