package backup

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgloop/pgloop/test/testbed"
)

const (
	// stanza names the cluster in the repository.
	stanza = "demo"
	// rows is how many rows each write adds.
	rows = 1000
	// testDeadline bounds the whole test: the store is down for a minute
	// or two of it, and PostgreSQL's archiver waits a minute between
	// rounds of three failures.
	testDeadline = 10 * time.Minute
	// ioTimeout is pgBackRest's io-timeout here, in seconds. Its default,
	// 60, makes an archive-push against a store that refuses connections
	// fail only after 8 minutes (measured: about 8 times io-timeout, as
	// each attempt to connect is retried until it runs out); 3 makes that
	// 24 s, and nothing on loopback is slower than that.
	ioTimeout = 3
	// archiveTimeout is archive-timeout, in seconds: how long an
	// asynchronous archive-push waits for its WAL to be pushed, and check
	// and backup for theirs to be archived (default 60).
	archiveTimeout = 30
)

// repoEnv is the whole of pgBackRest's configuration, as the operator will
// set it on a pod: PGBACKREST_* variables, no file. PGBACKREST_CONFIG=
// /dev/null keeps Debian's /etc/pgbackrest.conf (repo1-path=
// /var/lib/pgbackrest) out, so nothing else applies.
func repoEnv(s3 testbed.S3, repoPath, data, sock string, port int, spool, logs, lock string) []string {
	return []string{
		"PGBACKREST_CONFIG=/dev/null",
		"PGBACKREST_REPO1_TYPE=s3",
		"PGBACKREST_REPO1_S3_ENDPOINT=" + s3.Host,
		// repo1-s3-port and repo1-s3-ca-file in the docs of older
		// versions; 2.45 takes both names and logs these.
		"PGBACKREST_REPO1_STORAGE_PORT=" + strconv.Itoa(s3.Port),
		"PGBACKREST_REPO1_STORAGE_CA_FILE=" + s3.CAFile,
		"PGBACKREST_REPO1_S3_BUCKET=" + s3.Bucket,
		"PGBACKREST_REPO1_S3_REGION=" + s3.Region,
		"PGBACKREST_REPO1_S3_KEY=" + s3.AccessKey,
		"PGBACKREST_REPO1_S3_KEY_SECRET=" + s3.SecretKey,
		"PGBACKREST_REPO1_S3_URI_STYLE=" + s3.URIStyle,
		"PGBACKREST_REPO1_PATH=" + repoPath,
		"PGBACKREST_REPO1_RETENTION_FULL=2",
		"PGBACKREST_PG1_PATH=" + data,
		"PGBACKREST_PG1_PORT=" + strconv.Itoa(port),
		"PGBACKREST_PG1_SOCKET_PATH=" + sock,
		// archive-push returns once the WAL is in the spool's queue, a
		// separate process pushes it; the spool must be writable by
		// postgres (the default, /var/spool/pgbackrest, is Debian's).
		"PGBACKREST_ARCHIVE_ASYNC=y",
		"PGBACKREST_SPOOL_PATH=" + spool,
		// Defaults /var/log/pgbackrest and /tmp/pgbackrest.
		"PGBACKREST_LOG_PATH=" + logs,
		"PGBACKREST_LOCK_PATH=" + lock,
		// A backup starts with an immediate checkpoint, not the next one.
		"PGBACKREST_START_FAST=y",
		"PGBACKREST_IO_TIMEOUT=" + strconv.Itoa(ioTimeout),
		"PGBACKREST_ARCHIVE_TIMEOUT=" + strconv.Itoa(archiveTimeout),
	}
}

// pgbackrest runs pgBackRest as postgres with env and returns its stdout
// (JSON for info) and stdout and stderr together (its messages).
type runner struct {
	cred *syscall.Credential
	dir  string
	env  []string
	// stanza is the stanza on the command line; "" means the constant
	// stanza.
	stanza string
}

