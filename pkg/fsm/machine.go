package fsm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	lfsm "github.com/looplab/fsm"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// errGuard cancels an event whose guard does not hold.
var errGuard = errors.New("guard does not hold")

// Engine runs the transitions of many machines, one at a time: it holds the
// configuration and one looplab/fsm instance compiled from Table, which is
// pointed at a machine's state (SetState) before each event. Every
// per-cluster fact lives in the Machine and its status; a looplab/fsm per
// cluster would cost kilobytes of maps per cluster and cache misses on the
// loop's hot path (docs/performance.md). An Engine is not safe for
// concurrent use: each event loop has its own.
type Engine struct {
	cfg Config
	fsm *lfsm.FSM
	cur *Machine // the machine whose event is running
}

// NewEngine compiles Table into a looplab/fsm instance.
func NewEngine(cfg Config) *Engine {
	e := &Engine{cfg: cfg}
	e.compile()
	return e
}

func (e *Engine) compile() {
	on := func(f func(m *Machine, ev *lfsm.Event)) lfsm.Callback {
		return func(_ context.Context, ev *lfsm.Event) { f(e.cur, ev) }
	}
	e.fsm = lfsm.NewFSM(Pending, events, lfsm.Callbacks{
		"before_event":                   on((*Machine).guard),
		"leave_state":                    on((*Machine).leaveState),
		"enter_state":                    on((*Machine).enterState),
		"enter_" + Creating:              on((*Machine).enterCreating),
		"enter_" + Updating:              on((*Machine).enterUpdating),
		"enter_" + Running:               on((*Machine).enterRunning),
		"enter_" + Degraded:              on((*Machine).enterDegraded),
		"enter_" + Invalid:               on((*Machine).enterInvalid),
		"enter_" + Deleting:              on((*Machine).enterDeleting),
		"enter_" + Deleted:               on((*Machine).enterDeleted),
		"after_" + EventCreate:           on((*Machine).afterSpecSeen),
		"after_" + EventSpecChanged:      on((*Machine).afterSpecSeen),
		"after_" + EventInvalidSpec:      on((*Machine).afterSpecSeen),
		"after_" + EventRetry:            on((*Machine).afterRetry),
		"after_" + EventResync:           on((*Machine).afterResync),
		"after_" + EventLossGrace:        on((*Machine).afterLossGrace),
		"after_" + EventReplacePod:       on((*Machine).afterReplacePod),
		"after_" + EventEffectsSucceeded: on((*Machine).afterEffectsSucceeded),
		"after_" + EventEffectsFailed:    on((*Machine).afterTrouble),
		"after_" + EventPanicked:         on((*Machine).afterTrouble),
	})
}

// event runs one looplab/fsm event for m.
func (e *Engine) event(m *Machine, event string) error {
	e.cur = m
	e.fsm.SetState(m.st.State)
	completed := false
	defer func() {
		e.cur = nil
		if !completed {
			// A callback panicked: looplab/fsm may be left mid-transition,
			// refusing every later event. Start afresh; the panic goes on
			// to the loop, which records it on this cluster only.
			e.compile()
		}
	}()
	err := e.fsm.Event(context.Background(), event)
	completed = true
	return err
}

// Config is the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// Machine is the state machine of one cluster. It is not safe for concurrent
// use: the event loop owns it and calls it from one goroutine.
type Machine struct {
	eng *Engine
	cfg *Config
	// st is the status. Its slices and pointers are copy-on-write: a change
	// replaces them, never writes into them, so a plan's snapshot is a
	// shallow copy that later transitions cannot touch.
	st v1.PostgresqlStatus

	// dirty is set when st changed since the last plan took a snapshot.
	dirty bool
	// ensureWanted and cleanupWanted stay set until a plan carrying them
	// succeeds; every plan made meanwhile carries them again, so a plan
	// superseded in the executor's queue loses nothing.
	ensureWanted  bool
	cleanupWanted bool
	cleanupDone   bool
	troubled      bool
	// replaced are the UIDs of the pods last asked to be replaced, and
	// replace those the next plan deletes.
	replaced []string
	replace  []PodRef
	// nudge is the quota version the next plan records on the
	// StatefulSet, nudged the one last asked for (Facts.Nudge).
	nudge, nudged string
	// again re-plans the state's effects on the next observation: the
	// last plan was waiting for something the informers will report.
	again bool

	planSeq      uint64 // ID of the latest plan
	ensurePlan   uint64 // ID of the latest plan carrying Ensure or Cleanup, 0 if done
	statusPlan   uint64 // ID of the latest plan carrying a status snapshot
	statusInPlan bool   // statusPlan has not reported yet
	// statusFailed is set once a plan that wrote only the status (and
	// Events, which never fail a plan) failed, and cleared when a plan
	// carrying the status succeeds: meanwhile the status stays dirty but
	// waits for the retry timer (statusHeld), so an API server that
	// refuses writes is not hammered.
	statusFailed bool

	call call // scratch of the Handle in progress
}

