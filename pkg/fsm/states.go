package fsm

// States. PascalCase nouns, as a user reads them in `kubectl get`.
const (
	// Pending is a cluster pgloop has seen but not acted on yet.
	Pending = "Pending"
	// Invalid is a cluster whose spec passed the CRD schema but that pgloop
	// cannot serve; it waits for the spec to be fixed.
	Invalid = "Invalid"
	// Creating is a cluster whose objects are being created and whose pods
	// have not all become Ready yet.
	Creating = "Creating"
	// Running is a cluster with every desired instance Ready, a primary,
	// and objects matching the spec.
	Running = "Running"
	// Updating is a cluster whose spec changed and whose objects and pods
	// are being brought to the new spec.
	Updating = "Updating"
	// Degraded is a cluster that cannot reach the desired shape: pods stuck
	// or lost, a timeout, a failed API call. It retries with backoff and
	// goes back to Running as soon as the cause goes away.
	Degraded = "Degraded"
	// Deleting is a cluster whose custom resource is being deleted; its
	// objects are cleaned up before the finalizer is removed.
	Deleting = "Deleting"
	// Deleted is the final state: the cleanup finished and the loop forgets
	// the cluster.
	Deleted = "Deleted"
)

// States lists every state in the order the documentation shows them.
var States = []string{Pending, Invalid, Creating, Running, Updating, Degraded, Deleting, Deleted}

// Events. lowerCamel facts.
const (
	// EventCreate: a new cluster with a valid spec.
	EventCreate = "create"
	// EventInvalidSpec: the spec cannot be served.
	EventInvalidSpec = "invalidSpec"
	// EventSpecChanged: a valid spec with a generation not acted on yet.
	EventSpecChanged = "specChanged"
	// EventPodsReady: every desired pod Ready, a primary known, objects
	// converged.
	EventPodsReady = "podsReady"
	// EventPodsLost: a Running cluster lost a Ready pod or its primary,
	// and the loss outlasted the loss grace (or has a concrete cause).
	EventPodsLost = "podsLost"
	// EventLossGrace: the loss grace of a Running cluster ran out; the
	// loss, if it still holds, fires podsLost.
	EventLossGrace = "lossGrace"
	// EventReplacePod: outdated pods replaced: every one that runs
	// nothing at once, or one step of a rollout, with a slot of the
	// fleet's rollout budget (rollout.go).
	EventReplacePod = "replacePod"
	// EventOutOfSync: a Running cluster's pods are all Ready, but the
	// cluster is not what the spec asks: its objects or pods differ (an
	// upgrade of pgloop changed the pod template), or what runs inside
	// PostgreSQL and Patroni does: roles, databases or configuration to
	// apply, a password to rotate, a sync requested, or a member pending
	// a restart.
	EventOutOfSync = "outOfSync"
	// EventRestartMember: a member whose Patroni reports a setting pending
	// a restart is restarted through Patroni, one at a time.
	EventRestartMember = "restartMember"
	// EventSwitchover: before a rollout replaces the primary's pod, Patroni
	// hands its role to an up-to-date replica; a step of the rollout, with
	// a slot of its budget.
	EventSwitchover = "switchover"
	// EventTimeout: the state's deadline passed without convergence.
	EventTimeout = "timeout"
	// EventRetry: the retry timer fired; the ensure effects are planned again.
	EventRetry = "retry"
	// EventResync: the periodic resync timer fired in Running.
	EventResync = "resync"
	// EventMaintenance: the next maintenance window opened (its timer),
	// and a rollout or restart that waited for it may go on.
	EventMaintenance = "maintenanceWindow"
	// EventEffectsSucceeded: the plan of ensure or cleanup effects succeeded.
	EventEffectsSucceeded = "effectsSucceeded"
	// EventEffectsFailed: the plan failed; the error is the reason.
	EventEffectsFailed = "effectsFailed"
	// EventPanicked: pgloop itself panicked while handling this cluster.
	EventPanicked = "panicked"
	// EventDelete: the custom resource has a deletion timestamp.
	EventDelete = "delete"
	// EventCleanedUp: the cleanup plan succeeded, or the resource is gone.
	EventCleanedUp = "cleanedUp"
	// EventPrimaryChanged: the primary moved from one pod to another (a
	// switchover or a failover). It is no transition of the table: the
	// state stays, and the machine records it in the history and as a
	// Kubernetes Event (see Machine.notePrimary).
	EventPrimaryChanged = "primaryChanged"
)

