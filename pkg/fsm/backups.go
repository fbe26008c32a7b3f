package fsm

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Timers of the base backups: TimerBackup fires when the next scheduled
// backup is due (status.backup.nextScheduled), TimerBackupDeadline when
// pgloop gives up waiting for the running one (status.backup.running's
// deadline). Both deadlines are in status.backup: a state change drops the
// timers of the old epoch, and backups arms them again from there.
const (
	TimerBackup         = "backup"
	TimerBackupDeadline = "backupDeadline"
)

// Reasons of the LastBackupSucceeded condition and the backups' Events;
// BackupScheduled, BackupRequested and BackupFirst are why a backup runs
// (status.backup.running.reason).
const (
	ReasonBackupSucceeded = "BackupSucceeded"
	ReasonBackupFailed    = "BackupFailed"
	ReasonBackupStarted   = "BackupStarted"
	ReasonVerifyFailed    = "BackupVerifyFailed"
	ReasonDrillFailed     = "RestoreDrillFailed"
	BackupScheduled       = "Scheduled"
	BackupRequested       = "Requested"
	BackupFirst           = "First"
)

// firstBackupRetry is how long after a failed first backup of a repository
// pgloop tries again when no schedule asks sooner.
const firstBackupRetry = time.Hour

// backups runs the cluster's base backups (docs/backups.md): it starts one
// when the schedule, a request (the pgloop.dev/backup-requested-at
// annotation) or a repository with no backup asks: it records the run in
// status.backup.running and asks the plan to start it on the primary
// (Plan.StartBackup, a step that returns once the run is under way). The
// archive checks (pkg/archiving) read how it goes there and report it; a
// report that the primary shows no trace of the run (its start failed, or
// the primary changed since) asks for its start again. It records how the
// run ended from their report, or gives up at its deadline. It runs after
// archiving, which keeps status.backup's repository and archiving.
func (m *Machine) backups() {
	st, c := &m.st, &m.eng.call
	f := &c.facts
	if st.Backup == nil || f.Repository == "" {
		why := "the cluster has no backup repository"
		if f.ArchiveBlocked != "" {
			why = f.ArchiveBlocked
		}
		m.endRequest(v1.RequestBackup, false, why)
		m.out.backup = nil
		m.cancelTimer(TimerBackup)
		m.cancelTimer(TimerBackupDeadline)
		if meta.FindStatusCondition(st.Conditions, v1.ConditionLastBackupSucceeded) != nil {
			st.Conditions = slices.Clone(st.Conditions)
			meta.RemoveStatusCondition(&st.Conditions, v1.ConditionLastBackupSucceeded)
			m.deferWrite()
		}
		return
	}
	b := *st.Backup // copy-on-write
	now := c.now

	// How the running backup went: its phases one after the other, each
	// started once the one before ended (a failed backup has no other).
	if r := b.Running; r != nil {
		rep := f.Backup.Report
		if rep != nil && rep.ID != r.ID {
			rep = nil
		}
		fresh := rep != nil && !rep.CheckedAt.Time.Equal(m.out.backupSeen)
		next, waits := m.nextPhase(rep)
		switch {
		case rep != nil && rep.Done && (rep.Failed || next == "" && !waits):
			m.backupEnded(&b, rep)
		case !now.Before(r.Deadline.Time):
			m.backupEnded(&b, m.overdue(r, rep))
		case fresh && rep.NotStarted:
			// The primary shows no trace of it: its start failed, or
			// another pod leads now. Once per report.
			m.out.backupSeen = rep.CheckedAt.Time
			m.startBackup(r.ID, PhaseBackup)
		case fresh && next != "":
			// The phase before ended; this one has not begun there
			// (or its start failed). Once per report.
			m.out.backupSeen = rep.CheckedAt.Time
			m.startBackup(r.ID, next)
		}
	}

	// What asks for the next one.
	req := m.pendingRequest(v1.RequestBackup)
	if b.Running == nil {
		typ, reason := "", ""
		switch {
		case req != nil && req.Value != b.Request:
			// A request (requests.go), taken once: b.Request keeps
			// its value, as before status recorded requests.
			b.Request = req.Value
			if t := f.Request(v1.RequestBackup).Detail; slices.Contains(v1.BackupTypes, t) {
				typ, reason = t, BackupRequested
			} else {
				m.endRequest(v1.RequestBackup, false, fmt.Sprintf("backup type %q is not one of %s (annotation %s)",
					t, strings.Join(v1.BackupTypes, ", "), v1.AnnotationBackupType))
			}
		case b.NextScheduled != nil && !now.Before(b.NextScheduled.Time.Time):
			typ, reason = b.NextScheduled.Type, BackupScheduled
		case b.LastBackup == nil && archivingWorks(f.Archiving) &&
			(b.LastFailure == nil || now.Sub(b.LastFailure.At.Time) >= firstBackupRetry):
			typ, reason = v1.BackupFull, BackupFirst
		}
		if typ != "" {
			timeout := m.cfg.BackupTimeout
			if timeout <= 0 {
				timeout = 6 * time.Hour
			}
			b.Running = &v1.BackupRun{ID: v1.BackupRunID(now, typ), Type: typ, Reason: reason,
				StartedAt: metav1.NewTime(now), Deadline: metav1.NewTime(ceilSecond(now.Add(timeout)))}
			c.records = append(c.records, Record{Reason: ReasonBackupStarted,
				Message: fmt.Sprintf("%s backup %s started (%s)", typ, b.Running.ID, reason)})
			m.startBackup(b.Running.ID, PhaseBackup)
			if reason == BackupRequested {
				m.requestWaits(v1.RequestBackup, "backup "+b.Running.ID+" running")
			}
		}
	} else if req != nil && req.Value != b.Request {
		m.requestWaits(v1.RequestBackup, "waits for backup "+b.Running.ID+" to end")
	}
	// A start carried on the plans is for the run status names, until a
	// report shows its phase under way on the primary.
	switch r, rep, s := b.Running, f.Backup.Report, m.out.backup; {
	case r == nil:
		m.out.backup, m.out.backupErr = nil, ""
	case s == nil:
	case s.ID != r.ID:
		m.out.backup = nil
	case rep != nil && rep.ID == r.ID && underWay(rep, s.Phase):
		m.out.backup, m.out.backupErr = nil, ""
	}

	// The schedule: a backup due while another runs is skipped.
	b.NextScheduled = nextScheduled(f.Backup, now)

	if !backupEqual(&b, st.Backup) {
		st.Backup = &b
		// At once: the plan that starts a run writes it first, and the
		// archive checks read a run once status shows it.
		m.out.changed()
	}
	m.armBackupTimer(TimerBackup, b.NextScheduled != nil, func() time.Time { return b.NextScheduled.Time.Time })
	m.armBackupTimer(TimerBackupDeadline, b.Running != nil, func() time.Time { return b.Running.Deadline.Time })
}

