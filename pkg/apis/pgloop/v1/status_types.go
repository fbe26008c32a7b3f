package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types set on every Postgresql. They follow the Kubernetes
// conventions so `kubectl wait --for=condition=Ready` works.
const (
	// ConditionReady is True while every desired instance is Ready and a
	// primary is known.
	ConditionReady = "Ready"
	// ConditionProgressing is True while pgloop is creating or updating the
	// cluster's objects and waiting for them to converge.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when the cluster cannot reach the desired
	// shape; its message carries the concrete cause (unschedulable pod,
	// quota, pending volume, crash loop, failed API call).
	ConditionDegraded = "Degraded"
	// ConditionRolesSynced is True when the roles and databases of the
	// spec, with their Secrets' passwords, are what PostgreSQL has; False
	// with the failure ("role app: permission denied", "primary
	// 127.64.1.2:5432 did not answer within 5s") or what it waits for.
	ConditionRolesSynced = "RolesSynced"
	// ConditionConfigApplied is True when Patroni's dynamic configuration
	// holds the spec's settings and every member runs them (no restart
	// pending); False with what is pending and why.
	ConditionConfigApplied = "ConfigApplied"
	// ConditionContinuousArchiving, on a cluster with a backup
	// repository, is True while the primary archives its WAL there; False
	// with the archiver's own words when it fails; Unknown until pgloop
	// could ask the primary, with why not.
	ConditionContinuousArchiving = "ContinuousArchiving"
	// ConditionLastBackupSucceeded, on a cluster with a backup
	// repository, is True when the last base backup pgloop took
	// succeeded, False with pgBackRest's words when it failed; absent
	// until the first one ends.
	ConditionLastBackupSucceeded = "LastBackupSucceeded"
)

// MaxHistory bounds Status.History so the object stays small however long a
// cluster lives.
const MaxHistory = 10

// PostgresqlStatus is the persisted state machine of one cluster. Everything
// the operator needs to resume a cluster after a restart is here: the state,
// the epoch that tags its timers, and the timers' absolute deadlines. No
// secret is ever stored in status.
type PostgresqlStatus struct {
	// State is the cluster's state machine state (Pending, Creating, Running,
	// Updating, Degraded, Invalid, Deleting).
	// +optional
	State string `json:"state,omitempty"`
	// StateSince is when the cluster entered State.
	// +optional
	StateSince *metav1.Time `json:"stateSince,omitempty"`
	// Epoch is bumped on every state change. Timers are tagged with the
	// epoch they were set in; a timer from an older epoch is stale.
	// +optional
	Epoch int64 `json:"epoch,omitempty"`
	// ObservedGeneration is the spec generation the current state acts on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Reason is a one-line, machine-readable cause of the current state.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is the human-readable cause of the current state.
	// +optional
	Message string `json:"message,omitempty"`
	// Attempt counts consecutive failed or unproductive retries in the
	// current state; it sets the retry backoff.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// Timers are the pending timers with their absolute deadlines.
	// +optional
	// +listType=map
	// +listMapKey=name
	Timers []Timer `json:"timers,omitempty"`
	// Conditions are Ready, Progressing and Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// History holds the last transitions, newest last, at most MaxHistory.
	// +optional
	History []Transition `json:"history,omitempty"`
	// DesiredInstances is spec.numberOfInstances as last observed.
	// +optional
	DesiredInstances int32 `json:"desiredInstances,omitempty"`
	// ReadyInstances counts the cluster's pods that are Ready.
	// +optional
	ReadyInstances int32 `json:"readyInstances,omitempty"`
	// Ready is "ready/desired", shown by kubectl get.
	// +optional
	Ready string `json:"ready,omitempty"`
	// Primary is the name of the pod Patroni elected leader, if known: the
	// pod named by Patroni's leader record while that pod is Ready.
	// +optional
	Primary string `json:"primary,omitempty"`
	// LastPrimary is the pod that was the primary before it became unknown,
	// set only while Primary is empty. A failover first clears Primary (the
	// old leader stops being Ready) and only later names the new one; this
	// field lets the change be recorded as "old -> new" then, even across a
	// restart of the operator.
	// +optional
	LastPrimary string `json:"lastPrimary,omitempty"`
	// Requests are the requests users made (the request annotations,
	// annotations.go), the last of each kind: when pgloop saw it and what
	// became of it.
	// +optional
	// +listType=map
	// +listMapKey=kind
	Requests []RequestStatus `json:"requests,omitempty"`
	// Database is what pgloop last applied inside PostgreSQL: the roles
	// and databases of the spec. Nil until the first sync.
	// +optional
	Database *DatabaseStatus `json:"database,omitempty"`
	// Config is the Patroni dynamic configuration pgloop last applied, and
	// the members waiting for a restart to run it.
	// +optional
	Config *ConfigStatus `json:"config,omitempty"`
	// Volumes is the growth of the data volumes to spec.volume.size, while
	// a claim of a desired instance is smaller: what each claim asks and
	// has, and why it waits. Absent once every claim has the size.
	// +optional
	Volumes *VolumesStatus `json:"volumes,omitempty"`
	// Backup is how the cluster's backups go: where they are kept and how
	// continuous archiving goes. Absent when the cluster has no
	// repository.
	// +optional
	Backup *BackupStatus `json:"backup,omitempty"`
	// PasswordRotation is the schedule of the password rotation, for a
	// cluster with users to rotate (docs/user-guide.md).
	// +optional
	PasswordRotation *PasswordRotationStatus `json:"passwordRotation,omitempty"`
	// PoolerPause is present while pgloop may have paused the primary's
	// connection pooler for a switchover, until every pooler pod was
	// resumed.
	// +optional
	PoolerPause *PoolerPause `json:"poolerPause,omitempty"`
}

