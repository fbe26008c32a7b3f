package v1

import (
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PasswordRotationStatus is the schedule of a cluster's password rotation,
// as the operator's --password-rotation-interval sets it: when the next one
// is due, the latest one, and the roles rotations made that their
// retention has not dropped yet. A restarted operator resumes from it.
type PasswordRotationStatus struct {
	// NextRotation is when the next rotation is due.
	// +optional
	NextRotation *metav1.Time `json:"nextRotation,omitempty"`
	// Last is the latest rotation: under way until it has finishedAt.
	// +optional
	Last *PasswordRotation `json:"last,omitempty"`
	// Roles are the roles rotations created (mode newRole), oldest first.
	// +optional
	Roles []RotationRole `json:"roles,omitempty"`
}

// PasswordRotation is one rotation of the passwords of a cluster's users.
type PasswordRotation struct {
	// ID names the rotation; each user's Secret records the last one
	// that gave it its password (AnnotationPasswordRotated).
	ID string `json:"id"`
	// StartedAt is when it was due and began.
	StartedAt metav1.Time `json:"startedAt"`
	// FinishedAt is when every user's Secret had its new credentials.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Users are the users rotated, with how.
	Users []RotatedUser `json:"users"`
	// Drop are roles of earlier rotations past their retention that this
	// one drops.
	// +optional
	Drop []string `json:"drop,omitempty"`
}

// RotatedUser is one user of a rotation.
type RotatedUser struct {
	// Name is the user (a key of spec.users, or a prepared database's
	// default user).
	Name string `json:"name"`
	// Mode is newRole or inPlace.
	Mode string `json:"mode"`
	// Role is the role that gets the new password: the user itself in
	// place, else the new role, a member of the user.
	Role string `json:"role"`
}

// RotationRole is a role a rotation created for a user.
type RotationRole struct {
	Name      string      `json:"name"`
	User      string      `json:"user"`
	CreatedAt metav1.Time `json:"createdAt"`
}

// SecretNextRotationKey is the Secret's key that says, in RFC 3339 UTC,
// when its next scheduled rotation is due (zalando's nextRotation).
const SecretNextRotationKey = "nextRotation"

// RotationRoleName is the role a newRole rotation at t creates for user:
// the user's name and the date, YYMMDD as zalando has it; with an interval
// under a day (tests) the time too, so that two rotations of one day make
// two roles.
func RotationRoleName(user string, t time.Time, interval time.Duration) string {
	layout := "060102"
	if interval < 24*time.Hour {
		layout = "060102150405"
	}
	return user + t.UTC().Format(layout)
}

// Rotating returns the rotation under way and how it rotates user; nil
// when none rotates it.
func (s *PasswordRotationStatus) Rotating(user string) (*PasswordRotation, *RotatedUser) {
	if s == nil || s.Last == nil || s.Last.FinishedAt != nil {
		return nil, nil
	}
	i := slices.IndexFunc(s.Last.Users, func(u RotatedUser) bool { return u.Name == user })
	if i < 0 {
		return nil, nil
	}
	return s.Last, &s.Last.Users[i]
}
