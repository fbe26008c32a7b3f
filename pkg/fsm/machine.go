package fsm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	lfsm "github.com/looplab/fsm"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

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
		"after_" + EventRestartMember:    on((*Machine).afterRestartMember),
		"after_" + EventSwitchover:       on((*Machine).afterSwitchover),
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
	// st is the status, timers included. Its slices and pointers are
	// copy-on-write: a change replaces them, never writes into them, so a
	// plan's snapshot is a shallow copy that later transitions cannot
	// touch.
	st v1.PostgresqlStatus
	// out is what the machine remembers of its plans (outbox.go).
	out outbox
	// roll is its part in the fleet's rollout budget (rollout.go).
	roll rollout
	// windowWait: a rollout step or a restart waits for a maintenance
	// window (noteWindow).
	windowWait bool
	// soft are the timers of the current epoch that status does not keep:
	// the resync and the status flush. Writing them would cost a status
	// write each time they are armed; a restarted operator arms them
	// afresh (Resume) instead.
	soft []v1.Timer
	// waits counts the effects that reported waiting (ErrWaiting) one
	// after another in this state: the retry that asks again in case no
	// observation does backs off with it. Not kept in status: a restarted
	// operator asks again soon, as after any restart.
	waits int32

	call call // scratch of the Handle in progress
}

// call is what callbacks record during one Handle.
type call struct {
	facts   Facts
	now     time.Time
	reason  string
	message string
	res     Result
	events  []Record
	// inFlight is Input.InFlight.
	inFlight uint64
	// lossDue: a loss in Running may go Degraded now, the lossGrace
	// timer having fired in this call, or the grace being 0.
	lossDue bool
}

// memory is the read-only view of what the machine remembers that guards
// decide on.
func (m *Machine) memory() Memory {
	return Memory{CleanupDone: m.out.cleanupDone, Troubled: m.out.troubled, Replaced: m.out.replaced, LossDue: m.call.lossDue,
		Restarted: m.out.restarted, SwitchedFrom: m.out.switchedFrom,
		EnsurePending: m.out.want == ensureEffects || m.out.again}
}

// effects are the state's own effects: the cleanup in Deleting, the ensure
// effects elsewhere.
func (m *Machine) effects() effects {
	if m.st.State == Deleting {
		return cleanupEffects
	}
	return ensureEffects
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
	if m.st.Reason == ReasonMaintenanceWindow {
		// Waiting for a maintenance window: its timeout was cancelled
		// (rollout.go, noteWindow).
		m.windowWait = true
	}
	if m.st.Reason == ReasonRolloutQueued {
		// Blocked on the rollout budget: its timeout was cancelled, and
		// is armed again once it is no longer blocked (rollout.go).
		m.roll.state, m.roll.blocked = Queued, true
	}
	// Before soft timers, status kept the resync's deadline: Resume arms
	// it afresh, and the next write forgets the stored one.
	m.st.Timers = slices.DeleteFunc(slices.Clone(m.st.Timers), func(t v1.Timer) bool { return softTimer(t.Name) })
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
		m.call.now = now
		m.setSoftTimer(TimerResync, m.nextResync(now))
		res.Timers = append(res.Timers, m.call.res.Timers...)
		m.call.res.Timers = nil
	}
	switch m.st.State {
	case Creating, Updating, Running, Degraded, Deleting:
		m.out.ask(m.effects())
	}
	return res
}

// Handle runs one input through the machine with the facts observed now and
// returns what to do. It never blocks and does no I/O.
func (m *Machine) Handle(in Input, f Facts, now time.Time) Result {
	c := &m.call
	*c = call{facts: f, now: now, events: c.events[:0], lossDue: m.eng.cfg.LossGrace <= 0, inFlight: in.InFlight}
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
		m.out.observed(m.effects())
	}
	m.out.keep(c.facts.PendingRestart, c.facts.Primary)
	m.adoptBootstrap()
	m.notePrimary()
	m.observe()
	m.adoptBootstrap()
	m.noteNudge()
	m.noteInDatabase()
	m.graceLoss()
	m.noteRollout()
	m.noteWindow()
	m.project()
	return m.finish(epoch)
}