// BackupStatus is how a cluster's backups go.
type BackupStatus struct {
	// Repository is where they are kept: s3://<bucket><path> at the
	// endpoint.
	Repository string `json:"repository"`
	// Archiving is continuous WAL archiving as last checked on the
	// primary; absent until the first check.
	// +optional
	Archiving *ArchivingStatus `json:"archiving,omitempty"`
	// Running is the base backup pgloop started and waits for, absent
	// when none runs.
	// +optional
	Running *BackupRun `json:"running,omitempty"`
	// NextScheduled is when the next scheduled backup is due, and its
	// type; absent when no schedule is set.
	// +optional
	NextScheduled *ScheduledBackup `json:"nextScheduled,omitempty"`
	// Request is the last value of the pgloop.dev/backup-requested-at
	// annotation pgloop acted on.
	// +optional
	Request string `json:"request,omitempty"`
	// FirstRecoverabilityPoint is the earliest time the repository can
	// restore to: the end of its oldest backup.
	// +optional
	FirstRecoverabilityPoint *metav1.Time `json:"firstRecoverabilityPoint,omitempty"`
	// LastBackup is the newest backup the repository holds.
	// +optional
	LastBackup *BackupInfo `json:"lastBackup,omitempty"`
	// LastFailure is the last backup that failed, with pgBackRest's
	// words; it stays after later successes (compare the times).
	// +optional
	LastFailure *BackupFailure `json:"lastFailure,omitempty"`
	// Backups are the base backups the repository holds, oldest first
	// (the newest MaxBackupsListed when it holds more), as read after the
	// last backup pgloop took, retention applied.
	// +optional
	Backups []BackupInfo `json:"backups,omitempty"`
	// BackupCount is how many base backups the repository holds.
	// +optional
	BackupCount int32 `json:"backupCount,omitempty"`
	// LastVerification is what pgBackRest's verify found in the
	// repository after the last backup that succeeded: every backup's
	// files and the WAL, with any gap in it.
	// +optional
	LastVerification *BackupVerification `json:"lastVerification,omitempty"`
	// LastRestoreDrill is how the last restore drill went
	// (spec.backup.restoreDrill).
	// +optional
	LastRestoreDrill *RestoreDrill `json:"lastRestoreDrill,omitempty"`
}

// RestoreDrill is a backup restored into a scratch directory and started
// there, then removed.
type RestoreDrill struct {
	// At is when pgloop read it; Backup the backup run it followed.
	At     metav1.Time `json:"at"`
	Backup string      `json:"backup"`
	// Succeeded says PostgreSQL restored from the backup reached a
	// consistent state and accepted connections.
	Succeeded bool `json:"succeeded"`
	// RestoreSeconds is how long pgBackRest's restore took,
	// StartSeconds how long PostgreSQL then took to accept connections.
	// +optional
	RestoreSeconds int64 `json:"restoreSeconds,omitempty"`
	// +optional
	StartSeconds int64 `json:"startSeconds,omitempty"`
	// Message says what was checked, or what failed in the tools' words.
	Message string `json:"message"`
}

