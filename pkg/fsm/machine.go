package fsm

import (
	"errors"
	"fmt"
	"time"

	lfsm "github.com/looplab/fsm"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Machine is the state machine of one cluster. It is not safe for concurrent
// use: the event loop owns it and calls it from one goroutine.
type Machine struct {
	eng *Engine
	cfg *Config
	// st is the status, timers included. Its slices and pointers are
	// copy-on-write: a change replaces them, never writes into them, so a
	// plan's snapshot is a shallow copy that later transitions cannot
	// touch.
	st v1.PostgresqlStatus
	// out is what the machine remembers of its plans (outbox.go).
	out outbox
	// roll is its part in the fleet's rollout budget and its wait for a
	// maintenance window (rollout.go).
	roll rolloutMemory
	// soft are the timers status does not keep (timers.go).
	soft softTimers
}

// call is what callbacks record during one Handle (or Resume): the
// engine's, since it runs one machine's input at a time; each Handle
// starts it afresh.
type call struct {
	facts   Facts
	now     time.Time
	reason  string
	message string
	res     Result
	records []Record // Kubernetes Events to record (Plan.Records)
	// inFlight is Input.InFlight.
	inFlight uint64
	// lossDue: a loss in Running may go Degraded now, the lossGrace
	// timer having fired in this call, or the grace being 0.
	lossDue bool
}

// memory is the read-only view of what the machine remembers that guards
// decide on.
func (m *Machine) memory() Memory {
	return Memory{CleanupDone: m.out.cleanupDone, Troubled: m.out.troubled, Replaced: m.out.replaced, LossDue: m.eng.call.lossDue,
		Restarted: m.out.restarted, SwitchedFrom: m.out.switchedFrom,
		EnsurePending: m.out.want == ensureWork || m.out.again}
}

// work is the state's own effects: the cleanup in Deleting, the ensure
// effects elsewhere.
func (m *Machine) work() work {
	if m.st.State == Deleting {
		return cleanupWork
	}
	return ensureWork
}

// State is the current state.
func (m *Machine) State() string { return m.st.State }

// Status returns the machine's status. Callers must not modify it.
func (m *Machine) Status() *v1.PostgresqlStatus { return &m.st }

// Resume is called once after New: it re-arms the timers stored in status
// (a restarted operator keeps the original deadlines), arms a Running
// cluster's resync at the next multiple of the period since it became
// Running (so the resyncs of a restarted fleet stay spread as they were)
// and, since the outcome of the previous process's last plan is unknown,
// asks for the state's effects again on the next input. It changes
// nothing that status keeps: an idle cluster resumed writes nothing.
func (m *Machine) Resume(now time.Time) Result {
	res := Result{From: m.st.State, To: m.st.State, Epoch: m.st.Epoch}
	for _, t := range m.st.Timers {
		res.Timers = append(res.Timers, TimerOp{Name: t.Name, Deadline: t.Deadline.Time})
	}
	if m.st.State == Running {
		// The engine's scratch holds the last Handle's, of any machine.
		c := &m.eng.call
		*c = call{now: now, records: c.records[:0]}
		m.setSoftTimer(TimerResync, m.nextResync(now))
		res.Timers = append(res.Timers, c.res.Timers...)
		c.res.Timers = nil
	}
	switch m.st.State {
	case Creating, Updating, Running, Degraded, Deleting:
		m.out.ask(m.work())
	}
	return res
}

// Handle runs one input through the machine with the facts observed now and
// returns what to do. It never blocks and does no I/O.
func (m *Machine) Handle(in Input, f Facts, now time.Time) Result {
	c := &m.eng.call
	*c = call{facts: f, now: now, records: c.records[:0], lossDue: m.cfg.LossGrace <= 0, inFlight: in.InFlight}
	m.out.begin()
	c.res.From = m.st.State
	epoch := m.st.Epoch

	switch in.Kind {
	case TimerFired:
		if !m.takeTimer(in.Timer, in.Epoch) {
			return m.ignore(fmt.Sprintf("stale timer %s (epoch %d, now %d)", in.Timer, in.Epoch, m.st.Epoch))
		}
		if in.Timer == TimerFlush {
			m.out.flush()
			break
		}
		if in.Timer == TimerConfigCheck {
			// As an observation would: effects still waiting are
			// asked again.
			m.out.signalled(m.work())
			break
		}
		if in.Timer == TimerBackup || in.Timer == TimerBackupDeadline || in.Timer == TimerPasswordRotation {
			break // their deadlines are in status.backup and status.passwordRotation: backups and passwordRotation read them
		}
		reason, msg := "", ""
		if in.Timer == TimerTimeout {
			r, s := stuck(&c.facts)
			reason, msg = ReasonTimeout, fmt.Sprintf("not converged within %s: %s (%s)", m.timeoutFor(m.st.State), s, r)
		}
		m.fire(in.Timer, reason, msg)
	case PlanDone:
		if !m.planDone(in.PlanID, in.Err) {
			return m.ignore(fmt.Sprintf("stale result of plan %d (latest %d)", in.PlanID, m.out.seq))
		}
	case Panicked:
		// The panic may have cut a transition short: trust nothing until
		// the retry's effects succeed.
		m.out.trouble()
		m.fire(EventPanicked, ReasonPanic, fmt.Sprint(in.Err))
	case Signal:
		m.out.signalled(m.work())
	}
	// Then the input steps, in order (pipeline.go), and the plan:
	// status write, effects, timers, urgency (plan.go).
	for _, step := range inputSteps {
		step.run(m)
	}
	return m.finish(epoch)
}

// planDone accounts for a plan's result. It reports false when the result
// is stale: a newer plan carries everything this one did.
func (m *Machine) planDone(id uint64, err error) bool {
	var part *PartError
	if errors.As(err, &part) && part.Part == PartBackup {
		// A backup's start is the plan's last effect: every other one
		// succeeded, and its failure fails none of them. The archive
		// checks' next report that the primary shows no trace of the
		// run asks for it again; its deadline ends it (backups.go).
		m.out.backupErr, err, part = part.Err.Error(), nil, nil
	}
	r := m.out.report(id, err)
	if r.stale {
		return false
	}
	if r.poolersResumed {
		m.poolersResumed()
	}
	if r.written && m.st.State == Invalid {
		// Invalid retries nothing but the status write.
		m.resetRetry()
	}
	if r.outcome == waiting || r.outcome == failed {
		errors.As(err, &part)
		// The roles are synced before the configuration is applied: a
		// configuration that failed or waits comes after a sync that
		// succeeded.
		if part != nil && part.Part == PartConfig && r.inDatabase != nil && r.inDatabase.Sync != "" {
			m.recordInDatabase(&InDatabase{Sync: r.inDatabase.Sync})
		}
	}
	switch r.outcome {
	case waiting:
		m.st.Message = err.Error()
		if d, soon := m.configCheck(part, r.inDatabase); soon {
			m.setSoftTimer(TimerConfigCheck, d)
		} else {
			m.setTimer(TimerRetry, m.cfg.waitDelay(m.out.waits))
			m.out.waits = min(m.out.waits+1, 3)
		}
		if part != nil {
			m.partCondition(part, ReasonSyncPending, ReasonConfigPending)
		}
	case failed:
		m.out.waits, m.out.configWait = 0, configWait{}
		if part != nil {
			m.partCondition(part, ReasonSyncFailed, ReasonConfigFailed)
		}
		reason := ReasonEffectsFailed
		if errors.Is(err, v1.ErrAdoptionRefused) {
			reason = ReasonAdoptionRefused
		}
		m.fire(EventEffectsFailed, reason, err.Error())
	case succeeded:
		m.out.waits, m.out.configWait = 0, configWait{}
		if r.inDatabase != nil {
			m.recordInDatabase(r.inDatabase)
		}
		m.fire(EventEffectsSucceeded, "", "")
	}
	if r.outcome != noOutcome {
		m.keepTimeout(effectsReported)
	}
	return true
}

func (m *Machine) ignore(why string) Result {
	return Result{From: m.st.State, To: m.st.State, Epoch: m.st.Epoch, Ignored: why, Rollout: m.roll.state}
}

// fire runs one event when its guard holds. It reports whether the event
// fired; a guard that does not hold or an event the state does not take is
// not an error, just no transition.
func (m *Machine) fire(event, reason, message string) bool {
	if g := guards[guardKey{event, m.st.State}]; g != nil && !g(&m.st, &m.eng.call.facts, m.memory()) {
		return false
	}
	return m.transition(event, reason, message)
}

// transition runs one looplab/fsm event whose guard holds. Guards run
// here, in the machine, once per event: not again in a looplab/fsm
// callback.
func (m *Machine) transition(event, reason, message string) bool {
	m.eng.call.reason, m.eng.call.message = reason, message
	from := m.st.State
	err := m.eng.event(m, event)
	var noTransition lfsm.NoTransitionError
	if err == nil || errors.As(err, &noTransition) {
		m.eng.call.res.Fired = append(m.eng.call.res.Fired, Fired{Event: event, From: from, To: m.st.State})
		return true
	}
	return false
}

// fireObserved fires the fact-driven events whose guards hold, in observeOrder,
// until none does. A few rounds are enough: Pending → Creating → Running is
// the longest chain. Each guard runs once per try.
func (m *Machine) fireObserved() {
	for round := 0; round < 4 && m.st.State != Deleted; round++ {
		fired := false
		for _, c := range candidates[m.st.State] {
			if c.guard != nil && !c.guard(&m.st, &m.eng.call.facts, m.memory()) {
				continue
			}
			reason, msg := m.observeReason(c.event)
			if m.transition(c.event, reason, msg) {
				fired = true
				break
			}
		}
		if !fired {
			return
		}
	}
}

// noteNudge asks for the StatefulSet to be nudged once per change of the
// namespace's quotas while a quota keeps its pods from being created
// (Facts.Nudge). It is no transition: the state stays, and the nudge rides
// on the next plan.
func (m *Machine) noteNudge() {
	switch m.st.State {
	case Creating, Running, Updating, Degraded:
		m.out.askNudge(m.eng.call.facts.Nudge)
	}
}