func (r runner) run(ctx context.Context, extra []string, args ...string) (stdout, all string, took time.Duration, err error) {
	name := r.stanza
	if name == "" {
		name = stanza
	}
	cmd := exec.CommandContext(ctx, pgBackRest, append([]string{"--stanza=" + name}, args...)...)
	cmd.Env = append(append(append([]string{}, baseEnv...), r.env...), extra...)
	cmd.Dir = r.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: r.cred}
	var out, both strings.Builder
	cmd.Stdout = multiWriter{&out, &both}
	cmd.Stderr = &both
	began := time.Now()
	err = cmd.Run()
	return out.String(), both.String(), time.Since(began), err
}

type multiWriter []*strings.Builder

func (m multiWriter) Write(p []byte) (int, error) {
	for _, b := range m {
		b.Write(p)
	}
	return len(p), nil
}

// stanzaInfo is what `pgbackrest info --output=json` says of one stanza
// (the fields read here).
type stanzaInfo struct {
	Name   string `json:"name"`
	Status struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"status"`
	Archive []struct {
		ID  string `json:"id"`
		Min string `json:"min"`
		Max string `json:"max"`
	} `json:"archive"`
	Backup []struct {
		Label   string `json:"label"`
		Type    string `json:"type"`
		Error   bool   `json:"error"`
		Archive struct {
			Start string `json:"start"`
			Stop  string `json:"stop"`
		} `json:"archive"`
		Info struct {
			Size       int64 `json:"size"`
			Repository struct {
				Size int64 `json:"size"`
			} `json:"repository"`
		} `json:"info"`
		Timestamp struct {
			Start int64 `json:"start"`
			Stop  int64 `json:"stop"`
		} `json:"timestamp"`
	} `json:"backup"`
	Repo []struct {
		Key    int `json:"key"`
		Status struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"status"`
	} `json:"repo"`
}

func (r runner) info(ctx context.Context, t testing.TB) stanzaInfo {
	t.Helper()
	// Its messages would go to stdout, into the JSON.
	out, all, _, err := r.run(ctx, []string{"PGBACKREST_LOG_LEVEL_CONSOLE=off"}, "info", "--output=json")
	if err != nil {
		t.Fatalf("info: %v\n%s", err, all)
	}
	var infos []stanzaInfo
	if err := json.Unmarshal([]byte(out), &infos); err != nil {
		t.Fatalf("info --output=json: %v\n%s", err, out)
	}
	want := r.stanza
	if want == "" {
		want = stanza
	}
	if len(infos) != 1 || infos[0].Name != want {
		t.Fatalf("info --output=json: want stanza %s alone, got %s", want, out)
	}
	return infos[0]
}

// timings are the figures docs/backups.md reports, logged at the end.
type timings []string

func (tm *timings) add(format string, args ...any) { *tm = append(*tm, fmt.Sprintf(format, args...)) }