// BackupVerification is a verification of the repository.
type BackupVerification struct {
	// At is when pgloop read it; Backup the backup it followed.
	At     metav1.Time `json:"at"`
	Backup string      `json:"backup"`
	// Succeeded says verify found every backup valid and the WAL from the
	// oldest backup on without a gap; Message says what it checked, or
	// what is wrong.
	Succeeded bool   `json:"succeeded"`
	Message   string `json:"message"`
}

// MaxBackupsListed bounds BackupStatus.Backups.
const MaxBackupsListed = 20

// BackupRun is a base backup pgloop started.
type BackupRun struct {
	// ID names the run: the time it was asked for and its type.
	ID string `json:"id"`
	// Type is full, diff or incr.
	Type string `json:"type"`
	// Reason is why it runs: Scheduled, Requested (pgloop backup, the
	// annotation) or First (a repository with no backup yet).
	Reason string `json:"reason"`
	// StartedAt is when pgloop asked for it.
	StartedAt metav1.Time `json:"startedAt"`
	// Deadline is when pgloop gives up waiting for it
	// (--backup-timeout after StartedAt).
	Deadline metav1.Time `json:"deadline"`
}

// ScheduledBackup is the next backup a schedule asks for.
type ScheduledBackup struct {
	Time metav1.Time `json:"time"`
	Type string      `json:"type"`
}

// BackupInfo is one base backup in the repository, as pgBackRest's info
// lists it.
type BackupInfo struct {
	// Label is pgBackRest's name of the backup (restore --set).
	Label string `json:"label"`
	// Type is full, diff or incr.
	Type string `json:"type"`
	// Start and Stop are when it began and ended; a restore can reach
	// any time after Stop that the archive covers.
	Start metav1.Time `json:"start"`
	Stop  metav1.Time `json:"stop"`
	// Size is the database's size; RepoSize what this backup added to
	// the repository (compressed, and only the changed files for diff
	// and incr: pgBackRest's repository delta).
	// +optional
	Size int64 `json:"size,omitempty"`
	// +optional
	RepoSize int64 `json:"repoSize,omitempty"`
	// WALStart and WALStop are the first and last WAL segment the
	// backup needs to be consistent.
	// +optional
	WALStart string `json:"walStart,omitempty"`
	// +optional
	WALStop string `json:"walStop,omitempty"`
}

// BackupFailure is a base backup that failed.
type BackupFailure struct {
	ID   string      `json:"id"`
	Type string      `json:"type"`
	At   metav1.Time `json:"at"`
	// Message is pgBackRest's words, or why pgloop gave up waiting.
	Message string `json:"message"`
}

// ArchivingStatus is continuous WAL archiving as the primary's PostgreSQL
// and its archiver report it. pgloop checks it every
// --archive-check-period and writes it to status when it turns failing or
// healthy, or when the archiver's words change, and otherwise at most
// every --archive-status-period: lastArchivedTime may be that much behind.
type ArchivingStatus struct {
	// CheckedAt is when this was read from the primary.
	CheckedAt metav1.Time `json:"checkedAt"`
	// Failing says the last attempt to archive a segment failed.
	Failing bool `json:"failing"`
	// Message is the archiver's own words while it fails, or why the
	// primary could not be asked.
	// +optional
	Message string `json:"message,omitempty"`
	// LastArchivedWAL is the last segment archived, and LastArchivedTime
	// when.
	// +optional
	LastArchivedWAL string `json:"lastArchivedWAL,omitempty"`
	// +optional
	LastArchivedTime *metav1.Time `json:"lastArchivedTime,omitempty"`
	// LastFailedWAL is the last segment that failed, and LastFailedTime
	// when.
	// +optional
	LastFailedWAL string `json:"lastFailedWAL,omitempty"`
	// +optional
	LastFailedTime *metav1.Time `json:"lastFailedTime,omitempty"`
	// WaitingSegments counts the WAL segments not archived yet: what a
	// failing archive keeps in pg_wal.
	// +optional
	WaitingSegments int64 `json:"waitingSegments,omitempty"`
	// WALBytes is the size of pg_wal.
	// +optional
	WALBytes int64 `json:"walBytes,omitempty"`
}

