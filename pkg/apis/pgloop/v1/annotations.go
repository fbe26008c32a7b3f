package v1

// The annotations of pgloop's API: those a user sets to ask for something,
// and those pgloop writes for a user to read. (The annotations pgloop keeps
// for itself on the objects it builds are pkg/cluster's.)

// Requests: a user, or pgloop's CLI, sets one of these to ask pgloop for
// something once. Every kind goes the same way: pgloop reads them in one
// place (pkg/facts' requests.go), records each new one as seen in
// status.requests (RequestStatus, Pending), and says there what became of
// it (Succeeded or Failed, with a message).
const (
	// AnnotationSyncRequestedAt on a Postgresql asks for its roles,
	// databases and Patroni configuration to be synced again now, even
	// though nothing changed (`pgloop sync NAME` sets it to the time). Each
	// new value is one sync (RequestSync).
	AnnotationSyncRequestedAt = "pgloop.dev/sync-requested-at"
	// AnnotationRotatePassword on a user's Secret asks for a new password:
	// pgloop generates one, sets it in PostgreSQL, then writes it to the
	// Secret and removes the annotation (docs/user-guide.md;
	// RequestRotatePassword, of every Secret that asks).
	AnnotationRotatePassword = "pgloop.dev/rotate-password"
	// AnnotationBackupRequestedAt on a Postgresql asks for a base backup
	// now (`pgloop backup NAME` sets it to the time); each new value is
	// one backup (RequestBackup), of the type AnnotationBackupType names
	// (full unless set).
	AnnotationBackupRequestedAt = "pgloop.dev/backup-requested-at"
	// AnnotationBackupType is the type of the requested backup: full,
	// diff or incr.
	AnnotationBackupType = "pgloop.dev/backup-type"
)

// Adoption of a cluster another operator made (docs/migrating.md, "Adopt in
// place"; adopt.go).
const (
	// AnnotationAdopt on a Postgresql asks pgloop to take over, without
	// restarting a pod, the cluster the zalando postgres-operator made
	// under the same name in the same namespace: its StatefulSet, pods,
	// Services, PodDisruptionBudgets and the passwords of its credentials
	// Secrets. `pgloop convert --adopt` writes it with the value
	// AdoptZalando, the only one pgloop knows. Once the StatefulSet is
	// the Postgresql's, the annotation does nothing more.
	AnnotationAdopt = "pgloop.dev/adopt"
	// AdoptZalando is AnnotationAdopt's value for a zalando cluster.
	AdoptZalando = "zalando"
)

// Records: pgloop writes these for a user to read.
const (
	// AnnotationPasswordRotated on a user's Secret is the ID of the
	// scheduled rotation that last gave it its credentials (rotation.go).
	AnnotationPasswordRotated = "pgloop.dev/password-rotated"
)