// planDone accounts for a plan's result. It reports false when the result
// is stale: a newer plan carries everything this one did.
func (m *Machine) planDone(id uint64, err error) bool {
	r := m.out.report(id, err)
	if r.stale {
		return false
	}
	if r.written && m.st.State == Invalid {
		// Invalid retries nothing but the status write.
		m.resetRetry()
	}
	var part *PartError
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
		m.setTimer(TimerRetry, m.cfg.waitDelay(m.waits))
		m.waits = min(m.waits+1, 3)
		if part != nil {
			m.partCondition(part, ReasonSyncPending, ReasonConfigPending)
		}
	case failed:
		m.waits = 0
		if part != nil {
			m.partCondition(part, ReasonSyncFailed, ReasonConfigFailed)
		}
		m.fire(EventEffectsFailed, ReasonEffectsFailed, err.Error())
	case succeeded:
		m.waits = 0
		if r.inDatabase != nil {
			m.recordInDatabase(r.inDatabase)
		}
		m.fire(EventEffectsSucceeded, "", "")
	}
	m.armTimeout(r.outcome)
	return true
}

func (m *Machine) ignore(why string) Result {
	return Result{From: m.st.State, To: m.st.State, Epoch: m.st.Epoch, Ignored: why, Rollout: m.roll.state}
}

// fire runs one event when its guard holds. It reports whether the event
// fired; a guard that does not hold or an event the state does not take is
// not an error, just no transition.
func (m *Machine) fire(event, reason, message string) bool {
	if g := guards[guardKey{event, m.st.State}]; g != nil && !g(&m.st, &m.call.facts, m.memory()) {
		return false
	}
	return m.transition(event, reason, message)
}

