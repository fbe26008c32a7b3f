package fsm

// inputStep is one step every input takes after its own (a timer, a plan's
// result, a panic, a signal), in Handle: each reads what the ones before
// wrote. docs/fsm.md lists them (Markdown), so what a reader finds there is
// what runs.
type inputStep struct {
	name string
	// doc says what the step does, for docs/fsm.md; file is where.
	doc, file string
	run       func(m *Machine)
}

// inputSteps are the steps of every input, in order.
var inputSteps = []inputStep{
	{"keep", "forget the restarts and the switchover the facts show done", "outbox.go",
		func(m *Machine) { m.out.keep(m.eng.call.facts.PendingRestart, m.eng.call.facts.Primary) }},
	{"acceptBootstrap", "take what Patroni's bootstrap made as applied, so the guards of the fact-driven events see a fresh cluster in sync", "indatabase.go",
		(*Machine).acceptBootstrap},
	{"notePrimary", "follow the primary Patroni names (`primaryChanged`)", "primary.go",
		(*Machine).notePrimary},
	{"fireObserved", "fire the fact-driven events whose guards hold (Pending → Creating → Running at most)", "machine.go",
		(*Machine).fireObserved},
	{"acceptBootstrap", "again: the events may have entered a state where the bootstrap is accepted (Pending → Creating)", "indatabase.go",
		(*Machine).acceptBootstrap},
	{"noteNudge", "ask for the StatefulSet's nudge when the namespace's quotas changed", "machine.go",
		(*Machine).noteNudge},
	{"notePause", "resume the poolers a switchover or a restart paused, once it reported", "poolerpause.go",
		(*Machine).notePause},
	{"noteInDatabase", "plan the sync of roles and databases and the configuration's apply, or record them done", "indatabase.go",
		(*Machine).noteInDatabase},
	{"graceLoss", "give a Running cluster that lost a Ready pod or its primary its grace before Degraded, or end it", "grace.go",
		(*Machine).graceLoss},
	{"noteRollout", "take, keep or give back a slot of the fleet's rollout budget", "rollout.go",
		(*Machine).noteRollout},
	{"noteWindow", "wait for the maintenance window, or stop waiting", "rollout.go",
		(*Machine).noteWindow},
	{"requests", "record each request not seen before (a new value of a request annotation, read in one place: pkg/facts' requests.go) in status.requests, Pending; answer those done by the steps before (a sync applied, a password rotation stored); `backups` answers a backup's", "requests.go",
		(*Machine).noteRequests},
	{"project", "show the counts, the conditions, the reason and the message in status, and how the backup repository's archiving goes (status.backup, ContinuousArchiving); it decides nothing", "project.go, archiving.go",
		(*Machine).project},
	{"backups", "while the cluster serves: start a base backup the schedule, a request or an empty repository asks for (status.backup.running, and the plan's `startBackup` step), ask for its start again when the archive checks find no trace of it on the primary, then, once its backup succeeded, for its verify (`startVerify`) and its restore drill (`startDrill`) when asked for, each once the one before ended; record how it ended, or give up at its deadline", "backups.go",
		func(m *Machine) {
			if m.serving() {
				m.backups()
			}
		}},
	{"passwordRotation", "while the cluster serves: keep the password rotation's schedule, start a rotation due in Running (status.passwordRotation; the sync the plan carries does it) and record it done", "rotation.go",
		func(m *Machine) {
			if m.serving() {
				m.passwordRotation()
			}
		}},
}

// serving says whether the cluster's state is one where it has, or is
// getting, pods that serve: not Pending, Invalid, Deleting or Deleted.
func (m *Machine) serving() bool {
	switch m.st.State {
	case Pending, Invalid, Deleting, Deleted:
		return false
	}
	return true
}

// planStep documents one part of a Plan as the step that carries it out
// (pkg/controller's step names), for docs/fsm.md; TestPlanStepsDocumented
// keeps every field of Plan that asks for work among them.
type planStep struct {
	step, field, actor, doc string
}

// planSteps are the steps of a plan, in the order they run.
var planSteps = []planStep{
	{"status", "Status", "pkg/effects, always", "the status changed, or a snapshot is in flight (outbox.go)"},
	{"ensure", "Ensure", "pkg/effects", "outside Deleting, after a signal, a timer or a spec change: every object of the spec created or brought in line with it (`KeepPodTemplate` while the rollout waits for a slot)"},
	{"syncRoles", "InDatabase", "pkg/indb", "with the ensure, the roles and databases (and a password rotation) not yet applied"},
	{"configure", "InDatabase", "pkg/indb", "with the ensure, Patroni's dynamic configuration not yet applied"},
	{"replacePod", "ReplacePods", "pkg/effects", "`replacePod` fired: outdated pods deleted for the StatefulSet controller to re-create"},
	{"switchover", "Switchover", "pkg/indb", "`switchover` fired: Patroni hands the primary's role to a replica, the pooler paused around it"},
	{"resumePoolers", "ResumePoolers", "pkg/indb", "a pause of the poolers is on record and nothing that pauses them is carried"},
	{"restartMember", "Restart", "pkg/indb", "`restartMember` fired: a member's pending restart, through Patroni"},
	{"nudge", "Nudge", "pkg/effects", "a ResourceQuota held pods back and changed"},
	{"startBackup", "StartBackup", "pkg/indb", "`backups` started a base backup run, or a report found no trace of it on the primary: the backup's program starts detached on the primary (COPY ... TO PROGRAM); last of the effects, its failure fails none of them (nor does startVerify's or startDrill's)"},
	{"startVerify", "StartBackup", "pkg/indb", "in its place: the run's backup succeeded and the operator asks for verify (`--backup-verify`): pgBackRest's verify of the repository, detached"},
	{"startDrill", "StartBackup", "pkg/indb", "in its place: the run's backup succeeded, verify (if asked for) ended, and the spec asks for a restore drill (`spec.backup.restoreDrill`): the newest backup restored into a scratch directory and started, detached"},
	{"cleanup", "Cleanup", "pkg/effects", "in Deleting: the cluster's objects deleted and the finalizer removed"},
	{"events", "Records", "pkg/effects (pkg/events), always", "the steps recorded Kubernetes Events"},
}
