package fsm

import (
	"fmt"
	"slices"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// deferWrite records a status change that may wait Config.StatusDelay for its
// write: progress (counts, the cause shown, conditions, history) rather
// than what a restart needs (state, epoch, timers, what was applied). A
// plan made meanwhile for any other reason writes it too; the flush timer
// writes it otherwise. So a create whose pods come up within the delay
// writes its status three times (accepted, objects created, Running), not
// once per pod event.
func (m *Machine) deferWrite() {
	if m.cfg.StatusDelay <= 0 {
		m.out.changed()
		return
	}
	m.out.deferred = true
	if !m.soft.has(TimerFlush) {
		m.setSoftTimer(TimerFlush, m.cfg.StatusDelay)
	}
}

// say shows reason and message in status, when they differ from what it
// shows, with the deferred write (deferWrite).
func (m *Machine) say(reason, message string) {
	if m.st.Reason != reason || m.st.Message != message {
		m.st.Reason, m.st.Message = reason, message
		m.deferWrite()
	}
}

// project copies the observed counts into status and keeps the conditions,
// the reason and the message in line with the state and the facts; it
// shows how the backup repository's archiving goes (archiving.go). It
// decides nothing: what starts work (a backup, a rotation) is a step of its
// own (pipeline.go).
func (m *Machine) project() {
	if m.st.State == Deleted {
		return
	}
	f := &m.eng.call.facts
	st := &m.st
	if st.DesiredInstances != f.Desired || st.ReadyInstances != f.Ready || st.Primary != f.Primary || st.Ready == "" {
		st.DesiredInstances, st.ReadyInstances, st.Primary = f.Desired, f.Ready, f.Primary
		st.Ready = fmt.Sprintf("%d/%d", f.Ready, f.Desired)
		m.deferWrite()
	}
	// In Degraded the message follows the live cause, so a user sees the
	// current reason, not the one of an hour ago.
	if st.State == Degraded && f.Stuck != "" {
		m.say(f.StuckReason, f.Stuck)
	}
	if st.State == Degraded && !m.out.troubled {
		m.showQueued()
	}
	if st.State == Creating || st.State == Updating {
		m.showCause()
	}
	if m.serving() {
		m.inDatabaseConditions()
		m.archiving()
		if v := volumesStatus(f); (v != nil || st.Volumes != nil) && !apiequality.Semantic.DeepEqual(v, st.Volumes) {
			st.Volumes = v
			m.deferWrite()
		}
	}
	state := st.State
	m.condition(v1.ConditionReady, state == Running && !m.hasTimer(TimerLossGrace), st.Reason, st.Message)
	m.condition(v1.ConditionProgressing, state == Creating || state == Updating || state == Deleting, st.Reason, st.Message)
	m.condition(v1.ConditionDegraded, state == Degraded || state == Invalid, st.Reason, st.Message)
}

// showCause keeps the reason and message of Creating and Updating, which
// `kubectl get pg` shows, on what holds the cluster back now:
//  1. a failed plan or a panic keeps its own reason until a retry's
//     effects succeed (troubled): the user must see pgloop's own trouble;
//  2. a replacement in flight keeps "replacing pod ...": the pods it
//     names are the ones whose cause the facts may still show;
//  3. a cluster blocked on the fleet's rollout budget says so
//     (RolloutQueued, Facts.RolloutWait): every pod serves, only a slot is
//     missing;
//  4. a concrete cause of stuck pods (Facts.Stuck) is shown as soon as it
//     is observed, while the state waits for its timeout;
//  5. once that cause is gone, the state's own words come back.
func (m *Machine) showCause() {
	st, f := &m.st, &m.eng.call.facts
	o := &m.out
	if o.troubled || len(o.replace) > 0 || len(o.restarted) > 0 || o.switchedFrom != "" {
		return
	}
	reason, msg := f.StuckReason, f.Stuck
	switch {
	case m.roll.windowWait:
		reason, msg = ReasonMaintenanceWindow, f.MaintenanceWait
	case m.roll.blocked:
		reason, msg = ReasonRolloutQueued, f.RolloutWait
	case f.Stuck == "" && f.converged() && !applied(st, f):
		// The pods are there; what runs inside PostgreSQL is not yet.
		reason, _ = m.progress()
		msg = m.outOfSync()
	case f.Stuck == "":
		// The state's own reason ("replacing pod ..." included) stays.
		if st.State == Creating && st.Reason == ReasonCreating || st.State == Updating && st.Reason == ReasonUpdating {
			return
		}
		reason, msg = m.progress()
	}
	m.say(reason, msg)
}

// showQueued keeps the reason and message of a Degraded cluster on the
// fleet's rollout budget while it is blocked on it, and on what holds it
// back once it no longer is (rollout.go).
func (m *Machine) showQueued() {
	st, f := &m.st, &m.eng.call.facts
	reason, msg := st.Reason, st.Message
	switch {
	case m.roll.windowWait:
		reason, msg = ReasonMaintenanceWindow, f.MaintenanceWait
	case m.roll.blocked:
		reason, msg = ReasonRolloutQueued, f.RolloutWait
	case st.Reason == ReasonRolloutQueued, st.Reason == ReasonMaintenanceWindow:
		reason, msg = stuck(f)
	}
	m.say(reason, msg)
}

func (m *Machine) condition(typ string, on bool, reason, message string) {
	status := metav1.ConditionFalse
	if on {
		status = metav1.ConditionTrue
	}
	m.conditionStatus(typ, status, reason, message)
}

// conditionStatus sets condition typ, with the deferred write when it
// changes.
func (m *Machine) conditionStatus(typ string, status metav1.ConditionStatus, reason, message string) {
	if reason == "" {
		reason = m.st.State
	}
	if c := meta.FindStatusCondition(m.st.Conditions, typ); c != nil &&
		c.Status == status && c.Reason == reason && c.Message == message && c.ObservedGeneration == m.st.ObservedGeneration {
		return
	}
	m.st.Conditions = slices.Clone(m.st.Conditions)
	meta.SetStatusCondition(&m.st.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message,
		ObservedGeneration: m.st.ObservedGeneration, LastTransitionTime: metav1.NewTime(m.eng.call.now),
	})
	m.deferWrite()
}
