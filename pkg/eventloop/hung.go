package eventloop

import (
	"slices"
	"time"

	"github.com/sirupsen/logrus"
)

// The hung lane keeps clusters whose calls hang off the workers that
// healthy clusters need, whatever the number of hung clusters:
//
//   - A plan that has held a worker, or a place of the hung lane, for
//     SlowAfter is detached: it stops counting against them, its goroutine
//     goes on until its step ends (the step's deadline bounds it), and the
//     next waiting plan starts. A hung step holds a place for SlowAfter,
//     not for its whole deadline.
//   - A step that ran SlowAfter or longer and failed (most often at its
//     deadline) is slow, and its name is kept in its cluster's state: the
//     cluster's plans with a step of that name start in the hung lane,
//     which has places of its own (HungWorkers) and never takes a worker.
//     A step of that name that succeeds or ends sooner, there, takes it off
//     the list: the cluster's plans go back to the workers. A long step
//     that succeeds (a switchover waits for the new leader) is not slow.
//
// So a cluster that hangs holds a worker for SlowAfter once per kind of
// step that hangs (a frozen PostgreSQL: its in-database steps; an API that
// never answers for it: each of its steps once), and then none: K hung
// clusters, however many, cost healthy ones K*kinds*SlowAfter of worker
// time in all, spread by the run queue's turns, not K*deadline on every
// retry. A hung cluster that recovers waits for a place of the hung lane
// with its next plan with the step that hung, behind the other hung
// clusters' plans, each of which holds one for SlowAfter at most (and the
// machines' retries back off); that step answering in time puts it back
// on the workers. Plans are detached at most (Workers+HungWorkers) per
// SlowAfter, each running for its step's deadline at most (a plan pauses
// between steps while others wait), and at most detachFactor times the
// places of each lane detached from it at once (below).

// When the whole API server is slow, not one cluster, detaching at
// SlowAfter would only multiply the requests in flight: every plan of a
// burst of creates ran past it (Service creates took seconds, then their
// whole deadline, on the loaded server), was detached, and its worker
// started another, until some 700 plans were in flight where the workers
// bound them to 16, and the server timed out thousands of requests
// (docs/scale.md, "The hung lane under a burst"). Two bounds keep the
// workers and the hung lane's places the bound of what is in flight:
//
//   - At most detachFactor times Workers plans detached from a worker run
//     at once (64 with the defaults), and at most detachFactor times
//     HungWorkers detached from the hung lane; past that, a slow plan
//     keeps its worker, or its place, until one detached from the same
//     ends. More clusters than that hanging at the same instant then hold
//     workers for their deadline, as they did before the hung lane; their
//     next plans, with the step that hung, run in the hung lane, whose
//     places they hold for their deadline in turn. The lanes wait apart:
//     a hung lane at its bound never keeps a worker's slow plan from
//     being detached. (At 10,000 clusters, before the hung lane's bound,
//     549 plans ran at once beside 16 workers, 534 of them detached: the
//     clusters whose Service creates the API server ended after 60 s went
//     to the hung lane, and each of its places started a new plan every
//     SlowAfter.)
//   - The threshold follows the API: SlowAfter, or detachFactor times the
//     median time the last steps that succeeded on workers took
//     (stepTimes, once minStepTimes are known), whichever is longer. A
//     hung step fails at its deadline and does not count, so hung
//     clusters, however many, leave it at SlowAfter; a server slow for
//     everyone, whose steps succeed in seconds, raises it. The same
//     threshold says which failed steps were slow.
const (
	detachFactor  = 4
	stepTimesKept = 64
	minStepTimes  = 16
)

// noteTimes records the durations of steps that succeeded on a worker,
// and sets the detach threshold from them.
func (l *Loop) noteTimes(took []time.Duration) {
	if l.slowAfter <= 0 || len(took) == 0 {
		return
	}
	for _, d := range took {
		l.stepTimes[l.stepTimesNext] = d
		l.stepTimesNext = (l.stepTimesNext + 1) % len(l.stepTimes)
		l.stepTimesLen = min(l.stepTimesLen+1, len(l.stepTimes))
	}
	if l.stepTimesLen < minStepTimes {
		return
	}
	recent := slices.Clone(l.stepTimes[:l.stepTimesLen])
	slices.Sort(recent)
	l.detachAfter = max(l.slowAfter, detachFactor*recent[len(recent)/2])
	l.st.detachAfter.Store(int64(l.detachAfter))
}

// slot is what a plan in flight holds while it runs.
type slot uint8

const (
	noSlot     slot = iota
	onWorker        // one of the Workers (Loop.inflight)
	inHungLane      // a place of the hung lane (Loop.hungInflight)
	detached        // none: it ran past SlowAfter (Loop.detached)
)

// watched is a plan that took a worker or a place of the hung lane at at;
// stale once its job (seq) no longer holds it.
type watched struct {
	rec *clusterState
	seq uint64
	at  time.Time
}

// queueOf is the run queue that holds, or is to hold, the cluster's plan.
func (l *Loop) queueOf(rec *clusterState) *runQueue {
	if rec.queued != notQueued {
		if rec.inHung {
			return &l.hungq
		}
		return &l.runq
	}
	if l.hangs(rec) {
		return &l.hungq
	}
	return &l.runq
}

// enqueue queues the cluster, which is in no run queue, in the hung lane
// when its next steps include one that was slow, else on the workers'.
func (l *Loop) enqueue(rec *clusterState, urgent bool) {
	rec.inHung = l.hangs(rec)
	rec.queuedAt, rec.queuedRound = l.clock.Now(), l.rounds
	l.queueOf(rec).push(rec, urgent)
}

