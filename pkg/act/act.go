// Package act holds the words the state machine (pkg/fsm) and the actors
// that carry out its plans (pkg/effects for the Kubernetes API, pkg/indb
// inside PostgreSQL) share: what a plan names (a pod to replace, an Event to
// record) and what an actor answers besides success (not yet, or which
// in-database part failed). It is a leaf, as pkg/observed is for the
// caches: both sides import it, neither imports the other, and nothing
// has to be copied across (pkg/controller, which turns a plan into the
// loop's steps, passes these values on as they are).
package act

import (
	"errors"
	"fmt"
	"strings"
)

// ErrWaiting is wrapped by the errors of effects that mean "not yet"
// rather than "failed": the effect waits for something the cluster's
// watches will report (pods terminating, a StatefulSet being deleted, a
// member that has not reloaded), and is to be asked for again then, not
// backed off from. The machine plans it again on the next observation,
// with a retry timer as a safety net.
var ErrWaiting = errors.New("waiting")

// Pod names one pod; the UID makes its deletion a precondition on that
// very pod, not a successor with the same name.
type Pod struct {
	Name string
	UID  string
	// Claim and ClaimUID, when set, name the pod's data volume claim, to
	// be deleted with it: a claim that never bound (it holds no data) and
	// asks for another StorageClass than the StatefulSet's, so the
	// StatefulSet controller re-creates it from its current template.
	Claim    string
	ClaimUID string
}

// Record is a Kubernetes Event to record on a cluster's resource.
type Record struct {
	Warning bool
	Reason  string
	Message string
}

// BackupStart is a phase of a base backup run to start on a cluster's
// primary: of the run status.backup.running names.
type BackupStart struct {
	// ID is the run's ID (v1.BackupRunID), which its files on the
	// primary are named after.
	ID string
	// Phase is PhaseBackup, PhaseVerify or PhaseDrill.
	Phase string
}

// Phases of a base backup run, one after the other, each started by a
// step of its own: the backup (with the repository's expiry), pgBackRest's
// verify of the repository, and a restore drill of the newest backup.
const (
	PhaseBackup = "backup"
	PhaseVerify = "verify"
	PhaseDrill  = "drill"
)

// PartError is a failure of work inside PostgreSQL or Patroni: Part says
// which, so the machine reports it where it belongs (a condition, or the
// base backup's record) rather than as a failure of the cluster's
// objects.
type PartError struct {
	Part string
	Err  error
}

// Parts of the in-database work.
const (
	// PartRoles: the roles and databases (RolesSynced).
	PartRoles = "roles"
	// PartConfig: Patroni's dynamic configuration (ConfigApplied).
	PartConfig = "config"
	// PartBackup: the start of a base backup on the primary
	// (status.backup): it does not fail the cluster's plan.
	PartBackup = "backup"
)

func (e *PartError) Error() string { return e.Err.Error() }
func (e *PartError) Unwrap() error { return e.Err }

// FieldManager names pgloop in the managedFields of what it writes: every
// create, update and patch (status included) of every actor carries it,
// so `kubectl get --show-managed-fields` tells the fields pgloop owns from
// those of users and other controllers. (A delete has no field manager.)
const FieldManager = "pgloop"

// SplitKey splits a cluster key, "namespace/name", as the loop and the
// caches name a cluster.
func SplitKey(key string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(key, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("cluster key %q: want namespace/name", key)
	}
	return namespace, name, nil
}
