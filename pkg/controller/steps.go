package controller

import (
	"context"
	"time"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/effects"
	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/indb"
)

// Names of the steps of a plan (NewStepBuilder), for logs, metrics and tests.
const (
	StepStatus        = "status"
	StepEnsure        = "ensure"
	StepReplacePod    = "replacePod"
	StepNudge         = "nudge"
	StepSyncRoles     = "syncRoles"
	StepConfigure     = "configure"
	StepSwitchover    = "switchover"
	StepRestart       = "restartMember"
	StepResumePoolers = "resumePoolers"
	StepBackup        = "startBackup"
	StepVerify        = "startVerify"
	StepDrill         = "startDrill"
	StepCleanup       = "cleanup"
	StepEvents        = "events"
)

// Actor carries out the effects of a plan in the Kubernetes API, one
// method per effect, for the cluster key ("namespace/name"):
// *effects.Effects. An error that wraps act.ErrWaiting means "not yet".
type Actor interface {
	WriteStatus(ctx context.Context, key string, status *v1.PostgresqlStatus) error
	Ensure(ctx context.Context, key string, opts effects.EnsureOptions) error
	ReplacePods(ctx context.Context, key string, pods []act.Pod) error
	Nudge(ctx context.Context, key, version string) error
	Cleanup(ctx context.Context, key string) error
	RecordEvents(ctx context.Context, key string, events []act.Record) error
}

// DatabaseActor carries out the work of a plan inside PostgreSQL, Patroni
// and PgBouncer, one method per step, for the cluster key: *indb.Actor.
// Its errors are act.PartError where the machine reports them apart.
type DatabaseActor interface {
	SyncRoles(ctx context.Context, key string) error
	Configure(ctx context.Context, key string, remove []string) error
	Switchover(ctx context.Context, key, from, to string) error
	RestartMembers(ctx context.Context, key string, pods []string) error
	ResumePoolers(ctx context.Context, key string) error
	StartBackup(ctx context.Context, key string, b act.BackupStart) error
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

// NewStepBuilder returns the StepBuilder whose steps call a (the API) and
// db (inside PostgreSQL). It is the one place where the state machine's
// plans meet their actors: the machine and the actors know nothing of
// each other, and share only pkg/act's words.
func NewStepBuilder(a Actor, db DatabaseActor, t Timeouts) StepBuilder { return actorSteps{a, db, t} }

type actorSteps struct {
	a  Actor
	db DatabaseActor
	t  Timeouts
}

var (
	_ Actor         = (*effects.Effects)(nil)
	_ DatabaseActor = (*indb.Actor)(nil)
)

// Steps returns the steps that carry out plan for the cluster key, in this
// order: status, ensure, syncRoles, configure, replacePod, switchover,
// resumePoolers, restartMember, nudge, startBackup (or startVerify or
// startDrill: a phase of a base backup run), cleanup, events. Only the steps
// the plan asks for are returned. status and events are Always: the state
// machine's record and the user's Events are written even when an effect
// failed. startBackup comes after every other effect: its failure is
// reported apart (act.PartBackup) and fails none of them.
func (e actorSteps) Steps(key string, plan *fsm.Plan) []eventloop.Step {
	a, db := e.a, e.db
	var steps []eventloop.Step
	timed := func(name string, always bool, timeout time.Duration, run func(ctx context.Context) error) {
		steps = append(steps, eventloop.Step{Name: name, Always: always, Timeout: timeout, Run: run})
	}
	add := func(name string, always bool, run func(ctx context.Context) error) { timed(name, always, 0, run) }
	if status := plan.Status; status != nil {
		add(StepStatus, true, func(ctx context.Context) error { return a.WriteStatus(ctx, key, status) })
	}
	if plan.Ensure {
		opts := effects.EnsureOptions{KeepPodTemplate: plan.KeepPodTemplate}
		add(StepEnsure, false, func(ctx context.Context) error { return a.Ensure(ctx, key, opts) })
	}
	if work := plan.InDatabase; plan.Ensure && work != nil {
		// The roles first: they are quick, and a configuration that
		// waits for Patroni's next loop does not hold them back.
		if work.Sync != "" {
			timed(StepSyncRoles, false, e.t.InDatabase, func(ctx context.Context) error { return db.SyncRoles(ctx, key) })
		}
		if work.Config != "" {
			remove := work.RemoveParameters
			timed(StepConfigure, false, e.t.InDatabase, func(ctx context.Context) error { return db.Configure(ctx, key, remove) })
		}
	}
	if len(plan.ReplacePods) > 0 {
		pods := plan.ReplacePods
		add(StepReplacePod, false, func(ctx context.Context) error { return a.ReplacePods(ctx, key, pods) })
	}
	if sw := plan.Switchover; sw != nil {
		timed(StepSwitchover, false, e.t.Switchover, func(ctx context.Context) error { return db.Switchover(ctx, key, sw.From, sw.To) })
	}
	if plan.ResumePoolers {
		add(StepResumePoolers, false, func(ctx context.Context) error { return db.ResumePoolers(ctx, key) })
	}
	if len(plan.Restart) > 0 {
		pods := make([]string, len(plan.Restart))
		for i, p := range plan.Restart {
			pods[i] = p.Name
		}
		timed(StepRestart, false, e.t.Restart, func(ctx context.Context) error { return db.RestartMembers(ctx, key, pods) })
	}
	if version := plan.Nudge; version != "" {
		add(StepNudge, false, func(ctx context.Context) error { return a.Nudge(ctx, key, version) })
	}
	if b := plan.StartBackup; b != nil {
		start := *b
		name := map[string]string{act.PhaseBackup: StepBackup, act.PhaseVerify: StepVerify, act.PhaseDrill: StepDrill}[start.Phase]
		timed(name, false, e.t.InDatabase, func(ctx context.Context) error { return db.StartBackup(ctx, key, start) })
	}
	if plan.Cleanup {
		add(StepCleanup, false, func(ctx context.Context) error { return a.Cleanup(ctx, key) })
	}
	if len(plan.Records) > 0 {
		events := plan.Records
		add(StepEvents, true, func(ctx context.Context) error { return a.RecordEvents(ctx, key, events) })
	}
	return steps
}
