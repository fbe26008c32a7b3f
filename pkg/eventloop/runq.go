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
// turns in the order they came. A cluster whose plans follow one another
// goes to the back of its flow after each. So a thousand clusters created
// at once in a few namespaces delay a cluster of another namespace by one
// plan (one step, as plans pause between steps while clusters wait) per
// busy namespace, not by their thousand: as the API server's Priority and
// Fairness shares a priority level among flows, a tenant's burst is shared
// out among its own clusters. Clusters of one namespace share its flow's
// turns as they did the whole lane's before flows.
//
// Invariants (TestRunQueue checks them after every operation):
//  1. A cluster state is queued in at most one lane, the one rec.queued names,
//     and has exactly one live entry there, the one whose seq is rec.seq,
//     in the flow its flowOf names. A flow's live counts its live entries,
//     a lane's live those of its flows.
//  2. The flows map holds the flows with a live entry; each of them is in
//     the turns ring exactly once. promote moves a cluster state from the
//     background lane to the urgent one: a ring cannot remove from its
//     middle, so the old entry stays, stale (its seq is not the cluster state's
//     any more), and is skipped when popped. A flow left with stale
//     entries only leaves the map at once, and the ring when its turn
//     comes: a cluster state of its namespace queued meanwhile starts a new flow
//     at the back of the turns, as if the old one were gone.
//  3. A lane with no live entry holds no flow at all: stale entries never
//     outlive the live ones.
//  4. streak counts the cluster states taken in a row from the urgent lane while
//     a background cluster state waited; it never exceeds maxUrgentStreak, at
//     which the next pop takes from the background lane.
type runQueue struct {
	urgent, background lane
	seq                uint64 // of the last entry pushed
	streak             int
}

// lane is one priority of the run queue: its flows, in the order they take
// turns.
type lane struct {
	turns ring[*flow]
	flows map[string]*flow
	live  int
}

// flow is the queued clusters of one namespace, in the order they take
// turns.
type flow struct {
	name    string
	entries ring[entry]
	live    int
}

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

// pop takes the cluster state whose plan starts next, and says from which lane;
// nil when both are empty. It takes from the urgent lane first, except
// that after maxUrgentStreak urgent cluster states in a row it takes a background
// one if one waits.
func (q *runQueue) pop() (rec *clusterState, urgent bool) {
	if q.background.live > 0 && (q.streak >= maxUrgentStreak || q.urgent.live == 0) {
		q.streak = 0
		return q.background.pop(), false
	}
	if q.urgent.live == 0 {
		return nil, false
	}
	rec = q.urgent.pop()
	if q.background.live > 0 {
		q.streak++
	} else {
		q.streak = 0
	}
	return rec, true
}

// popUrgent takes the cluster state whose urgent plan starts next, nil when the
// urgent lane is empty: what a worker kept for urgent plans takes
// (Options.UrgentWorkers). A background plan could not have had that
// worker, so the streak does not count it.
func (q *runQueue) popUrgent() *clusterState {
	if q.urgent.live == 0 {
		return nil
	}
	return q.urgent.pop()
}

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
	f.entries.push(entry{rec: rec, seq: rec.seq})
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

// pop takes the first live entry of the flow whose turn it is, which must
// exist (live > 0); the flow goes to the back of the turns if it has more.
func (l *lane) pop() *clusterState {
	for {
		f := l.turns.pop()
		if f.live == 0 {
			continue // stale entries only (remove)
		}
		var e entry
		for e = f.entries.pop(); e.seq != e.rec.seq; e = f.entries.pop() {
		}
		if f.live--; f.live > 0 {
			l.turns.push(f)
		} else {
			delete(l.flows, f.name)
		}
		e.rec.queued = notQueued
		l.left()
		return e.rec
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