// DatabaseStatus is what the last successful sync of roles and databases
// applied.
type DatabaseStatus struct {
	// Hash identifies what was applied: the users with their flags, the
	// databases with their owners, the version of each password's Secret
	// and the sync request. A cluster whose hash is current makes no SQL
	// call.
	// +optional
	Hash string `json:"hash,omitempty"`
	// SyncedAt is when the last sync succeeded; unset when Patroni's
	// bootstrap made everything there is (no users, no databases).
	// +optional
	SyncedAt *metav1.Time `json:"syncedAt,omitempty"`
	// Roles are the roles of spec.users and of spec.preparedDatabases,
	// each with when it was last synced.
	// +optional
	// +listType=map
	// +listMapKey=name
	Roles []RoleStatus `json:"roles,omitempty"`
	// Databases are the databases of spec.databases and
	// spec.preparedDatabases as last synced.
	// +optional
	// +listType=set
	Databases []string `json:"databases,omitempty"`
	// Retained are roles and databases pgloop made that the spec no longer
	// lists ("role old", "database legacy"): pgloop never drops them.
	// +optional
	// +listType=set
	Retained []string `json:"retained,omitempty"`
	// SyncRequest is the last value of the pgloop.dev/sync-requested-at
	// annotation handled.
	// +optional
	SyncRequest string `json:"syncRequest,omitempty"`
}

// RoleStatus is one role and when it was last synced.
type RoleStatus struct {
	// Name is the role.
	Name string `json:"name"`
	// SyncedAt is when its flags and password were last set.
	SyncedAt metav1.Time `json:"syncedAt"`
}

// ConfigStatus is the Patroni dynamic configuration pgloop last applied.
type ConfigStatus struct {
	// Hash identifies the settings applied: the Patroni timings and the
	// PostgreSQL parameters kept in Patroni's dynamic configuration.
	// +optional
	Hash string `json:"hash,omitempty"`
	// AppliedAt is when every member was last seen running them; unset
	// when they are Spilo's bootstrap defaults and nothing was sent.
	// +optional
	AppliedAt *metav1.Time `json:"appliedAt,omitempty"`
	// Parameters are the postgresql.parameters pgloop keeps in Patroni's
	// dynamic configuration; one removed from the spec is removed from it
	// (reset to PostgreSQL's or Patroni's default) on the next apply.
	// +optional
	// +listType=set
	Parameters []string `json:"parameters,omitempty"`
	// PendingRestart are the members whose Patroni reports a setting that
	// takes effect only after a restart; pgloop restarts them one at a
	// time, replicas first.
	// +optional
	// +listType=set
	PendingRestart []string `json:"pendingRestart,omitempty"`
}

// Timer is a pending timer: when Deadline passes, the operator delivers the
// event Name to the cluster's state machine, provided the cluster is still in
// Epoch.
type Timer struct {
	// Name is the timer, and the event it fires (timeout, retry, resync).
	Name string `json:"name"`
	// Deadline is when the timer fires.
	Deadline metav1.Time `json:"deadline"`
	// Epoch is the status epoch the timer was set in.
	Epoch int64 `json:"epoch"`
}

// Transition is one entry of the state machine's history: a change of
// state, or a change of the primary (event primaryChanged, From and To both
// the state the cluster was in).
type Transition struct {
	// From is the state left.
	From string `json:"from"`
	// To is the state entered.
	To string `json:"to"`
	// Event is the event that caused the transition.
	Event string `json:"event"`
	// Time is when the transition happened.
	Time metav1.Time `json:"time"`
	// Reason is the cause, as in Status.Reason.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says what the reason alone does not. Only entries that are
	// no change of state carry one (primaryChanged: "primary changed from
	// A to B"); a state's message is in status, its condition and its
	// Event, and the history stays small.
	// +optional
	Message string `json:"message,omitempty"`
}

// VolumesStatus is the growth of a cluster's data volumes in progress.
type VolumesStatus struct {
	// Size is the spec.volume.size the claims grow to.
	Size string `json:"size"`
	// Claims are the claims of the desired instances that do not have
	// Size yet, by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Claims []ClaimStatus `json:"claims,omitempty"`
}

