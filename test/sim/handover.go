package sim

import (
	"math/rand/v2"
	"slices"
	"time"
)

// A handover is the leader losing its Lease while a standby takes over,
// as pkg/operator's elect and client-go's leaderelection do it. What the
// real operator does when the Lease is lost (client-go v0.37,
// pkg/operator/operator.go):
//
//  1. The leader renews every RetryPeriod (2 s); once renewals fail for
//     RenewDeadline (10 s), client-go's renew gives up and, with
//     ReleaseOnCancel, first releases the Lease (a Get and an Update,
//     bounded by RenewDeadline again), and only then cancels the context
//     OnStartedLeading runs under. pkg/operator's elect keeps the elector
//     on a context of its own so that a release waits for lead to return,
//     but that covers Run's context ending, not a Lease lost: then the
//     release comes first.
//  2. Until that cancellation, nothing of the leader stops: its loop
//     handles events, fires timers and starts plans; its informers go on.
//  3. The cancellation ends the loop (eventloop.Loop.Run cancels every
//     plan in flight and waits for the steps, which honour their context:
//     client-go aborts a request whose context ends; a step not started
//     does not run), then lead returns, elect returns ErrLeadershipLost
//     and the process exits (cmd/pgloop), to start again as a standby.
//  4. A standby acquires the Lease once it has seen no renewal for
//     LeaseDuration (15 s), or at its next try (RetryPeriod) after a
//     release, then lists, syncs its caches and resumes every cluster
//     from its status (runLeader).
//
// So the old leader may act while the new one already does: from its
// last renewal, it stops after at most RetryPeriod + RenewDeadline +
// RenewDeadline (22 s) when the API is slow to answer its release, while
// the standby can start after LeaseDuration (15 s): 7 s of overlap with
// the defaults, without any fault of the process. A process paused (a
// long GC, CPU throttling, a frozen node) overlaps longer: nothing bounds
// the pause, but once it runs again a step past its own deadline is
// cancelled by it, so its calls stop within the step deadline of the
// step they belong to. Nothing fenced the old leader's writes: the
// resourceVersion of an update was the only guard, and a status write
// that meets a Conflict reads again and retries (effects.writeStatus).
// That is what the handover seeds of TestHandoverFence found; since then
// pkg/operator stops the work before a release and at the renew deadline,
// and its clients refuse the work's writes from then on (fencedLock,
// traffic.Fence): the simulation refuses the old incarnation's writes too
// (errFenced), unless Options.unfenced.
//
// The simulation models this worst case: at a seeded time the new
// incarnation starts from what the API holds (as after a crash) while the
// old one goes on, unaware, for a seeded overlap of up to stepTimeout:
// its loop handles the results of its plans and fires its timers, it
// starts plans, and their calls reach the API, each step still bounded by
// its own deadline. Its cache gets nothing more (as a watch of a process
// that falls behind). Then it stops as a crash does: the plans still in
// flight fail every later call. The two incarnations never run at once:
// each has its clock (set to the simulated time in turn) and the
// simulator settles one loop before it moves the other's clock.
type handover struct {
	at      time.Duration // from the start
	overlap time.Duration // how long the old incarnation goes on
}

// newHandovers draws the handovers of a run: in a third of the seeds, one
// or two, while the faults last. Like newStuck they draw from a stream
// of their own, so that a seed without any runs as it did before them.
func newHandovers(seed int64, active time.Duration) []handover {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x4a0d))
	if rng.IntN(3) != 0 {
		return nil
	}
	var out []handover
	for range 1 + rng.IntN(2) {
		out = append(out, handover{at: time.Duration(rng.Int64N(int64(active))),
			overlap: time.Duration(1+rng.IntN(int(stepTimeout/time.Millisecond))) * time.Millisecond})
	}
	slices.SortFunc(out, func(a, b handover) int { return int(a.at - b.at) })
	return out
}

// handOver makes the running incarnation lose its Lease: a new one starts
// from the API while the old one goes on until its overlap ends.
func (s *Sim) handOver(h handover) {
	s.retire()
	s.count(FaultHandover)
	old := s.op
	old.until = s.clock.Now().Add(h.overlap)
	s.old = old
	s.tracef("operator %d lost its lease: it goes on until %v", old.inc, old.until.Sub(t0).Round(time.Millisecond))
	s.startOperator()
}

// retire stops the incarnation that lost its Lease, if one still runs:
// from now on its calls fail, as the process exits.
func (s *Sim) retire() {
	old := s.old
	if old == nil {
		return
	}
	s.old = nil
	s.stop(old)
}

// alive tells whether the calls of incarnation inc reach the API: it is
// the running one, or the one that lost its Lease, within its overlap.
func (s *Sim) alive(inc int) bool {
	if inc == s.live {
		return true
	}
	return s.old != nil && inc == s.old.inc && s.clock.Now().Before(s.old.until)
}
