package controller

import (
	"fmt"
	"slices"

	"github.com/pgloop/pgloop/pkg/fsm"
)

// SignalRollout is the signal a cluster gets when its turn for a slot of
// the rollout budget comes: its machine looks again, and takes the slot.
const SignalRollout = "rollout"

// budget is the fleet's rollout budget: at most max clusters replace pods
// that run PostgreSQL at once (--max-rolling-clusters; 0 means no bound).
// Without a bound the clusters that roll are still counted (the metrics).
// Each cluster replaces one such pod at a time, so max also bounds the pods
// of the fleet being replaced at once. An upgrade of pgloop that changes
// every pod template thus rolls max clusters at a time, never the whole
// fleet in one go.
//
// The machines decide whether they need a slot (fsm.Rollout); the budget
// only says whether one is theirs (offer, before the machine's input) and
// accounts for what the machine then reports (report). It lives in the
// Controller, on the loop goroutine: no locks. It is not persisted: a
// restarted operator starts empty, and the clusters take their slots again
// as their machines report, those whose rollout is under way first
// (fsm.Facts.RolloutStarted), and no new rollout before every cluster the
// operator resumed was seen once (expect, seen). So a restart never lets
// more than max clusters roll, and never deadlocks: a cluster that holds no
// slot waits in line, and every slot is held by a cluster whose machine
// last said it rolls.
//
// Invariants (checkBudget in budget_test.go):
//  1. With max > 0, at most max clusters hold a slot; a cluster holds a
//     slot iff its machine last reported fsm.Rolling, waits in line iff it
//     reported fsm.Queued, and is in neither otherwise or once forgotten.
//  2. Each waiting cluster is once in one line: resumed (its rollout is
//     under way) or fresh (it would start one), each in the order the
//     clusters joined it.
//  3. The free slots are the turns of the first waiting clusters, resumed
//     before fresh, and of the fresh ones only once warm (every cluster
//     resumed at the start seen). A cluster whose turn comes is woken
//     (SignalRollout); until its machine looks, the slot is kept for it.
type budget struct {
	max int
	// wait is what a cluster without a slot is told (fsm.Facts.RolloutWait).
	wait    string
	holders map[string]struct{}
	// resumed and fresh are the lines; inResumed says which one a
	// waiting cluster is in.
	resumed, fresh []string
	inResumed      map[string]bool
	// unseen are the clusters the operator resumed at its start that the
	// loop has not handled yet.
	unseen map[string]struct{}
	// wake signals a cluster without blocking.
	wake func(key string)
}

func newBudget(max int, wake func(key string)) budget {
	return budget{
		max:       max,
		wait:      fmt.Sprintf("waiting for a rollout slot: at most %d clusters roll at once (--max-rolling-clusters)", max),
		holders:   map[string]struct{}{},
		inResumed: map[string]bool{},
		unseen:    map[string]struct{}{},
		wake:      wake,
	}
}

// expect records the clusters the operator resumes at its start: until the
// loop has handled each once, no fresh rollout starts.
func (b *budget) expect(keys []string) {
	if b.max <= 0 {
		return
	}
	for _, k := range keys {
		b.unseen[k] = struct{}{}
	}
}

// seen records that the loop handles key. The last cluster resumed at the
// start to be seen opens the fresh line.
func (b *budget) seen(key string) {
	if len(b.unseen) == 0 {
		return
	}
	delete(b.unseen, key)
	if len(b.unseen) == 0 {
		b.wakeTurns()
	}
}

func (b *budget) warm() bool { return len(b.unseen) == 0 }

// offer returns what key is told before its machine's input: "" when it
// may roll (it holds a slot, or a free slot is its turn), the wait
// otherwise. started says its rollout is under way.
func (b *budget) offer(key string, started bool) string {
	if b.max <= 0 {
		return ""
	}
	if _, ok := b.holders[key]; ok {
		return ""
	}
	if b.inTurn(key, started) {
		return ""
	}
	return b.wait
}

