package backup

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/test/testbed"
)

// python is the interpreter Patroni runs on (Debian's patroni package):
// the test splits the bootstrap command with its shlex, as Patroni does.
const python = "/usr/bin/python3"

// TestPointInTimeClone restores a clone to a time as a pgloop cluster with
// spec.clone.timestamp does, for real: a source archiving to its own
// repository path and stanza, a full backup, rows before and after a time
// T, then the command cluster.RestoreCommand builds, split as Patroni
// splits it and run with the clone's own pgBackRest environment (its own
// path and stanza, which the command line overrides). The clone holds
// exactly the rows committed before T, reads the source's archive during
// recovery (the restore_command pgBackRest wrote names the source), and
// after promotion archives on a new timeline to its own path, with
// pgloop's archive_command, nothing of it in the source's. Then the
// faults: a time before the source's first backup, a time after the end
// of its archive.
func TestPointInTimeClone(t *testing.T) {
	requireFiles(t, pgBackRest, filepath.Join(pgBin, "postgres"), python)
	ctx, cancel := context.WithTimeout(t.Context(), testDeadline)
	defer cancel()
	var tm timings
	defer func() { t.Logf("measured:\n  %s", strings.Join(tm, "\n  ")) }()
	store := startStore(ctx, t)

	// The clusters as pgloop has them: the source, and its clone in
	// another namespace.
	source := &v1.Postgresql{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "acid-source", UID: "uid-source"}}
	repo := &v1.BackupS3{Endpoint: store.S3.Endpoint, Bucket: store.S3.Bucket, SecretName: "s3"}
	newClone := func(name string, at time.Time) *v1.Postgresql {
		return &v1.Postgresql{
			ObjectMeta: metav1.ObjectMeta{Namespace: "staging", Name: name, UID: types.UID("uid-" + name)},
			Spec: v1.PostgresqlSpec{
				Backup: &v1.Backup{S3: repo},
				Clone: &v1.CloneSpec{Cluster: source.Name, Namespace: source.Namespace, UID: string(source.UID),
					Timestamp: at.Format(time.RFC3339)},
			},
		}
	}

	cred := credential(t)
	base := t.TempDir()
	traversable(t, base)
	data, sock, spool, logs, lock := filepath.Join(base, "data"), filepath.Join(base, "sock"), filepath.Join(base, "spool"), filepath.Join(base, "log"), filepath.Join(base, "lock")
	ownedDirs(t, cred, base, sock, spool, logs, lock)
	t.Cleanup(func() { killStragglers(t, base) })
	port := freePorts(t, 3)
	env := withEnv(repoEnv(store.S3, cluster.RepositoryPath(source), data, sock, port[0], spool, logs, lock),
		"PGBACKREST_STANZA="+cluster.Stanza(source))
	src := runner{cred: cred, dir: base, env: env, stanza: cluster.Stanza(source)}

	initdb(ctx, t, cred, data)
	primary := startServer(ctx, t, cred, "source", data, sock, port[0], env,
		"archive_mode=on", "archive_command="+cluster.ArchiveCommand(source, repo))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("source's log, last lines:\n%s", primary.logTail(40))
			b, _ := os.ReadFile(filepath.Join(spool, cluster.StanzaCreateError))
			t.Logf("source's %s: %s", cluster.StanzaCreateError, b)
		}
	})
	must := func(r runner, step string, args ...string) {
		t.Helper()
		_, out, took, err := r.run(ctx, nil, args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		tm.add("%s: %v", step, took.Round(10*time.Millisecond))
	}
	must(src, "stanza-create", "stanza-create")
	// pgloop's archive_command runs stanza-create too, at its first push
	// (and hourly): during a backup, which holds the stanza's backup
	// lock, that fails ("[050]: unable to acquire lock"), the segment is
	// not pushed and the backup times out waiting for it. So one segment
	// is archived before the backup, as pgloop's first push is.
	primary.query(ctx, t, "CREATE TABLE before_backup()")
	archived(ctx, t, primary)
	// A time before any backup, for the first fault.
	var beforeBackup time.Time
	primary.query(ctx, t, "SELECT clock_timestamp()", &beforeBackup)
	time.Sleep(1100 * time.Millisecond)
	must(src, "backup --type=full", "backup", "--type=full")

	// Rows before T, then T on a whole second after their commit (the
	// timestamp's precision, as users write it), then rows after T.
	primary.query(ctx, t, fmt.Sprintf("CREATE TABLE t AS SELECT g AS i FROM generate_series(1, %d) g", rows))
	var now time.Time
	primary.query(ctx, t, "SELECT clock_timestamp()", &now)
	at := now.Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(at.Add(time.Second)))
	primary.query(ctx, t, fmt.Sprintf("INSERT INTO t SELECT g FROM generate_series(%d, %d) g", rows+1, 2*rows))
	var segment string
	primary.query(ctx, t, "SELECT pg_walfile_name(pg_current_wal_lsn())", &segment)
	primary.query(ctx, t, "SELECT pg_switch_wal()::text", new(string))
	must(src, "check (the rows after T archived)", "check")

	// The clone's first member, as Patroni bootstraps it.
	clone := newClone("acid-copy", at)
	if errs := clone.Validate(); len(errs) > 0 {
		// Only the fields the test leaves out (teamId, volume...) may be
		// refused; nothing of spec.clone.
		if s := errs.ToAggregate().Error(); strings.Contains(s, "clone") {
			t.Fatalf("the clone's spec: %s", s)
		}
	}
	restored, cloneEnv, r := cloneDirs(t, base, "copy", store.S3, clone, sock, port[1], cred)
	cmd := cluster.RestoreCommand(clone)
	tm.add("T = %s; bootstrap command: %s", clone.Spec.Clone.Timestamp, cmd)
	out, took, err := runBootstrap(ctx, cmd, restored, cloneEnv, cred)
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	tm.add("restore to T: %v", took.Round(10*time.Millisecond))
	auto, err := os.ReadFile(filepath.Join(restored, "postgresql.auto.conf"))
	if err != nil {
		t.Fatal(err)
	}
	var restoreCommand string
	for line := range strings.Lines(string(auto)) {
		if strings.HasPrefix(line, "restore_command") || strings.HasPrefix(line, "recovery_target") {
			tm.add("restore wrote %s", strings.TrimSpace(line))
		}
		if strings.HasPrefix(line, "restore_command") {
			restoreCommand = line
		}
	}
	for _, want := range []string{"--repo1-path=" + cluster.SourceRepositoryPath(clone), "--stanza=" + source.Name} {
		if !strings.Contains(restoreCommand, want) {
			t.Errorf("restore_command %q does not name the source's %s: the replay would read the clone's own repository", restoreCommand, want)
		}
	}

	began := time.Now()
	copySrv := startServer(ctx, t, cred, "copy", restored, sock, port[1], cloneEnv,
		"archive_mode=on", "archive_command="+cluster.ArchiveCommand(clone, repo))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("clone's log, last lines:\n%s", copySrv.logTail(40))
		}
	})
	if err := copySrv.promoted(ctx, t, 200*time.Millisecond); err != nil {
		t.Fatalf("the clone did not reach T and promote: %v\n%s", err, copySrv.logTail(30))
	}
	tm.add("clone started → recovered to T and promoted: %v", time.Since(began).Round(100*time.Millisecond))
	var count, maxRow, timeline int
	copySrv.query(ctx, t, "SELECT count(*), max(i) FROM t", &count, &maxRow)
	if count != rows || maxRow != rows {
		t.Errorf("the clone has %d rows up to %d, want the %d committed before T", count, maxRow, rows)
	}
	copySrv.query(ctx, t, "SELECT timeline_id FROM pg_control_checkpoint()", &timeline)
	if log, _ := os.ReadFile(copySrv.logPath); !strings.Contains(string(log), "recovery stopping before commit") {
		t.Errorf("the clone's log does not say where recovery stopped:\n%s", copySrv.logTail(30))
	} else {
		for line := range strings.Lines(string(log)) {
			if strings.Contains(line, "recovery stopping") || strings.Contains(line, "selected new timeline") {
				tm.add("clone's log: %s", strings.TrimSpace(line))
			}
		}
	}

	// Its own repository from now on: writes on the new timeline,
	// archived by pgloop's archive_command (which makes the clone's
	// stanza) to the clone's path.
	copySrv.query(ctx, t, fmt.Sprintf("INSERT INTO t SELECT g FROM generate_series(%d, %d) g", 10*rows, 11*rows-1))
	var cloneSegment string
	copySrv.query(ctx, t, "SELECT pg_walfile_name(pg_current_wal_lsn())", &cloneSegment)
	copySrv.query(ctx, t, "SELECT pg_switch_wal()::text", new(string))
	began = time.Now()
	err = poll(ctx, time.Second, func() (bool, error) {
		var wal *string
		copySrv.query(ctx, t, "SELECT last_archived_wal FROM pg_stat_archiver", &wal)
		return wal != nil && *wal >= cloneSegment, nil
	})
	if err != nil {
		t.Fatalf("the clone did not archive %s: %v\n%s", cloneSegment, err, copySrv.logTail(30))
	}
	tm.add("clone's segment %s (timeline %d) archived %v after the switch", cloneSegment, timeline, time.Since(began).Round(100*time.Millisecond))
	if want := fmt.Sprintf("%08X", timeline); timeline < 2 || !strings.HasPrefix(cloneSegment, want) {
		t.Errorf("the clone writes segment %s on timeline %d, want a new timeline", cloneSegment, timeline)
	}
	own := r.info(ctx, t)
	if len(own.Archive) != 1 || !strings.HasPrefix(own.Archive[0].Max, cloneSegment[:8]) || own.Archive[0].Max < cloneSegment {
		t.Errorf("the clone's own repository: want its archive up to %s, got %+v", cloneSegment, own.Archive)
	} else {
		tm.add("clone's own repository %s: archive %s %s..%s", cluster.RepositoryPath(clone), own.Archive[0].ID, own.Archive[0].Min, own.Archive[0].Max)
	}
	theirs := src.info(ctx, t)
	for _, a := range theirs.Archive {
		if !strings.HasPrefix(a.Max, "00000001") {
			t.Errorf("the source's repository has the clone's timeline: %+v", theirs.Archive)
		}
	}
	copySrv.stop()

	// Faults. 1: a time before the source's first backup.
	early := newClone("acid-early", beforeBackup.Truncate(time.Second))
	restored, cloneEnv, _ = cloneDirs(t, base, "early", store.S3, early, sock, port[2], cred)
	out, took, err = runBootstrap(ctx, cluster.RestoreCommand(early), restored, cloneEnv, cred)
	tm.add("a time before the first backup (%s): restore %v after %v:\n%s", early.Spec.Clone.Timestamp, errOrOK(err), took.Round(10*time.Millisecond), indent(strings.TrimSpace(out)))
	if err == nil {
		// pgBackRest restored a later backup: the server must not
		// reach the target, and must say so.
		checkNoRecovery(ctx, t, &tm, cred, "early", restored, sock, port[2], cloneEnv)
	}

	// 2: a time after the end of the source's archive (nothing archived
	// reaches it yet).
	late := newClone("acid-late", time.Now().Add(time.Hour).Truncate(time.Second))
	restored, cloneEnv, _ = cloneDirs(t, base, "late", store.S3, late, sock, port[2], cred)
	out, took, err = runBootstrap(ctx, cluster.RestoreCommand(late), restored, cloneEnv, cred)
	tm.add("a time after the archive's end: restore %v after %v", errOrOK(err), took.Round(10*time.Millisecond))
	if err != nil {
		t.Fatalf("restore to a time after the archive: %v\n%s", err, out)
	}
	checkNoRecovery(ctx, t, &tm, cred, "late", restored, sock, port[2], cloneEnv)
}

