package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/effects"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// actor records the effects called, as "effect key args", and fails those
// named in fail.
type actor struct {
	calls []string
	fail  map[string]error
}

func (a *actor) call(name, key string, args any) error {
	a.calls = append(a.calls, fmt.Sprintf("%s %s %v", name, key, args))
	return a.fail[name]
}

func (a *actor) WriteStatus(_ context.Context, key string, status *v1.PostgresqlStatus) error {
	return a.call("status", key, status.State)
}
func (a *actor) Ensure(_ context.Context, key string, opts effects.EnsureOptions) error {
	return a.call("ensure", key, opts)
}
func (a *actor) ReplacePods(_ context.Context, key string, pods []act.Pod) error {
	return a.call("replacePods", key, pods)
}
func (a *actor) Nudge(_ context.Context, key, version string) error {
	return a.call("nudge", key, version)
}
func (a *actor) Cleanup(_ context.Context, key string) error   { return a.call("cleanup", key, "") }
func (a *actor) SyncRoles(_ context.Context, key string) error { return a.call("syncRoles", key, "") }
func (a *actor) Configure(_ context.Context, key string, remove []string) error {
	return a.call("configure", key, remove)
}
func (a *actor) Switchover(_ context.Context, key, from, to string) error {
	return a.call("switchover", key, from+"->"+to)
}
func (a *actor) RestartMembers(_ context.Context, key string, pods []string) error {
	return a.call("restart", key, pods)
}
func (a *actor) ResumePoolers(_ context.Context, key string) error {
	return a.call("resume", key, "")
}
func (a *actor) StartBackup(_ context.Context, key string, b act.BackupStart) error {
	return a.call("startBackup", key, b)
}
func (a *actor) RecordEvents(_ context.Context, key string, events []act.Record) error {
	return a.call("events", key, events)
}

func TestStepsOrder(t *testing.T) {
	a := &actor{}
	plan := &fsm.Plan{
		Status: &v1.PostgresqlStatus{State: "Running"}, Ensure: true, KeepPodTemplate: true, Cleanup: true,
		ReplacePods: []fsm.PodRef{{Name: "p-0", UID: "u", Claim: "c-0", ClaimUID: "cu"}}, Nudge: "q1",
		Records:    []fsm.Record{{Warning: true, Reason: "Running", Message: "m"}},
		InDatabase: &fsm.InDatabase{Sync: "s1", Config: "c1", RemoveParameters: []string{"work_mem"}},
		Switchover: &fsm.Switchover{From: "p-0", To: "p-1"}, ResumePoolers: true,
		Restart:     []fsm.PodRef{{Name: "p-1", UID: "u1"}},
		StartBackup: &fsm.BackupStart{ID: "20261130-120000-full", Phase: fsm.PhaseVerify},
	}
	var got []string
	timeouts := Timeouts{InDatabase: 30 * time.Second, Restart: time.Minute, Switchover: 20 * time.Second}
	for _, s := range NewStepBuilder(a, a, timeouts).Steps("db/acid", plan) {
		got = append(got, fmt.Sprintf("%s:%v", s.Name, s.Always))
		if want := map[string]time.Duration{StepSyncRoles: 30 * time.Second, StepConfigure: 30 * time.Second,
			StepRestart: time.Minute, StepSwitchover: 20 * time.Second, StepVerify: 30 * time.Second}[s.Name]; s.Timeout != want {
			t.Errorf("%s: timeout %v, want %v", s.Name, s.Timeout, want)
		}
		if err := s.Run(context.Background()); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
	want := []string{"status:true", "ensure:false", "syncRoles:false", "configure:false", "replacePod:false",
		"switchover:false", "resumePoolers:false", "restartMember:false", "nudge:false", "startVerify:false", "cleanup:false", "events:true"}
	if !slices.Equal(got, want) {
		t.Errorf("steps = %v, want %v", got, want)
	}
	wantCalls := []string{
		"status db/acid Running",
		"ensure db/acid {true}",
		"syncRoles db/acid ",
		"configure db/acid [work_mem]",
		"replacePods db/acid [{p-0 u c-0 cu}]",
		"switchover db/acid p-0->p-1",
		"resume db/acid ",
		"restart db/acid [p-1]",
		"nudge db/acid q1",
		"startBackup db/acid {20261130-120000-full verify}",
		"cleanup db/acid ",
		"events db/acid [{true Running m}]",
	}
	if !slices.Equal(a.calls, wantCalls) {
		t.Errorf("calls:\n got %q\nwant %q", a.calls, wantCalls)
	}
	if n := len(NewStepBuilder(a, a, Timeouts{}).Steps("db/acid", &fsm.Plan{})); n != 0 {
		t.Errorf("empty plan: %d steps, want none", n)
	}
}

// TestStepsErrors: the actors' errors reach the state machine as they are:
// an effect that waits (act.ErrWaiting) waits for it too (fsm.ErrWaiting is
// the same error), with its message.
func TestStepsErrors(t *testing.T) {
	failed := errors.New("boom")
	terminating := fmt.Errorf("%w: 2 of postgresql db/acid", effects.ErrPodsTerminating)
	for _, tt := range []struct {
		name        string
		err         error
		wantWaiting bool
	}{
		{name: "success"},
		{name: "failure", err: failed},
		{name: "waiting", err: terminating, wantWaiting: true},
		{name: "cancelled", err: fmt.Errorf("ensure: %w", context.Canceled)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := &actor{fail: map[string]error{"cleanup": tt.err}}
			steps := NewStepBuilder(a, a, Timeouts{}).Steps("db/acid", &fsm.Plan{Cleanup: true})
			err := steps[0].Run(context.Background())
			if tt.err == nil {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.err) || err.Error() != tt.err.Error() {
				t.Errorf("err = %v, want %v itself", err, tt.err)
			}
			if got := errors.Is(err, fsm.ErrWaiting); got != tt.wantWaiting {
				t.Errorf("errors.Is(err, fsm.ErrWaiting) = %v, want %v", got, tt.wantWaiting)
			}
			if errors.Is(err, context.Canceled) != errors.Is(tt.err, context.Canceled) {
				t.Errorf("context.Canceled lost or added: %v", err)
			}
		})
	}
}

// TestPartErrorPasses: an in-database failure reaches the machine as an
// fsm.PartError of the same part, a wait still a wait.
func TestPartErrorPasses(t *testing.T) {
	waiting := fmt.Errorf("pod x has not reloaded (%w)", act.ErrWaiting)
	a := &actor{fail: map[string]error{"configure": &act.PartError{Part: act.PartConfig, Err: waiting}}}
	steps := NewStepBuilder(a, a, Timeouts{}).Steps("db/acid", &fsm.Plan{Ensure: true, InDatabase: &fsm.InDatabase{Config: "c1"}})
	err := steps[len(steps)-1].Run(context.Background())
	var part *fsm.PartError
	if !errors.As(err, &part) || part.Part != fsm.PartConfig || !errors.Is(err, fsm.ErrWaiting) {
		t.Errorf("%v: part %+v, fsm.ErrWaiting %v", err, part, errors.Is(err, fsm.ErrWaiting))
	}
	if err.Error() != waiting.Error() {
		t.Errorf("message %q, want %q", err, waiting)
	}
}
