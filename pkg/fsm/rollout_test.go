package fsm

import "fmt"

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