// archived switches the server's WAL segment and waits until its archiver
// has pushed it.
func archived(ctx context.Context, t *testing.T, s *server) string {
	t.Helper()
	var segment string
	s.query(ctx, t, "SELECT pg_walfile_name(pg_current_wal_lsn())", &segment)
	s.query(ctx, t, "SELECT pg_switch_wal()::text", new(string))
	err := poll(ctx, 200*time.Millisecond, func() (bool, error) {
		var wal *string
		s.query(ctx, t, "SELECT last_archived_wal FROM pg_stat_archiver", &wal)
		return wal != nil && *wal >= segment, nil
	})
	if err != nil {
		t.Fatalf("%s did not archive %s: %v\n%s", s.name, segment, err, s.logTail(20))
	}
	return segment
}

// cloneDirs makes the directories of a clone's instance and returns its
// data directory, its pgBackRest environment (its own repository path and
// stanza, as pgloop's pod has them) and a runner of its stanza.
func cloneDirs(t *testing.T, base, name string, s3 testbed.S3, clone *v1.Postgresql, sock string, port int, cred *syscall.Credential) (string, []string, runner) {
	t.Helper()
	data := filepath.Join(base, name)
	spool, lock := filepath.Join(base, "spool-"+name), filepath.Join(base, "lock-"+name)
	// Not the data directory: Patroni runs the bootstrap without one.
	ownedDirs(t, cred, spool, lock)
	env := withEnv(repoEnv(s3, cluster.RepositoryPath(clone), data, sock, port, spool, filepath.Join(base, "log"), lock),
		"PGBACKREST_STANZA="+cluster.Stanza(clone))
	return data, env, runner{cred: cred, dir: base, env: env, stanza: cluster.Stanza(clone)}
}