// Phases of a base backup run (act.PhaseBackup...): the plan's steps
// startBackup, startVerify and startDrill.
const (
	PhaseBackup = act.PhaseBackup
	PhaseVerify = act.PhaseVerify
	PhaseDrill  = act.PhaseDrill
)

// startBackup asks the next plans to start phase of run id on the
// primary.
func (m *Machine) startBackup(id, phase string) {
	m.out.backup = &BackupStart{ID: id, Phase: phase}
}

// nextPhase is the phase of the run rep reports on that comes after its
// backup succeeded, "" when none is left; waits says one runs. Verify
// follows when the operator asks for it (--backup-verify), the restore
// drill when the spec does, whatever verify found.
func (m *Machine) nextPhase(rep *v1.BackupReport) (next string, waits bool) {
	if rep == nil || !rep.Done || rep.Failed {
		return "", false
	}
	switch {
	case m.cfg.BackupVerify && rep.Verification == nil:
		if rep.VerifyRunning {
			return "", true
		}
		return PhaseVerify, false
	case m.eng.call.facts.Backup.Drill && rep.Drill == nil:
		if rep.DrillRunning {
			return "", true
		}
		return PhaseDrill, false
	}
	return "", false
}

// underWay says whether rep shows phase begun on the primary.
func underWay(rep *v1.BackupReport, phase string) bool {
	switch phase {
	case PhaseVerify:
		return rep.VerifyRunning || rep.Verification != nil
	case PhaseDrill:
		return rep.DrillRunning || rep.Drill != nil
	}
	return !rep.NotStarted && rep.Message == ""
}

// overdue is how run ends at its deadline: failed, with why, when its
// backup did not end; else the backup counts, and the verify or drill
// that did not end after it failed.
func (m *Machine) overdue(run *v1.BackupRun, rep *v1.BackupReport) *v1.BackupReport {
	c := &m.eng.call
	msg := fmt.Sprintf("did not end within %s of its start", run.Deadline.Sub(run.StartedAt.Time).Round(time.Second))
	if rep != nil && rep.Done && !rep.Failed {
		out := *rep
		at := metav1.NewTime(c.now)
		if m.cfg.BackupVerify && out.Verification == nil {
			out.Verification = &v1.BackupVerification{At: at, Backup: run.ID, Message: "verify " + msg}
		}
		if c.facts.Backup.Drill && out.Drill == nil {
			out.Drill = &v1.RestoreDrill{At: at, Backup: run.ID, Message: "the restore drill " + msg}
		}
		return &out
	}
	switch {
	case rep != nil && rep.Message != "":
		msg += ": " + rep.Message
	case m.out.backupErr != "":
		msg += ": it could not be started: " + m.out.backupErr
	}
	return &v1.BackupReport{ID: run.ID, Done: true, Failed: true, Message: msg}
}