// userActions are the events that answer what a user did to the resource
// (created, edited, deleted it): the plan of an input that fires one is
// urgent (Plan.Urgent).
var userActions = []string{EventCreate, EventSpecChanged, EventInvalidSpec, EventDelete}

// createSteps are the events that take a create on, fired in Creating: a
// plan they fire is urgent too. A retry is not one: it is background, as
// in every state.
var createSteps = []string{EventEffectsSucceeded, EventPodsReady}

// recordedEvents are the events the machine records without the FSM: they
// change no state, so they are not in Table.
var recordedEvents = []string{EventPrimaryChanged}

// Timer names. A timer fires the event of the same name.
const (
	TimerTimeout = EventTimeout
	TimerRetry   = EventRetry
	TimerResync  = EventResync
	// TimerLossGrace is armed in Running when a pod or the primary is lost
	// and cancelled when the loss recovers (Machine.graceLoss).
	TimerLossGrace = EventLossGrace
	// TimerMaintenance is armed for the opening of the next maintenance
	// window while a rollout step or a restart waits for it
	// (Machine.noteWindow).
	TimerMaintenance = EventMaintenance
	// TimerFlush writes the status changes that wait
	// (Config.StatusDelay); it fires no event.
	TimerFlush = "flush"
)

// Reasons are the machine-readable causes written to status.reason, to
// condition reasons and to Kubernetes Events.
const (
	ReasonCreating        = "Creating"
	ReasonUpdating        = "Updating"
	ReasonReady           = "AllInstancesReady"
	ReasonInvalidSpec     = "InvalidSpec"
	ReasonTimeout         = "Timeout"
	ReasonPodsNotReady    = "PodsNotReady"
	ReasonEffectsFailed   = "EffectsFailed"
	ReasonPanic           = "Panic"
	ReasonDeleting        = "Deleting"
	ReasonCleanupFinished = "CleanupFinished"
	ReasonNoPrimary       = "NoPrimary"
	ReasonPrimaryChanged  = "PrimaryChanged"
	ReasonOutOfSync       = "OutOfSync"
	ReasonRestarting      = "RestartingMember"
	ReasonSwitchover      = "Switchover"
	// ReasonRolloutQueued: the next step of a rollout waits for a slot of
	// the fleet's rollout budget (--max-rolling-clusters).
	ReasonRolloutQueued = "RolloutQueued"
	// ReasonMaintenanceWindow: the next step of a rollout, or a restart,
	// waits for the cluster's next maintenance window.
	ReasonMaintenanceWindow = "MaintenanceWindow"
	// Reasons of the RolesSynced and ConfigApplied conditions.
	ReasonSynced         = "Synced"
	ReasonStandby        = "Standby" // a standby cluster syncs no roles (RolesSynced)
	ReasonSyncPending    = "SyncPending"
	ReasonSyncFailed     = "SyncFailed"
	ReasonApplied        = "Applied"
	ReasonConfigPending  = "ConfigPending"
	ReasonConfigFailed   = "ConfigFailed"
	ReasonRestartPending = "RestartPending"
	// ReasonNotConverged: the owned objects do not match the spec yet,
	// with no cause found.
	ReasonNotConverged = "NotConverged"

	// Causes pkg/facts finds (fsm.Facts.StuckReason). A container that
	// cannot start reports the kubelet's own reason instead
	// (CrashLoopBackOff, ImagePullBackOff, ErrImagePull,
	// CreateContainerConfigError).

	// ReasonUnschedulable: the scheduler found no node for a pod (the
	// scheduler's own reason, corev1.PodReasonUnschedulable).
	ReasonUnschedulable = "Unschedulable"
	// ReasonVolumePending: a data volume claim of the cluster is not bound.
	ReasonVolumePending = "VolumePending"
	// ReasonQuotaExceeded: the StatefulSet controller could not create a
	// pod because a ResourceQuota is exhausted.
	ReasonQuotaExceeded = "QuotaExceeded"
	// ReasonFailedCreate: the StatefulSet controller could not create a pod
	// for another reason (admission, a missing ServiceAccount...).
	ReasonFailedCreate = "FailedCreate"
	// ReasonVolumeNotExpandable: spec.volume.size grew and a claim's
	// StorageClass does not allow volume expansion.
	ReasonVolumeNotExpandable = "VolumeNotExpandable"
)

