package fsm

import (
	"errors"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
)

// retryDeadline is the pending retry timer's deadline; the zero time when
// there is none.
func retryDeadline(m *Machine) time.Time {
	for _, t := range m.Status().Timers {
		if t.Name == TimerRetry {
			return t.Deadline.Time
		}
	}
	return time.Time{}
}

// TestFailedStatusWriteBacksOff: a plan that writes only the status and
// fails is not planned again at once (the loop would retry as fast as the
// API server refuses, starving every other cluster's writes through the
// shared client rate limiter): the status stays dirty and goes with the
// retry timer's plan, the latest snapshot, with a backoff that grows while
// the writes fail and starts over once one succeeds.
func TestFailedStatusWriteBacksOff(t *testing.T) {
	cfg := writeAtOnce()
	refused := errors.New("step status: update status of postgresql ns/c: connection refused")
	// Each case's facts(n) differ from one observation to the next in the
	// ready count (for Running, in both counts, so it stays converged): the
	// status changes without a transition.
	tests := []struct {
		name  string
		from  string
		facts func(n int32) Facts
		// wantState after the first failure; a Running cluster goes to
		// Degraded, and that transition's Events make one more plan.
		wantState      string
		wantTransition bool
		// what the retry plans besides the status
		wantEnsure, wantCleanup bool
		// after a success: the state, and whether the backoff starts
		// over (Degraded keeps backing off while its pods are stuck).
		wantRecovered string
		wantReset     bool
	}{
		{name: "running", from: Running,
			facts:     func(n int32) Facts { return with(ready(1), func(f *Facts) { f.Desired, f.Ready = 2+n%2, 2+n%2 }) },
			wantState: Degraded, wantTransition: true, wantEnsure: true, wantRecovered: Running, wantReset: true},
		{name: "creating", from: Creating,
			facts:     func(n int32) Facts { return with(starting(1), func(f *Facts) { f.Ready = n % 2 }) },
			wantState: Creating, wantEnsure: true, wantRecovered: Creating, wantReset: true},
		{name: "updating", from: Updating,
			facts: func(n int32) Facts {
				return with(ready(1), func(f *Facts) { f.Ready, f.ObjectsCurrent = n%2, false })
			},
			wantState: Updating, wantEnsure: true, wantRecovered: Updating, wantReset: true},
		{name: "degraded", from: Degraded,
			facts:     func(n int32) Facts { return with(unschedulable(1), func(f *Facts) { f.Ready = n % 2 }) },
			wantState: Degraded, wantEnsure: true, wantRecovered: Degraded},
		{name: "invalid", from: Invalid,
			facts:     func(n int32) Facts { return with(invalid(1, "bad"), func(f *Facts) { f.Ready = n % 2 }) },
			wantState: Invalid, wantRecovered: Invalid, wantReset: true},
		{name: "deleting", from: Deleting,
			facts:     func(n int32) Facts { return with(starting(1), func(f *Facts) { f.Deleting, f.Ready = true, n%2 }) },
			wantState: Deleting, wantCleanup: true, wantRecovered: Deleted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := inState(t, &cfg, tc.from)
			now := t0
			var n int32
			observeNext := func() Result {
				t.Helper()
				n++
				now = now.Add(100 * time.Millisecond)
				return m.Handle(Input{Kind: Signal}, tc.facts(n), now)
			}
			// fail reports the plan failed and checks the write is held:
			// a retry timer is armed (and handed to the loop), and no
			// status-only plan is made until it fires.
			fail := func(p *Plan) time.Duration {
				t.Helper()
				// On a whole second, so the delay is not rounded up.
				if r := now.Truncate(time.Second); !r.Equal(now) {
					now = r.Add(time.Second)
				}
				failed := now
				res := m.Handle(Input{Kind: PlanDone, PlanID: p.ID, Err: refused}, tc.facts(n), now)
				deadline := retryDeadline(m)
				if deadline.IsZero() {
					t.Fatalf("no retry timer after a failed status write (timers %v)", m.Status().Timers)
				}
				if !slices.Contains(res.Timers, TimerOp{Name: TimerRetry, Deadline: deadline}) {
					t.Errorf("retry timer at %s not handed to the loop: %+v", deadline, res.Timers)
				}
				if res.Plan != nil {
					t.Fatalf("failed status write planned again at once: %+v", res.Plan)
				}
				for range 5 {
					if res := observeNext(); res.Plan != nil {
						t.Fatalf("status change planned before the retry timer fired: %+v", res.Plan)
					}
				}
				return deadline.Sub(failed)
			}
			// retry fires the retry timer at its deadline: exactly one
			// plan, carrying the latest status.
			retry := func() *Plan {
				t.Helper()
				now = retryDeadline(m)
				res := m.Handle(Input{Kind: TimerFired, Timer: TimerRetry, Epoch: m.Status().Epoch}, tc.facts(n), now)
				p := res.Plan
				if p == nil || p.Status == nil {
					t.Fatalf("retry fired: plan %+v, want one with the status", p)
				}
				if p.Ensure != tc.wantEnsure || p.Cleanup != tc.wantCleanup {
					t.Errorf("retry plan ensure=%v cleanup=%v, want %v %v", p.Ensure, p.Cleanup, tc.wantEnsure, tc.wantCleanup)
				}
				if !equality.Semantic.DeepEqual(p.Status, m.Status()) || p.Status.ReadyInstances != tc.facts(n).Ready {
					t.Errorf("retry plan's snapshot is not the latest status: ready %d, want %d", p.Status.ReadyInstances, tc.facts(n).Ready)
				}
				return p
			}

			// A status-only plan fails.
			p := observeNext().Plan
			if p == nil || p.Status == nil || p.Ensure || p.Cleanup || len(p.Records) != 0 {
				t.Fatalf("first plan %+v, want the status alone", p)
			}
			if tc.wantTransition {
				res := m.Handle(Input{Kind: PlanDone, PlanID: p.ID, Err: refused}, tc.facts(n), now)
				if got := firedEvents(res.Fired); !slices.Equal(got, []string{EventEffectsFailed}) {
					t.Fatalf("fired %v: want %s alone, no flapping back", got, EventEffectsFailed)
				}
				// The transition's Event (and status) go at once, once.
				p = res.Plan
				if p == nil || len(p.Records) != 1 || !p.Records[0].Warning || p.Status == nil {
					t.Fatalf("plan after %s -> %s: %+v", tc.from, m.State(), p)
				}
			}
			var delays []time.Duration
			for range 4 {
				delays = append(delays, fail(p))
				if m.State() != tc.wantState {
					t.Fatalf("state %s after a failed status write, want %s", m.State(), tc.wantState)
				}
				p = retry()
			}
			for i := 1; i < len(delays); i++ {
				if delays[i] <= delays[i-1] {
					t.Errorf("backoff does not grow: %v", delays)
				}
			}
			if delays[0] != cfg.RetryBase {
				t.Errorf("first delay %s, want %s", delays[0], cfg.RetryBase)
			}

			// The API server is back: the retry's plan succeeds.
			res := m.Handle(Input{Kind: PlanDone, PlanID: p.ID}, tc.facts(n), now)
			for i := 0; res.Plan != nil && i < 3; i++ {
				res = m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, tc.facts(n), now)
			}
			if m.State() != tc.wantRecovered {
				t.Fatalf("state %s after a successful retry, want %s", m.State(), tc.wantRecovered)
			}
			if !tc.wantReset {
				return
			}
			if a := m.Status().Attempt; a != 0 {
				t.Errorf("attempt %d after a success, want 0", a)
			}
			// Nothing held any more: the next change is written at once,
			// and if it fails the backoff starts over.
			p = observeNext().Plan
			if p == nil || p.Status == nil {
				t.Fatalf("status change after a success: plan %+v", p)
			}
			if p.Ensure {
				p = m.Handle(Input{Kind: PlanDone, PlanID: p.ID}, tc.facts(n), now).Plan
				if p == nil {
					p = observeNext().Plan
				}
			}
			if tc.wantTransition {
				p = m.Handle(Input{Kind: PlanDone, PlanID: p.ID, Err: refused}, tc.facts(n), now).Plan
			}
			if d := fail(p); d != cfg.RetryBase {
				t.Errorf("after a success the backoff starts at %s, want %s", d, cfg.RetryBase)
			}
		})
	}
}

