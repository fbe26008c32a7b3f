package eventloop

import (
	"context"
	"time"
)

// Kind tells what an Event reports.
type Kind uint8

const (
	// Signal says something about a cluster changed (its spec, its pods, an
	// owned object). Signals are coalesced: while a cluster's signal of a
	// given Name waits in the inbox, more of the same are merged into it.
	Signal Kind = iota
	// TimerFired says the timer Name set in Epoch reached its deadline. Never
	// dropped by the inbox; the loop itself drops it when Epoch is stale.
	TimerFired
	// PlanDone carries the result of the plan PlanID: Err is nil on success.
	// Never dropped or merged.
	PlanDone
	// Panicked tells the handler that its own Handle, or a step of its plan,
	// panicked for this cluster; Err describes the panic. Delivered so the
	// state machine can record it on the cluster.
	Panicked

	// paused is the loop's own: a worker left a plan between two steps
	// because other clusters waited for a worker (Event.cont). Never
	// handed to the Handler.
	paused
)

// Event is what the loop hands to the Handler, one cluster at a time.
type Event struct {
	// Key names the cluster, "namespace/name".
	Key string
	// Kind is what the event reports.
	Kind Kind
	// Name is the signal's name (Signal) or the timer's name (TimerFired).
	Name string
	// Epoch is the epoch the timer was set in (TimerFired).
	Epoch int64
	// PlanID is the plan the result belongs to (PlanDone).
	PlanID uint64
	// Err is the plan's error (PlanDone) or the panic (Panicked).
	Err error
	// At is when the event entered the inbox (or the timer fired), by the
	// loop's clock.
	At time.Time
	// InFlight is the ID of the cluster's plan running when the Handler
	// sees the event, 0 when none is (set by the loop; a PlanDone's plan
	// is no longer running). A plan that waits may be superseded by the
	// next one; a running plan is not, and reports: the Handler need not
	// ask again for what it carries.
	InFlight uint64
	// Urgent marks a user's action (Loop.NotifyUrgent) or the result of an
	// urgent plan: the inbox takes its cluster's events ahead of other
	// clusters' until it is taken.
	Urgent bool

	// cont is the rest of a paused plan, or the job a PlanDone reports
	// (its steps' times: Loop.noteSteps).
	cont *job
}

// Handler owns the per-cluster state machines. The loop calls it from its one
// goroutine, so it needs no locks; it must never block or do network I/O.
type Handler interface {
	// Handle runs one event through the cluster's state machine and says
	// what the loop must do next.
	Handle(ev Event) Outcome
}

// Outcome is what the loop does after Handle returns.
type Outcome struct {
	// Epoch is the cluster's epoch after the event. When it differs from
	// the epoch the loop knew, every timer of the cluster is dropped before
	// Timers are applied: timers belong to the epoch they were set in.
	Epoch int64
	// Timers to set (replacing a pending timer of the same name) or cancel.
	Timers []TimerOp
	// Plan, when not nil, is run off the loop by the executor. If a plan of
	// this cluster is running, this one waits for it and replaces any plan
	// already waiting (and is urgent if that one was).
	Plan *Plan
	// CancelInFlight cancels the context of the cluster's running plan at
	// once and drops its waiting plan (before Plan, if any, is queued).
	CancelInFlight bool
	// Forget drops everything the loop keeps for the cluster (timers,
	// epoch, waiting plan) once Plan, if any, is done. Used when the cluster
	// is gone.
	Forget bool
}

// TimerOp sets or cancels one timer of a cluster.
type TimerOp struct {
	// Name is the timer; the TimerFired event carries it.
	Name string
	// Deadline is when it fires; a deadline in the past fires at once.
	Deadline time.Time
	// Cancel removes the pending timer Name instead of setting it.
	Cancel bool
}

// Plan is a batch of effects for one cluster, run in order off the loop.
type Plan struct {
	// ID is chosen by the Handler; the PlanDone event carries it back.
	ID uint64
	// Urgent starts the plan ahead of the background plans (Urgent false)
	// of other clusters waiting for a worker: a user's action (a new
	// cluster, a spec change, a deletion) should not wait behind resyncs,
	// retries and rollout steps. After four urgent plans in a row, one
	// background plan goes, so background work is never starved.
	Urgent bool
	// Continues says the plan continues what the cluster's earlier plans
	// began (a create whose pods are Ready, told Running): within its
	// namespace it starts ahead of the clusters whose work has not begun,
	// as a plan paused between two steps does, so a burst's clusters are
	// finished one by one rather than all together at its end.
	Continues bool
	// Steps run one after another. The first error stops the plan, except
	// that steps marked Always still run; the plan's error is the first one.
	Steps []Step
}

// Step is one effect: one API call, Patroni call or SQL statement.
type Step struct {
	// Name says what the step does, for logs, metrics and errors.
	Name string
	// Timeout bounds the step; zero means the executor's default. The
	// deadline follows the loop's clock, so tests with a fake clock control it.
	Timeout time.Duration
	// Always runs the step even when an earlier step failed (status writes).
	Always bool
	// Run does the work. It must honour ctx and be idempotent.
	Run func(ctx context.Context) error
}
