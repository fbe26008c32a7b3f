package fsm

import (
	"slices"
	"time"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// InputKind tells what kind of input reaches the machine.
type InputKind uint8

const (
	// Signal: something about the cluster changed (spec, pods, owned
	// objects); only the facts matter.
	Signal InputKind = iota
	// TimerFired: the timer Input.Timer set in Input.Epoch fired.
	TimerFired
	// PlanDone: the plan Input.PlanID finished with Input.Err.
	PlanDone
	// Panicked: pgloop panicked handling the cluster; Input.Err describes it.
	Panicked
)

// Input is one thing that happened to a cluster.
type Input struct {
	Kind   InputKind
	Timer  string
	Epoch  int64
	PlanID uint64
	Err    error
	// InFlight is the ID of the cluster's plan that is running, 0 when
	// none is. A running plan reports; one that waits may be superseded.
	InFlight uint64
}

// ErrWaiting is wrapped by effect errors that mean "not yet" rather than
// "failed" (act.ErrWaiting, shared with the actors).
var ErrWaiting = act.ErrWaiting

// Plan is the batch of effects a transition asks for. The caller turns it
// into API calls and runs them off the loop: the status first, then the
// ensure or cleanup effects, then the Kubernetes Events.
type Plan struct {
	// ID identifies the plan; its PlanDone input carries it back.
	ID uint64
	// Urgent says the plan answers a user's action (userActions fired: a
	// new cluster, an edited spec, valid or not, a deletion), takes a
	// create on (createSteps fired in Creating: its objects written, its
	// pods Ready), or carries the cleanup that a deletion asked for,
	// retries included. It is run
	// ahead of other clusters' background plans: those of timers (retry,
	// resync), rollout steps, nudges and status writes.
	Urgent bool
	// Continues says the plan takes on a create the cluster's earlier
	// plans began (createSteps fired in Creating): the executor starts it
	// ahead of the clusters of its namespace whose work has not begun
	// (eventloop.Plan.Continues), so a burst's clusters become Running one
	// by one, not all at its end.
	Continues bool
	// Status, when not nil, is the status to write: a snapshot that shares
	// its slices with other snapshots, so it must not be modified (DeepCopy
	// it first).
	Status *v1.PostgresqlStatus
	// Ensure asks for every object the spec describes to be created or
	// brought in line with the spec (idempotent; nothing written when equal).
	Ensure bool
	// KeepPodTemplate, with Ensure, keeps the StatefulSet's pod template
	// as it is: the cluster waits for a slot of the fleet's rollout budget
	// to roll out a new one (Facts.TemplateChanged while blocked). The
	// template is written once the slot is the cluster's, so an upgrade
	// of pgloop that changes every template rewrites the StatefulSets of
	// the clusters that roll, not the whole fleet's at once.
	KeepPodTemplate bool
	// Cleanup asks for the owned objects to be deleted and the finalizer
	// removed.
	Cleanup bool
	// ReplacePods are pods to delete (each with its UID as precondition,
	// and its claim when named) so the StatefulSet controller recreates
	// them from the current template: one pod of a rollout, or every
	// outdated pod that runs nothing.
	ReplacePods []PodRef
	// Nudge, when set, is recorded on the StatefulSet (an annotation) so
	// its controller retries a pod creation a ResourceQuota refused: the
	// quota changed (Facts.Nudge).
	Nudge string
	// InDatabase, with Ensure, is the work inside PostgreSQL and Patroni
	// to do once the objects are ensured.
	InDatabase *InDatabase
	// Restart are members to restart through Patroni (POST /restart of
	// what is pending): one at a time.
	Restart []PodRef
	// Switchover asks Patroni to hand the primary's role to a replica.
	Switchover *Switchover
	// ResumePoolers asks every pod of the primary's connection pooler to
	// resume (PgBouncer RESUME): a switchover paused them
	// (status.poolerPause, poolerpause.go).
	ResumePoolers bool
	// StartBackup asks for the base backup run status.backup.running
	// names to be started on the primary, with what follows it (verify,
	// the restore drill): the step starts it detached and returns at
	// once; the archive checks read how it goes (backups.go).
	StartBackup *BackupStart
	// Records are the Kubernetes Events to record on the resource.
	Records []Record
}

// InDatabase is the work of a plan inside PostgreSQL and Patroni, on the
// primary. The machine records Sync and Config as applied when the plan's
// effects succeed.
type InDatabase struct {
	// Sync, when set, is the hash of the roles and databases to sync.
	Sync string
	// Config, when set, is the hash of the dynamic configuration to
	// apply; RemoveParameters are parameters to remove from it (the spec
	// no longer sets them).
	Config           string
	RemoveParameters []string
}

// PartError is an effect failure inside PostgreSQL or Patroni: Part says
// which (PartRoles, PartConfig or PartBackup), so the machine reports it
// where it belongs (act.PartError, shared with the actors).
type PartError = act.PartError

// Parts of the in-database work.
const (
	PartRoles  = act.PartRoles
	PartConfig = act.PartConfig
	PartBackup = act.PartBackup
)

// Record is a Kubernetes Event to record on the custom resource
// (act.Record).
type Record = act.Record

// BackupStart is a base backup run to start on the primary
// (act.BackupStart).
type BackupStart = act.BackupStart

// TimerOp sets or cancels one of the cluster's timers.
type TimerOp struct {
	Name     string
	Deadline time.Time
	Cancel   bool
}

// Result is what one input did to the machine.
type Result struct {
	// From and To are the states before and after the input.
	From, To string
	// Fired lists the FSM events that fired, in order, and the changes the
	// machine records without the FSM (EventPrimaryChanged, from and to
	// the same state).
	Fired []Fired
	// Ignored says why the input changed nothing (a stale timer or result).
	Ignored string
	// Epoch is the epoch after the input; timers of older epochs are stale.
	Epoch int64
	// Timers to set or cancel, in the new epoch.
	Timers []TimerOp
	// Plan is nil when there is nothing to do.
	Plan *Plan
	// CancelInFlight asks the executor to cancel the running plan at once.
	CancelInFlight bool
	// Forget says the cluster is gone: drop everything kept for it.
	Forget bool
	// Rollout is the cluster's part in the fleet's rollout budget after
	// the input (rollout.go); an ignored input leaves it as it was.
	Rollout Rollout
}

// Fired is one FSM event that fired during an input, with the states it
// went from and to (the same state for a self-transition).
type Fired struct {
	Event, From, To string
}

// finish turns what the callbacks recorded into a Result and a Plan.
func (m *Machine) finish(epoch int64) Result {
	c := &m.eng.call
	res := c.res
	res.To, res.Epoch, res.Rollout = m.st.State, m.st.Epoch, m.roll.state
	if res.Epoch != epoch {
		// The loop drops every timer of the old epoch; re-send the ones
		// set in this one, once each, with their final deadlines.
		res.Timers = res.Timers[:0]
		for _, t := range m.st.Timers {
			res.Timers = append(res.Timers, TimerOp{Name: t.Name, Deadline: t.Deadline.Time})
		}
		for _, t := range m.soft {
			res.Timers = append(res.Timers, TimerOp{Name: t.Name, Deadline: t.Deadline.Time})
		}
	}
	if m.st.State == Deleted {
		return res
	}
	// A failed status write waits for the retry timer that its failure
	// armed (outbox invariant 5): every failure of a plan carrying the
	// status fires effectsFailed, which arms it (afterTrouble, or entering
	// Degraded from Running) and sets troubled, so podsReady waits for a
	// retry's success. A state change drops the timer, ending the hold,
	// but it records an Event, so its plan is made anyway: Running ->
	// Degraded on a failed write is one such plan, once. Meanwhile the
	// status is not lost: the retry's plan, or any plan made for another
	// reason, writes the latest one.
	p, status := m.out.next(len(c.records) > 0, m.hasTimer(TimerRetry), c.inFlight)
	if p == nil {
		return res
	}
	if len(c.records) > 0 {
		p.Records = append([]Record(nil), c.records...)
	}
	if p.Ensure {
		p.InDatabase = m.inDatabaseWork()
		m.out.inDatabase = p.InDatabase
		p.KeepPodTemplate = m.roll.blocked && c.facts.TemplateChanged
	}
	if status {
		// A shallow copy is a snapshot: st is copy-on-write.
		snap := m.st
		p.Status = &snap
		if m.soft.drop(TimerFlush) {
			// Armed in this call, it is no news to the loop.
			n := len(res.Timers)
			res.Timers = slices.DeleteFunc(res.Timers, func(op TimerOp) bool { return op.Name == TimerFlush })
			if len(res.Timers) == n {
				res.Timers = append(res.Timers, TimerOp{Name: TimerFlush, Cancel: true})
			}
		}
	}
	// What a user did goes ahead of other clusters' background work; so
	// does the cleanup a deletion asked for, also when a timer retries it,
	// and the rest of a create: its objects written, then Running. Else,
	// in a burst of creates, the clusters whose pods are Ready would wait
	// to be told Running behind every create of the burst (5,000 at once:
	// 125 Running while 2,840 had their pods Ready, in make bench-scale).
	continues := slices.ContainsFunc(res.Fired, func(f Fired) bool {
		return f.From == Creating && slices.Contains(createSteps, f.Event)
	})
	p.Urgent = p.Cleanup || continues || slices.ContainsFunc(res.Fired, func(f Fired) bool {
		return slices.Contains(userActions, f.Event)
	})
	// The rest of a create also goes ahead of its namespace's creates not
	// begun yet (Plan.Continues).
	p.Continues = continues
	res.Plan = p
	return res
}