// backupEnded records how the running backup ended, from rep.
func (m *Machine) backupEnded(b *v1.BackupStatus, rep *v1.BackupReport) {
	c := &m.eng.call
	r := b.Running
	b.Running = nil
	if rep.Backups != nil {
		listBackups(b, rep.Backups)
	}
	if d := rep.Drill; d != nil {
		b.LastRestoreDrill = d
		if !d.Succeeded {
			c.records = append(c.records, Record{Warning: true, Reason: ReasonDrillFailed,
				Message: "the restore drill after backup " + r.ID + " failed: " + d.Message})
		}
	}
	if v := rep.Verification; v != nil {
		b.LastVerification = v
		if !v.Succeeded {
			c.records = append(c.records, Record{Warning: true, Reason: ReasonVerifyFailed,
				Message: "the repository's verification after backup " + r.ID + " failed: " + v.Message})
		}
	}
	if req := m.pendingRequest(v1.RequestBackup); req != nil && r.Reason == BackupRequested && req.Value == b.Request {
		// The request that started this run: answered as it ended
		// (the Event below says how).
		defer func() {
			if rep.Failed {
				m.endRequest(v1.RequestBackup, false, "backup "+r.ID+" failed: "+rep.Message)
			} else {
				m.endRequest(v1.RequestBackup, true, "backup "+r.ID+" succeeded")
			}
		}()
	}
	if rep.Failed {
		b.LastFailure = &v1.BackupFailure{ID: r.ID, Type: r.Type, At: metav1.NewTime(c.now), Message: rep.Message}
		msg := fmt.Sprintf("%s backup %s failed: %s", r.Type, r.ID, rep.Message)
		m.conditionStatus(v1.ConditionLastBackupSucceeded, metav1.ConditionFalse, ReasonBackupFailed, msg)
		c.records = append(c.records, Record{Warning: true, Reason: ReasonBackupFailed, Message: msg})
		return
	}
	msg := fmt.Sprintf("%s backup %s ended after %s", r.Type, r.ID, c.now.Sub(r.StartedAt.Time).Round(time.Second))
	if l := b.LastBackup; l != nil {
		msg = fmt.Sprintf("%s backup %s took %s, %s of data, %s in the repository",
			l.Type, l.Label, l.Stop.Sub(l.Start.Time), quantity(l.Size), quantity(l.RepoSize))
	}
	m.conditionStatus(v1.ConditionLastBackupSucceeded, metav1.ConditionTrue, ReasonBackupSucceeded, msg)
	c.records = append(c.records, Record{Reason: ReasonBackupSucceeded, Message: msg})
}

// listBackups records the repository's backups, oldest first.
func listBackups(b *v1.BackupStatus, all []v1.BackupInfo) {
	b.BackupCount = int32(len(all))
	b.Backups, b.LastBackup, b.FirstRecoverabilityPoint = nil, nil, nil
	if len(all) == 0 {
		return
	}
	b.Backups = append([]v1.BackupInfo(nil), all[max(0, len(all)-v1.MaxBackupsListed):]...)
	last := all[len(all)-1]
	b.LastBackup = &last
	first := all[0].Stop
	b.FirstRecoverabilityPoint = &first
}

// archivingWorks says whether the last check saw the primary archive.
func archivingWorks(a *v1.ArchivingStatus) bool {
	return a != nil && !a.Failing && a.Message == "" && a.LastArchivedWAL != ""
}

// nextScheduled is the next backup the schedules ask for after now: the
// earlier of the full and the differential one, the full one when both
// fall at the same time; nil when there is no schedule.
func nextScheduled(f BackupFacts, now time.Time) *v1.ScheduledBackup {
	var next *v1.ScheduledBackup
	if f.Full != nil {
		if t := f.Full.Next(now); !t.IsZero() {
			next = &v1.ScheduledBackup{Time: metav1.NewTime(t.UTC()), Type: v1.BackupFull}
		}
	}
	if f.Differential != nil {
		if t := f.Differential.Next(now); !t.IsZero() && (next == nil || t.Before(next.Time.Time)) {
			next = &v1.ScheduledBackup{Time: metav1.NewTime(t.UTC()), Type: v1.BackupDifferential}
		}
	}
	return next
}

// armBackupTimer arms the timer name at the deadline at returns while want
// holds, and cancels it otherwise; a timer already armed there is left.
func (m *Machine) armBackupTimer(name string, want bool, at func() time.Time) {
	switch {
	case !want:
		m.cancelTimer(name)
	case !m.timerAt(name, at()):
		m.setTimer(name, at().Sub(m.eng.call.now))
	}
}

// backupEqual says whether two backup statuses are the same, the
// repository's listing compared by its labels.
func backupEqual(a, b *v1.BackupStatus) bool {
	if a.Request != b.Request || a.BackupCount != b.BackupCount || len(a.Backups) != len(b.Backups) ||
		!sameRun(a.Running, b.Running) || !sameScheduled(a.NextScheduled, b.NextScheduled) ||
		a.LastFailure != b.LastFailure || a.LastBackup != b.LastBackup || a.LastVerification != b.LastVerification ||
		a.LastRestoreDrill != b.LastRestoreDrill ||
		a.Repository != b.Repository || a.Archiving != b.Archiving {
		return false
	}
	for i := range a.Backups {
		if a.Backups[i].Label != b.Backups[i].Label {
			return false
		}
	}
	return true
}

func sameRun(a, b *v1.BackupRun) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func sameScheduled(a, b *v1.ScheduledBackup) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Type == b.Type && a.Time.Equal(&b.Time)
}

// quantity is a size in MiB, which backups are counted in: 21.3 MiB.
func quantity(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
