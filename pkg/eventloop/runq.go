package eventloop

// maxUrgentStreak is how many plans in a row the run queue takes from its
// urgent ring while background plans wait; the next one is a background
// plan. It bounds starvation: under a constant stream of urgent plans, the
// background plan at the head of its ring starts within maxUrgentStreak+1
// starts: background work gets at least one start in five.
const maxUrgentStreak = 4

// queue names the ring of the run queue that holds a record, if any.
type queue uint8

const (
	notQueued queue = iota
	inBackground
	inUrgent
)

// runQueue holds the clusters whose waiting plan starts when a worker is
// free, in two FIFO rings: urgent plans (a user's action) go ahead of
// background ones (timers, rollout steps, status writes), so the spec change
// of one cluster does not wait behind the resyncs of a thousand others.
// Within a ring clusters take turns, one plan each: a cluster whose plans
// follow one another goes to the back of its ring after each.
//
// Invariants (TestRunQueue checks them after every operation):
//  1. A record is queued in at most one ring, the one rec.queued names, and
//     has one live entry there. live counts the live entries of the
//     background ring.
//  2. promote moves a record from the background ring to the end of the
//     urgent one. A ring cannot remove from its middle, so the old entry
//     stays, stale, counted in rec.stale. A record's live entry is pushed
//     after its stale ones, so the first rec.stale entries of a record that
//     pop from the background ring are the stale ones, and are skipped.
//  3. The background ring is empty when live is 0: its stale entries are
//     dropped when its last live one goes. So len counts no stale entry
//     once nothing waits, and stale entries never outlive the live ones.
//  4. streak counts the records taken in a row from the urgent ring while
//     a background record waited; it never exceeds maxUrgentStreak, at
//     which the next pop takes the head of the background ring.
type runQueue struct {
	urgent, background ring[*record]
	live               int
	streak             int
}

// len counts the entries of both rings, stale ones included.
func (q *runQueue) len() int { return q.urgent.len() + q.background.len() }

// waiting counts the records queued in either ring (no stale entry).
func (q *runQueue) waiting() int { return q.urgent.len() + q.live }

// push queues a record that is in no ring, at the end of the urgent ring or
// of the background one.
func (q *runQueue) push(rec *record, urgent bool) {
	if urgent {
		rec.queued = inUrgent
		q.urgent.push(rec)
		return
	}
	rec.queued = inBackground
	q.background.push(rec)
	q.live++
}

// promote moves a record queued in the background ring to the end of the
// urgent ring.
func (q *runQueue) promote(rec *record) {
	rec.stale++
	q.live--
	q.dropStale()
	rec.queued = inUrgent
	q.urgent.push(rec)
}

// pop takes the record whose plan starts next, and says from which ring;
// nil when both are empty. It takes from the urgent ring first, except
// that after maxUrgentStreak urgent records in a row it takes a background
// one if one waits.
func (q *runQueue) pop() (rec *record, urgent bool) {
	if q.live > 0 && (q.streak >= maxUrgentStreak || q.urgent.len() == 0) {
		q.streak = 0
		return q.popBackground(), false
	}
	if q.urgent.len() == 0 {
		return nil, false
	}
	rec = q.urgent.pop()
	rec.queued = notQueued
	if q.live > 0 {
		q.streak++
	} else {
		q.streak = 0
	}
	return rec, true
}

// popBackground takes the first live entry of the background ring, which
// must hold one, skipping the stale ones before it.
func (q *runQueue) popBackground() *record {
	for {
		rec := q.background.pop()
		if rec.stale > 0 {
			rec.stale--
			continue
		}
		rec.queued = notQueued
		q.live--
		q.dropStale()
		return rec
	}
}

// dropStale empties the background ring once it holds no live entry.
func (q *runQueue) dropStale() {
	if q.live > 0 {
		return
	}
	for q.background.len() > 0 {
		q.background.pop().stale--
	}
}
