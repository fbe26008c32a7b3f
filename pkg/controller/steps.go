package controller

import (
	"context"
	"errors"
	"time"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/effects"
	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// Names of the steps of a plan (NewStepBuilder), for logs, metrics and tests.
const (
	StepStatus     = "status"
	StepEnsure     = "ensure"
	StepReplacePod = "replacePod"
	StepNudge      = "nudge"
	StepSyncRoles  = "syncRoles"
	StepConfigure  = "configure"
	StepSwitchover = "switchover"
	StepRestart    = "restartMember"
	StepResume     = "resumePoolers"
	StepCleanup    = "cleanup"
	StepEvents     = "events"
)

// Actor carries out the effects of a plan, one method per effect, for the
// cluster key ("namespace/name"): *effects.Effects. An error that wraps
// effects.ErrWaiting means "not yet".
type Actor interface {
	WriteStatus(ctx context.Context, key string, status *v1.PostgresqlStatus) error
	Ensure(ctx context.Context, key string, opts effects.EnsureOptions) error
	ReplacePods(ctx context.Context, key string, pods []effects.Pod) error
	Nudge(ctx context.Context, key, version string) error
	SyncRoles(ctx context.Context, key string) error
	Configure(ctx context.Context, key string, remove []string) error
	Switchover(ctx context.Context, key, from, to string) error
	RestartMembers(ctx context.Context, key string, pods []string) error
	ResumePoolers(ctx context.Context, key string) error
	Cleanup(ctx context.Context, key string) error
	RecordEvents(ctx context.Context, key string, events []effects.Record) error
}

// Timeouts bound the steps that talk to PostgreSQL and Patroni; zero means
// the executor's default. Each call inside has its own, shorter deadline
// (connect, statement, REST call): these bound the whole step, so that no
// step holds an executor slot past them.
type Timeouts struct {
	// InDatabase bounds the sync of roles and databases, and the
	// configuration's apply and check, each.
	InDatabase time.Duration
	// Restart bounds a member's restart.
	Restart time.Duration
	// Switchover bounds a switchover.
	Switchover time.Duration
}

// NewStepBuilder returns the StepBuilder whose steps call a. It is the one place
// where the state machine's plans meet the API: the machine and the
// effects know nothing of each other.
func NewStepBuilder(a Actor, t Timeouts) StepBuilder { return actorSteps{a, t} }

type actorSteps struct {
	a Actor
	t Timeouts
}

var _ Actor = (*effects.Effects)(nil)

// Steps returns the steps that carry out plan for the cluster key, in this
// order: status, ensure, syncRoles, configure, replacePod, switchover,
// resumePoolers, restartMember, nudge, cleanup, events. Only the steps
// the plan asks for are returned. status and events are Always: the state
// machine's record and the user's Events are written even when an effect
// failed.
func (e actorSteps) Steps(key string, plan *fsm.Plan) []eventloop.Step {
	a := e.a
	var steps []eventloop.Step
	timed := func(name string, always bool, timeout time.Duration, run func(ctx context.Context) error) {
		steps = append(steps, eventloop.Step{Name: name, Always: always, Timeout: timeout,
			Run: func(ctx context.Context) error { return machineError(run(ctx)) }})
	}
	add := func(name string, always bool, run func(ctx context.Context) error) { timed(name, always, 0, run) }
	if status := plan.Status; status != nil {
		add(StepStatus, true, func(ctx context.Context) error { return a.WriteStatus(ctx, key, status) })
	}
	if plan.Ensure {
		opts := effects.EnsureOptions{KeepPodTemplate: plan.KeepPodTemplate}
		add(StepEnsure, false, func(ctx context.Context) error { return a.Ensure(ctx, key, opts) })
	}
	if db := plan.InDatabase; plan.Ensure && db != nil {
		// The roles first: they are quick, and a configuration that
		// waits for Patroni's next loop does not hold them back.
		if db.Sync != "" {
			timed(StepSyncRoles, false, e.t.InDatabase, func(ctx context.Context) error { return a.SyncRoles(ctx, key) })
		}
		if db.Config != "" {
			remove := db.RemoveParameters
			timed(StepConfigure, false, e.t.InDatabase, func(ctx context.Context) error { return a.Configure(ctx, key, remove) })
		}
	}
	if len(plan.ReplacePods) > 0 {
		pods := make([]effects.Pod, len(plan.ReplacePods))
		for i, p := range plan.ReplacePods {
			pods[i] = effects.Pod{Name: p.Name, UID: p.UID, Claim: p.Claim, ClaimUID: p.ClaimUID}
		}
		add(StepReplacePod, false, func(ctx context.Context) error { return a.ReplacePods(ctx, key, pods) })
	}
	if sw := plan.Switchover; sw != nil {
		timed(StepSwitchover, false, e.t.Switchover, func(ctx context.Context) error { return a.Switchover(ctx, key, sw.From, sw.To) })
	}
	if plan.ResumePoolers {
		add(StepResume, false, func(ctx context.Context) error { return a.ResumePoolers(ctx, key) })
	}
	if len(plan.Restart) > 0 {
		pods := make([]string, len(plan.Restart))
		for i, p := range plan.Restart {
			pods[i] = p.Name
		}
		timed(StepRestart, false, e.t.Restart, func(ctx context.Context) error { return a.RestartMembers(ctx, key, pods) })
	}
	if version := plan.Nudge; version != "" {
		add(StepNudge, false, func(ctx context.Context) error { return a.Nudge(ctx, key, version) })
	}
	if plan.Cleanup {
		add(StepCleanup, false, func(ctx context.Context) error { return a.Cleanup(ctx, key) })
	}
	if len(plan.Records) > 0 {
		events := make([]effects.Record, len(plan.Records))
		for i, ev := range plan.Records {
			events[i] = effects.Record{Warning: ev.Warning, Reason: ev.Reason, Message: ev.Message}
		}
		add(StepEvents, true, func(ctx context.Context) error { return a.RecordEvents(ctx, key, events) })
	}
	return steps
}

// machineError returns err as the state machine reads it: an effect that
// waits (effects.ErrWaiting) is waiting to the machine too (fsm.ErrWaiting).
func machineError(err error) error {
	if err == nil {
		return nil
	}
	var part *effects.PartError
	if errors.As(err, &part) {
		return &fsm.PartError{Part: part.Part, Err: machineError(part.Err)}
	}
	if !errors.Is(err, effects.ErrWaiting) || errors.Is(err, fsm.ErrWaiting) {
		return err
	}
	return waitingError{err}
}

// waitingError is an error of the effects that wraps effects.ErrWaiting,
// made to wrap fsm.ErrWaiting as well. Its message is the effect's.
type waitingError struct{ err error }

func (w waitingError) Error() string   { return w.err.Error() }
func (w waitingError) Unwrap() []error { return []error{w.err, fsm.ErrWaiting} }