// call is what callbacks record during one Handle.
type call struct {
	facts   Facts
	now     time.Time
	reason  string
	message string
	res     Result
	events  []KubeEvent
}

// New returns the machine of a cluster, resumed from its stored status (nil
// for a new cluster). The status is copied.
func (e *Engine) New(status *v1.PostgresqlStatus) *Machine {
	m := &Machine{eng: e, cfg: &e.cfg}
	if status != nil {
		status.DeepCopyInto(&m.st)
	}
	if !knownState(m.st.State) || m.st.State == Deleted {
		m.st.State = Pending
	}
	return m
}

func knownState(s string) bool {
	for _, k := range States {
		if s == k {
			return true
		}
	}
	return false
}

// State is the current state.
func (m *Machine) State() string { return m.st.State }

// Status returns the machine's status. Callers must not modify it.
func (m *Machine) Status() *v1.PostgresqlStatus { return &m.st }

// Resume is called once after New: it re-arms the timers stored in status
// (a restarted operator keeps the original deadlines) and, since the outcome
// of the previous process's last plan is unknown, asks for the state's
// effects again on the next input.
func (m *Machine) Resume() Result {
	res := Result{From: m.st.State, To: m.st.State, Epoch: m.st.Epoch}
	for _, t := range m.st.Timers {
		res.Timers = append(res.Timers, TimerOp{Name: t.Name, Deadline: t.Deadline.Time})
	}
	switch m.st.State {
	case Creating, Updating, Running, Degraded:
		m.ensureWanted = true
	case Deleting:
		m.cleanupWanted = true
	}
	return res
}

// Handle runs one input through the machine with the facts observed now and
// returns what to do. It never blocks and does no I/O.
func (m *Machine) Handle(in Input, f Facts, now time.Time) Result {
	c := &m.call
	*c = call{facts: f, now: now, events: c.events[:0]}
	c.facts.cleanupDone, c.facts.troubled, c.facts.replaced = m.cleanupDone, m.troubled, m.replaced
	c.facts.lossDue = m.eng.cfg.LossGrace <= 0
	c.res.From = m.st.State
	epoch := m.st.Epoch

	switch in.Kind {
	case TimerFired:
		if !m.takeTimer(in.Timer, in.Epoch) {
			return m.ignore(fmt.Sprintf("stale timer %s (epoch %d, now %d)", in.Timer, in.Epoch, m.st.Epoch))
		}
		reason, msg := "", ""
		if in.Timer == TimerTimeout {
			r, s := stuck(&c.facts)
			reason, msg = ReasonTimeout, fmt.Sprintf("not converged within %s: %s (%s)", m.timeoutFor(m.st.State), s, r)
		}
		m.fire(in.Timer, reason, msg)
	case PlanDone:
		if !m.planDone(in.PlanID, in.Err) {
			return m.ignore(fmt.Sprintf("stale result of plan %d (latest %d)", in.PlanID, m.planSeq))
		}
	case Panic:
		// The panic may have cut a transition short: trust nothing until
		// the retry's effects succeed.
		m.setTroubled(true)
		m.fire(EventPanicked, ReasonPanic, fmt.Sprint(in.Err))
	}
	if in.Kind == Observe && m.again {
		m.again = false
		m.cleanupWanted = m.st.State == Deleting
		m.ensureWanted = !m.cleanupWanted
	}
	m.notePrimary()
	m.observe()
	m.noteNudge()
	m.graceLoss()
	m.project()
	return m.finish(epoch)
}

