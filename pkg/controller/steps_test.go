package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

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
func (a *actor) Ensure(_ context.Context, key string) error { return a.call("ensure", key, "") }
func (a *actor) ReplacePods(_ context.Context, key string, pods []effects.Pod) error {
	return a.call("replacePods", key, pods)
}
func (a *actor) Nudge(_ context.Context, key, version string) error {
	return a.call("nudge", key, version)
}
func (a *actor) Cleanup(_ context.Context, key string) error { return a.call("cleanup", key, "") }
func (a *actor) RecordEvents(_ context.Context, key string, events []effects.Record) error {
	return a.call("events", key, events)
}

func TestStepsOrder(t *testing.T) {
	a := &actor{}
	plan := &fsm.Plan{
		Status: &v1.PostgresqlStatus{State: "Running"}, Ensure: true, Cleanup: true,
		ReplacePods: []fsm.PodRef{{Name: "p-0", UID: "u", Claim: "c-0", ClaimUID: "cu"}}, Nudge: "q1",
		Records: []fsm.Record{{Warning: true, Reason: "Running", Message: "m"}},
	}
	var got []string
	for _, s := range NewEffects(a, Timeouts{}).Steps("db/acid", plan) {
		got = append(got, fmt.Sprintf("%s:%v", s.Name, s.Always))
		if err := s.Run(context.Background()); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
	want := []string{"status:true", "ensure:false", "replacePod:false", "nudge:false", "cleanup:false", "events:true"}
	if !slices.Equal(got, want) {
		t.Errorf("steps = %v, want %v", got, want)
	}
	wantCalls := []string{
		"status db/acid Running",
		"ensure db/acid ",
		"replacePods db/acid [{p-0 u c-0 cu}]",
		"nudge db/acid q1",
		"cleanup db/acid ",
		"events db/acid [{true Running m}]",
	}
	if !slices.Equal(a.calls, wantCalls) {
		t.Errorf("calls:\n got %q\nwant %q", a.calls, wantCalls)
	}
	if n := len(NewEffects(a, Timeouts{}).Steps("db/acid", &fsm.Plan{})); n != 0 {
		t.Errorf("empty plan: %d steps, want none", n)
	}
}

// TestStepsErrors: an effect that waits (effects.ErrWaiting) waits for the
// state machine too (fsm.ErrWaiting), with its message; other errors pass
// as they are.
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
			steps := NewEffects(a, Timeouts{}).Steps("db/acid", &fsm.Plan{Cleanup: true})
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
			if got := errors.Is(err, effects.ErrWaiting); got != tt.wantWaiting {
				t.Errorf("errors.Is(err, effects.ErrWaiting) = %v, want %v", got, tt.wantWaiting)
			}
			if errors.Is(err, context.Canceled) != errors.Is(tt.err, context.Canceled) {
				t.Errorf("context.Canceled lost or added: %v", err)
			}
		})
	}
}
