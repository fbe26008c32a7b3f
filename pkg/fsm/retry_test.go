package fsm

import (
	"errors"
	"testing"
	"time"
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