// planDone accounts for a plan's result. It reports false when the result
// is stale: a newer plan carries everything this one did.
func (m *Machine) planDone(id uint64, err error) bool {
	handled := false
	carriedReplace := (len(m.replace) > 0 || m.nudge != "") && id == m.planSeq
	if carriedReplace {
		if err != nil {
			// Ask again once the retry comes.
			m.replaced, m.nudged = nil, ""
		}
		m.replace, m.nudge = nil, ""
	}
	if id == m.statusPlan && m.statusInPlan {
		m.statusInPlan = false
		if err != nil {
			// The snapshot may not have been written: write it again,
			// the latest one. The error does not say which step
			// failed, but in a plan without ensure, cleanup or a
			// replacement only the status can fail it (Events never
			// do): then hold the write until the retry timer the
			// failure arms has fired (statusHeld). When other effects
			// failed too, nothing new is known about the status: it is
			// written again at once, and held if that write fails.
			m.dirty = true
			if id != m.ensurePlan && !carriedReplace {
				m.statusFailed = true
			}
		} else {
			m.statusFailed = false
			if m.st.State == Invalid {
				// Invalid retries nothing but the status write.
				m.resetRetry()
			}
		}
		handled = true
	}
	switch {
	case id == m.ensurePlan && errors.Is(err, ErrWaiting):
		m.ensurePlan = 0
		m.ensureWanted, m.cleanupWanted, m.again = false, false, true
		m.st.Message = err.Error()
		m.setTimer(TimerRetry, m.cfg.RetryBase)
		return true
	case id == m.ensurePlan:
		m.ensurePlan = 0
		if err != nil {
			// Not again at once: the retry timer plans them, with backoff.
			m.ensureWanted, m.cleanupWanted = false, false
			m.setTroubled(true)
			m.fire(EventEffectsFailed, ReasonEffectsFailed, err.Error())
			return true
		}
		m.setTroubled(false)
		if m.cleanupWanted {
			m.cleanupWanted = false
			m.cleanupDone = true
			m.call.facts.cleanupDone = true
		}
		m.ensureWanted = false
		m.fire(EventEffectsSucceeded, "", "")
		return true
	case id == m.planSeq && err != nil:
		// The latest plan wrote only status or events, or replaced a
		// pod, and failed. As for a failed ensure, trust nothing until a
		// retry's effects succeed: otherwise a Running cluster would go
		// to Degraded and straight back (podsReady) on every failed
		// write, each time with two Events to record and a new plan.
		m.setTroubled(true)
		m.fire(EventEffectsFailed, ReasonEffectsFailed, err.Error())
		return true
	}
	return handled || id == m.planSeq
}

func (m *Machine) setTroubled(v bool) {
	m.troubled, m.call.facts.troubled = v, v
}

func (m *Machine) ignore(why string) Result {
	return Result{From: m.st.State, To: m.st.State, Epoch: m.st.Epoch, Ignored: why}
}

// fire runs one looplab/fsm event. It reports whether the event fired; a
// guard that does not hold or an event the state does not take is not an
// error, just no transition.
func (m *Machine) fire(event, reason, message string) bool {
	m.call.reason, m.call.message = reason, message
	from := m.st.State
	err := m.eng.event(m, event)
	var noTransition lfsm.NoTransitionError
	if err == nil || errors.As(err, &noTransition) {
		m.call.res.Fired = append(m.call.res.Fired, Fired{Event: event, From: from, To: m.st.State})
		return true
	}
	return false
}

// observe fires the fact-driven events whose guards hold, in observeOrder,
// until none does. A few rounds are enough: Pending → Creating → Running is
// the longest chain.
func (m *Machine) observe() {
	f := &m.call.facts
	for round := 0; round < 4 && m.st.State != Deleted; round++ {
		fired := false
		for _, c := range candidates[m.st.State] {
			if c.guard != nil && !c.guard(&m.st, f) {
				continue
			}
			reason, msg := m.observeReason(c.event)
			if m.fire(c.event, reason, msg) {
				fired = true
				break
			}
		}
		if !fired {
			return
		}
	}
}

