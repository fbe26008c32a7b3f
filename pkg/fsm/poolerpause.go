package fsm

import (
	"slices"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// A switchover of a cluster with a primary connection pooler pauses the
// pooler's pods (PgBouncer PAUSE), switches, waits until the master Service
// routes to the new primary and resumes them, all inside the switchover's
// effect (indb.Switchover), each step under its own deadline: the
// pause lasts as long as Patroni's switch and no loop round-trip longer.
// The machine's part is that a pause never outlives the switchover:
//
//  1. The plan that asks for the switchover writes status.poolerPause
//     first (its status step runs before its effects), and the effect
//     pauses only while the resource's status records it. So a pause is
//     always on record.
//  2. Once the plan carrying the switchover reported, failed or not (or
//     when a restarted operator reads the record back), every plan asks
//     for the poolers' resume (Plan.ResumePoolers, idempotent: RESUME of
//     a pooler that is not paused succeeds) until one carrying it
//     succeeds; only then is the record removed. A failed resume is a
//     failed plan: retried with backoff, the cluster not Running meanwhile.
//  3. A new switchover asked meanwhile takes the record over (its own
//     resume follows it).
//
// A restart of the primary for a setting (afterRestartMember) is paused
// for the same way, recorded as a pause from and to the primary itself
// (indb.RestartMembers): its clients wait for the restart instead of
// losing their connections' transactions.

// pauseFor records the pause of the poolers for the switchover s, when
// the spec enables the primary's pooler.
func (m *Machine) pauseFor(s *Switchover) {
	if !m.eng.call.facts.PausePooler {
		return
	}
	if p := m.st.PoolerPause; p != nil && p.From == s.From && p.To == s.To {
		return
	}
	m.st.PoolerPause = &v1.PoolerPause{From: s.From, To: s.To}
	m.out.changed()
}

// pauseForRestart records the pause of the poolers for the restart of
// ref when it is the primary.
func (m *Machine) pauseForRestart(ref *PodRef) {
	if ref.Name == m.eng.call.facts.Primary {
		m.pauseFor(&Switchover{From: ref.Name, To: ref.Name})
	}
}

// pausing reports whether the plans carry what pauses the poolers: a
// switchover, or the restart of the member the pause is recorded for.
func (m *Machine) pausing() bool {
	if m.out.switchover != nil {
		return true
	}
	p := m.st.PoolerPause
	return p != nil && p.From == p.To && slices.ContainsFunc(m.out.restart, func(r PodRef) bool { return r.Name == p.From })
}

// notePause asks for the poolers' resume while a pause is on record and
// nothing that pauses them is carried (2, 3).
func (m *Machine) notePause() {
	m.out.resumePoolers = m.st.PoolerPause != nil && !m.pausing()
}

// poolersResumed removes the record of the pause: a plan carrying the resume
// succeeded, and nothing that pauses them was asked since.
func (m *Machine) poolersResumed() {
	if m.st.PoolerPause == nil || m.pausing() {
		return
	}
	m.st.PoolerPause = nil
	m.out.changed()
}

// pauseCause names what the pause p was recorded for.
func pauseCause(p *v1.PoolerPause) string {
	if p.From == p.To {
		return "the restart of " + p.From
	}
	return "the switchover from " + p.From + " to " + p.To
}
