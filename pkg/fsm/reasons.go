package fsm

import (
	"fmt"
	"strings"
	"time"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

func (m *Machine) observeReason(event string) (string, string) {
	f := &m.eng.call.facts
	switch event {
	case EventCleanedUp:
		if f.Gone {
			return ReasonCleanupFinished, "resource gone"
		}
		return ReasonCleanupFinished, "objects deleted, finalizer removed"
	case EventDelete:
		return ReasonDeleting, "deletion requested"
	case EventInvalidSpec:
		return ReasonInvalidSpec, f.SpecError
	case EventCreate:
		return ReasonCreating, fmt.Sprintf("creating %d instances", f.Desired)
	case EventSpecChanged:
		if m.st.State == Invalid || m.st.State == Creating {
			// specChanged leads to Creating from there.
			return m.observeReason(EventCreate)
		}
		return ReasonUpdating, fmt.Sprintf("applying generation %d", f.Generation)
	case EventPodsReady:
		return ReasonReady, fmt.Sprintf("%d/%d instances ready, primary %s", f.Ready, f.Desired, f.Primary)
	case EventOutOfSync:
		return ReasonOutOfSync, m.outOfSync()
	}
	return stuck(f)
}

// stuck names why a cluster is not converged, from the concrete cause when
// one was observed.
func stuck(f *Facts) (string, string) {
	switch {
	case f.Stuck != "":
		return f.StuckReason, f.Stuck
	case !f.ObjectsCurrent:
		return ReasonNotConverged, fmt.Sprintf("objects do not match the spec yet, %d/%d instances ready", f.Ready, f.Desired)
	case f.Ready < f.Desired:
		return ReasonPodsNotReady, fmt.Sprintf("%d/%d instances ready", f.Ready, f.Desired)
	}
	if f.NoPrimary != "" {
		return ReasonNoPrimary, f.NoPrimary
	}
	return ReasonNoPrimary, "no pod holds the primary role"
}

func (m *Machine) timeoutFor(state string) time.Duration {
	if state == Updating {
		return m.cfg.UpdateTimeout
	}
	return m.cfg.CreateTimeout
}

// outOfSync says what a Running cluster that serves updates: its objects
// and pods, and what it applies inside PostgreSQL.
func (m *Machine) outOfSync() string {
	st, f := &m.st, &m.eng.call.facts
	var what []string
	switch {
	case f.ObjectsCurrent:
	case f.Outdated > 0:
		what = append(what, fmt.Sprintf("outdated pods to replace (%d)", f.Outdated))
	default:
		what = append(what, "objects to update")
	}
	if SyncDue(st, f) {
		what = append(what, "roles and databases to sync")
	}
	if ConfigDue(st, f) {
		what = append(what, "Patroni configuration to apply")
	}
	if len(f.PendingRestart) > 0 {
		what = append(what, "restart pending on "+strings.Join(f.PendingRestart, ", "))
	}
	if len(f.Volumes) > 0 {
		what = append(what, volumesMessage(f))
	}
	if f.Pooler != "" {
		what = append(what, f.Pooler)
	}
	if p := st.PoolerPause; p != nil {
		what = append(what, "the primary's connection pooler to resume (paused for "+pauseCause(p)+")")
	}
	msg := strings.Join(what, "; ")
	if f.NoTarget != "" {
		msg += " (waiting: " + f.NoTarget + ")"
	}
	return msg
}

// volumesMessage says where the growth of the volumes is, claim by claim.
func volumesMessage(f *Facts) string {
	claims := make([]string, len(f.Volumes))
	for i, c := range f.Volumes {
		have := c.Capacity
		if have == "" {
			have = "?"
		}
		claims[i] = fmt.Sprintf("%s %s of %s (%s)", c.Name, have, f.VolumeSize, c.Phase)
		if c.Message != "" && c.Phase != v1.ClaimToResize && c.Phase != v1.ClaimResizing {
			claims[i] = fmt.Sprintf("%s %s of %s (%s: %s)", c.Name, have, f.VolumeSize, c.Phase, c.Message)
		}
	}
	return "volumes growing to " + f.VolumeSize + ": " + strings.Join(claims, ", ")
}

// progress is the reason and message of Creating or Updating when nothing
// holds the cluster back.
func (m *Machine) progress() (string, string) {
	if m.st.State == Creating {
		return m.observeReason(EventCreate)
	}
	return m.observeReason(EventSpecChanged)
}
