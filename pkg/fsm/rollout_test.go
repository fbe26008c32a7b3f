package fsm

import (
	"fmt"
	"testing"
	"time"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// checkRollout returns an error when one of rollout's invariants does not
// hold (rollout.go); the script runner calls it after every input.
func checkRollout(m *Machine) error {
	r, st := &m.roll, &m.st
	switch {
	case r.state != NotRolling && st.State != Creating && st.State != Updating && st.State != Degraded:
		return fmt.Errorf("rollout: %s in %s", r.state, st.State)
	case r.blocked && r.state != Queued:
		return fmt.Errorf("rollout: blocked while %s", r.state)
	case r.blocked && m.hasTimer(TimerTimeout):
		return fmt.Errorf("rollout: blocked with a timeout pending")
	case r.blocked && !m.out.troubled && st.Reason != ReasonRolloutQueued:
		return fmt.Errorf("rollout: blocked with reason %s", st.Reason)
	case r.stepped:
		return fmt.Errorf("rollout: stepped left set after the input")
	}
	return nil
}

// A restarted operator resumes a cluster that waited for a rollout slot
// with a new pod template (status.reason RolloutQueued): the resume's
// ensure keeps the StatefulSet's template while no slot is its, and the
// input that brings the slot writes it.
func TestResumedQueuedKeepsTemplate(t *testing.T) {
	cfg := writeAtOnce()
	st := &v1.PostgresqlStatus{State: Updating, Epoch: 6, ObservedGeneration: 1, Reason: ReasonRolloutQueued,
		Message: "waiting for a rollout slot"}
	m := NewEngine(cfg).New(st)
	m.Resume(t0)
	waiting := with(ready(1), func(f *Facts) {
		f.ObjectsCurrent, f.TemplateChanged, f.RolloutWait = false, true, "waiting for a rollout slot"
	})
	res := m.Handle(Input{Kind: Signal}, waiting, t0)
	if p := res.Plan; p == nil || !p.Ensure || !p.KeepPodTemplate {
		t.Fatalf("resumed while waiting: plan %+v, want an ensure that keeps the template", p)
	}
	if res.Rollout != Queued {
		t.Errorf("rollout %s, want queued", res.Rollout)
	}
	m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, waiting, t0)

	slot := waiting
	slot.RolloutWait = ""
	res = m.Handle(Input{Kind: Signal}, slot, t0.Add(time.Second))
	if p := res.Plan; p == nil || !p.Ensure || p.KeepPodTemplate {
		t.Fatalf("with a slot: plan %+v, want an ensure that writes the template", p)
	}
	if res.Rollout != Rolling {
		t.Errorf("rollout %s, want rolling", res.Rollout)
	}
}
