package fsm

import (
	"fmt"
	"strings"

	lfsm "github.com/looplab/fsm"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// leaveState starts a new epoch: every timer of the old state is dropped.
func (m *Machine) leaveState(_ *lfsm.Event) {
	m.st.Epoch++
	m.st.Timers = nil
	m.soft = nil
	m.st.Attempt = 0
	m.out.changed()
}

func (m *Machine) enterState(e *lfsm.Event) {
	c := &m.eng.call
	now := metav1.NewTime(c.now)
	m.st.State = e.Dst
	m.st.StateSince = &now
	m.out.waits = 0
	m.st.Reason, m.st.Message = c.reason, c.message
	m.addHistory(v1.Transition{From: e.Src, To: e.Dst, Event: e.Event, Time: now, Reason: c.reason})
	m.out.changed()
	if e.Dst != Deleted {
		warning := e.Dst == Degraded || e.Dst == Invalid
		msg := fmt.Sprintf("%s -> %s on %s", e.Src, e.Dst, e.Event)
		if c.message != "" {
			msg += ": " + c.message
		}
		c.records = append(c.records, Record{Warning: warning, Reason: e.Dst, Message: msg})
	}
}

// addHistory appends t to the history (copy-on-write), dropping the oldest
// entries beyond v1.MaxHistory.
func (m *Machine) addHistory(t v1.Transition) {
	old := m.st.History
	if n := len(old) + 1 - v1.MaxHistory; n > 0 {
		old = old[n:]
	}
	h := make([]v1.Transition, len(old), len(old)+1)
	copy(h, old)
	m.st.History = append(h, t)
	m.deferWrite()
}

// enterCreating and enterUpdating ask for the objects; the state's
// timeout is armed when the effects first report (keepTimeout).
func (m *Machine) enterCreating(_ *lfsm.Event) {
	m.out.ask(ensureWork)
}

func (m *Machine) enterUpdating(_ *lfsm.Event) {
	m.out.ask(ensureWork)
}

func (m *Machine) enterRunning(_ *lfsm.Event) {
	m.setSoftTimer(TimerResync, m.cfg.ResyncPeriod)
}

func (m *Machine) enterDegraded(_ *lfsm.Event) {
	m.setTimer(TimerRetry, m.cfg.backoff(0))
}

// enterInvalid drops the ensure effects; a plan in flight still reports.
func (m *Machine) enterInvalid(_ *lfsm.Event) {
	m.out.ask(noWork)
}

func (m *Machine) enterDeleting(_ *lfsm.Event) {
	m.out.ask(cleanupWork)
	m.eng.call.res.CancelInFlight = true
}

func (m *Machine) enterDeleted(_ *lfsm.Event) {
	m.out.ask(noWork)
	m.eng.call.res.Forget = true
}

// afterSpecSeen records that the current generation was acted on. A
// self-transition (a new spec while Creating or Updating, a still-invalid
// edit) re-plans and restarts the state's timeout.
func (m *Machine) afterSpecSeen(e *lfsm.Event) {
	m.st.ObservedGeneration = m.eng.call.facts.Generation
	m.out.changed()
	if e.Src != e.Dst {
		return
	}
	switch e.Dst {
	case Invalid:
		m.st.Reason, m.st.Message = m.eng.call.reason, m.eng.call.message
	case Creating, Updating:
		m.out.ask(ensureWork)
		m.keepTimeout(specEdited)
	}
}

func (m *Machine) afterRetry(e *lfsm.Event) {
	m.out.retried()
	switch e.Dst {
	case Invalid:
		m.out.changed() // only the status write had failed
	default:
		m.out.ask(m.work())
	}
	if e.Dst == Degraded {
		m.st.Attempt++
		m.setTimer(TimerRetry, m.cfg.backoff(m.st.Attempt))
	}
}

// afterReplacePod asks for outdated pods to be deleted: one pod of a
// rollout, or every one that runs nothing. The StatefulSet controller
// recreates them; their pod events drive the next step. A replacement still
// waiting for its plan's result is carried on with the new one.
func (m *Machine) afterReplacePod(e *lfsm.Event) {
	f := &m.eng.call.facts
	refs := f.toReplace(m.out.replaced)
	m.out.replacePods(refs, f.Replace)
	m.roll.stepped = m.roll.stepped || f.ReplaceRunning
	names := make([]string, 0, len(refs))
	for _, p := range refs {
		names = append(names, p.Name)
	}
	reason := ReasonUpdating
	if e.Dst == Creating {
		reason = ReasonCreating
	}
	what := "pod " + names[0]
	if len(names) > 1 {
		what = "pods " + strings.Join(names, ", ")
	}
	m.st.Reason, m.st.Message = reason, fmt.Sprintf("replacing %s (%d outdated)", what, f.Outdated)
	m.out.changed()
}

// afterRestartMember asks Patroni to restart one member whose settings
// wait for a restart. Its member data drive the next step.
func (m *Machine) afterRestartMember(_ *lfsm.Event) {
	f := &m.eng.call.facts
	ref := f.toRestart(m.out.restarted)
	m.out.restartPod(ref)
	m.pauseForRestart(ref)
	m.st.Reason = ReasonRestarting
	m.st.Message = fmt.Sprintf("restarting pod %s: settings pending a restart on %s", ref.Name, strings.Join(f.PendingRestart, ", "))
	m.out.changed()
}

// afterSwitchover asks Patroni to hand the primary's role over before the
// rollout replaces the primary's pod.
func (m *Machine) afterSwitchover(_ *lfsm.Event) {
	s := m.eng.call.facts.Switchover
	m.out.askSwitchover(s)
	m.pauseFor(s)
	m.roll.stepped = true
	m.st.Reason = ReasonSwitchover
	m.st.Message = fmt.Sprintf("switching over from %s to %s before replacing %s", s.From, s.To, s.From)
	m.out.changed()
}

func (m *Machine) afterResync(_ *lfsm.Event) {
	m.out.ask(ensureWork)
	m.setSoftTimer(TimerResync, m.cfg.ResyncPeriod)
}

// afterLossGrace lets podsLost fire in this call: the loss lasted the whole
// grace. fireObserved fires it next, when the loss still holds.
func (m *Machine) afterLossGrace(_ *lfsm.Event) {
	m.eng.call.lossDue = true
}

func (m *Machine) afterEffectsSucceeded(e *lfsm.Event) {
	if e.Dst == Creating || e.Dst == Updating {
		m.resetRetry()
	}
}

// resetRetry ends a backoff after a success: the next failure waits
// RetryBase again.
func (m *Machine) resetRetry() {
	if m.st.Attempt != 0 {
		m.st.Attempt = 0
		m.out.changed()
	}
	m.cancelTimer(TimerRetry)
}

// afterTrouble handles a failed plan or a panic that did not change the
// state: record the cause and retry with backoff. Entering Degraded arms its
// own retry. Either way a retry timer is pending after a failed plan, and a
// failed status write waits for it (outbox invariant 5).
func (m *Machine) afterTrouble(e *lfsm.Event) {
	if e.Src != e.Dst {
		return
	}
	m.st.Reason, m.st.Message = m.eng.call.reason, m.eng.call.message
	m.out.changed()
	// In Degraded the retry that planned these effects already counted
	// the attempt (afterRetry) and so did entering it: the delay runs
	// again from the failure, but counting the failure too would back off
	// four times per cycle instead of doubling.
	counted := e.Dst == Degraded && m.hasTimer(TimerRetry)
	delay := m.cfg.backoff(m.st.Attempt)
	if m.st.Reason == ReasonAdoptionRefused {
		delay = m.cfg.waitDelay(m.st.Attempt)
	}
	m.setTimer(TimerRetry, delay)
	if !counted {
		m.st.Attempt++
	}
}
