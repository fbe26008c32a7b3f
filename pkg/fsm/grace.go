package fsm

import (
	"fmt"
)

// graceLoss gives a Running cluster that lost a Ready pod or its primary
// Config.LossGrace to recover before podsLost takes it to Degraded. A
// planned switchover leaves no primary while Patroni hands its leader lock
// over, and the former primary then restarts PostgreSQL as a replica, not
// Ready for seconds; a failed-over primary that rejoins (pg_rewind) does
// the same. Neither is worth a Degraded state, two history entries and two
// Events, each time.
//
// It runs after fireObserved, so podsLost has had its chance: a cluster still
// Running here is either converged or within its grace.
//  1. Converged: a pending grace is cancelled, and the reason and message
//     are Running's again. No history entry, no Event: at most a status
//     write.
//  2. A loss: the lossGrace timer is armed once, when the loss is first
//     seen; its deadline stays while the loss lasts, however its cause
//     changes (a switchover goes from "no primary" to "1/2 instances
//     ready"). The timer is in status like the others, so a restarted
//     operator re-arms it with its deadline (Resume).
//  3. Meanwhile status tells the truth: the ready count and the primary
//     follow the facts (project), the reason and message name what is
//     missing, and the Ready condition is False (project); the state is
//     still Running, and the Degraded condition still False.
//
// When the timer fires, afterLossGrace lets podsLost fire if the loss
// still holds, with the reason and message it always had. A loss with a
// concrete cause (Facts.Stuck) does not wait: podsLost's guard fires it at
// once, since an unschedulable pod or a crash loop is no blip. A cause
// older than the newest pod (Facts.StuckStale: a FailedCreate Event the
// pod made since may have outlived) is named but waits for the grace.
func (m *Machine) graceLoss() {
	st, f := &m.st, &m.eng.call.facts
	if st.State != Running {
		return
	}
	if f.converged() {
		m.cancelTimer(TimerLossGrace)
		if st.Reason != ReasonReady {
			st.Reason, st.Message = m.observeReason(EventPodsReady)
			m.deferWrite()
		}
		return
	}
	if !m.hasTimer(TimerLossGrace) {
		m.setTimer(TimerLossGrace, m.cfg.LossGrace)
	}
	reason, msg := stuck(f)
	msg = fmt.Sprintf("%s; Degraded unless it recovers within the %s loss grace", msg, m.cfg.LossGrace)
	m.say(reason, msg)
}
