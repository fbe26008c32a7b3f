package fsm

import (
	"context"
	"slices"

	lfsm "github.com/looplab/fsm"

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
	// call is the scratch of the Handle in progress, of whichever machine:
	// one per engine, not per cluster (a cluster's facts are not kept
	// between its inputs).
	call call
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

// New returns the machine of a cluster, resumed from its stored status (nil
// for a new cluster). The status is copied.
func (e *Engine) New(status *v1.PostgresqlStatus) *Machine {
	m := &Machine{eng: e, cfg: &e.cfg}
	if status != nil {
		status.DeepCopyInto(&m.st)
	}
	if !KnownState(m.st.State) || m.st.State == Deleted {
		m.st.State = Pending
	}
	if m.st.Reason == ReasonMaintenanceWindow {
		// Waiting for a maintenance window: its timeout was cancelled
		// (noteWindow, keepTimeout).
		m.roll.windowWait = true
	}
	if m.st.Reason == ReasonRolloutQueued {
		// Blocked on the rollout budget: its timeout was cancelled, and
		// is armed again once it is no longer blocked (noteRollout,
		// keepTimeout).
		m.roll.state, m.roll.blocked = Queued, true
	}
	// Before soft timers, status kept the resync's deadline: Resume arms
	// it afresh, and the next write forgets the stored one.
	m.st.Timers = slices.DeleteFunc(slices.Clone(m.st.Timers), func(t v1.Timer) bool { return softTimer(t.Name) })
	return m
}

// KnownState reports whether s is a state of the machine (States).
func KnownState(s string) bool { return slices.Contains(States, s) }
