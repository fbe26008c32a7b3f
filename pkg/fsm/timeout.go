package fsm

// timeoutCue is what happened, during an input, that bears on the timeout
// of Creating and Updating (TimerTimeout). keepTimeout decides on it.
type timeoutCue uint8

const (
	// effectsReported: the state's effects reported, whatever their
	// outcome (planDone).
	effectsReported timeoutCue = iota
	// specEdited: the spec was edited while Creating or Updating, a
	// self-transition (afterSpecSeen).
	specEdited
	// waitNoted: noteRollout or noteWindow worked out whether the cluster
	// waits for a slot of the fleet's rollout budget (rolloutMemory.blocked)
	// or for a maintenance window (rolloutMemory.windowWait); it did not
	// wait for it before this input.
	waitNoted
	// waitOver: the same, for a cluster that waited for it before this
	// input: unless it still waits, its wait is over.
	waitOver
)

// waitCue is the cue of noteRollout or noteWindow for a cluster that waited
// (waited) or not before this input.
func waitCue(waited bool) timeoutCue {
	if waited {
		return waitOver
	}
	return waitNoted
}

// keepTimeout arms or cancels the timeout of Creating and Updating on cue:
// the one place that decides it. The timeout measures the cluster, not the
// queue in front of it nor the calendar.
//  1. Only Creating and Updating have a timeout; a state change drops it
//     with every timer of the state.
//  2. While the cluster waits for a slot of the fleet's rollout budget or
//     for a maintenance window (rolloutMemory.waiting), it is not pending:
//     no cluster is declared Degraded for the time it waited for pgloop's
//     own budget or for its window.
//  3. A spec edit cancels it: the state starts over, and the edit's
//     effects arm it again (4).
//  4. Otherwise it is armed, in full, unless it is pending, when the
//     state's effects report, whatever their outcome (the first report
//     arms it: a cluster whose plan waited behind a thousand others for a
//     worker and the API's rate is not timed out for that wait), and when
//     a wait of 2 is over.
//
// A restarted operator reads the waits of 2 back from status.reason
// (Engine.New), and the pending timeout from status.timers (Resume).
func (m *Machine) keepTimeout(cue timeoutCue) {
	switch {
	case m.st.State != Creating && m.st.State != Updating:
	case cue == specEdited || m.roll.waiting():
		m.cancelTimer(TimerTimeout)
	case (cue == effectsReported || cue == waitOver) && !m.hasTimer(TimerTimeout):
		m.setTimer(TimerTimeout, m.timeoutFor(m.st.State))
	}
}