// Phases of a claim's growth (ClaimStatus.Phase).
const (
	// ClaimToResize: the claim asks for less than the size; pgloop raises
	// its request.
	ClaimToResize = "ToResize"
	// ClaimResizing: the claim asks for the size; the StorageClass's
	// resizer has not expanded the volume yet.
	ClaimResizing = "Resizing"
	// ClaimFileSystemResizePending: the volume is expanded; the file system
	// on it grows when the kubelet next mounts it (the claim's
	// FileSystemResizePending condition).
	ClaimFileSystemResizePending = "FileSystemResizePending"
	// ClaimResizeFailed: the resizer reported an error (the claim's
	// ControllerResizeError or NodeResizeError condition); it retries.
	ClaimResizeFailed = "ResizeFailed"
	// ClaimNotExpandable: the claim's StorageClass does not allow volume
	// expansion: the claim keeps its size until an administrator allows it.
	ClaimNotExpandable = "NotExpandable"
)

// ClaimStatus is the growth of one data volume claim.
type ClaimStatus struct {
	// Name is the PersistentVolumeClaim's name.
	Name string `json:"name"`
	// Requested is the storage the claim asks for
	// (spec.resources.requests.storage).
	// +optional
	Requested string `json:"requested,omitempty"`
	// Capacity is the storage the volume has (status.capacity.storage).
	// +optional
	Capacity string `json:"capacity,omitempty"`
	// Phase is where the growth is: ToResize, Resizing,
	// FileSystemResizePending, ResizeFailed or NotExpandable.
	Phase string `json:"phase"`
	// Message is the resizer's or the kubelet's words, or why the claim
	// cannot grow.
	// +optional
	Message string `json:"message,omitempty"`
}

// BackupReport is what the archive checks (pkg/archiving) found of the base
// backup status.backup.running names, on the primary: not stored as it is;
// the state machine turns it into status.backup.
type BackupReport struct {
	// CheckedAt is when the primary was asked.
	CheckedAt metav1.Time `json:"checkedAt"`
	// ID is the run the report is about.
	ID string `json:"id"`
	// NotStarted says the primary shows no trace of the run: it was not
	// started there yet (or on the former primary only), and the state
	// machine asks for it to be started (again).
	NotStarted bool `json:"notStarted,omitempty"`
	// VerifyRunning and DrillRunning say the run's verify, or its
	// restore drill, began on the primary and has not ended.
	VerifyRunning bool `json:"verifyRunning,omitempty"`
	DrillRunning  bool `json:"drillRunning,omitempty"`
	// Done says it ended; Failed that it failed (or could not start),
	// with Message saying why in pgBackRest's words.
	Done    bool   `json:"done,omitempty"`
	Failed  bool   `json:"failed,omitempty"`
	Message string `json:"message,omitempty"`
	// Backups are the repository's backups once it ended, oldest first,
	// as pgBackRest's info listed them; nil when unknown.
	Backups []BackupInfo `json:"backups,omitempty"`
	// Verification is what verify found after the backup, nil until it
	// ended.
	Verification *BackupVerification `json:"verification,omitempty"`
	// Drill is how the restore drill after the backup went, nil until
	// it ended.
	Drill *RestoreDrill `json:"drill,omitempty"`
}

// Kinds of requests (RequestStatus.Kind).
const (
	// RequestSync: AnnotationSyncRequestedAt.
	RequestSync = "sync"
	// RequestBackup: AnnotationBackupRequestedAt.
	RequestBackup = "backup"
	// RequestRotatePassword: AnnotationRotatePassword on users'
	// Secrets; its value names the Secrets that ask.
	RequestRotatePassword = "rotatePassword"
)

// Phases of a request (RequestStatus.Phase).
const (
	// RequestPending: seen, not done yet; the message says what it
	// waits for.
	RequestPending = "Pending"
	// RequestSucceeded: done.
	RequestSucceeded = "Succeeded"
	// RequestFailed: pgloop will not do it, or it failed; the message
	// says why. A new value of the annotation asks again.
	RequestFailed = "Failed"
)

// RequestStatus is what became of the last request of one kind a user
// made: every kind is seen, recorded and answered the same way.
type RequestStatus struct {
	// Kind is RequestSync, RequestBackup or RequestRotatePassword.
	Kind string `json:"kind"`
	// Value identifies the request: the annotation's value (each new
	// one is a new request); for a password rotation, the Secrets that
	// ask, by name.
	Value string `json:"value"`
	// SeenAt is when pgloop first saw this request.
	SeenAt metav1.Time `json:"seenAt"`
	// Phase is Pending, Succeeded or Failed.
	Phase string `json:"phase"`
	// Message says what became of it, or what it waits for.
	// +optional
	Message string `json:"message,omitempty"`
	// EndedAt is when it succeeded or failed.
	// +optional
	EndedAt *metav1.Time `json:"endedAt,omitempty"`
}