// runBootstrap runs a bootstrap command as Patroni 3.0.2 runs it
// (Bootstrap._custom_bootstrap with no_params): split by Python's
// shlex.split, no shell, in the instance's environment.
func runBootstrap(ctx context.Context, command, dir string, env []string, cred *syscall.Credential) (string, time.Duration, error) {
	split, err := exec.CommandContext(ctx, python, "-c", "import json, shlex, sys; print(json.dumps(shlex.split(sys.argv[1])))", command).Output()
	if err != nil {
		return "", 0, fmt.Errorf("shlex.split: %w", err)
	}
	var argv []string
	if err := json.Unmarshal(split, &argv); err != nil {
		return "", 0, err
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(append([]string{}, baseEnv...), env...)
	cmd.Dir = filepath.Dir(dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	began := time.Now()
	out, err := cmd.CombinedOutput()
	return string(out), time.Since(began), err
}

// checkNoRecovery starts PostgreSQL on a restored directory whose target
// cannot be reached and wants it to exit saying so.
func checkNoRecovery(ctx context.Context, t *testing.T, tm *timings, cred *syscall.Credential, name, data, sock string, port int, env []string) {
	t.Helper()
	logPath := filepath.Join(filepath.Dir(data), name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(waitCtx, filepath.Join(pgBin, "postgres"), "-D", data, "-k", sock, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "logging_collector=off", "-c", "archive_mode=off")
	cmd.Env = append(append([]string{}, baseEnv...), env...)
	cmd.Dir = filepath.Dir(data)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}
	// Its group (archive-get's processes too) when it does not exit.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	began := time.Now()
	err = cmd.Run()
	log, _ := os.ReadFile(logPath)
	var said []string
	for line := range strings.Lines(string(log)) {
		if strings.Contains(line, "FATAL") || strings.Contains(line, "recovery target") {
			said = append(said, strings.TrimSpace(line))
		}
	}
	tm.add("%s: postgres exited (%v) after %v, saying:\n%s", name, errOrOK(err), time.Since(began).Round(100*time.Millisecond), indent(strings.Join(said, "\n")))
	if err == nil || !strings.Contains(string(log), "recovery ended before configured recovery target was reached") {
		t.Errorf("%s: want PostgreSQL to stop before promoting, saying the target was not reached; it %v:\n%s", name, errOrOK(err), log)
	}
}

func errOrOK(err error) string {
	if err == nil {
		return "succeeded"
	}
	return "failed (" + err.Error() + ")"
}
