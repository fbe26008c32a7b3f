package fsm

// Rollout is a cluster's part in the fleet's rollout budget, as its machine
// reports it after every input (Result.Rollout). The budget (how many
// clusters may replace pods that run PostgreSQL at once) is the
// controller's: the machine learns whether it may go on through
// Facts.RolloutWait, and says here whether it needs a slot.
type Rollout uint8

const (
	// NotRolling: no rollout of pods that run PostgreSQL is under way or
	// due. The cluster needs no slot, and frees the one it held.
	NotRolling Rollout = iota
	// Rolling: the cluster is in such a rollout and had a slot
	// (Facts.RolloutWait empty). It keeps it until it reports NotRolling,
	// also between its steps, while a replaced pod comes up.
	Rolling
	// Queued: the cluster is in such a rollout, or its next step would
	// start one, and it has no slot.
	Queued
)

func (r Rollout) String() string {
	switch r {
	case Rolling:
		return "rolling"
	case Queued:
		return "queued"
	}
	return "not rolling"
}

// rolloutMemory is what a machine remembers of its part in the fleet's rollout
// budget between inputs.
//
// A cluster needs a slot from the input where it would first replace a pod
// that runs PostgreSQL, or switch its primary over for one, or update its
// StatefulSet's pod template while every pod serves (Facts.TemplateChanged:
// the replacements that follow are then known; a cluster without a slot
// says RolloutQueued in the same status write as Updating, not in a second
// one once the StatefulSet is updated), to the input
// where no pod is outdated and every pod is Ready again, while it is
// Creating, Updating or Degraded. It keeps its slot between its steps, so
// a rollout that started finishes before another starts. A restarted
// operator remembers nothing of it: a cluster whose rollout is under way
// (Facts.RolloutStarted) asks for a slot back at once, before its next
// step is due.
//
// Invariants (the script runner checks them after every input):
//  1. state is the last report; it is NotRolling out of Creating, Updating
//     and Degraded.
//  2. blocked implies Queued: a step is due, and only a slot is missing.
//     Meanwhile the timeout of Creating or Updating is not pending: no
//     cluster is declared Degraded for the time it waited for pgloop's own
//     budget; the timeout measures the cluster, not the queue in front of
//     it. It is armed again, in full, once the cluster is no longer
//     blocked (keepTimeout).
//  3. A blocked cluster's status.reason is RolloutQueued, unless a failed
//     plan's reason stands: a restarted operator reads blocked back from it
//     (Engine.New).
type rolloutMemory struct {
	state   Rollout
	blocked bool
	// stepped: a step of a rollout (a running pod's replacement, a
	// switchover) fired in the current input.
	stepped bool
	// windowWait: a rollout step or a restart waits for a maintenance
	// window (noteWindow).
	windowWait bool
}

// waiting reports whether the cluster waits for a slot of the rollout
// budget or for a maintenance window: its timeout does not run meanwhile
// (keepTimeout).
func (r *rolloutMemory) waiting() bool { return r.blocked || r.windowWait }

// rolloutStepDue reports whether a step of a rollout of pods that run
// PostgreSQL is due now but for a slot: a running pod to replace, or a
// switchover, that the machine has not asked for yet.
func (m *Machine) rolloutStepDue() bool {
	return !windowClosed(&m.st, &m.eng.call.facts) && m.rolloutStep()
}

// rolloutStep reports whether the facts show a step of a rollout of pods
// that run PostgreSQL the machine has not asked for yet, slot and
// maintenance window aside: a replacement, a switchover, or the pod
// template's update that makes every pod outdated.
func (m *Machine) rolloutStep() bool {
	f, o := &m.eng.call.facts, &m.out
	return f.ReplaceRunning && len(f.toReplace(o.replaced)) > 0 ||
		f.Switchover != nil && f.Switchover.From != o.switchedFrom ||
		f.TemplateChanged
}

// noteWindow holds back what waits for a maintenance window (windowClosed)
// once noteRollout has run: while a rollout step or a restart is due and
// no window is open, the cluster is waiting, its status.reason
// MaintenanceWindow (showCause), and the timer of the next opening is
// armed; the timeout of Updating is cancelled, as for the rollout budget
// (keepTimeout): it measures the cluster, not the calendar. Once nothing
// waits (the window opened, or nothing is due any more), the timer goes
// and the timeout is armed again, in full. A restarted operator reads the
// wait back from status.reason (Engine.New). A waiting cluster holds no
// slot of the rollout budget (rolloutStepDue).
func (m *Machine) noteWindow() {
	st, f := &m.st, &m.eng.call.facts
	was := m.roll.windowWait
	m.roll.windowWait = windowClosed(st, f) && (st.State == Updating || st.State == Degraded) &&
		(m.rolloutStep() || !ConfigDue(st, f) && f.toRestart(m.out.restarted) != nil)
	if !m.roll.windowWait {
		m.cancelTimer(TimerMaintenance)
	}
	m.keepTimeout(waitCue(was))
	if m.roll.windowWait && !m.timerAt(TimerMaintenance, f.MaintenanceOpens) {
		m.setTimer(TimerMaintenance, f.MaintenanceOpens.Sub(m.eng.call.now))
	}
}

// noteRollout works out the cluster's part in the fleet's rollout budget
// once fireObserved has fired what it could:
//  1. Out of Creating, Updating and Degraded, or with no pod outdated nor
//     a pod template to change and, for a cluster that held a slot, every
//     pod Ready again, it needs none.
//  2. It needs one when a step of a rollout fired or is due, or the facts
//     show a rollout under way; and, once it needed one, until 1: a
//     cluster keeps its slot between its steps, and its place in the
//     queue while a pod of it is not Ready, but not its turn: offered a
//     slot with no step to take, it leaves the queue.
//  3. With a slot (Facts.RolloutWait empty) it is Rolling; without, Queued,
//     and blocked when a step is due: the timeout of Creating or Updating
//     is cancelled (status.reason says why, showCause). Once no longer
//     blocked, the timeout is armed again (keepTimeout).
func (m *Machine) noteRollout() {
	st, f, r := &m.st, &m.eng.call.facts, &m.roll
	wasBlocked := r.blocked
	r.blocked = false
	switch {
	case st.State != Creating && st.State != Updating && st.State != Degraded:
		r.state = NotRolling
	case f.Outdated == 0 && !f.TemplateChanged && (r.state != Rolling || f.Ready >= f.Desired):
		r.state = NotRolling
	case !r.stepped && !f.RolloutStarted && !m.rolloutStepDue() &&
		(r.state == NotRolling || r.state == Queued && f.RolloutWait == ""):
		// A queued cluster whose turn comes while it has no step to take
		// (a pod of it not Ready) passes its turn on: it holds no slot
		// for a rollout it has not started.
		r.state = NotRolling
	case f.RolloutWait == "":
		r.state = Rolling
	default:
		r.state = Queued
		r.blocked = m.rolloutStepDue()
	}
	r.stepped = false
	m.keepTimeout(waitCue(wasBlocked))
	if wasBlocked && !r.blocked && f.TemplateChanged {
		// The ensures made while it was blocked kept the pod template
		// (Plan.KeepPodTemplate): now it is written.
		m.out.ask(ensureWork)
	}
}
