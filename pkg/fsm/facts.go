package fsm

import (
	"slices"
	"time"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Facts are what pgloop observed about a cluster when an input arrives,
// derived from the informers' caches by pkg/facts, plus one decision that
// is not an observation: RolloutWait, the controller's answer from the
// fleet's rollout budget. Guards decide on them, the status and what the
// machine remembers (Memory).
type Facts struct {
	// Generation is the custom resource's metadata.generation.
	Generation int64
	// Deleting is true once the resource has a deletion timestamp.
	Deleting bool
	// Gone is true once the resource is no longer in the cache.
	Gone bool
	// SpecError says why the spec cannot be served; empty when it can.
	SpecError string
	// Desired is spec.numberOfInstances.
	Desired int32
	// Ready counts the cluster's pods that are Ready.
	Ready int32
	// Primary is the pod holding Patroni's leader lock, when that pod is
	// Ready; empty when none.
	Primary string
	// NoPrimary says why Primary is empty (no leader record yet, the
	// leader's pod not Ready...); empty when there is a primary.
	NoPrimary string
	// ObjectsCurrent is true when the owned objects match the spec and the
	// StatefulSet's pods all run its current revision.
	ObjectsCurrent bool
	// Outdated counts the pods not running the StatefulSet's current pod
	// template (a rollout is due).
	Outdated int32
	// Replace are the outdated pods to replace now. Pods that run no
	// PostgreSQL (not scheduled, waiting on a volume, a container that
	// cannot start) serve nothing and are all listed at once, whatever the
	// other pods do; a pod that runs PostgreSQL is listed alone, only when
	// no such idle pod is outdated and every desired pod is Ready, replicas
	// before the primary.
	Replace []PodRef
	// ReplaceRunning says Replace lists a pod that runs PostgreSQL: a
	// step of a rollout, which waits for a slot of the fleet's rollout
	// budget (RolloutWait), as a Switchover does. Idle pods never wait.
	ReplaceRunning bool
	// TemplateChanged: the StatefulSet's pod template is not the one the
	// spec (and this pgloop) builds, while every desired pod runs its
	// template and is Ready. Once the ensure effects update it, every pod
	// is outdated: the first step of a rollout of pods that run PostgreSQL
	// is due, and waits for a slot as a replacement does.
	TemplateChanged bool
	// RolloutStarted: a rollout of the pods that run PostgreSQL is under
	// way, so far that pgloop may have started it before a restart: an
	// outdated pod that runs PostgreSQL remains, and some desired pod
	// already runs the current template, or is missing or terminating
	// (about to be made from it).
	RolloutStarted bool
	// RolloutWait is set by the controller, from the fleet's rollout
	// budget, not derived from the cluster's objects: why the cluster may
	// not start or go on with a rollout of pods that run PostgreSQL now
	// (every slot is taken). Empty when it may: it holds a slot, a slot
	// is free for it, or there is no budget.
	RolloutWait string
	// Nudge, when set, is the namespace's ResourceQuota version that the
	// StatefulSet controller has not been told about while it backs off
	// creating a pod a quota refused (QuotaExceeded). Recording it on the
	// StatefulSet makes the controller try again now, not after its
	// backoff of up to 16 minutes.
	Nudge string
	// StuckReason and Stuck are the concrete cause pods are not progressing,
	// when one is known (Unschedulable, QuotaExceeded, VolumePending,
	// CrashLoopBackOff...): a CamelCase reason and a message.
	StuckReason string
	Stuck       string
	// StuckStale: the cause is a Warning seen before the newest pod was
	// created (the StatefulSet controller's FailedCreate, which it
	// refreshes only on its backoff). It still explains missing pods, but
	// the pod made since may show it is gone, so it does not end the loss
	// grace early: a brief gap of a Running cluster (a pod deleted and
	// made again) waits for the grace as any other.
	StuckStale bool

	// What pgloop applies inside PostgreSQL and Patroni, derived only
	// while every desired pod is Ready (otherwise zero).

	// Sync is the roles-and-databases sync the spec asks for: the users
	// with their flags, the databases with their owners, the version of
	// every password's Secret and the sync request.
	Sync Want
	// Config is the Patroni dynamic configuration the spec asks for.
	Config Want
	// ConfigParameters are the PostgreSQL parameters of Config.
	ConfigParameters []string
	// Users and Databases are the names in the spec, sorted.
	Users, Databases []string
	// Standby, for a standby cluster (spec.standby), is the primary it
	// follows, host:port: its roles and databases are that primary's
	// (Sync is empty).
	Standby string
	// Requests are the requests the cluster's users made (pkg/facts'
	// requests.go), one of each kind at most, by kind.
	Requests []Request
	// SyncRequest is the sync's request (pgloop.dev/sync-requested-at),
	// "" when none: the sync's and the configuration's hashes hold it.
	SyncRequest string
	// Target is the pod in-database work goes to: the primary, once its
	// Patroni publishes its member data (addresses). NoTarget says why
	// there is none.
	Target   string
	NoTarget string
	// LoopWait is the cluster's Patroni loop_wait (spec.patroni.loop_wait
	// or Patroni's default): how long Patroni may take to apply Config.
	LoopWait time.Duration
	// PendingRestart are the pods whose Patroni reports a setting pending
	// a restart, sorted.
	PendingRestart []string
	// Restart is the next member to restart (replicas first, the primary
	// last), when every desired pod is Ready and none is outdated.
	Restart *PodRef
	// Switchover, when set, hands the primary's role to an up-to-date
	// replica before the primary's pod is replaced in a rollout: Replace
	// then lists no pod, and lists the former primary once it is a replica.
	Switchover *Switchover
	// PausePooler says the spec enables the primary's connection pooler:
	// a switchover pauses it (poolerpause.go).
	PausePooler bool

	// VolumeSize is spec.volume.size; Volumes are the bound data volume
	// claims of the desired instances whose volume is smaller, by name,
	// with where their growth is (v1.ClaimToResize, ...). The spec is in
	// effect once none is left.
	VolumeSize string
	Volumes    []v1.ClaimStatus

	// MaintenanceWait, when set, says the cluster's maintenance windows
	// are closed now (spec.maintenanceWindows) and when the next opens:
	// steps that restart PostgreSQL and are not urgent wait for
	// MaintenanceOpens, the opening. Empty when a window is open or the
	// cluster has none.
	MaintenanceWait  string
	MaintenanceOpens time.Time

	// Repository is where the cluster's backups go (s3://bucket/path),
	// empty when it has no repository; Archiving is continuous archiving
	// as last checked on its primary, nil until then.
	Repository string
	Archiving  *v1.ArchivingStatus
	// ArchiveBlocked says why a cluster whose spec or operator gives it a
	// repository does not archive (its image); empty when nothing blocks
	// it.
	ArchiveBlocked string
	// Backup are the base backups' facts, for a cluster with a
	// repository (backups.go).
	Backup BackupFacts
	// Rotation are the facts of the scheduled password rotation
	// (rotation.go).
	Rotation RotationFacts

	// Pooler says which connection pooler the spec enables does not run
	// all its pods, ready, from its current template yet, and how far it
	// is; empty when every enabled one does (or none is enabled). Its
	// objects' match with the spec is part of ObjectsCurrent.
	Pooler string
}

// Want is what the spec asks to be applied inside PostgreSQL or Patroni.
type Want struct {
	// Hash identifies it; empty when it cannot be known yet (a password's
	// Secret is missing from the cache).
	Hash string
	// Missing is true when what is asked cannot be known yet because
	// something it is made of is missing (a user's Secret, which the
	// ensure effects make): it is pending, and not ready to be sent.
	Missing bool
	// Bootstrap is true when Patroni's bootstrap applies it: no users nor
	// databases (the system roles are made from their Secrets), or the
	// configuration the StatefulSet bootstraps the cluster with. A cluster
	// that never had anything applied records it without a call: the
	// sync in any state, the configuration while Creating (a cluster
	// Running before pgloop managed its configuration may have lost edits).
	Bootstrap bool
}

// Switchover asks Patroni to hand the leadership from one pod to another.
type Switchover struct {
	From, To string
}

// PodRef names one pod, its UID a precondition on that very pod
// (act.Pod, shared with the actors).
type PodRef = act.Pod

// toReplace returns the pods of f.Replace the machine has not asked to
// replace yet (Memory.Replaced).
func (f *Facts) toReplace(replaced []string) []PodRef {
	var out []PodRef
	for _, p := range f.Replace {
		if !slices.Contains(replaced, p.UID) {
			out = append(out, p)
		}
	}
	return out
}

// toRestart returns f.Restart unless the machine asked to restart it and
// its Patroni still reports the restart pending.
func (f *Facts) toRestart(restarted []string) *PodRef {
	if f.Restart == nil || slices.Contains(restarted, f.Restart.Name) {
		return nil
	}
	return f.Restart
}

// windowClosed reports whether steps that restart PostgreSQL and are not
// urgent wait for a maintenance window: a rollout of pods that run
// PostgreSQL, its switchover, a restart for a parameter. A cluster being
// created never waits: it serves nothing yet.
func windowClosed(st *v1.PostgresqlStatus, f *Facts) bool {
	return f.MaintenanceWait != "" && st.State != Creating
}

// converged is the podsReady guard: the cluster serves, and the objects
// match the spec.
func (f *Facts) converged() bool {
	return f.ObjectsCurrent && f.serving()
}

// serving: every desired pod Ready, and a primary known whenever there are
// pods, whether or not the objects match the spec.
func (f *Facts) serving() bool {
	return f.Ready >= f.Desired && (f.Desired == 0 || f.Primary != "")
}

// Memory is what a machine remembers, beside its status, that guards decide
// on: a read-only view (Replaced must not be modified), made for each guard.
type Memory struct {
	// CleanupDone: the cleanup plan succeeded.
	CleanupDone bool
	// Troubled: the machine's last plan failed (its effects, or a write)
	// or it panicked, and no effects have succeeded since: pods may be
	// Ready, but the objects are not known to match the spec, or pgloop
	// cannot write.
	Troubled bool
	// Replaced are the UIDs of the pods the machine last asked to
	// replace, so a stale cache showing them still there does not
	// replace them twice.
	Replaced []string
	// LossDue: a loss in Running may go Degraded now, the lossGrace timer
	// having fired in this input, or the grace being 0.
	LossDue bool
	// Restarted are the names of the pods the machine asked to restart
	// whose Patroni may still report the restart pending; SwitchedFrom is
	// the name of the primary's pod it asked to hand its role over, while
	// it is still the primary.
	Restarted    []string
	SwitchedFrom string
	// EnsurePending: the ensure effects asked for (a create, a spec
	// edit, a retry) have not reported success yet, or wait to be asked
	// again. The facts compare only the StatefulSet, the poolers and the
	// CronJob with the spec: a create or an update of a Service or a
	// PodDisruptionBudget is seen here, so neither Creating nor Updating
	// ends before it is done. (The ensure writes the Services beside the
	// StatefulSet: pods may be Ready while a Service's create still
	// waits on a slow API server.)
	EnsurePending bool
}

// SyncDue reports whether the roles and databases the spec asks for are
// not the ones last applied.
func SyncDue(st *v1.PostgresqlStatus, f *Facts) bool {
	h := syncHash(st, f)
	return f.Sync.Missing || h != "" && (st.Database == nil || st.Database.Hash != h)
}

// ConfigDue reports whether the dynamic configuration the spec asks for
// is not the one last applied.
func ConfigDue(st *v1.PostgresqlStatus, f *Facts) bool {
	return f.Config.Hash != "" && (st.Config == nil || st.Config.Hash != f.Config.Hash)
}

// applied is what "in effect" adds to converged pods: roles, databases and
// configuration applied, no member pending a restart, every volume of the
// spec's size, every connection pooler ready and none paused by pgloop (a
// pause on record may still hold its clients: poolerpause.go).
func applied(st *v1.PostgresqlStatus, f *Facts) bool {
	return !SyncDue(st, f) && !ConfigDue(st, f) && len(f.PendingRestart) == 0 && len(f.Volumes) == 0 && f.Pooler == "" &&
		st.PoolerPause == nil
}

// volumesStatus is status.volumes for f: nil once every claim has the size.
func volumesStatus(f *Facts) *v1.VolumesStatus {
	if len(f.Volumes) == 0 {
		return nil
	}
	return &v1.VolumesStatus{Size: f.VolumeSize, Claims: f.Volumes}
}

// BackupFacts are what the base backups of a cluster with a repository
// depend on.
type BackupFacts struct {
	// Full and Differential are the schedules of full and differential
	// backups, nil for none.
	Full, Differential Schedule
	// Drill asks for a restore drill after each backup that succeeded
	// (spec.backup.restoreDrill).
	Drill bool
	// Report is what the archive checks found of status.backup.running,
	// nil until they looked.
	Report *v1.BackupReport
}

// Schedule says when a schedule next fires after a time (robfig/cron's).
type Schedule interface{ Next(time.Time) time.Time }

// Request is a user's request as the facts read it (the request
// annotations, v1/annotations.go): its kind (v1.RequestSync...), its value
// (each new one a new request) and what it asks for beyond (a backup's
// type).
type Request struct {
	Kind, Value, Detail string
}

// Request returns the request of kind, the zero Request when there is
// none.
func (f *Facts) Request(kind string) Request {
	for _, r := range f.Requests {
		if r.Kind == kind {
			return r
		}
	}
	return Request{}
}