func (m *Machine) observeReason(event string) (string, string) {
	f := &m.call.facts
	switch event {
	case EventCleanedUp:
		if f.Gone {
			return ReasonCleanupFinished, "resource gone"
		}
		return ReasonCleanupFinished, "objects deleted, finalizer removed"
	case EventDelete:
		return ReasonDeleting, "deletion requested"
	case EventInvalidSpec:
		return ReasonInvalidSpec, f.SpecError
	case EventCreate:
		return ReasonCreating, fmt.Sprintf("creating %d instances", f.Desired)
	case EventSpecChanged:
		return ReasonUpdating, fmt.Sprintf("applying generation %d", f.Generation)
	case EventPodsReady:
		return ReasonReady, fmt.Sprintf("%d/%d instances ready, primary %s", f.Ready, f.Desired, f.Primary)
	}
	return stuck(f)
}

// stuck names why a cluster is not converged, from the concrete cause when
// one was observed.
func stuck(f *Facts) (string, string) {
	switch {
	case f.Stuck != "":
		return f.StuckReason, f.Stuck
	case !f.ObjectsCurrent:
		return "NotConverged", fmt.Sprintf("objects do not match the spec yet, %d/%d instances ready", f.Ready, f.Desired)
	case f.Ready < f.Desired:
		return ReasonPodsNotReady, fmt.Sprintf("%d/%d instances ready", f.Ready, f.Desired)
	}
	if f.NoPrimary != "" {
		return ReasonNoPrimary, f.NoPrimary
	}
	return ReasonNoPrimary, "no pod holds the primary role"
}

func (m *Machine) timeoutFor(state string) time.Duration {
	if state == Updating {
		return m.cfg.UpdateTimeout
	}
	return m.cfg.CreateTimeout
}

// --- callbacks: they only record into m.call and m.st ---

func (m *Machine) guard(e *lfsm.Event) {
	if g := guards[guardKey{e.Event, e.Src}]; g != nil && !g(&m.st, &m.call.facts) {
		e.Cancel(errGuard)
	}
}

// leaveState starts a new epoch: every timer of the old state is dropped.
func (m *Machine) leaveState(_ *lfsm.Event) {
	m.st.Epoch++
	m.st.Timers = nil
	m.st.Attempt = 0
	m.dirty = true
}