// waited counts how long the cluster's plan, starting now holding s,
// waited in its run queue for a free worker or place: nothing when it
// starts in the schedule round that follows its enqueue (every enqueue
// is followed by one), as it found one free.
func (l *Loop) waited(rec *clusterState, s slot) {
	if rec.queuedRound == l.rounds {
		return
	}
	w := l.clock.Since(rec.queuedAt)
	i := 0
	if s == inHungLane {
		i = 1
	}
	l.st.waits[i].Add(1)
	l.st.waitNanos[i].Add(uint64(w))
}

// hangs reports whether what the cluster runs next (the rest of its
// paused plan, or its waiting plan) has a step that was slow.
func (l *Loop) hangs(rec *clusterState) bool {
	if len(rec.slow) == 0 {
		return false
	}
	var steps []Step
	switch {
	case rec.paused != nil:
		steps = rec.paused.plan.Steps[rec.paused.next:]
	case rec.waiting != nil:
		steps = rec.waiting.Steps
	}
	for i := range steps {
		if slices.Contains(rec.slow, steps[i].Name) {
			return true
		}
	}
	return false
}

// laneOf is the index of what a plan holds in Loop.watch and
// Loop.detachedFrom: 0 a worker, 1 a place of the hung lane.
func laneOf(s slot) int {
	if s == inHungLane {
		return 1
	}
	return 0
}

// places is the number of places of lane i: the workers, or the hung
// lane's.
func (l *Loop) places(i int) int {
	if i == 1 {
		return l.hungWorkers
	}
	return l.workers
}

// watchJob notes that the cluster's job took a worker or a place now.
func (l *Loop) watchJob(rec *clusterState) {
	if l.slowAfter > 0 {
		l.watch[laneOf(rec.slot)].push(watched{rec: rec, seq: rec.job, at: l.clock.Now()})
	}
}

// nextDetach returns when the oldest plan holding a worker, or a place of
// the hung lane, is to be detached, whichever comes first, and the index
// of its lane, dropping the entries of plans that no longer hold one. A
// lane whose detached plans are at their bound (detachFactor times its
// places) has none: its turn comes when one of them ends (the loop calls
// detachSlow after every batch of events).
func (l *Loop) nextDetach() (time.Time, int, bool) {
	var next time.Time
	found := -1
	for i := range l.watch {
		w := &l.watch[i]
		for w.len() > 0 {
			if head := w.at(0); head.rec.job == head.seq && (head.rec.slot == onWorker || head.rec.slot == inHungLane) {
				break
			}
			w.pop()
		}
		if w.len() == 0 || l.detachedFrom[i] >= detachFactor*l.places(i) {
			continue
		}
		if due := w.at(0).at.Add(l.detachAfter); found < 0 || due.Before(next) {
			next, found = due, i
		}
	}
	return next, found, found >= 0
}

// detachSlow detaches the plans that have held a worker or a place for
// the detach threshold by now: they run on holding neither, and what they free starts
// waiting plans.
func (l *Loop) detachSlow(now time.Time) {
	n := 0
	for {
		at, i, ok := l.nextDetach()
		if !ok || at.After(now) {
			break
		}
		rec := l.watch[i].pop().rec
		l.freed(rec)
		rec.slot, rec.from = detached, i
		l.detachedFrom[i]++
		l.detached++
		l.st.plansDetached.Add(1)
		n++
	}
	if n > 0 {
		l.schedule()
	}
}

// timed notes that the job's step name ran for d and ended with err: slow
// when it ran the job's threshold or longer and failed; quick, for a step
// that was slow before, when it succeeded or ended sooner. The durations
// of the steps that succeeded, of a job handed to a worker, are kept for
// the loop's threshold.
func (j *job) timed(name string, d time.Duration, err error) {
	if err == nil && j.onWorker && j.slowAfter > 0 {
		j.took = append(j.took, d)
	}
	switch {
	case j.slowAfter <= 0:
	case d >= j.slowAfter && err != nil:
		if !slices.Contains(j.slow, name) {
			j.slow = append(j.slow, name)
		}
	case slices.Contains(j.suspect, name) && !slices.Contains(j.quick, name):
		j.quick = append(j.quick, name)
	}
}

// noteSteps updates the cluster's slow steps with what its job reports:
// its steps that were slow are added, those that were slow before and ran
// quickly now are taken off. The cluster state's list is replaced, never changed
// in place: a job started later reads it as it was.
func (l *Loop) noteSteps(rec *clusterState, j *job) {
	l.noteTimes(j.took)
	if len(j.slow) == 0 && len(j.quick) == 0 {
		return
	}
	before := len(rec.slow)
	next := slices.DeleteFunc(slices.Clone(rec.slow), func(name string) bool {
		return slices.Contains(j.quick, name) && !slices.Contains(j.slow, name)
	})
	for _, name := range j.slow {
		if !slices.Contains(next, name) {
			next = append(next, name)
		}
	}
	if len(next) == 0 {
		next = nil
	}
	rec.slow = next
	log := l.log.WithFields(logrus.Fields{"cluster": rec.key, "slowSteps": next})
	switch {
	case before == 0 && len(next) > 0:
		l.hungClusters++
		log.Infof("steps failed after %v or longer: the cluster's plans with them run in the hung lane, off the workers", j.slowAfter)
	case before > 0 && len(next) == 0:
		l.hungClusters--
		log.Info("its slow steps answered in time again: the cluster's plans run on the workers")
	}
}

// quiet reports whether no plan is running or waiting to start.
func (l *Loop) quiet() bool {
	return l.inflight == 0 && l.hungInflight == 0 && l.detached == 0 && l.runq.waiting() == 0 && l.hungq.waiting() == 0
}