// stateDocs and eventDocs are the documentation `pgloop fsm --markdown`
// writes into docs/fsm.md.
var stateDocs = map[string]string{
	Pending:  "Seen by pgloop, not acted on yet (a new resource has no state).",
	Invalid:  "The spec passed the CRD schema but pgloop cannot serve it; the message says why. Waits for a spec edit.",
	Creating: "Objects are being created; waits for every pod to be Ready and a primary to be elected. A `timeout` timer bounds the wait; it starts when the effects first report (the objects are created, or their creation failed), not when the plan was queued, so the time a cluster waits for its turn among many is not held against it. As soon as a concrete cause of stuck pods is observed (an unschedulable pod, a pending volume, a quota...), status.reason and status.message name it, while the state waits for the timeout.",
	Running:  "Every desired instance is Ready, a primary is known and the objects match the spec. A `resync` timer re-plans the ensure effects periodically. A loss (fewer Ready instances than desired, no primary, objects not matching) first arms a `lossGrace` timer instead of going Degraded: a switchover, or a former primary restarting as a replica, takes a few seconds. Meanwhile the state stays Running, the `Ready` condition is False and status.reason and status.message name what is missing; a recovery before the timer fires cancels it, with no history entry and no Event. A loss with a concrete cause (an unschedulable pod, a crash loop, an image that cannot be pulled, a pending volume, a pod the StatefulSet cannot create) is no blip: it goes Degraded at once.",
	Updating: "The spec changed, or the objects are not the spec's while every pod serves (an upgrade of pgloop changed the pod template); objects are updated and pods replaced. A `timeout` timer bounds the wait, from the first report of the effects, as in Creating. As in Creating, status.reason and status.message name a concrete cause of stuck pods as soon as it is observed. While the next step of a rollout waits for a slot of the fleet's rollout budget (`--max-rolling-clusters`), the reason is `RolloutQueued` and the timeout does not run: it measures the cluster, not the queue in front of it.",
	Degraded: "The cluster cannot reach the desired shape; the Degraded condition carries the concrete cause. A `retry` timer with exponential backoff re-plans the ensure effects; pod events move it on as soon as the cause goes away, and a spec edit (a fix) moves it to Updating at once, cancelling the retry. While a ResourceQuota keeps its pods from being created, each change of the namespace's quotas nudges the StatefulSet (an annotation) so its controller tries again at once rather than after its own backoff.",
	Deleting: "The resource is being deleted; in-flight effects are cancelled and the objects cleaned up before the finalizer is removed.",
	Deleted:  "Cleanup finished; the loop forgets the cluster.",
}