// TestDegradedRetriesDouble: in Degraded each retry whose ensure effects
// fail waits twice as long as the one before, as docs/fsm.md says (the
// failure used to count as an attempt too: four times per cycle).
func TestDegradedRetriesDouble(t *testing.T) {
	cfg := writeAtOnce()
	m := inState(t, &cfg, Degraded)
	failed := errors.New("step ensure: create statefulset: connection refused")
	f := unschedulable(1)
	var delays []time.Duration
	for range 5 {
		now := retryDeadline(m)
		if now.IsZero() {
			t.Fatalf("no retry timer pending (timers %v)", m.Status().Timers)
		}
		res := m.Handle(Input{Kind: TimerFired, Timer: TimerRetry, Epoch: m.Status().Epoch}, f, now)
		if res.Plan == nil || !res.Plan.Ensure {
			t.Fatalf("retry at %s: plan %+v, want the ensure effects", now, res.Plan)
		}
		m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID, Err: failed}, f, now)
		delays = append(delays, retryDeadline(m).Sub(now))
	}
	for i := 1; i < len(delays); i++ {
		if delays[i] != 2*delays[i-1] {
			t.Errorf("delays %v: want each twice the one before", delays)
			break
		}
	}
	if m.State() != Degraded {
		t.Errorf("state %s, want Degraded", m.State())
	}
}

// writeAtOnce is the default configuration with no StatusDelay: every
// status change has its plan, as the tests of the outbox expect.
func writeAtOnce() Config {
	cfg := DefaultConfig()
	cfg.StatusDelay = 0
	return cfg
}