// inTurn reports whether a free slot is key's: it is among the first
// waiting clusters, one per free slot, or would be on joining its line.
func (b *budget) inTurn(key string, started bool) bool {
	free := b.max - len(b.holders)
	if free <= 0 {
		return false
	}
	if _, waiting := b.inResumed[key]; !waiting {
		if started {
			return len(b.resumed) < free
		}
		return b.warm() && len(b.resumed)+len(b.fresh) < free
	}
	found := false
	b.turns(free, func(k string) {
		found = found || k == key
	})
	return found
}

// turns calls fn with the first n waiting clusters, in their order.
func (b *budget) turns(n int, fn func(key string)) {
	for _, k := range b.resumed {
		if n == 0 {
			return
		}
		fn(k)
		n--
	}
	if !b.warm() {
		return
	}
	for _, k := range b.fresh {
		if n == 0 {
			return
		}
		fn(k)
		n--
	}
}

// wakeTurns wakes the clusters whose turn a free slot is. A cluster woken
// twice before it looks gets one event: the loop merges signals.
func (b *budget) wakeTurns() {
	if b.wake == nil {
		return
	}
	if free := b.max - len(b.holders); free > 0 {
		b.turns(free, b.wake)
	}
}

// budgetChange is what a report changed, for the log.
type budgetChange uint8

const (
	budgetSame budgetChange = iota
	budgetTook
	budgetQueued
	budgetFreed
	budgetLeft // left its line without a slot
)

// report accounts for what key's machine reported after its input, and
// wakes the clusters whose turn came. started says its rollout is under
// way.
func (b *budget) report(key string, r fsm.Rollout, started bool) budgetChange {
	_, held := b.holders[key]
	switch r {
	case fsm.Rolling:
		if held {
			return budgetSame
		}
		// It had a free slot, its turn: no other cluster's turn
		// changes.
		b.leaveLine(key)
		b.holders[key] = struct{}{}
		return budgetTook
	case fsm.Queued:
		if held {
			// The controller offers a holder its slot: a machine
			// never queues with one. Should it, the slot is freed.
			delete(b.holders, key)
			b.wakeTurns()
		}
		inResumed, waiting := b.inResumed[key]
		switch {
		case !waiting:
			// At the end of its line: no other cluster's turn
			// changes.
			b.join(key, started)
			return budgetQueued
		case started && !inResumed:
			// Its rollout got under way while it waited (a pod of
			// it was re-made from the new template): it goes before
			// the fresh ones, which may make it its turn.
			b.leaveLine(key)
			b.join(key, true)
			b.wakeTurns()
		}
		return budgetSame
	}
	switch {
	case held:
		delete(b.holders, key)
		b.wakeTurns()
		return budgetFreed
	case b.leaveLine(key):
		// Its turn, if it was, passes on.
		b.wakeTurns()
		return budgetLeft
	}
	return budgetSame
}

// forget drops key, whose cluster is gone.
func (b *budget) forget(key string) budgetChange {
	delete(b.unseen, key)
	return b.report(key, fsm.NotRolling, false)
}

func (b *budget) join(key string, started bool) {
	if started {
		b.resumed = append(b.resumed, key)
	} else {
		b.fresh = append(b.fresh, key)
	}
	b.inResumed[key] = started
}

// leaveLine takes key out of its line, and reports whether it was in one.
func (b *budget) leaveLine(key string) bool {
	inResumed, waiting := b.inResumed[key]
	if !waiting {
		return false
	}
	delete(b.inResumed, key)
	line := &b.fresh
	if inResumed {
		line = &b.resumed
	}
	if i := slices.Index(*line, key); i >= 0 {
		*line = slices.Delete(*line, i, i+1)
	}
	return true
}

// rolling and waiting count the clusters holding a slot and those in line.
func (b *budget) rolling() int { return len(b.holders) }
func (b *budget) waiting() int { return len(b.resumed) + len(b.fresh) }
