package fsm

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// notePrimary follows the primary from one observation to the next and
// records a change of it: a switchover (A, then B) or a failover (A, then
// none while the old leader is not Ready, then B) gives one "A -> B".
//
// status.primary follows the facts (project), so a failover clears it in
// between; status.lastPrimary keeps A meanwhile, until a primary is known
// again. It is status rather than a field of the Machine so that a change
// spanning a restart of the operator, or a handover of its leadership, is
// still recorded; and it is set only while no primary is known, so it
// shows exactly when it says something. The first primary of a cluster,
// and the same pod again, are no change.
//
// A change is no FSM transition: the state stays, and looplab/fsm refuses
// a self-transition (NoTransitionError). It is recorded here, before the
// fact-driven events fire, so that a failover that also lets the cluster
// converge reads "primaryChanged, then podsReady" in the history.
func (m *Machine) notePrimary() {
	f, st := &m.eng.call.facts, &m.st
	if st.State == Deleted {
		return
	}
	last := st.Primary
	if last == "" {
		last = st.LastPrimary
	}
	if f.Primary == "" {
		if st.Primary != "" {
			st.LastPrimary = st.Primary
			m.out.changed()
		}
		return
	}
	if last != "" && last != f.Primary {
		m.primaryChanged(last, f.Primary)
	}
	if st.LastPrimary != "" {
		st.LastPrimary = ""
		m.out.changed()
	}
}

// primaryChanged records that the primary moved from one pod to another:
// a history entry from and to the current state, a Normal Kubernetes
// Event, and a Fired entry (so the transitions metric counts switchovers
// and failovers). A Running cluster's message names the primary: it is
// brought up to date.
func (m *Machine) primaryChanged(from, to string) {
	c, st := &m.eng.call, &m.st
	msg := fmt.Sprintf("primary changed from %s to %s", from, to)
	m.addHistory(v1.Transition{From: st.State, To: st.State, Event: EventPrimaryChanged, Time: metav1.NewTime(c.now),
		Reason: ReasonPrimaryChanged, Message: msg})
	c.records = append(c.records, Record{Reason: ReasonPrimaryChanged, Message: msg})
	c.res.Fired = append(c.res.Fired, Fired{Event: EventPrimaryChanged, From: st.State, To: st.State})
	if st.State == Running && st.Reason == ReasonReady {
		_, st.Message = m.observeReason(EventPodsReady)
	}
}
