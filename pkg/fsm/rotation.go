package fsm

import (
	"fmt"
	"slices"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// TimerPasswordRotation fires when the next scheduled password rotation
// is due (status.passwordRotation.nextRotation): the deadline is in
// status, and passwordRotation arms the timer again from there after a
// state change or a restart.
const TimerPasswordRotation = "passwordRotation"

// Reasons of the password rotation's Events.
const (
	ReasonPasswordRotationStarted = "PasswordRotationStarted"
	ReasonPasswordsRotated        = "PasswordsRotated"
)

// RotationFacts are what the scheduled password rotation needs to know of
// a cluster.
type RotationFacts struct {
	// Global and Listed are the users to rotate, with their modes
	// (v1.RotationNewRole, v1.RotationInPlace): with the operator's
	// --password-rotation and without it (v1.PostgresqlSpec.RotatedUsers).
	Global, Listed map[string]string
	// Rotated is, by user, the rotation whose credentials the user's
	// Secret holds (v1.AnnotationPasswordRotated); a user whose Secret has
	// none, or is not cached, is not there.
	Rotated map[string]string
}

// passwordRotation keeps the cluster's password rotation schedule
// (docs/user-guide.md, "Password rotation"), in status.passwordRotation:
//  1. the rotation under way ends once every user it rotates still to be
//     rotated has a Secret that took it: the roles it created are
//     recorded, those it dropped forgotten;
//  2. a cluster with users to rotate has a next rotation, at most an
//     interval away (a shorter interval brings it closer);
//  3. when it is due, a Running cluster starts one, unless one is under
//     way: status names its users and the role each gets (the user
//     itself in place, else a new role named after the user and the
//     date), and the roles past their retention it drops; the sync its ID
//     asks for (pkg/facts puts it in the sync's hash) does it, off the
//     loop, through the Secrets as a pgloop.dev/rotate-password request
//     does.
//
// A restarted operator reads the schedule from status and the Secrets'
// pgloop.dev/password-rotated annotations: it neither rotates twice nor
// loses a rotation under way. A standby rotates nothing (its roles are
// its source's).
func (m *Machine) passwordRotation() {
	st, c := &m.st, &m.eng.call
	f := &c.facts
	modes := f.Rotation.Listed
	if m.cfg.PasswordRotation {
		modes = f.Rotation.Global
	}
	if f.Standby != "" {
		modes = nil
	}
	prev := st.PasswordRotation
	if len(modes) == 0 && prev == nil {
		m.cancelTimer(TimerPasswordRotation)
		return
	}
	var r v1.PasswordRotationStatus // copy-on-write: prev's slices are shared
	if prev != nil {
		r = *prev
	}
	now := c.now
	interval, retention := m.rotationPeriods()

	// 1. The rotation under way.
	if l := r.Last; l != nil && l.FinishedAt == nil {
		done := true
		for _, u := range l.Users {
			if _, still := modes[u.Name]; still && f.Rotation.Rotated[u.Name] != l.ID {
				done = false
			}
		}
		if done {
			fin := *l
			at := metav1.NewTime(now.Truncate(time.Second))
			fin.FinishedAt = &at
			roles := slices.DeleteFunc(slices.Clone(r.Roles), func(x v1.RotationRole) bool { return slices.Contains(l.Drop, x.Name) })
			var names []string
			for _, u := range l.Users {
				names = append(names, u.Name)
				if u.Mode == v1.RotationNewRole && !slices.ContainsFunc(roles, func(x v1.RotationRole) bool { return x.Name == u.Role }) {
					roles = append(roles, v1.RotationRole{Name: u.Role, User: u.Name, CreatedAt: l.StartedAt})
				}
			}
			r.Last, r.Roles = &fin, roles
			msg := fmt.Sprintf("rotation %s: new credentials in the Secrets of %s", l.ID, strings.Join(names, ", "))
			if len(l.Drop) > 0 {
				msg += "; dropped, past their retention: " + strings.Join(l.Drop, ", ")
			}
			c.records = append(c.records, Record{Reason: ReasonPasswordsRotated, Message: msg})
		}
	}

	// 2. The schedule.
	switch {
	case len(modes) == 0:
		r.NextRotation = nil
	case r.NextRotation == nil || r.NextRotation.After(now.Add(interval)):
		next := metav1.NewTime(ceilSecond(now.Add(interval)))
		r.NextRotation = &next
	}

	// 3. A rotation due.
	if r.NextRotation != nil && !now.Before(r.NextRotation.Time) && st.State == Running && (r.Last == nil || r.Last.FinishedAt != nil) {
		at := now.Truncate(time.Second)
		run := &v1.PasswordRotation{ID: at.UTC().Format("20060102T150405Z"), StartedAt: metav1.NewTime(at)}
		var names []string
		users := make([]string, 0, len(modes))
		for u := range modes {
			users = append(users, u)
		}
		slices.Sort(users)
		for _, u := range users {
			role := u
			if modes[u] == v1.RotationNewRole {
				role = v1.RotationRoleName(u, at, interval)
			}
			run.Users = append(run.Users, v1.RotatedUser{Name: u, Mode: modes[u], Role: role})
			names = append(names, u+" ("+modes[u]+")")
		}
		for _, x := range r.Roles {
			if !at.Before(x.CreatedAt.Add(retention)) {
				run.Drop = append(run.Drop, x.Name)
			}
		}
		next := metav1.NewTime(ceilSecond(now.Add(interval)))
		r.Last, r.NextRotation = run, &next
		c.records = append(c.records, Record{Reason: ReasonPasswordRotationStarted,
			Message: fmt.Sprintf("rotation %s of %s; next at %s", run.ID, strings.Join(names, ", "), next.UTC().Format(time.RFC3339))})
	}

	if prev == nil || !apiequality.Semantic.DeepEqual(&r, prev) {
		st.PasswordRotation = &r
		// At once: the sync the rotation asks for starts from status.
		m.out.changed()
	}
	m.armBackupTimer(TimerPasswordRotation, r.NextRotation != nil, func() time.Time { return r.NextRotation.Time })
}

// rotationPeriods are the rotation's interval and the retention of the
// roles it creates, at least twice the interval, as zalando has it.
func (m *Machine) rotationPeriods() (interval, retention time.Duration) {
	interval, retention = m.cfg.PasswordRotationInterval, m.cfg.PasswordRotationUserRetention
	if interval <= 0 {
		interval = 90 * 24 * time.Hour
	}
	if retention <= 0 {
		retention = 180 * 24 * time.Hour
	}
	return interval, max(retention, 2*interval)
}

// syncHash is the hash of the sync the cluster needs: the facts' (the
// spec's roles and databases, their Secrets' versions, a request), and
// the latest scheduled password rotation's ID, which status holds: a
// rotation the machine starts is a sync due at once, without waiting for
// the cluster to be observed again.
func syncHash(st *v1.PostgresqlStatus, f *Facts) string {
	h := f.Sync.Hash
	if r := st.PasswordRotation; h != "" && r != nil && r.Last != nil {
		h += "+rotation " + r.Last.ID
	}
	return h
}