func (m *Machine) enterState(e *lfsm.Event) {
	c := &m.call
	now := metav1.NewTime(c.now)
	m.st.State = e.Dst
	m.st.StateSince = &now
	m.st.Reason, m.st.Message = c.reason, c.message
	m.addHistory(v1.Transition{From: e.Src, To: e.Dst, Event: e.Event, Time: now, Reason: c.reason})
	if e.Dst != Deleted {
		warning := e.Dst == Degraded || e.Dst == Invalid
		msg := fmt.Sprintf("%s -> %s on %s", e.Src, e.Dst, e.Event)
		if c.message != "" {
			msg += ": " + c.message
		}
		c.events = append(c.events, KubeEvent{Warning: warning, Reason: e.Dst, Message: msg})
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
	m.dirty = true
}

func (m *Machine) enterCreating(_ *lfsm.Event) {
	m.ensureWanted = true
	m.setTimer(TimerTimeout, m.cfg.CreateTimeout)
}

func (m *Machine) enterUpdating(_ *lfsm.Event) {
	m.ensureWanted = true
	m.setTimer(TimerTimeout, m.cfg.UpdateTimeout)
}

func (m *Machine) enterRunning(_ *lfsm.Event) {
	m.setTimer(TimerResync, m.cfg.ResyncPeriod)
}

func (m *Machine) enterDegraded(_ *lfsm.Event) {
	m.setTimer(TimerRetry, m.cfg.backoff(0))
}

func (m *Machine) enterInvalid(_ *lfsm.Event) {
	m.ensureWanted = false
}

func (m *Machine) enterDeleting(_ *lfsm.Event) {
	m.ensureWanted = false
	m.cleanupWanted = true
	m.call.res.CancelInFlight = true
}

func (m *Machine) enterDeleted(_ *lfsm.Event) {
	m.ensureWanted, m.cleanupWanted = false, false
	m.call.res.Forget = true
}

// afterSpecSeen records that the current generation was acted on. A
// self-transition (a new spec while Creating or Updating, a still-invalid
// edit) re-plans and restarts the state's timeout.
func (m *Machine) afterSpecSeen(e *lfsm.Event) {
	m.st.ObservedGeneration = m.call.facts.Generation
	m.dirty = true
	if e.Src != e.Dst {
		return
	}
	switch e.Dst {
	case Invalid:
		m.st.Reason, m.st.Message = m.call.reason, m.call.message
	case Creating, Updating:
		m.ensureWanted = true
		m.setTimer(TimerTimeout, m.timeoutFor(e.Dst))
	}
}

func (m *Machine) afterRetry(e *lfsm.Event) {
	switch e.Dst {
	case Deleting:
		m.cleanupWanted = true
	case Invalid:
		m.dirty = true // only the status write had failed
	default:
		m.ensureWanted = true
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
	f := &m.call.facts
	refs := f.toReplace()
	// The UIDs asked for earlier are remembered while the cache may
	// still show their pods, and forgotten once it does not.
	var replaced []string
	for _, uid := range m.replaced {
		if slices.ContainsFunc(f.Replace, func(p PodRef) bool { return p.UID == uid }) {
			replaced = append(replaced, uid)
		}
	}
	names := make([]string, 0, len(refs))
	for _, p := range refs {
		replaced = append(replaced, p.UID)
		names = append(names, p.Name)
	}
	m.replaced, f.replaced = replaced, replaced
	m.replace = append(slices.Clone(m.replace), refs...)
	reason := ReasonUpdating
	if e.Dst == Creating {
		reason = ReasonCreating
	}
	what := "pod " + names[0]
	if len(names) > 1 {
		what = "pods " + strings.Join(names, ", ")
	}
	m.st.Reason, m.st.Message = reason, fmt.Sprintf("replacing %s (%d outdated)", what, f.Outdated)
	m.dirty = true
}

// noteNudge asks for the StatefulSet to be nudged once per change of the
// namespace's quotas while a quota keeps its pods from being created
// (Facts.Nudge). It is no transition: the state stays, and the nudge rides
// on the next plan.
func (m *Machine) noteNudge() {
	f := &m.call.facts
	if f.Nudge == "" || f.Nudge == m.nudged {
		return
	}
	switch m.st.State {
	case Creating, Running, Updating, Degraded:
		m.nudge, m.nudged = f.Nudge, f.Nudge
	}
}

func (m *Machine) afterResync(_ *lfsm.Event) {
	m.ensureWanted = true
	m.setTimer(TimerResync, m.cfg.ResyncPeriod)
}

// afterLossGrace lets podsLost fire in this call: the loss lasted the whole
// grace. observe fires it next, when the loss still holds.
func (m *Machine) afterLossGrace(_ *lfsm.Event) {
	m.call.facts.lossDue = true
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
		m.dirty = true
	}
	m.cancelTimer(TimerRetry)
}

// afterTrouble handles a failed plan or a panic that did not change the
// state: record the cause and retry with backoff. Entering Degraded arms its
// own retry. Either way a retry timer is pending after a failed plan, and a
// failed status write waits for it (statusHeld).
func (m *Machine) afterTrouble(e *lfsm.Event) {
	if e.Src != e.Dst {
		return
	}
	m.st.Reason, m.st.Message = m.call.reason, m.call.message
	m.dirty = true
	// In Degraded the retry that planned these effects already counted
	// the attempt (afterRetry) and so did entering it: the delay runs
	// again from the failure, but counting the failure too would back off
	// four times per cycle instead of doubling.
	counted := e.Dst == Degraded && m.hasTimer(TimerRetry)
	m.setTimer(TimerRetry, m.cfg.backoff(m.st.Attempt))
	if !counted {
		m.st.Attempt++
	}
}

// --- the primary ---

// notePrimary follows the primary from one observation to the next and
// records a change of it: a switchover (A, then B) or a failover (A, then
// none while the old leader is not Ready, then B) gives one "A -> B".
//
// status.primary follows the facts (project), so a failover clears it in
// between; status.lastPrimary keeps A meanwhile, until a primary is known
// again. It is status rather than a field of the Machine so that a change
// spanning a restart of the operator, or a handover of its leadership, is
// still recorded; and it is set only while no primary is known, so it
// shows exactly when it says something. The first primary of a cluster,
// and the same pod again, are no change.
//
// A change is no FSM transition: the state stays, and looplab/fsm refuses
// a self-transition (NoTransitionError). It is recorded here, before the
// fact-driven events fire, so that a failover that also lets the cluster
// converge reads "primaryChanged, then podsReady" in the history.
func (m *Machine) notePrimary() {
	f, st := &m.call.facts, &m.st
	if st.State == Deleted {
		return
	}
	last := st.Primary
	if last == "" {
		last = st.LastPrimary
	}
	if f.Primary == "" {
		if st.Primary != "" {
			st.LastPrimary = st.Primary
			m.dirty = true
		}
		return
	}
	if last != "" && last != f.Primary {
		m.primaryChanged(last, f.Primary)
	}
	if st.LastPrimary != "" {
		st.LastPrimary = ""
		m.dirty = true
	}
}

// primaryChanged records that the primary moved from one pod to another:
// a history entry from and to the current state, a Normal Kubernetes
// Event, and a Fired entry (so the transitions metric counts switchovers
// and failovers). A Running cluster's message names the primary: it is
// brought up to date.
func (m *Machine) primaryChanged(from, to string) {
	c, st := &m.call, &m.st
	msg := fmt.Sprintf("primary changed from %s to %s", from, to)
	m.addHistory(v1.Transition{From: st.State, To: st.State, Event: EventPrimaryChanged, Time: metav1.NewTime(c.now),
		Reason: ReasonPrimaryChanged, Message: msg})
	c.events = append(c.events, KubeEvent{Reason: ReasonPrimaryChanged, Message: msg})
	c.res.Fired = append(c.res.Fired, Fired{Event: EventPrimaryChanged, From: st.State, To: st.State})
	if st.State == Running && st.Reason == ReasonReady {
		_, st.Message = m.observeReason(EventPodsReady)
	}
}

// --- the loss grace ---

// graceLoss gives a Running cluster that lost a Ready pod or its primary
// Config.LossGrace to recover before podsLost takes it to Degraded. A
// planned switchover leaves no primary while Patroni hands its leader lock
// over, and the former primary then restarts PostgreSQL as a replica, not
// Ready for seconds; a failed-over primary that rejoins (pg_rewind) does
// the same. Neither is worth a Degraded state, two history entries and two
// Events, each time.
//
// It runs after observe, so podsLost has had its chance: a cluster still
// Running here is either converged or within its grace.
//  1. Converged: a pending grace is cancelled, and the reason and message
//     are Running's again. No history entry, no Event: at most a status
//     write.
//  2. A loss: the lossGrace timer is armed once, when the loss is first
//     seen; its deadline stays while the loss lasts, however its cause
//     changes (a switchover goes from "no primary" to "1/2 instances
//     ready"). The timer is in status like the others, so a restarted
//     operator re-arms it with its deadline (Resume).
//  3. Meanwhile status tells the truth: the ready count and the primary
//     follow the facts (project), the reason and message name what is
//     missing, and the Ready condition is False (project); the state is
//     still Running, and the Degraded condition still False.
//
// When the timer fires, afterLossGrace lets podsLost fire if the loss
// still holds, with the reason and message it always had. A loss with a
// concrete cause (Facts.Stuck) does not wait: podsLost's guard fires it at
// once, since an unschedulable pod or a crash loop is no blip.
func (m *Machine) graceLoss() {
	st, f := &m.st, &m.call.facts
	if st.State != Running {
		return
	}
	if f.converged() {
		m.cancelTimer(TimerLossGrace)
		if st.Reason != ReasonReady {
			st.Reason, st.Message = m.observeReason(EventPodsReady)
			m.dirty = true
		}
		return
	}
	if !m.hasTimer(TimerLossGrace) {
		m.setTimer(TimerLossGrace, m.cfg.LossGrace)
	}
	reason, msg := stuck(f)
	msg = fmt.Sprintf("%s; Degraded unless it recovers within the %s loss grace", msg, m.cfg.LossGrace)
	if st.Reason != reason || st.Message != msg {
		st.Reason, st.Message = reason, msg
		m.dirty = true
	}
}

// --- timers ---

// setTimer arms (or re-arms) a timer d from now, in the current epoch. The
// deadline is rounded up to a whole second, the precision status keeps, so
// a resumed timer never fires early.
func (m *Machine) setTimer(name string, d time.Duration) {
	deadline := m.call.now.Add(d)
	if r := deadline.Truncate(time.Second); !r.Equal(deadline) {
		deadline = r.Add(time.Second)
	}
	t := v1.Timer{Name: name, Deadline: metav1.NewTime(deadline), Epoch: m.st.Epoch}
	m.dirty = true
	m.call.res.Timers = append(m.call.res.Timers, TimerOp{Name: name, Deadline: deadline})
	timers := make([]v1.Timer, 0, len(m.st.Timers)+1)
	replaced := false
	for _, old := range m.st.Timers {
		if old.Name == name {
			old, replaced = t, true
		}
		timers = append(timers, old)
	}
	if !replaced {
		timers = append(timers, t)
	}
	m.st.Timers = timers
}

// dropTimer removes the timer name from status (copy-on-write) and reports
// whether it was there.
func (m *Machine) dropTimer(name string) bool {
	for i := range m.st.Timers {
		if m.st.Timers[i].Name == name {
			m.st.Timers = slices.Delete(slices.Clone(m.st.Timers), i, i+1)
			m.dirty = true
			return true
		}
	}
	return false
}

func (m *Machine) cancelTimer(name string) {
	if m.dropTimer(name) {
		m.call.res.Timers = append(m.call.res.Timers, TimerOp{Name: name, Cancel: true})
	}
}

// hasTimer reports whether the timer name is pending (in the current
// epoch: a state change drops every timer).
func (m *Machine) hasTimer(name string) bool {
	for i := range m.st.Timers {
		if m.st.Timers[i].Name == name {
			return true
		}
	}
	return false
}

// takeTimer removes the pending timer name of the given epoch and reports
// whether it was pending: a fired timer that is not is stale.
func (m *Machine) takeTimer(name string, epoch int64) bool {
	return epoch == m.st.Epoch && m.dropTimer(name)
}

// --- status projection and the plan ---

// project copies the observed counts into status and keeps the conditions in
// line with the state.
func (m *Machine) project() {
	if m.st.State == Deleted {
		return
	}
	f := &m.call.facts
	st := &m.st
	if st.DesiredInstances != f.Desired || st.ReadyInstances != f.Ready || st.Primary != f.Primary || st.Ready == "" {
		st.DesiredInstances, st.ReadyInstances, st.Primary = f.Desired, f.Ready, f.Primary
		st.Ready = fmt.Sprintf("%d/%d", f.Ready, f.Desired)
		m.dirty = true
	}
	// In Degraded the message follows the live cause, so a user sees the
	// current reason, not the one of an hour ago.
	if st.State == Degraded && f.Stuck != "" && (st.Reason != f.StuckReason || st.Message != f.Stuck) {
		st.Reason, st.Message = f.StuckReason, f.Stuck
		m.dirty = true
	}
	if st.State == Creating || st.State == Updating {
		m.showCause()
	}
	state := st.State
	m.condition(v1.ConditionReady, state == Running && !m.hasTimer(TimerLossGrace), st.Reason, st.Message)
	m.condition(v1.ConditionProgressing, state == Creating || state == Updating || state == Deleting, st.Reason, st.Message)
	m.condition(v1.ConditionDegraded, state == Degraded || state == Invalid, st.Reason, st.Message)
}

// showCause keeps the reason and message of Creating and Updating, which
// `kubectl get pg` shows, on what holds the cluster back now:
//  1. a failed plan or a panic keeps its own reason until a retry's
//     effects succeed (troubled): the user must see pgloop's own trouble;
//  2. a replacement in flight keeps "replacing pod ...": the pods it
//     names are the ones whose cause the facts may still show;
//  3. a concrete cause of stuck pods (Facts.Stuck) is shown as soon as it
//     is observed, while the state waits for its timeout;
//  4. once that cause is gone, the state's own words come back.
func (m *Machine) showCause() {
	st, f := &m.st, &m.call.facts
	if m.troubled || len(m.replace) > 0 {
		return
	}
	reason, msg := f.StuckReason, f.Stuck
	if f.Stuck == "" {
		if st.Reason == ReasonCreating || st.Reason == ReasonUpdating {
			return
		}
		reason, msg = m.progress()
	}
	if st.Reason != reason || st.Message != msg {
		st.Reason, st.Message = reason, msg
		m.dirty = true
	}
}

// progress is the reason and message of Creating or Updating when nothing
// holds the cluster back.
func (m *Machine) progress() (string, string) {
	if m.st.State == Creating {
		return m.observeReason(EventCreate)
	}
	return m.observeReason(EventSpecChanged)
}

func (m *Machine) condition(typ string, on bool, reason, message string) {
	status := metav1.ConditionFalse
	if on {
		status = metav1.ConditionTrue
	}
	if reason == "" {
		reason = m.st.State
	}
	if c := meta.FindStatusCondition(m.st.Conditions, typ); c != nil &&
		c.Status == status && c.Reason == reason && c.Message == message && c.ObservedGeneration == m.st.ObservedGeneration {
		return
	}
	m.st.Conditions = slices.Clone(m.st.Conditions)
	meta.SetStatusCondition(&m.st.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message,
		ObservedGeneration: m.st.ObservedGeneration, LastTransitionTime: metav1.NewTime(m.call.now),
	})
	m.dirty = true
}