var eventDocs = map[string]string{
	EventCreate:           "A new cluster whose spec is valid.",
	EventInvalidSpec:      "The spec cannot be served (guard: the validation error is not empty).",
	EventSpecChanged:      "The spec's generation is newer than status.observedGeneration and the spec is valid.",
	EventPodsReady:        "Guard: ready instances = desired, a primary is elected (when desired > 0: the pod Patroni's leader record `<cluster>-leader` names is Ready), the objects converged, and what runs inside PostgreSQL is the spec: roles and databases synced, Patroni's dynamic configuration applied, no member pending a restart; and every data volume claim of a desired instance has spec.volume.size (its capacity, the file system grown).",
	EventPodsLost:         "Guard, while Running: fewer Ready instances than desired, or no primary, or objects not matching the spec, and either the `lossGrace` timer fired, or the grace is 0 (`--loss-grace=0`), or a concrete cause is known (an unschedulable pod, a crash loop...). The reason and message name the cause (`PodsNotReady`, `NoPrimary`, `NotConverged` or the concrete one).",
	EventLossGrace:        "The `lossGrace` timer fired in Running: the loss has lasted the whole grace (`--loss-grace`), and `podsLost` fires if it still holds. The timer is armed when a loss is first seen in Running, and cancelled (no history entry, no Event) when the cluster recovers before it fires.",
	EventReplacePod:       "Outdated pods are deleted (UID precondition) so the StatefulSet controller recreates them from the current template. (1) Pods that run no PostgreSQL (not scheduled, waiting on a volume, a container that cannot start) serve nothing: every outdated one is replaced at once, in Creating, Updating or Degraded, without waiting for the other pods or for a timeout; this is how an edit fixes a stuck cluster. A never-bound claim of such a pod that asks for another StorageClass than the StatefulSet's is deleted with it. (2) A pod that runs PostgreSQL is replaced alone, once every desired pod is Ready and no idle pod is outdated: replicas first, the primary last; the next step waits for the pod events that show the new pod Ready. Such a rollout takes a slot of the fleet's rollout budget (`--max-rolling-clusters` clusters at once) at its first step, or already when the pod template is to change while every pod serves (an upgrade of pgloop, a new image), so a cluster that waits says `RolloutQueued` in the same status write as `Updating` (its StatefulSet keeps the old template until the slot is its), and keeps it until no pod is outdated and every pod is Ready again, or the cluster leaves Creating, Updating and Degraded; without a slot the cluster waits (reason `RolloutQueued`, no `timeout`), and the controller wakes it when one frees, first come first served. Pods of kind (1) never wait for a slot.",
	EventOutOfSync:        "Guard, while Running: every pod is Ready and a primary known, but the objects do not match the spec (an upgrade of pgloop changed the StatefulSet or its pod template: pods to replace), or the roles and databases (users, databases, a password's Secret, a sync request) or Patroni's dynamic configuration are not the ones last applied (status.database.hash, status.config.hash), or a member's Patroni reports a restart pending, or a data volume claim is smaller than spec.volume.size (status.volumes shows each claim's growth; a StorageClass that does not allow expansion is the cause `VolumeNotExpandable`, and the claim is left alone). Updating then applies them; pods that serve are not a loss, so this is no `podsLost`.",
	EventRestartMember:    "A member whose Patroni reports `pending_restart` is restarted through Patroni's `POST /restart` (only what is pending), once the configuration is applied and every pod is Ready: replicas first, the primary last, one at a time; the next waits for the member data that shows the restart done.",
	EventSwitchover:       "In a rollout, when the next pod to replace is the primary and a replica is Ready, Patroni is asked for a switchover (`POST /switchover`) to the most up-to-date replica first; the former primary is then replaced as a replica. The effect runs a `CHECKPOINT` on the primary first; with a primary connection pooler it pauses the pooler's pods around Patroni's switch and resumes them once the new primary takes writes and the master Service routes to it (status.poolerPause is written before and removed after a resume that succeeded, also after a failure or an operator restart). Off with `--switchover=false`. A step of the rollout: it needs a slot of the rollout budget, as `replacePod` (2) does.",
	EventTimeout:          "The `timeout` timer of Creating or Updating fired.",
	EventRetry:            "The `retry` timer fired: the ensure effects (in Deleting the cleanup, in Invalid the status write alone) are planned again, with the latest status, and, in Degraded, the next retry is armed with a doubled delay.",
	EventResync:           "The `resync` timer fired in Running: the ensure effects are planned again; nothing is written when nothing changed.",
	EventMaintenance:      "The `maintenanceWindow` timer fired: the cluster's next maintenance window opened, and the rollout step or restart that waited for it is taken if the facts still show it due.",
	EventEffectsSucceeded: "The latest plan of ensure effects succeeded.",
	EventEffectsFailed:    "The latest plan failed, its ensure or cleanup effects or only its status write: a `retry` timer with backoff is armed (entering Degraded arms it from Running), and the cluster goes back to Running only once a retry's effects succeed. A failed status write is not planned again on its own before the timer fires: the status stays pending, and the retry's plan, or any plan made meanwhile for another reason, writes the latest one.",
	EventPanicked:         "pgloop panicked while handling the cluster; the panic is recorded and the cluster retries.",
	EventDelete:           "The resource has a deletion timestamp.",
	EventCleanedUp:        "The cleanup plan succeeded, or the resource disappeared.",
	EventPrimaryChanged:   "Not a transition: the primary moved from pod A to pod B (switchover or failover), also when no primary was known in between. The state stays; the history gets an entry from and to the current state with reason `PrimaryChanged` and the message \"primary changed from A to B\", and a Normal Event `PrimaryChanged` is recorded. The first primary of a cluster is no change.",
}
