package fsm

import (
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// setTimer arms (or re-arms) a timer d from now, in the current epoch. The
// deadline is rounded up to a whole second, the precision status keeps, so
// a resumed timer never fires early.
func (m *Machine) setTimer(name string, d time.Duration) {
	deadline := m.eng.call.now.Add(d)
	if r := deadline.Truncate(time.Second); !r.Equal(deadline) {
		deadline = r.Add(time.Second)
	}
	t := v1.Timer{Name: name, Deadline: metav1.NewTime(deadline), Epoch: m.st.Epoch}
	m.out.changed()
	m.eng.call.res.Timers = append(m.eng.call.res.Timers, TimerOp{Name: name, Deadline: deadline})
	timers := make([]v1.Timer, 0, len(m.st.Timers)+1)
	replaced := false
	for _, old := range m.st.Timers {
		if old.Name == name {
			old, replaced = t, true
		}
		timers = append(timers, old)
	}
	if !replaced {
		timers = append(timers, t)
	}
	m.st.Timers = timers
}

// dropTimer removes the timer name from status (copy-on-write) and reports
// whether it was there.
func (m *Machine) dropTimer(name string) bool {
	if !m.removeTimer(name) {
		return false
	}
	m.out.changed()
	return true
}

// removeTimer removes the timer name from status (copy-on-write), without
// asking for a write, and reports whether it was there.
func (m *Machine) removeTimer(name string) bool {
	i := slices.IndexFunc(m.st.Timers, func(t v1.Timer) bool { return t.Name == name })
	if i < 0 {
		return false
	}
	m.st.Timers = slices.Delete(slices.Clone(m.st.Timers), i, i+1)
	return true
}

func (m *Machine) cancelTimer(name string) {
	if m.dropTimer(name) {
		m.eng.call.res.Timers = append(m.eng.call.res.Timers, TimerOp{Name: name, Cancel: true})
	}
}

// timerAt reports whether the timer name is pending with the deadline at
// (rounded up to the second, as setTimer does).
func (m *Machine) timerAt(name string, at time.Time) bool {
	if r := at.Truncate(time.Second); !r.Equal(at) {
		at = r.Add(time.Second)
	}
	for i := range m.st.Timers {
		if t := &m.st.Timers[i]; t.Name == name {
			return t.Deadline.Time.Equal(at)
		}
	}
	return false
}

// hasTimer reports whether the timer name is pending (in the current
// epoch: a state change drops every timer).
func (m *Machine) hasTimer(name string) bool {
	for i := range m.st.Timers {
		if m.st.Timers[i].Name == name {
			return true
		}
	}
	return false
}

// takeTimer removes the pending timer name of the given epoch and reports
// whether it was pending: a fired timer that is not is stale.
func (m *Machine) takeTimer(name string, epoch int64) bool {
	if epoch != m.st.Epoch {
		return false
	}
	if softTimer(name) {
		return m.dropSoft(name)
	}
	// A fired timer left in status fires again, at once, after a
	// restart, which plans what its event did anyway: its removal alone
	// is not worth a write; the next write takes it along.
	return m.removeTimer(name)
}

// softTimer reports whether the timer name is one status does not keep.
func softTimer(name string) bool { return name == TimerResync || name == TimerFlush }

// setSoftTimer arms (or re-arms) a timer that status does not keep, d from
// now, in the current epoch.
func (m *Machine) setSoftTimer(name string, d time.Duration) {
	deadline := m.eng.call.now.Add(d)
	m.dropSoft(name)
	m.soft = append(m.soft, v1.Timer{Name: name, Deadline: metav1.NewTime(deadline), Epoch: m.st.Epoch})
	m.eng.call.res.Timers = append(m.eng.call.res.Timers, TimerOp{Name: name, Deadline: deadline})
}

// dropSoft removes the soft timer name and reports whether it was there.
func (m *Machine) dropSoft(name string) bool {
	n := len(m.soft)
	m.soft = slices.DeleteFunc(m.soft, func(t v1.Timer) bool { return t.Name == name })
	return len(m.soft) != n
}

// hasSoft reports whether the soft timer name is pending.
func (m *Machine) hasSoft(name string) bool {
	return slices.ContainsFunc(m.soft, func(t v1.Timer) bool { return t.Name == name })
}

// nextResync is how long until the next resync of a cluster resumed in
// Running: the next multiple of the period since it became Running, at
// least a second away.
func (m *Machine) nextResync(now time.Time) time.Duration {
	period := m.cfg.ResyncPeriod
	if m.st.StateSince == nil || period <= 0 {
		return period
	}
	in := now.Sub(m.st.StateSince.Time)
	if in < 0 {
		return period
	}
	d := period - in%period
	if d < time.Second {
		d += period
	}
	return d
}
