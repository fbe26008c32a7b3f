package archiving

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/indb"
	"github.com/pgloop/pgloop/pkg/observed"
	"github.com/pgloop/pgloop/pkg/pgsql"
)

// SignalArchiving is the signal a published report sends the loop.
const SignalArchiving = "archiving"

// Defaults of Options.
const (
	DefaultPeriod       = 30 * time.Second
	DefaultStatusPeriod = 5 * time.Minute
	DefaultWorkers      = 4
	DefaultTimeout      = 10 * time.Second
)

// Options tune the checks.
type Options struct {
	// Period is how often each archiving cluster's primary is checked.
	Period time.Duration
	// StatusPeriod is how often a report that only moved on (a later
	// segment archived, the same verdict) is published, and so written
	// to status: a change of verdict or of the archiver's words is
	// published at once.
	StatusPeriod time.Duration
	// Workers bounds the checks running at once; Timeout each check.
	Workers int
	Timeout time.Duration
	// Build are the builders' options: the default repository.
	Build cluster.Options
	// Log, Now: logger and clock; defaults are logrus's and time.Now.
	Log *logrus.Entry
	Now func() time.Time
	// Observe, when set, is told each check's outcome: "ok", "failing"
	// (archiving fails) or "error" (the primary could not be asked).
	Observe func(outcome string)
}

