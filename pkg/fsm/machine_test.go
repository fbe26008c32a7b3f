package fsm

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

func TestEpochAndTimersOnStateChange(t *testing.T) {
	cfg := writeAtOnce()
	m := NewEngine(cfg).New(nil)
	res := m.Handle(Input{Kind: Signal}, starting(1), t0.Add(300*time.Millisecond))
	if res.Epoch != 1 || m.Status().Epoch != 1 {
		t.Fatalf("epoch %d, want 1", res.Epoch)
	}
	// The timeout waits for the effects to report: the wait for a worker
	// is not the cluster's.
	if len(res.Timers) != 0 || res.Plan == nil {
		t.Fatalf("timers %+v before the effects reported, want none; plan %+v", res.Timers, res.Plan)
	}
	res = m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, starting(1), t0.Add(300*time.Millisecond))
	// The deadline is rounded up to the second status can keep.
	want := t0.Add(cfg.CreateTimeout + time.Second)
	if len(res.Timers) != 1 || res.Timers[0].Name != TimerTimeout || !res.Timers[0].Deadline.Equal(want) {
		t.Fatalf("timers %+v, want timeout at %s", res.Timers, want)
	}
	res = m.Handle(Input{Kind: TimerFired, Timer: TimerTimeout, Epoch: 1}, unschedulable(1), want)
	if res.Epoch != 2 || len(res.Timers) != 1 || res.Timers[0].Name != TimerRetry || !res.Timers[0].Deadline.Equal(want.Add(cfg.RetryBase)) {
		t.Fatalf("after timeout: epoch %d timers %+v", res.Epoch, res.Timers)
	}
	// Backoff doubles on every retry in Degraded and is capped.
	deadline := want.Add(cfg.RetryBase)
	for i := 1; i <= 12; i++ {
		res = m.Handle(Input{Kind: TimerFired, Timer: TimerRetry, Epoch: 2}, unschedulable(1), deadline)
		if len(res.Timers) != 1 {
			t.Fatalf("retry %d: timers %+v", i, res.Timers)
		}
		wantDelay := min(cfg.RetryBase<<i, cfg.RetryMax)
		if got := res.Timers[0].Deadline.Sub(deadline); got != wantDelay {
			t.Fatalf("retry %d: delay %s, want %s", i, got, wantDelay)
		}
		deadline = res.Timers[0].Deadline
	}
	if m.Status().Attempt != 12 {
		t.Errorf("attempt %d, want 12", m.Status().Attempt)
	}
}

func TestStatusProjection(t *testing.T) {
	cfg := writeAtOnce()
	m := NewEngine(cfg).New(nil)
	settle(m, unschedulable(1), t0)
	st := m.Status()
	if st.Ready != "0/2" || st.DesiredInstances != 2 {
		t.Errorf("ready %q desired %d", st.Ready, st.DesiredInstances)
	}
	prog := meta.FindStatusCondition(st.Conditions, v1.ConditionProgressing)
	if prog == nil || prog.Status != metav1.ConditionTrue || !strings.Contains(prog.Message, "0/3 nodes") {
		t.Errorf("progressing condition %+v: want True with the stuck message", prog)
	}
	res := m.Handle(Input{Kind: Signal}, ready(1), t0.Add(time.Second))
	m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, ready(1), t0.Add(time.Second))
	st = m.Status()
	if c := meta.FindStatusCondition(st.Conditions, v1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("ready condition %+v", c)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1.ConditionDegraded); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("degraded condition %+v", c)
	}
	if st.Primary != "c-0" || st.Ready != "2/2" {
		t.Errorf("primary %q ready %q", st.Primary, st.Ready)
	}
	if res.Plan == nil || res.Plan.Status == nil || len(res.Plan.Records) != 1 || res.Plan.Records[0].Reason != Running {
		t.Fatalf("plan %+v: want a status write and a Running event", res.Plan)
	}
	// The snapshot is a copy: later transitions do not change it.
	snap := res.Plan.Status
	frozen := snap.DeepCopy()
	res = m.Handle(Input{Kind: Signal}, with(ready(1), func(f *Facts) { f.Ready = 1 }), t0.Add(2*time.Second))
	if !equality.Semantic.DeepEqual(snap, frozen) {
		t.Errorf("snapshot changed by a later transition:\n%+v\nwas\n%+v", snap, frozen)
	}
	m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, with(ready(1), func(f *Facts) { f.Ready = 1 }), t0.Add(2*time.Second))
	// Nothing changed and every plan is done: nothing to do.
	res = m.Handle(Input{Kind: Signal}, with(ready(1), func(f *Facts) { f.Ready = 1 }), t0.Add(3*time.Second))
	if res.Plan != nil {
		t.Errorf("unchanged facts planned %+v", res.Plan)
	}
}

