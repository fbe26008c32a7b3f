package cluster

import (
	"encoding/base64"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"time"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Base backups run in the primary's Spilo container, where the data
// directory is: pgloop starts each phase of a run (the backup, then its
// verify and its restore drill when asked for) through PostgreSQL (COPY
// ... TO PROGRAM, as the superuser, a plan step of pkg/indb's), detached,
// so the statement returns at once, and the archive checks (pkg/archiving)
// read how they went from the files each phase leaves in BackupDir. Nothing of a backup needs `kubectl exec`, and the
// command runs with the PGBACKREST_* environment archive_command has.

// BackupDir is where the runs leave their files, relative to the data
// directory (PGData): the spool's backup directory, on the data volume.
// A run ID's backup leaves ID.started (a directory: its lock), then ID.log
// (pgBackRest's warnings and errors) and, once it ended, info.json (the
// repository's backups, retention applied) and ID.exit (the backup's exit
// code), last. Its verify, when asked for, leaves ID.verify.started and
// ID.verify (what pgBackRest's verify found, ending with its exit code);
// its restore drill ID.drill.started and ID.drill.
const BackupDir = "../../pgbackrest/spool/backup"

// Defaults of a base backup.
const (
	// DefaultBackupSchedule is when full backups are taken when neither
	// the spec nor the operator says: daily at 00:30 UTC, zalando's
	// (Spilo's BACKUP_SCHEDULE).
	DefaultBackupSchedule = "30 0 * * *"
	// DefaultBackupRetentionFull is how many full backups are kept when
	// neither says: zalando's BACKUP_NUM_TO_RETAIN.
	DefaultBackupRetentionFull = 5
	// DefaultBackupTimeout is how long pgloop waits for a backup to end.
	DefaultBackupTimeout = 6 * time.Hour
	// backupIOTimeout is pgBackRest's io-timeout for backups: a bucket
	// that stops answering fails the backup within minutes, not hours.
	backupIOTimeout = 30
)

// backupIDRE is a run ID: the time it was asked for and its type
// (v1.BackupRunID); nothing else reaches the shell.
var backupIDRE = regexp.MustCompile(`^[0-9]{8}-[0-9]{6}-(full|diff|incr)$`)

// BackupOptions are what a base backup does besides the backup.
type BackupOptions struct {
	// Retention is the repository's retention of full backups.
	Retention v1.BackupRetention
}

// Phases of a base backup run (v1.BackupRun): each a program of its own
// (BackupProgram, VerifyProgram, DrillProgram), started detached by a step
// of its own once the one before ended; the files each leaves in
// BackupDir say how it goes.
const (
	// BackupPhaseBackup: pgbackrest backup, then expire as retention
	// asks, then the repository's listing (info.json); ID.started,
	// ID.log, ID.exit.
	BackupPhaseBackup = "backup"
	// BackupPhaseVerify: pgBackRest's verify of the whole repository
	// (every file's checksum, and the WAL ranges); ID.verify.started,
	// ID.verify ending with "exit N".
	BackupPhaseVerify = "verify"
	// BackupPhaseDrill: a restore drill of the newest backup (see
	// v1.Backup.RestoreDrill); ID.drill.started, ID.drill ending with
	// "drill ok|failed".
	BackupPhaseDrill = "drill"
)

// drillPort names the restore drill's socket; it listens on no address.
const drillPort = "54329"

// BackupProgram is the shell command that starts the backup of run id,
// detached: what COPY ... TO PROGRAM runs as the postgres user. It returns
// at once. A second start of the same ID does nothing (ID.started is made
// once). It clears the files of earlier runs, takes the backup of the
// ID's type, expires what retention no longer keeps (backups and the WAL
// only they needed), lists the repository into info.json, and writes
// the backup's exit code to ID.exit, last.
func BackupProgram(id string, opts BackupOptions) (string, error) {
	m := backupIDRE.FindStringSubmatch(id)
	if m == nil {
		return "", fmt.Errorf("backup run ID %q is not one of pgloop's", id)
	}
	r := opts.Retention
	retention := "--repo1-retention-full=" + strconv.Itoa(int(r.Full))
	switch {
	case r.FullDays > 0:
		retention = "--repo1-retention-full-type=time --repo1-retention-full=" + strconv.Itoa(int(r.FullDays))
	case r.Full <= 0:
		return "", fmt.Errorf("retention %+v keeps no backup", r)
	}
	return detached(BackupPhaseBackup, `mkdir "$d/`+id+`.started" 2>/dev/null || exit 0
for f in "$d"/*.started; do case "$f" in "$d/`+id+`".*) ;; *) rm -rf "$f" "${f%.started}.log" "${f%.started}.verify" "${f%.started}.drill" "${f%.started}.exit";; esac; done
pgbackrest --type=`+m[1]+` --start-fast`+backupIO+` `+retention+` backup >"$d/`+id+`.log" 2>&1
rc=$?
pgbackrest --output=json --log-level-console=off --log-level-stderr=off info >"$d/info.tmp" 2>/dev/null && mv -f "$d/info.tmp" "$d/info.json"
echo $rc >"$d/`+id+`.exit"
`), nil
}

// VerifyProgram is the shell command that starts pgBackRest's verify of
// the repository after run id's backup, detached, once: its output goes to
// ID.verify, which ends with "exit N". Detail names each continuous range
// of WAL: two on one timeline are a gap, which 2.45's verify does not
// count as an error (pgloop does).
func VerifyProgram(id string) (string, error) {
	if !backupIDRE.MatchString(id) {
		return "", fmt.Errorf("backup run ID %q is not one of pgloop's", id)
	}
	return detached(BackupPhaseVerify, `mkdir "$d/`+id+`.verify.started" 2>/dev/null || exit 0
pgbackrest --output=text --verbose --log-level-console=detail`+backupIO+` verify >"$d/`+id+`.verify" 2>&1; echo "exit $?" >>"$d/`+id+`.verify"
`), nil
}

// DrillProgram is the shell command that starts the restore drill after
// run id's backup, detached, once: the newest backup restored to its end
// (immediate) into drill/, on the data volume; PostgreSQL started there
// without archiving, on a socket only (in /tmp: a socket's path is at most
// 107 bytes), paused at the target (a hot standby that accepts connections
// once consistent): pg_ctl -w returns once it does. Then stopped and
// removed. Its words go to ID.drill, which ends, once all that is done,
// with "drill ok" and the seconds each part took, or "drill failed".
func DrillProgram(id string) (string, error) {
	if !backupIDRE.MatchString(id) {
		return "", fmt.Errorf("backup run ID %q is not one of pgloop's", id)
	}
	return detached(BackupPhaseDrill, `mkdir "$d/`+id+`.drill.started" 2>/dev/null || exit 0
r="$d/drill"; o="$d/`+id+`.drill"; rm -rf "$r"; mkdir -m 700 "$r"; k=$(mktemp -d /tmp/pgloop-drill.XXXXXX); t0=$(date +%s); res="drill failed"
if pgbackrest --pg1-path="$r" --type=immediate --target-action=pause --archive-mode=off`+backupIO+` restore >"$o" 2>&1; then
t1=$(date +%s)
if "$b/pg_ctl" -D "$r" -w -t 3600 -l "$d/drill.log" -o "-c listen_addresses= -c port=`+drillPort+` -c unix_socket_directories=$k -c logging_collector=off -c archive_mode=off -c shared_buffers=32MB -c hot_standby=on" start >>"$o" 2>&1; then
res="drill ok restore $((t1-t0)) start $(($(date +%s)-t1))"
else echo "ERROR: PostgreSQL did not start on the restored backup:" >>"$o"; tail -n 5 "$d/drill.log" >>"$o"; res="drill failed restore $((t1-t0))"; fi
"$b/pg_ctl" -D "$r" -m immediate stop >/dev/null 2>&1
fi
rm -rf "$r" "$k" "$d/drill.log"
echo "$res" >>"$o"
`), nil
}

// backupIO is pgBackRest's io-timeout for the runs: a bucket that stops
// answering fails them within minutes, not hours.
var backupIO = " --io-timeout=" + strconv.Itoa(backupIOTimeout)

// detached wraps the body of a run's script into the command that starts
// it detached: the script travels base64-encoded (no quoting of the
// shell's or SQL's can break it), is written to the spool and run with
// setsid, so the statement returns at once. In the body, d is the runs'
// directory and b the directory of the server's binaries, that of the
// backend that runs COPY (pg_ctl for the drill), read before the
// statement returns: the backend may be gone by the time a background job
// would read it. Each phase has a script file of its own (phase.sh),
// written under another name and renamed: a start asked again while the
// phase runs never rewrites the file its shell is reading.
func detached(phase, body string) string {
	script := `d="$PGBACKREST_SPOOL_PATH/backup"; b="$1"
mkdir -p "$d" || exit 1
` + body
	enc := base64.StdEncoding.EncodeToString([]byte(script))
	file := `"$PGBACKREST_SPOOL_PATH/` + phase + `.sh"`
	return `b="$(dirname "$(readlink /proc/$PPID/exe)")"; mkdir -p "$PGBACKREST_SPOOL_PATH" && echo ` + enc +
		` | base64 -d >` + file + `.$$ && mv -f ` + file + `.$$ ` + file + ` && { setsid sh ` + file + ` "$b" </dev/null >/dev/null 2>&1 & }`
}

// Schedule is a backup schedule (robfig/cron's).
type Schedule interface{ Next(time.Time) time.Time }

// DefaultBackupScheduleSpread is Options.BackupScheduleSpread's default.
const DefaultBackupScheduleSpread = time.Hour

// SpreadSchedule returns the cluster's full backup schedule: the spec's as
// it is; the operator's, which every cluster without its own shares,
// delayed by an offset less than BackupScheduleSpread that the cluster's
// UID decides, whole seconds, so that a fleet does not start all its
// backups at once ("30 0 * * *": each cluster at its own time between
// 00:30 and 01:30, the same every day). nil for none.
func SpreadSchedule(pg *v1.Postgresql, opts Options, full Schedule) Schedule {
	if full == nil || pg.Spec.Backup != nil && pg.Spec.Backup.Schedule != "" || opts.BackupScheduleSpread < time.Second {
		return full
	}
	h := fnv.New64a()
	h.Write([]byte(pg.UID))
	offset := time.Duration(h.Sum64()%uint64(opts.BackupScheduleSpread/time.Second)) * time.Second
	return spread{full, offset}
}

// spread is a schedule delayed by offset.
type spread struct {
	s      Schedule
	offset time.Duration
}

func (s spread) Next(t time.Time) time.Time {
	next := s.s.Next(t.Add(-s.offset))
	if next.IsZero() {
		return next
	}
	return next.Add(s.offset)
}

// BackupSchedules are the cluster's schedules of full and differential
// backups, "" for none: the spec's, else the operator's (BackupSchedule,
// else DefaultBackupSchedule).
func BackupSchedules(pg *v1.Postgresql, opts Options) (full, diff string) {
	full = opts.BackupSchedule
	if full == "" {
		full = DefaultBackupSchedule
	}
	if b := pg.Spec.Backup; b != nil {
		if b.Schedule != "" {
			full = b.Schedule
		}
		diff = b.DifferentialSchedule
	}
	if full == v1.ScheduleNone {
		full = ""
	}
	return full, diff
}

// BackupRetention is the cluster's retention of full backups: the spec's,
// else the operator's count (BackupRetentionFull, else
// DefaultBackupRetentionFull).
func BackupRetention(pg *v1.Postgresql, opts Options) v1.BackupRetention {
	if b := pg.Spec.Backup; b != nil && b.Retention != nil && (b.Retention.Full > 0 || b.Retention.FullDays > 0) {
		return *b.Retention
	}
	n := opts.BackupRetentionFull
	if n <= 0 {
		n = DefaultBackupRetentionFull
	}
	return v1.BackupRetention{Full: n}
}