// Everything pgloop's backups will stand on, for real: PostgreSQL 15
// archiving its WAL with pgBackRest 2.45 to the object store (S3 over
// HTTPS, checked against the plane's CA), pgBackRest configured by
// environment variables only, a full backup, a restore into a new data
// directory that holds the rows written after the backup; then the store
// down (archive-push, check and info fail, and say why) and up again
// (archiving catches up, check passes).
func TestArchiveBackupRestore(t *testing.T) {
	requireFiles(t, pgBackRest, filepath.Join(pgBin, "postgres"))
	ctx, cancel := context.WithTimeout(t.Context(), testDeadline)
	defer cancel()
	var tm timings
	defer func() { t.Logf("measured:\n  %s", strings.Join(tm, "\n  ")) }()
	store := startStore(ctx, t)
	tm.add("object store (weed) ready in %v", store.StartupTime.Round(100*time.Millisecond))

	cred := credential(t)
	base := t.TempDir()
	traversable(t, base)
	data, restored := filepath.Join(base, "data"), filepath.Join(base, "restored")
	sock, spool, logs, lock := filepath.Join(base, "sock"), filepath.Join(base, "spool"), filepath.Join(base, "log"), filepath.Join(base, "lock")
	ownedDirs(t, cred, base, sock, spool, logs, lock)
	// Last of the cleanups (registered first): once PostgreSQL is down.
	t.Cleanup(func() { killStragglers(t, base) })
	port := freePorts(t, 2)
	env := repoEnv(store.S3, "/"+strings.ReplaceAll(t.Name(), "/", "-"), data, sock, port[0], spool, logs, lock)
	r := runner{cred: cred, dir: base, env: env}

	initdb(ctx, t, cred, data)
	began := time.Now()
	primary := startServer(ctx, t, cred, "primary", data, sock, port[0], env,
		"archive_mode=on",
		// As the brief of issue 31 has it: the stanza on the command
		// line, everything else from the environment PostgreSQL got.
		"archive_command=pgbackrest --stanza="+stanza+" archive-push %p",
	)
	tm.add("PostgreSQL up in %v", time.Since(began).Round(100*time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("primary's log, last lines:\n%s", primary.logTail(60))
		}
	})

	must := func(step string, args ...string) string {
		t.Helper()
		_, out, took, err := r.run(ctx, nil, args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		tm.add("%s: %v", step, took.Round(10*time.Millisecond))
		return out
	}
	must("stanza-create", "stanza-create")
	must("check", "check")
	must("backup --type=full", "backup", "--type=full")

	// Rows after the backup: only the archived WAL holds them.
	primary.query(ctx, t, fmt.Sprintf("CREATE TABLE t AS SELECT g AS i FROM generate_series(1, %d) g", rows))
	var segment string
	primary.query(ctx, t, "SELECT pg_walfile_name(pg_current_wal_lsn())", &segment)
	primary.query(ctx, t, "SELECT pg_switch_wal()::text", new(string))
	must("check after pg_switch_wal", "check")

	info := r.info(ctx, t)
	if info.Status.Code != 0 || len(info.Backup) != 1 || info.Backup[0].Type != "full" || info.Backup[0].Error {
		t.Fatalf("info: want status ok and one full backup, got %+v", info)
	}
	b := info.Backup[0]
	if len(info.Archive) != 1 || info.Archive[0].Min == "" || info.Archive[0].Max < segment || info.Archive[0].Min > b.Archive.Start {
		t.Fatalf("info: want archive from at most %s to at least %s, got %+v", b.Archive.Start, segment, info.Archive)
	}
	tm.add("info: backup %s, %d MiB, %d KiB in the repository, WAL %s..%s; archive %s %s..%s",
		b.Label, b.Info.Size>>20, b.Info.Repository.Size>>10, b.Archive.Start, b.Archive.Stop,
		info.Archive[0].ID, info.Archive[0].Min, info.Archive[0].Max)

	// Restore into a new data directory, to the end of the archive (the
	// default type), and count the rows written after the backup.
	// As in a pod of its own: its spool and lock directory too. It
	// restores with archive-get, asynchronous as well with
	// archive-async=y, under the same "archive" lock as archive-push:
	// sharing the primary's lock directory, it held up the primary's
	// archiving (seen: the primary's last segment still unarchived
	// seconds later).
	spool2, lock2 := filepath.Join(base, "spool-restored"), filepath.Join(base, "lock-restored")
	ownedDirs(t, cred, restored, spool2, lock2)
	if err := os.Chmod(restored, 0o700); err != nil {
		t.Fatal(err)
	}
	restoredEnv := withEnv(env,
		"PGBACKREST_PG1_PATH="+restored,
		"PGBACKREST_PG1_PORT="+strconv.Itoa(port[1]),
		"PGBACKREST_SPOOL_PATH="+spool2,
		"PGBACKREST_LOCK_PATH="+lock2)
	_, out, took, err := r.run(ctx, restoredEnv, "restore")
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	tm.add("restore: %v", took.Round(10*time.Millisecond))
	auto, err := os.ReadFile(filepath.Join(restored, "postgresql.auto.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(auto)) {
		if strings.HasPrefix(line, "restore_command") {
			tm.add("restore wrote %s", strings.TrimSpace(line))
		}
	}
	began = time.Now()
	// archive_mode off: its new timeline must not go to the same stanza.
	clone := startServer(ctx, t, cred, "restored", restored, sock, port[1], restoredEnv, "archive_mode=off")
	if err := clone.promoted(ctx, t, 200*time.Millisecond); err != nil {
		t.Fatalf("the restored copy did not finish recovery: %v\n%s", err, clone.logTail(30))
	}
	tm.add("restored copy recovered and promoted in %v", time.Since(began).Round(100*time.Millisecond))
	var count int
	clone.query(ctx, t, "SELECT count(*) FROM t", &count)
	if count != rows {
		t.Fatalf("restored copy has %d rows, want %d", count, rows)
	}
	clone.stop()

	// The store down: archiving fails, and says why.
	var failedBefore int64
	var archivedBefore *string
	primary.query(ctx, t, "SELECT failed_count, last_archived_wal FROM pg_stat_archiver", &failedBefore, &archivedBefore)
	if err := store.StopServer(true); err != nil {
		t.Fatal(err)
	}
	downAt := time.Now()
	primary.query(ctx, t, fmt.Sprintf("INSERT INTO t SELECT g FROM generate_series(%d, %d) g", rows+1, 2*rows))
	primary.query(ctx, t, "SELECT pg_walfile_name(pg_current_wal_lsn())", &segment)
	primary.query(ctx, t, "SELECT pg_switch_wal()::text", new(string))
	var lastFailed string
	err = poll(ctx, time.Second, func() (bool, error) {
		var failed int64
		var wal *string
		primary.query(ctx, t, "SELECT failed_count, last_failed_wal FROM pg_stat_archiver", &failed, &wal)
		if wal != nil {
			lastFailed = *wal
		}
		return failed > failedBefore, nil
	})
	if err != nil {
		t.Fatalf("no failed archive-push while the store is down: %v", err)
	}
	tm.add("store down (last archived %s, %d failures before): first failed archive-push of %s after %v; the next segment is %s",
		deref(archivedBefore), failedBefore, lastFailed, time.Since(downAt).Round(time.Second), segment)
	// The asynchronous process's own error reaches the log once it gives
	// up (several times io-timeout), through the next archive-push.
	err = poll(ctx, time.Second, func() (bool, error) {
		log, _ := os.ReadFile(primary.logPath)
		return strings.Contains(string(log), "Connection refused"), nil
	})
	if err != nil {
		t.Errorf("no archive-push said the connection was refused: %v", err)
	} else {
		tm.add("store down: archive-push reported the refused connection after %v", time.Since(downAt).Round(time.Second))
	}
	log, _ := os.ReadFile(primary.logPath)
	for _, msg := range errorMessages(string(log)) {
		tm.add("archive-push (async) said:\n%s", indent(msg))
	}
	for _, c := range []struct {
		step  string
		extra []string
		args  []string
	}{
		{"archive-push without archive-async", []string{"PGBACKREST_ARCHIVE_ASYNC=n"}, []string{"archive-push", filepath.Join(data, "pg_wal", segment)}},
		{"check", nil, []string{"check"}},
	} {
		_, out, took, err := r.run(ctx, c.extra, c.args...)
		if err == nil {
			t.Errorf("%s succeeded with the store down:\n%s", c.step, out)
			continue
		}
		tm.add("store down: %s failed (%v) after %v:\n%s", c.step, err, took.Round(100*time.Millisecond), indent(strings.TrimSpace(out)))
	}
	if out, _, took, err := r.run(ctx, []string{"PGBACKREST_LOG_LEVEL_CONSOLE=off"}, "info", "--output=json"); err == nil {
		var infos []stanzaInfo
		if err := json.Unmarshal([]byte(out), &infos); err != nil || len(infos) != 1 || infos[0].Status.Code == 0 {
			t.Errorf("info with the store down: want an error status, got %v %s", err, out)
		} else {
			tm.add("store down: info answered in %v with status %d %q, repo1 %+v", took.Round(100*time.Millisecond), infos[0].Status.Code, infos[0].Status.Message, infos[0].Repo)
		}
	} else {
		tm.add("store down: info failed (%v) after %v", err, took.Round(100*time.Millisecond))
	}

	// Up again: the archiver catches up by itself, check passes.
	began = time.Now()
	if err := store.StartServer(ctx); err != nil {
		t.Fatal(err)
	}
	tm.add("store up again in %v (down %v in all)", time.Since(began).Round(100*time.Millisecond), time.Since(downAt).Round(time.Second))
	upAt := time.Now()
	err = poll(ctx, time.Second, func() (bool, error) {
		var wal *string
		primary.query(ctx, t, "SELECT last_archived_wal FROM pg_stat_archiver", &wal)
		return wal != nil && *wal >= segment, nil
	})
	if err != nil {
		t.Fatalf("archiving did not catch up with %s: %v", segment, err)
	}
	tm.add("archiving caught up with %s %v after the store was back", segment, time.Since(upAt).Round(time.Second))
	must("check after the store is back", "check")
	for _, dir := range []string{spool, spool2, logs} {
		var found []string
		_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err == nil && path != dir && (d.IsDir() || dir == logs) {
				found = append(found, strings.TrimPrefix(path, base+"/"))
			}
			return nil
		})
		tm.add("%s holds %s", strings.TrimPrefix(dir, base+"/"), strings.Join(found, ", "))
	}
	info = r.info(ctx, t)
	if info.Status.Code != 0 || len(info.Archive) != 1 || info.Archive[0].Max < segment {
		t.Fatalf("info after the store is back: want status ok and the archive up to %s, got %+v", segment, info)
	}
}

