package fsm

import (
	"testing"
	"time"
)

// TestNoPrimaryReason: a cluster Degraded for want of a primary says why
// there is none, as the informers observed it: at once without a loss
// grace, and when the grace ran out with it.
func TestNoPrimaryReason(t *testing.T) {
	const why = "no member holds Patroni's leader lock (c-leader)"
	noPrimary := with(ready(1), func(f *Facts) { f.Primary, f.NoPrimary = "", why })
	for _, grace := range []time.Duration{0, 10 * time.Second} {
		t.Run("loss grace "+grace.String(), func(t *testing.T) {
			cfg := writeAtOnce()
			cfg.LossGrace = grace
			m := NewEngine(cfg).New(nil)
			settle(m, ready(1), t0)
			m.Handle(Input{Kind: Signal}, noPrimary, t0.Add(time.Second))
			if grace > 0 {
				m.Handle(Input{Kind: TimerFired, Timer: TimerLossGrace, Epoch: m.Status().Epoch}, noPrimary, t0.Add(time.Second+grace))
			}
			if st := m.Status(); st.State != Degraded || st.Reason != ReasonNoPrimary || st.Message != why {
				t.Errorf("state %s reason %q message %q", st.State, st.Reason, st.Message)
			}
		})
	}
}