func (o Options) withDefaults() Options {
	if o.Period <= 0 {
		o.Period = DefaultPeriod
	}
	if o.StatusPeriod <= 0 {
		o.StatusPeriod = DefaultStatusPeriod
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Log == nil {
		o.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Source is what the checks read: the informers' caches (pkg/informers).
type Source interface {
	Keys() []string
	Postgresql(key string) (*v1.Postgresql, bool)
	Objects(key string) (observed.Cluster, bool)
}

// Primaries reads what only a cluster's primary can tell, as the caches
// show the cluster: pkg/indb's Actor, the one way pgloop reaches a primary.
// Its errors wrap indb.ErrNoPrimary when no pod publishes as the primary.
type Primaries interface {
	// Archiver reads the primary's archiver and the error files
	// pgBackRest left in dirs.
	Archiver(ctx context.Context, objs observed.Cluster, dirs []string) (*pgsql.Archiver, error)
	// ReadBackup reads how a base backup run goes there; it starts
	// nothing.
	ReadBackup(ctx context.Context, objs observed.Cluster, run *v1.BackupRun, now time.Time) (*v1.BackupReport, error)
	// Forget drops what it remembers of a cluster.
	Forget(key string)
}

// Notifier wakes the loop for a cluster whose report was published.
type Notifier interface{ Notify(key, signal string) }

// Checker checks the archiving of every cluster that has a repository, off
// the loop, and publishes what it finds for the facts: it is a
// facts.Reader, the Source's objects with the cluster's last published
// report. See the package comment.
type Checker struct {
	src       Source
	primaries Primaries
	notify    Notifier
	opts      Options

	mu        sync.Mutex
	published map[string]*v1.ArchivingStatus
	backups   map[string]*v1.BackupReport // the last report of each cluster's running backup
	// waiting is when the run of a cluster began to wait for a phase to
	// start, as its report says (waitsForPhase), the same way since.
	waiting map[string]time.Time
	started map[string]time.Time // when the last check of a cluster started
	running map[string]bool
	slots   chan struct{}
}

// New returns a Checker that asks the primaries through primaries; Run
// starts its checks.
func New(src Source, primaries Primaries, notify Notifier, opts Options) *Checker {
	opts = opts.withDefaults()
	return &Checker{
		src: src, primaries: primaries, notify: notify, opts: opts,
		published: map[string]*v1.ArchivingStatus{},
		backups:   map[string]*v1.BackupReport{},
		waiting:   map[string]time.Time{},
		started:   map[string]time.Time{},
		running:   map[string]bool{},
		slots:     make(chan struct{}, opts.Workers),
	}
}

// Objects returns the Source's objects of cluster key with its last
// published report (observed.Cluster.Archiving). It does no I/O.
func (p *Checker) Objects(key string) (observed.Cluster, bool) {
	objs, ok := p.src.Objects(key)
	if !ok {
		return objs, false
	}
	p.mu.Lock()
	objs.Archiving = p.published[key]
	objs.Backup = p.backups[key]
	p.mu.Unlock()
	return objs, true
}

// Run checks until ctx is done: every tick (a tenth of Period, at most a
// second) it starts the checks that are due, at most Workers at once.
func (p *Checker) Run(ctx context.Context) {
	tick := min(p.opts.Period/10, time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		p.round(ctx, &wg)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// round starts the checks that are due and forgets clusters that no
// longer archive.
func (p *Checker) round(ctx context.Context, wg *sync.WaitGroup) {
	now := p.opts.Now()
	keys := p.src.Keys()
	archiving := make(map[string]bool, len(keys))
	for _, key := range keys {
		pg, ok := p.src.Postgresql(key)
		if !ok || pg.DeletionTimestamp != nil || cluster.Repository(pg, p.opts.Build) == nil {
			continue
		}
		archiving[key] = true
		p.mu.Lock()
		due := !p.running[key] && (now.Sub(p.started[key]) >= p.opts.Period || p.backupDue(key, running(pg), now))
		p.mu.Unlock()
		if !due {
			continue
		}
		select {
		case p.slots <- struct{}{}:
		default:
			// Every worker is busy: the rest wait for the next round.
			return
		}
		p.mu.Lock()
		p.running[key], p.started[key] = true, now
		p.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-p.slots }()
			p.check(ctx, key)
		}()
	}
	p.mu.Lock()
	var gone []string
	for key := range p.started {
		if !archiving[key] && !p.running[key] {
			delete(p.started, key)
			delete(p.published, key)
			delete(p.backups, key)
			delete(p.waiting, key)
			gone = append(gone, key)
		}
	}
	p.mu.Unlock()
	for _, key := range gone {
		p.primaries.Forget(key)
	}
}

// check asks the cluster's primary how its archiving goes and publishes
// the report when it says something new.
func (p *Checker) check(ctx context.Context, key string) {
	defer func() {
		p.mu.Lock()
		p.running[key] = false
		p.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	report, backup, ok := p.ask(ctx, key)
	if !ok {
		return // nothing to ask yet
	}
	if p.noteBackup(key, backup) {
		p.notify.Notify(key, SignalArchiving)
	}
	outcome := "ok"
	switch {
	case report.Failing:
		outcome = "failing"
	case report.Message != "":
		outcome = "error"
	}
	if p.opts.Observe != nil {
		p.opts.Observe(outcome)
	}
	p.mu.Lock()
	prev := p.published[key]
	publish := worthPublishing(prev, report, p.opts.StatusPeriod)
	if publish {
		p.published[key] = report
	}
	p.mu.Unlock()
	if publish {
		p.notify.Notify(key, SignalArchiving)
	}
}

// worthPublishing says whether report tells the facts something prev did
// not: a first report, another verdict or other words at once; a later
// segment or another backlog only once prev is period old.
func worthPublishing(prev, report *v1.ArchivingStatus, period time.Duration) bool {
	switch {
	case prev == nil, prev.Failing != report.Failing, prev.Message != report.Message:
		return true
	case report.CheckedAt.Sub(prev.CheckedAt.Time) < period:
		return false
	default:
		return prev.LastArchivedWAL != report.LastArchivedWAL || prev.LastFailedWAL != report.LastFailedWAL ||
			prev.WaitingSegments != report.WaitingSegments
	}
}

// ask reads the primary's archiver and, when status.backup.running names
// a base backup run, how it goes there (pkg/indb); false
// when there is nothing to ask yet (no primary publishes where it listens,
// the cluster is gone). It starts nothing: the state machine starts a run
// with a plan step, and again when a report says the primary shows no
// trace of it (a new primary).
func (p *Checker) ask(ctx context.Context, key string) (*v1.ArchivingStatus, *v1.BackupReport, bool) {
	objs, ok := p.src.Objects(key)
	if !ok {
		return nil, nil, false
	}
	pg := objs.Postgresql
	now := p.opts.Now()
	run := running(pg)
	unasked := func(err error) *v1.BackupReport {
		if run == nil {
			return nil
		}
		return &v1.BackupReport{CheckedAt: metav1.NewTime(now), ID: run.ID, Message: "could not ask the primary: " + err.Error()}
	}
	a, err := p.primaries.Archiver(ctx, objs, ErrorDirs(pg))
	switch {
	case errors.Is(err, indb.ErrNoPrimary):
		return nil, nil, false
	case err != nil:
		return &v1.ArchivingStatus{CheckedAt: metav1.NewTime(now), Message: "could not ask the primary: " + err.Error()}, unasked(err), true
	}
	var b *v1.BackupReport
	if run != nil {
		if b, err = p.primaries.ReadBackup(ctx, objs, run, now); err != nil {
			b = unasked(err)
		}
	}
	return report(a, now), b, true
}

// notStartedRecheck is how soon a run is read again whose last report
// saw it wait for a phase to start (waitsForPhase): the machine's step
// that starts it runs a moment after the report, so a run's phases follow
// each other within seconds, not periods. It holds for quickRecheckFor
// from when the run began to wait the same way: a start that keeps
// failing (a primary that refuses it) is then read, and asked again, once
// a period only.
const (
	notStartedRecheck = 5 * time.Second
	quickRecheckFor   = time.Minute
)

// waitsForPhase says whether report b says its run waits for a phase to
// start: the backup itself, or, after a backup that succeeded, its verify
// or its drill (or the machine's end of the run).
func waitsForPhase(b *v1.BackupReport) bool {
	return b != nil && (b.NotStarted || b.Done && !b.Failed && !b.VerifyRunning && !b.DrillRunning)
}

// backupDue says whether cluster key's running backup run must be checked
// before its period is up: it was not checked yet, or its last report,
// notStartedRecheck ago, saw it wait for a phase to start, within
// quickRecheckFor of when it began to. Called with mu held.
func (p *Checker) backupDue(key string, run *v1.BackupRun, now time.Time) bool {
	if run == nil {
		return false
	}
	last := p.backups[key]
	return last == nil || last.ID != run.ID ||
		waitsForPhase(last) && now.Sub(last.CheckedAt.Time) >= notStartedRecheck && now.Sub(p.waiting[key]) < quickRecheckFor
}

// noteBackup keeps the report of cluster key's running backup, nil when
// none runs, and says whether it tells something new.
func (p *Checker) noteBackup(key string, b *v1.BackupReport) bool {
	gone := true
	if pg, ok := p.src.Postgresql(key); ok && running(pg) != nil {
		gone = false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := p.backups[key]
	if b == nil {
		if gone {
			delete(p.backups, key) // no run in status: nothing to report
			delete(p.waiting, key)
		}
		return false // or it ended, and its report stays until the run leaves status
	}
	p.backups[key] = b
	switch {
	case !waitsForPhase(b):
		delete(p.waiting, key)
	case !waitsForPhase(prev) || !sameBackupReport(prev, b):
		p.waiting[key] = b.CheckedAt.Time
	}
	// A run that waits for a phase to start is news each time: the
	// machine asks again for it (a start that failed, a primary that
	// changed, a verify or drill after the backup).
	return waitsForPhase(b) || !sameBackupReport(prev, b)
}

// ErrorDirs are where the archiver's error files are, relative to the
// data directory: the spool (cluster.pgbackrestEnv, on the data volume
// beside PGROOT), where archive_command leaves a failed stanza-create's
// (cluster.StanzaCreateError), and its archive/STANZA/out, where
// pgBackRest's asynchronous archive-push leaves its own.
func ErrorDirs(pg *v1.Postgresql) []string {
	const spool = "../../pgbackrest/spool"
	return []string{spool, path.Join(spool, "archive", cluster.Stanza(pg), "out")}
}

// report turns what PostgreSQL said into the status' words.
func report(a *pgsql.Archiver, now time.Time) *v1.ArchivingStatus {
	r := &v1.ArchivingStatus{
		CheckedAt:       metav1.NewTime(now),
		Failing:         a.Failing(),
		LastArchivedWAL: a.LastArchivedWAL,
		LastFailedWAL:   a.LastFailedWAL,
		WaitingSegments: a.Ready,
		WALBytes:        a.WALBytes,
	}
	if !a.LastArchivedTime.IsZero() {
		r.LastArchivedTime = &metav1.Time{Time: a.LastArchivedTime.UTC().Truncate(time.Second)}
	}
	if !a.LastFailedTime.IsZero() {
		r.LastFailedTime = &metav1.Time{Time: a.LastFailedTime.UTC().Truncate(time.Second)}
	}
	if a.InRecovery {
		r.Message = "in recovery, a standby: its source archives; this cluster archives once it is promoted"
		return r
	}
	if a.ArchivedCount == 0 && a.FailedCount == 0 {
		// Not known to work until a segment is pushed: PostgreSQL
		// finishes the first one after writes (archive_timeout at most
		// after them); an idle new cluster has none.
		r.Message = "no WAL segment archived yet: the first goes once PostgreSQL finishes one (after writes, at most archive_timeout later)"
	}
	if r.Failing {
		r.Message = a.ErrorText()
		if r.Message == "" {
			r.Message = fmt.Sprintf("archive_command failed for %s (%d failures); pgBackRest left no words in its spool yet (its asynchronous push may still be trying)", a.LastFailedWAL, a.FailedCount)
		}
		if len(r.Message) > 1024 {
			r.Message = r.Message[:1024]
		}
	}
	return r
}

// running is the base backup status.backup.running names, nil when none.
func running(pg *v1.Postgresql) *v1.BackupRun {
	if pg.Status.Backup == nil {
		return nil
	}
	return pg.Status.Backup.Running
}

// sameBackupReport says whether two reports tell the same.
func sameBackupReport(a, b *v1.BackupReport) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ID == b.ID && a.NotStarted == b.NotStarted && a.Done == b.Done && a.Failed == b.Failed && a.Message == b.Message &&
		len(a.Backups) == len(b.Backups) && a.VerifyRunning == b.VerifyRunning && a.DrillRunning == b.DrillRunning &&
		(a.Verification == nil) == (b.Verification == nil) && (a.Drill == nil) == (b.Drill == nil)
}