// statusHeld reports whether a status write must wait: the last one failed
// and the retry timer armed after the failure has not fired yet. The write
// is not lost (the status stays dirty) and it is the latest snapshot that
// goes, with the retry's plan, or with any plan made meanwhile for another
// reason (ensure or cleanup effects, a pod to replace, Events of a state
// change); what does not happen is a plan for the status alone, so a write
// that keeps failing is retried with the backoff of the retry timer, not as
// fast as its failures come back.
//
// Every failure of a plan carrying the status fires effectsFailed, which
// arms the retry timer (afterTrouble, or entering Degraded from Running)
// and sets troubled, so podsReady waits for a retry's success. A state
// change drops the timer, ending the hold, but it records an Event, so its
// plan is made anyway: Running -> Degraded on a failed write is one such
// plan, once.
func (m *Machine) statusHeld() bool {
	return m.statusFailed && m.hasTimer(TimerRetry)
}

// finish turns what the callbacks recorded into a Result and a Plan.
func (m *Machine) finish(epoch int64) Result {
	c := &m.call
	res := c.res
	res.To, res.Epoch = m.st.State, m.st.Epoch
	if res.Epoch != epoch {
		// The loop drops every timer of the old epoch; re-send the ones
		// set in this one, once each, with their final deadlines.
		res.Timers = res.Timers[:0]
		for _, t := range m.st.Timers {
			res.Timers = append(res.Timers, TimerOp{Name: t.Name, Deadline: t.Deadline.Time})
		}
	}
	if m.st.State == Deleted {
		return res
	}
	// No plan when nothing asks for one: (1) no ensure, cleanup, Event or
	// replacement, and (2) no status to write, or only one that waits for
	// the retry timer.
	statusDue := m.dirty || m.statusInPlan
	if !m.ensureWanted && !m.cleanupWanted && len(c.events) == 0 && len(m.replace) == 0 && m.nudge == "" && (!statusDue || m.statusHeld()) {
		return res
	}
	m.planSeq++
	// A pending replacement rides on every plan until one carrying it
	// reports (deleting with a UID precondition is idempotent), so a plan
	// superseded in the executor's queue loses nothing.
	p := &Plan{ID: m.planSeq, Ensure: m.ensureWanted, Cleanup: m.cleanupWanted, ReplacePods: m.replace, Nudge: m.nudge}
	if len(c.events) > 0 {
		p.Events = append([]KubeEvent(nil), c.events...)
	}
	if statusDue {
		// A plan still carrying an older snapshot may be superseded in
		// the executor's queue: carry the newest one again. A shallow
		// copy is a snapshot: st is copy-on-write.
		snap := m.st
		p.Status = &snap
		m.statusPlan, m.statusInPlan, m.dirty = p.ID, true, false
	}
	if p.Ensure || p.Cleanup {
		m.ensurePlan = p.ID
	}
	res.Plan = p
	return res
}