// transition runs one looplab/fsm event whose guard holds. Guards run
// here, in the machine, once per event: not again in a looplab/fsm
// callback.
func (m *Machine) transition(event, reason, message string) bool {
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
// the longest chain. Each guard runs once per try.
func (m *Machine) observe() {
	for round := 0; round < 4 && m.st.State != Deleted; round++ {
		fired := false
		for _, c := range candidates[m.st.State] {
			if c.guard != nil && !c.guard(&m.st, &m.call.facts, m.memory()) {
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
		if m.st.State == Invalid || m.st.State == Creating {
			// specChanged leads to Creating from there.
			return m.observeReason(EventCreate)
		}
		return ReasonUpdating, fmt.Sprintf("applying generation %d", f.Generation)
	case EventPodsReady:
		return ReasonReady, fmt.Sprintf("%d/%d instances ready, primary %s", f.Ready, f.Desired, f.Primary)
	case EventOutOfSync:
		return ReasonOutOfSync, m.outOfSync()
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

// --- callbacks: they only record into m.call, m.st and m.out ---

// leaveState starts a new epoch: every timer of the old state is dropped.
func (m *Machine) leaveState(_ *lfsm.Event) {
	m.st.Epoch++
	m.st.Timers = nil
	m.soft = nil
	m.st.Attempt = 0
	m.out.changed()
}

func (m *Machine) enterState(e *lfsm.Event) {
	c := &m.call
	now := metav1.NewTime(c.now)
	m.st.State = e.Dst
	m.st.StateSince = &now
	m.waits = 0
	m.st.Reason, m.st.Message = c.reason, c.message
	m.addHistory(v1.Transition{From: e.Src, To: e.Dst, Event: e.Event, Time: now, Reason: c.reason})
	m.out.changed()
	if e.Dst != Deleted {
		warning := e.Dst == Degraded || e.Dst == Invalid
		msg := fmt.Sprintf("%s -> %s on %s", e.Src, e.Dst, e.Event)
		if c.message != "" {
			msg += ": " + c.message
		}
		c.events = append(c.events, Record{Warning: warning, Reason: e.Dst, Message: msg})
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
	m.later()
}

// enterCreating and enterUpdating ask for the objects; the state's
// timeout is armed when the effects first report (armTimeout).
func (m *Machine) enterCreating(_ *lfsm.Event) {
	m.out.ask(ensureEffects)
}

func (m *Machine) enterUpdating(_ *lfsm.Event) {
	m.out.ask(ensureEffects)
}

// armTimeout arms the timeout of Creating or Updating when the effects of
// the state first report, whatever their outcome. It measures the cluster,
// not the queue in front of it: a cluster whose plan waited behind a
// thousand others for a worker and the API's rate is not timed out for
// that wait. A spec edit meanwhile starts it again (afterSpecSeen).
//
// A cluster blocked on the fleet's rollout budget or waiting for a
// maintenance window has no timeout: it is armed once it no longer is
// (noteRollout, noteWindow).
func (m *Machine) armTimeout(o outcome) {
	if o == noOutcome || (m.st.State != Creating && m.st.State != Updating) || m.hasTimer(TimerTimeout) || m.roll.blocked || m.windowWait {
		return
	}
	m.setTimer(TimerTimeout, m.timeoutFor(m.st.State))
}

func (m *Machine) enterRunning(_ *lfsm.Event) {
	m.setSoftTimer(TimerResync, m.cfg.ResyncPeriod)
}

func (m *Machine) enterDegraded(_ *lfsm.Event) {
	m.setTimer(TimerRetry, m.cfg.backoff(0))
}

// enterInvalid drops the ensure effects; a plan in flight still reports.
func (m *Machine) enterInvalid(_ *lfsm.Event) {
	m.out.ask(noEffects)
}

func (m *Machine) enterDeleting(_ *lfsm.Event) {
	m.out.ask(cleanupEffects)
	m.call.res.CancelInFlight = true
}

func (m *Machine) enterDeleted(_ *lfsm.Event) {
	m.out.ask(noEffects)
	m.call.res.Forget = true
}

// afterSpecSeen records that the current generation was acted on. A
// self-transition (a new spec while Creating or Updating, a still-invalid
// edit) re-plans and restarts the state's timeout.
func (m *Machine) afterSpecSeen(e *lfsm.Event) {
	m.st.ObservedGeneration = m.call.facts.Generation
	m.out.changed()
	if e.Src != e.Dst {
		return
	}
	switch e.Dst {
	case Invalid:
		m.st.Reason, m.st.Message = m.call.reason, m.call.message
	case Creating, Updating:
		m.out.ask(ensureEffects)
		m.cancelTimer(TimerTimeout)
	}
}

func (m *Machine) afterRetry(e *lfsm.Event) {
	m.out.retried()
	switch e.Dst {
	case Invalid:
		m.out.changed() // only the status write had failed
	default:
		m.out.ask(m.effects())
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
	f := &m.call.facts
	ref := f.toRestart(m.out.restarted)
	m.out.restartPod(ref)
	m.st.Reason = ReasonRestarting
	m.st.Message = fmt.Sprintf("restarting pod %s: settings pending a restart on %s", ref.Name, strings.Join(f.PendingRestart, ", "))
	m.out.changed()
}

// afterSwitchover asks Patroni to hand the primary's role over before the
// rollout replaces the primary's pod.
func (m *Machine) afterSwitchover(_ *lfsm.Event) {
	s := m.call.facts.Switchover
	m.out.askSwitchover(s)
	m.roll.stepped = true
	m.st.Reason = ReasonSwitchover
	m.st.Message = fmt.Sprintf("switching over from %s to %s before replacing %s", s.From, s.To, s.From)
	m.out.changed()
}

// noteNudge asks for the StatefulSet to be nudged once per change of the
// namespace's quotas while a quota keeps its pods from being created
// (Facts.Nudge). It is no transition: the state stays, and the nudge rides
// on the next plan.
func (m *Machine) noteNudge() {
	switch m.st.State {
	case Creating, Running, Updating, Degraded:
		m.out.askNudge(m.call.facts.Nudge)
	}
}

// --- inside PostgreSQL and Patroni ---

// adoptBootstrap records as applied what Patroni's bootstrap makes, when
// nothing was ever applied (Facts.Want.Bootstrap): no users nor databases,
// and, while Creating, the configuration the StatefulSet bootstraps with.
// Such a cluster needs no SQL or Patroni call.
func (m *Machine) adoptBootstrap() {
	st, f := &m.st, &m.call.facts
	switch st.State {
	case Creating, Running, Updating, Degraded:
	default:
		return
	}
	// Derived from the StatefulSet, which a restarted operator finds
	// again: the write may wait.
	if st.Database == nil && f.Sync.Bootstrap && f.Sync.Hash != "" {
		st.Database = &v1.DatabaseStatus{Hash: f.Sync.Hash}
		m.later()
	}
	if st.Config == nil && st.State == Creating && f.Config.Bootstrap && f.Config.Hash != "" {
		st.Config = &v1.ConfigStatus{Hash: f.Config.Hash}
		m.later()
	}
}

// inDatabaseWork is the in-database work a plan of ensure effects carries
// now: what is due, once every pod is Ready and the primary's Patroni
// publishes where to reach it.
func (m *Machine) inDatabaseWork() *InDatabase {
	st, f := &m.st, &m.call.facts
	if f.Target == "" || !f.converged() {
		return nil
	}
	var w InDatabase
	if SyncDue(st, f) {
		w.Sync = f.Sync.Hash
	}
	if ConfigDue(st, f) {
		w.Config = f.Config.Hash
		if st.Config != nil {
			for _, p := range st.Config.Parameters {
				if !slices.Contains(f.ConfigParameters, p) {
					w.RemoveParameters = append(w.RemoveParameters, p)
				}
			}
		}
	}
	if w.Sync == "" && w.Config == "" {
		return nil
	}
	return &w
}

// noteInDatabase asks for the ensure effects, which carry the in-database
// work, when it is due and nothing else is on its way: not while a plan of
// effects is wanted or in flight, nor after a failure (the retry timer asks,
// with backoff), nor while waiting (the next observation asks).
func (m *Machine) noteInDatabase() {
	switch m.st.State {
	case Creating, Updating, Degraded:
	default:
		return
	}
	o := &m.out
	if o.want != noEffects || o.effectsPlan != 0 || o.troubled || o.again || m.inDatabaseWork() == nil {
		return
	}
	o.ask(ensureEffects)
}

// recordInDatabase records the in-database work of a plan whose effects
// succeeded as applied.
func (m *Machine) recordInDatabase(w *InDatabase) {
	st, f := &m.st, &m.call.facts
	now := metav1.NewTime(m.call.now)
	if w.Sync != "" {
		db := &v1.DatabaseStatus{Hash: w.Sync, SyncedAt: &now, SyncRequest: f.SyncRequest}
		for _, u := range f.Users {
			db.Roles = append(db.Roles, v1.RoleStatus{Name: u, SyncedAt: now})
		}
		db.Databases = slices.Clone(f.Databases)
		db.Retained = retained(st.Database, f)
		st.Database = db
	}
	if w.Config != "" {
		cfg := &v1.ConfigStatus{Hash: w.Config, AppliedAt: &now, Parameters: slices.Clone(f.ConfigParameters)}
		if st.Config != nil {
			cfg.PendingRestart = st.Config.PendingRestart
		}
		st.Config = cfg
	}
	m.out.changed()
}

// retained lists the roles and databases applied before (or retained
// before) that the spec no longer has: pgloop never drops them.
func retained(prev *v1.DatabaseStatus, f *Facts) []string {
	if prev == nil {
		return nil
	}
	var out []string
	add := func(kind, name string, current []string) {
		item := kind + " " + name
		if !slices.Contains(current, name) && !slices.Contains(out, item) {
			out = append(out, item)
		}
	}
	for _, r := range prev.Roles {
		add("role", r.Name, f.Users)
	}
	for _, d := range prev.Databases {
		add("database", d, f.Databases)
	}
	for _, item := range prev.Retained {
		kind, name, _ := strings.Cut(item, " ")
		current := f.Users
		if kind == "database" {
			current = f.Databases
		}
		add(kind, name, current)
	}
	slices.Sort(out)
	return out
}

// outOfSync says what a Running cluster that serves updates: its objects
// and pods, and what it applies inside PostgreSQL.
func (m *Machine) outOfSync() string {
	st, f := &m.st, &m.call.facts
	var what []string
	switch {
	case f.ObjectsCurrent:
	case f.Outdated > 0:
		what = append(what, fmt.Sprintf("outdated pods to replace (%d)", f.Outdated))
	default:
		what = append(what, "objects to update")
	}
	if SyncDue(st, f) {
		what = append(what, "roles and databases to sync")
	}
	if ConfigDue(st, f) {
		what = append(what, "Patroni configuration to apply")
	}
	if len(f.PendingRestart) > 0 {
		what = append(what, "restart pending on "+strings.Join(f.PendingRestart, ", "))
	}
	if len(f.Volumes) > 0 {
		what = append(what, volumesMessage(f))
	}
	if f.Pooler != "" {
		what = append(what, f.Pooler)
	}
	msg := strings.Join(what, "; ")
	if f.NoTarget != "" {
		msg += " (waiting: " + f.NoTarget + ")"
	}
	return msg
}

// volumesMessage says where the growth of the volumes is, claim by claim.
func volumesMessage(f *Facts) string {
	claims := make([]string, len(f.Volumes))
	for i, c := range f.Volumes {
		have := c.Capacity
		if have == "" {
			have = "?"
		}
		claims[i] = fmt.Sprintf("%s %s of %s (%s)", c.Name, have, f.VolumeSize, c.Phase)
		if c.Message != "" && c.Phase != v1.ClaimToResize && c.Phase != v1.ClaimResizing {
			claims[i] = fmt.Sprintf("%s %s of %s (%s: %s)", c.Name, have, f.VolumeSize, c.Phase, c.Message)
		}
	}
	return "volumes growing to " + f.VolumeSize + ": " + strings.Join(claims, ", ")
}

// inDatabaseConditions keeps RolesSynced and ConfigApplied in line with
// what is applied. A failure or a wait reported by a plan (partCondition)
// stays until what was due is applied, or a new cause is known.
func (m *Machine) inDatabaseConditions() {
	st, f := &m.st, &m.call.facts
	why := f.NoTarget
	if !f.converged() {
		why = "waiting for every instance to be Ready"
	} else if why == "" {
		why = "applying"
	}
	switch {
	case SyncDue(st, f):
		m.pendingCondition(v1.ConditionRolesSynced, ReasonSyncPending, "roles and databases not synced yet: "+why)
	case st.Database != nil:
		m.condition(v1.ConditionRolesSynced, true, ReasonSynced, synced(st.Database))
	}
	switch {
	case ConfigDue(st, f):
		m.pendingCondition(v1.ConditionConfigApplied, ReasonConfigPending, "Patroni configuration not applied yet: "+why)
	case len(f.PendingRestart) > 0:
		m.condition(v1.ConditionConfigApplied, false, ReasonRestartPending,
			"settings pending a restart on "+strings.Join(f.PendingRestart, ", ")+": restarting one member at a time, replicas first")
	case st.Config != nil:
		msg := "the spec's configuration, which the cluster was bootstrapped with"
		if st.Config.AppliedAt != nil {
			msg = "applied to every member at " + st.Config.AppliedAt.UTC().Format(time.RFC3339)
		}
		m.condition(v1.ConditionConfigApplied, true, ReasonApplied, msg)
	}
	if st.Config != nil && !slices.Equal(st.Config.PendingRestart, f.PendingRestart) {
		cfg := *st.Config
		cfg.PendingRestart = slices.Clone(f.PendingRestart)
		st.Config = &cfg
		m.out.changed()
	}
}

// pendingCondition sets a condition False with a pending reason, unless a
// plan reported a failure or a wait on it that still stands.
func (m *Machine) pendingCondition(typ, reason, message string) {
	if c := meta.FindStatusCondition(m.st.Conditions, typ); c != nil && c.Status == metav1.ConditionFalse && c.Reason != reason {
		return
	}
	m.condition(typ, false, reason, message)
}

// partCondition reports a failure or a wait of the in-database work on its
// condition.
func (m *Machine) partCondition(e *PartError, rolesReason, configReason string) {
	switch e.Part {
	case PartRoles:
		m.condition(v1.ConditionRolesSynced, false, rolesReason, e.Err.Error())
	case PartConfig:
		m.condition(v1.ConditionConfigApplied, false, configReason, e.Err.Error())
	}
}

func synced(db *v1.DatabaseStatus) string {
	if db.SyncedAt == nil {
		return "no users nor databases: Patroni's bootstrap made the system roles"
	}
	msg := fmt.Sprintf("%d roles and %d databases synced at %s", len(db.Roles), len(db.Databases), db.SyncedAt.UTC().Format(time.RFC3339))
	if len(db.Retained) > 0 {
		msg += "; left in place, no longer in the spec: " + strings.Join(db.Retained, ", ")
	}
	return msg
}

func (m *Machine) afterResync(_ *lfsm.Event) {
	m.out.ask(ensureEffects)
	m.setSoftTimer(TimerResync, m.cfg.ResyncPeriod)
}

// afterLossGrace lets podsLost fire in this call: the loss lasted the whole
// grace. observe fires it next, when the loss still holds.
func (m *Machine) afterLossGrace(_ *lfsm.Event) {
	m.call.lossDue = true
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
	m.st.Reason, m.st.Message = m.call.reason, m.call.message
	m.out.changed()
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
			m.out.changed()
		}
		return
	}
	if last != "" && last != f.Primary {
		m.primaryChanged(last, f.Primary)
	}
	if st.LastPrimary != "" {
		st.LastPrimary = ""
		m.out.changed()
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
	c.events = append(c.events, Record{Reason: ReasonPrimaryChanged, Message: msg})
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
			m.later()
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
		m.later()
	}
}

// later records a status change that may wait Config.StatusDelay for its
// write: progress (counts, the cause shown, conditions, history) rather
// than what a restart needs (state, epoch, timers, what was applied). A
// plan made meanwhile for any other reason writes it too; the flush timer
// writes it otherwise. So a create whose pods come up within the delay
// writes its status three times (accepted, objects created, Running), not
// once per pod event.
func (m *Machine) later() {
	if m.cfg.StatusDelay <= 0 {
		m.out.changed()
		return
	}
	m.out.lazy = true
	if !m.hasSoft(TimerFlush) {
		m.setSoftTimer(TimerFlush, m.cfg.StatusDelay)
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
	m.out.changed()
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
	if !m.removeTimer(name) {
		return false
	}
	m.out.changed()
	return true
}

// removeTimer removes the timer name from status (copy-on-write), without
// asking for a write, and reports whether it was there.
func (m *Machine) removeTimer(name string) bool {
	i := slices.IndexFunc(m.st.Timers, func(t v1.Timer) bool { return t.Name == name })
	if i < 0 {
		return false
	}
	m.st.Timers = slices.Delete(slices.Clone(m.st.Timers), i, i+1)
	return true
}

func (m *Machine) cancelTimer(name string) {
	if m.dropTimer(name) {
		m.call.res.Timers = append(m.call.res.Timers, TimerOp{Name: name, Cancel: true})
	}
}

// timerAt reports whether the timer name is pending with the deadline at
// (rounded up to the second, as setTimer does).
func (m *Machine) timerAt(name string, at time.Time) bool {
	if r := at.Truncate(time.Second); !r.Equal(at) {
		at = r.Add(time.Second)
	}
	for i := range m.st.Timers {
		if t := &m.st.Timers[i]; t.Name == name {
			return t.Deadline.Time.Equal(at)
		}
	}
	return false
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
	if epoch != m.st.Epoch {
		return false
	}
	if softTimer(name) {
		return m.dropSoft(name)
	}
	// A fired timer left in status fires again, at once, after a
	// restart, which plans what its event did anyway: its removal alone
	// is not worth a write; the next write takes it along.
	return m.removeTimer(name)
}

// softTimer reports whether the timer name is one status does not keep.
func softTimer(name string) bool { return name == TimerResync || name == TimerFlush }

// setSoftTimer arms (or re-arms) a timer that status does not keep, d from
// now, in the current epoch.
func (m *Machine) setSoftTimer(name string, d time.Duration) {
	deadline := m.call.now.Add(d)
	m.dropSoft(name)
	m.soft = append(m.soft, v1.Timer{Name: name, Deadline: metav1.NewTime(deadline), Epoch: m.st.Epoch})
	m.call.res.Timers = append(m.call.res.Timers, TimerOp{Name: name, Deadline: deadline})
}

// dropSoft removes the soft timer name and reports whether it was there.
func (m *Machine) dropSoft(name string) bool {
	n := len(m.soft)
	m.soft = slices.DeleteFunc(m.soft, func(t v1.Timer) bool { return t.Name == name })
	return len(m.soft) != n
}

// hasSoft reports whether the soft timer name is pending.
func (m *Machine) hasSoft(name string) bool {
	return slices.ContainsFunc(m.soft, func(t v1.Timer) bool { return t.Name == name })
}

// nextResync is how long until the next resync of a cluster resumed in
// Running: the next multiple of the period since it became Running, at
// least a second away.
func (m *Machine) nextResync(now time.Time) time.Duration {
	period := m.cfg.ResyncPeriod
	if m.st.StateSince == nil || period <= 0 {
		return period
	}
	in := now.Sub(m.st.StateSince.Time)
	if in < 0 {
		return period
	}
	d := period - in%period
	if d < time.Second {
		d += period
	}
	return d
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
		m.later()
	}
	// In Degraded the message follows the live cause, so a user sees the
	// current reason, not the one of an hour ago.
	if st.State == Degraded && f.Stuck != "" && (st.Reason != f.StuckReason || st.Message != f.Stuck) {
		st.Reason, st.Message = f.StuckReason, f.Stuck
		m.later()
	}
	if st.State == Degraded && !m.out.troubled {
		m.showQueued()
	}
	if st.State == Creating || st.State == Updating {
		m.showCause()
	}
	if st.State != Pending && st.State != Invalid && st.State != Deleting {
		m.inDatabaseConditions()
		if v := volumesStatus(f); (v != nil || st.Volumes != nil) && !apiequality.Semantic.DeepEqual(v, st.Volumes) {
			st.Volumes = v
			m.later()
		}
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
//  3. a cluster blocked on the fleet's rollout budget says so
//     (RolloutQueued, Facts.RolloutWait): every pod serves, only a slot is
//     missing;
//  4. a concrete cause of stuck pods (Facts.Stuck) is shown as soon as it
//     is observed, while the state waits for its timeout;
//  5. once that cause is gone, the state's own words come back.
func (m *Machine) showCause() {
	st, f := &m.st, &m.call.facts
	o := &m.out
	if o.troubled || len(o.replace) > 0 || len(o.restarted) > 0 || o.switchedFrom != "" {
		return
	}
	reason, msg := f.StuckReason, f.Stuck
	switch {
	case m.windowWait:
		reason, msg = ReasonMaintenanceWindow, f.MaintenanceWait
	case m.roll.blocked:
		reason, msg = ReasonRolloutQueued, f.RolloutWait
	case f.Stuck == "" && f.converged() && !applied(st, f):
		// The pods are there; what runs inside PostgreSQL is not yet.
		reason, _ = m.progress()
		msg = m.outOfSync()
	case f.Stuck == "":
		// The state's own reason ("replacing pod ..." included) stays.
		if st.State == Creating && st.Reason == ReasonCreating || st.State == Updating && st.Reason == ReasonUpdating {
			return
		}
		reason, msg = m.progress()
	}
	if st.Reason != reason || st.Message != msg {
		st.Reason, st.Message = reason, msg
		m.later()
	}
}

// showQueued keeps the reason and message of a Degraded cluster on the
// fleet's rollout budget while it is blocked on it, and on what holds it
// back once it no longer is (rollout.go).
func (m *Machine) showQueued() {
	st, f := &m.st, &m.call.facts
	reason, msg := st.Reason, st.Message
	switch {
	case m.windowWait:
		reason, msg = ReasonMaintenanceWindow, f.MaintenanceWait
	case m.roll.blocked:
		reason, msg = ReasonRolloutQueued, f.RolloutWait
	case st.Reason == ReasonRolloutQueued, st.Reason == ReasonMaintenanceWindow:
		reason, msg = stuck(f)
	}
	if st.Reason != reason || st.Message != msg {
		st.Reason, st.Message = reason, msg
		m.later()
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
	m.later()
}

// finish turns what the callbacks recorded into a Result and a Plan.
func (m *Machine) finish(epoch int64) Result {
	c := &m.call
	res := c.res
	res.To, res.Epoch, res.Rollout = m.st.State, m.st.Epoch, m.roll.state
	if res.Epoch != epoch {
		// The loop drops every timer of the old epoch; re-send the ones
		// set in this one, once each, with their final deadlines.
		res.Timers = res.Timers[:0]
		for _, t := range m.st.Timers {
			res.Timers = append(res.Timers, TimerOp{Name: t.Name, Deadline: t.Deadline.Time})
		}
		for _, t := range m.soft {
			res.Timers = append(res.Timers, TimerOp{Name: t.Name, Deadline: t.Deadline.Time})
		}
	}
	if m.st.State == Deleted {
		return res
	}
	// A failed status write waits for the retry timer that its failure
	// armed (outbox invariant 5): every failure of a plan carrying the
	// status fires effectsFailed, which arms it (afterTrouble, or entering
	// Degraded from Running) and sets troubled, so podsReady waits for a
	// retry's success. A state change drops the timer, ending the hold,
	// but it records an Event, so its plan is made anyway: Running ->
	// Degraded on a failed write is one such plan, once. Meanwhile the
	// status is not lost: the retry's plan, or any plan made for another
	// reason, writes the latest one.
	p, status := m.out.next(len(c.events) > 0, m.hasTimer(TimerRetry), c.inFlight)
	if p == nil {
		return res
	}
	if len(c.events) > 0 {
		p.Records = append([]Record(nil), c.events...)
	}
	if p.Ensure {
		p.InDatabase = m.inDatabaseWork()
		m.out.inDatabase = p.InDatabase
		p.KeepPodTemplate = m.roll.blocked && c.facts.TemplateChanged
	}
	if status {
		// A shallow copy is a snapshot: st is copy-on-write.
		snap := m.st
		p.Status = &snap
		if m.dropSoft(TimerFlush) {
			// Armed in this call, it is no news to the loop.
			n := len(res.Timers)
			res.Timers = slices.DeleteFunc(res.Timers, func(op TimerOp) bool { return op.Name == TimerFlush })
			if len(res.Timers) == n {
				res.Timers = append(res.Timers, TimerOp{Name: TimerFlush, Cancel: true})
			}
		}
	}
	// What a user did goes ahead of other clusters' background work; so
	// does the cleanup a deletion asked for, also when a timer retries it,
	// and the rest of a create: its objects written, then Running. Else,
	// in a burst of creates, the clusters whose pods are Ready would wait
	// to be told Running behind every create of the burst (5,000 at once:
	// 125 Running while 2,840 had their pods Ready, in make bench-scale).
	p.Urgent = p.Cleanup || slices.ContainsFunc(res.Fired, func(f Fired) bool {
		return slices.Contains(userActions, f.Event) || f.From == Creating && slices.Contains(createSteps, f.Event)
	})
	res.Plan = p
	return res
}