func TestStatusSurvivesSupersededPlans(t *testing.T) {
	cfg := writeAtOnce()
	m := NewEngine(cfg).New(nil)
	first := m.Handle(Input{Kind: Signal}, starting(1), t0).Plan
	// While the first plan runs, more pod events: each later plan still
	// carries the ensure (not confirmed yet) and the newest status.
	second := m.Handle(Input{Kind: Signal}, with(starting(1), func(f *Facts) { f.Ready = 1 }), t0.Add(time.Second)).Plan
	if second == nil || !second.Ensure || second.Status == nil || second.Status.Ready != "1/2" {
		t.Fatalf("second plan %+v", second)
	}
	// The first plan's result is stale: it is ignored.
	res := m.Handle(Input{Kind: PlanDone, PlanID: first.ID, Err: errors.New("late")}, starting(1), t0.Add(2*time.Second))
	if res.Ignored == "" && len(res.Fired) > 0 {
		t.Errorf("stale result fired %v", res.Fired)
	}
	res = m.Handle(Input{Kind: PlanDone, PlanID: second.ID}, with(starting(1), func(f *Facts) { f.Ready = 1 }), t0.Add(3*time.Second))
	if got := firedEvents(res.Fired); !slices.Equal(got, []string{EventEffectsSucceeded}) {
		t.Errorf("fired %v", got)
	}
	if res.Plan != nil && res.Plan.Ensure {
		t.Errorf("ensure planned again after success: %+v", res.Plan)
	}
}

func TestHistoryIsBounded(t *testing.T) {
	cfg := writeAtOnce()
	cfg.LossGrace = 0 // every lost pod a transition
	m := NewEngine(cfg).New(nil)
	now := t0
	for i := 0; i < 3*v1.MaxHistory; i++ {
		now = now.Add(time.Second)
		settle(m, ready(1), now)
		settle(m, with(ready(1), func(f *Facts) { f.Ready = 1 }), now)
	}
	h := m.Status().History
	if len(h) != v1.MaxHistory {
		t.Fatalf("history has %d entries, want %d", len(h), v1.MaxHistory)
	}
	last := h[len(h)-1]
	if last.From != Running || last.To != Degraded || last.Event != EventPodsLost || !last.Time.Time.Equal(now) {
		t.Errorf("last transition %+v", last)
	}
}

func TestResumeKeepsDeadlines(t *testing.T) {
	cfg := writeAtOnce()
	deadline := t0.Add(7 * time.Minute)
	st := &v1.PostgresqlStatus{State: Creating, Epoch: 9, ObservedGeneration: 1,
		Timers: []v1.Timer{{Name: TimerTimeout, Deadline: metav1.NewTime(deadline), Epoch: 9}}}
	m := NewEngine(cfg).New(st)
	res := m.Resume(t0)
	if res.Epoch != 9 || len(res.Timers) != 1 || !res.Timers[0].Deadline.Equal(deadline) {
		t.Fatalf("resume %+v", res)
	}
	// The previous process's last plan may not have run: ensure again.
	res = m.Handle(Input{Kind: Signal}, starting(1), t0)
	if res.Plan == nil || !res.Plan.Ensure {
		t.Fatalf("no ensure after resume: %+v", res.Plan)
	}
	// The original deadline fires the timeout.
	res = m.Handle(Input{Kind: TimerFired, Timer: TimerTimeout, Epoch: 9}, starting(1), deadline)
	if res.To != Degraded {
		t.Fatalf("resumed timeout led to %s", res.To)
	}
	// An unknown state starts over as Pending.
	if m := NewEngine(cfg).New(&v1.PostgresqlStatus{State: "Frobnicating"}); m.State() != Pending {
		t.Errorf("unknown state resumed as %s", m.State())
	}
}

// TestEngineSurvivesPanickingCallback: a panic inside a transition reaches
// the caller (the loop records it on that cluster) and leaves the shared
// engine usable for every other machine.
func TestEngineSurvivesPanickingCallback(t *testing.T) {
	cfg := writeAtOnce()
	e := NewEngine(cfg)
	bad := e.New(nil)
	bad.st.History = nil
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		// A nil config makes enter_Creating's timer arithmetic panic.
		bad.cfg = nil
		bad.Handle(Input{Kind: Signal}, starting(1), t0)
	}()
	good := e.New(nil)
	if res := good.Handle(Input{Kind: Signal}, starting(1), t0); res.To != Creating {
		t.Fatalf("after a panic elsewhere the engine took %s to %s", Pending, res.To)
	}
}