// errorMessages returns pgBackRest's distinct error messages in a
// PostgreSQL log: each "ERROR: [nnn]: ..." line with the indented lines
// (causes, hints) that follow it.
func errorMessages(log string) []string {
	var out []string
	lines := strings.Split(log, "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "ERROR: [") {
			continue
		}
		msg := lines[i]
		for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "       ") {
			i++
			msg += "\n" + lines[i]
		}
		// WAL names and seconds vary; keep one of each kind.
		if !slices.ContainsFunc(out, func(m string) bool { return sameKind(m, msg) }) {
			out = append(out, msg)
		}
	}
	return out
}

// sameKind reports whether two messages have the same error code and the
// same number of lines.
func sameKind(a, b string) bool {
	code := func(s string) string { c, _, _ := strings.Cut(s, "]"); return c }
	return code(a) == code(b) && strings.Count(a, "\n") == strings.Count(b, "\n")
}

// withEnv returns env with the variables of kvs set to their values.
func withEnv(env []string, kvs ...string) []string {
	out := slices.Clone(env)
	for _, kv := range kvs {
		name, _, _ := strings.Cut(kv, "=")
		i := slices.IndexFunc(out, func(e string) bool { return strings.HasPrefix(e, name+"=") })
		if i < 0 {
			out = append(out, kv)
		} else {
			out[i] = kv
		}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return "(none)"
	}
	return *s
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }

// testWriter sends the test bed's lines to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// requireFiles fails t when one of the programs is missing.
func requireFiles(t testing.TB, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v: run `make data-plane-deps`", err)
		}
	}
}

// startStore starts the test bed's object store alone, stopped when t ends.
func startStore(ctx context.Context, t testing.TB) *testbed.ObjectStore {
	t.Helper()
	store, err := testbed.StartObjectStore(ctx, testbed.ObjectStoreOptions{Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := store.Stop(); err != nil {
			t.Errorf("stopping the object store: %v", err)
		}
	})
	return store
}
