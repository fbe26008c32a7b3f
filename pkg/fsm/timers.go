package fsm

import (
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// setTimer arms (or re-arms) a timer d from now, in the current epoch. The
// deadline is rounded up to a whole second (ceilSecond), the precision
// status keeps, so a resumed timer never fires early.
func (m *Machine) setTimer(name string, d time.Duration) {
	deadline := ceilSecond(m.eng.call.now.Add(d))
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

// ceilSecond rounds t up to a whole second.
func ceilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}

// named matches the timer name.
func named(name string) func(v1.Timer) bool {
	return func(t v1.Timer) bool { return t.Name == name }
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
	i := slices.IndexFunc(m.st.Timers, named(name))
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
	i := slices.IndexFunc(m.st.Timers, named(name))
	return i >= 0 && m.st.Timers[i].Deadline.Time.Equal(ceilSecond(at))
}

// hasTimer reports whether the timer name is pending (in the current
// epoch: a state change drops every timer).
func (m *Machine) hasTimer(name string) bool {
	return slices.ContainsFunc(m.st.Timers, named(name))
}

// takeTimer removes the pending timer name of the given epoch and reports
// whether it was pending: a fired timer that is not is stale.
func (m *Machine) takeTimer(name string, epoch int64) bool {
	if epoch != m.st.Epoch {
		return false
	}
	if softTimer(name) {
		return m.soft.drop(name)
	}
	// A fired timer left in status fires again, at once, after a
	// restart, which plans what its event did anyway: its removal alone
	// is not worth a write; the next write takes it along.
	return m.removeTimer(name)
}

// softTimer reports whether the timer name is one status does not keep.
func softTimer(name string) bool {
	return name == TimerResync || name == TimerFlush || name == TimerConfigCheck
}

// softTimers are the timers of the current epoch that status does not
// keep (softTimer): the resync, the status flush and the check of a
// configuration Patroni applies. Writing them would cost a status write
// each time they are armed; a restarted operator arms them afresh, or asks
// for the effects again (Resume), instead. Their deadlines are not
// rounded: nothing stores them.
type softTimers []v1.Timer

// drop removes the timer name and reports whether it was there.
func (s *softTimers) drop(name string) bool {
	n := len(*s)
	*s = slices.DeleteFunc(*s, named(name))
	return len(*s) != n
}

// has reports whether the timer name is pending.
func (s softTimers) has(name string) bool { return slices.ContainsFunc(s, named(name)) }

// setSoftTimer arms (or re-arms) the soft timer name d from now, in the
// current epoch.
func (m *Machine) setSoftTimer(name string, d time.Duration) {
	deadline := m.eng.call.now.Add(d)
	m.soft.drop(name)
	m.soft = append(m.soft, v1.Timer{Name: name, Deadline: metav1.NewTime(deadline), Epoch: m.st.Epoch})
	m.eng.call.res.Timers = append(m.eng.call.res.Timers, TimerOp{Name: name, Deadline: deadline})
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
