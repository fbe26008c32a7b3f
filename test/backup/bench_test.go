package backup

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pgloop/pgloop/test/testbed"
)

// The benchmark's knobs, for shorter runs while changing it: `go test
// -bench . -args -pgbench-scale=5 -datasets=pgbench -rpo-timeouts=10`.
var (
	benchScale       = flag.Int("pgbench-scale", 68, "size of BenchmarkBackup1GiB's databases: pgbench -i scale (68: about 1 GiB), and as many times 96,000 rows of random text")
	benchDatasets    = flag.String("datasets", "pgbench,random", "BenchmarkBackup1GiB's databases: pgbench (pgbench -i: compresses 20 times) and random (random hex text: about 2 times)")
	benchRPOTimeouts = flag.String("rpo-timeouts", "60,10", "archive_timeout values, in seconds, of BenchmarkBackup1GiB's RPO runs")
	benchRPORuns     = flag.Int("rpo-runs", 3, "RPO runs per archive_timeout value")
)

const (
	// benchDeadline bounds the whole benchmark (about 8 minutes here).
	benchDeadline = 25 * time.Minute
	// benchRetentionFull is the backup's --repo1-retention-full, as the
	// operator passes it (its value does not matter with one backup).
	benchRetentionFull = 2
	// pgbench makes the large database (Debian's postgresql-15 has it).
	pgbench = pgBin + "/pgbench"
	// writeEvery is how often an RPO run's client commits a row.
	writeEvery = 100 * time.Millisecond
)

// BenchmarkBackup1GiB measures what issue 31 asks of backups, for real on
// this machine (docs/backups-bench.md has the figures and what they
// include): a database of about 1 GiB (pgbench -i) backed up by
// pg_basebackup to local disk and by pgBackRest to the object store with
// the operator's options, each copy restored and started (the restore of
// the repository is the RTO); then the RPO: primaries with a client
// committing a row every 100 ms, killed with their volume at points spread
// over one archive_timeout, restored from the repository to the end of the
// archive, the rows lost measured in seconds. It runs once whatever b.N
// (`make bench-backup`), and prints its tables; it asserts nothing about
// time.
func BenchmarkBackup1GiB(b *testing.B) {
	for _, bin := range []string{pgBackRest, filepath.Join(pgBin, "postgres"), filepath.Join(pgBin, "pg_basebackup"), pgbench} {
		if _, err := os.Stat(bin); err != nil {
			b.Fatalf("%v: run `make data-plane-deps`", err)
		}
	}
	var timeouts []int
	for _, f := range strings.Split(*benchRPOTimeouts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("-rpo-timeouts: %q is not a number of seconds", f)
		}
		timeouts = append(timeouts, n)
	}
	ctx, cancel := context.WithTimeout(b.Context(), benchDeadline)
	defer cancel()
	began := time.Now()
	var rep strings.Builder
	// To stdout: the testing package keeps 10 lines of a benchmark's log.
	defer func() {
		fmt.Printf("BenchmarkBackup1GiB figures (whole run %v):\n\n%s\n", time.Since(began).Round(time.Second), rep.String())
	}()

	// 64 volumes of 64 MiB: the random database's backup is half a GiB.
	store, err := testbed.StartObjectStore(ctx, testbed.ObjectStoreOptions{Log: testWriter{b}, MaxVolumes: 64})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := store.Stop(); err != nil {
			b.Errorf("stopping the object store: %v", err)
		}
	})
	cred := credential(b)
	base := b.TempDir()
	traversable(b, base)
	b.Cleanup(func() { killStragglers(b, base) })

	for _, name := range strings.Split(*benchDatasets, ",") {
		ds, ok := datasets[strings.TrimSpace(name)]
		if !ok {
			b.Fatalf("-datasets: no dataset %q", name)
		}
		f := benchSize(ctx, b, cred, store.S3, base, ds, *benchScale, &rep)
		rep.WriteString("\n")
		b.ReportMetric(f.backupRatio, "backup-ratio-"+ds.name)
		b.ReportMetric(f.restoreRatio, "restore-ratio-"+ds.name)
		b.ReportMetric(f.rto.Seconds(), "rto-s-"+ds.name)
	}
	benchRPO(ctx, b, cred, store.S3, base, timeouts, &rep)
}

// dataset is a way to make the large database: how compressible it is
// decides much of what pgBackRest's gzip costs and saves.
type dataset struct {
	name     string
	describe string
	// load fills the database of the server on sock and port.
	load func(ctx context.Context, b *testing.B, cred *syscall.Credential, dir, sock string, port, scale int)
	// table is the one whose rows a restored copy must have.
	table string
}

var datasets = map[string]dataset{
	"pgbench": {
		name:     "pgbench",
		describe: "pgbench -i -s %d (server-side generation: pgbench_accounts' filler is blanks)",
		table:    "pgbench_accounts",
		load: func(ctx context.Context, b *testing.B, cred *syscall.Credential, dir, sock string, port, scale int) {
			out, _, err := runAs(ctx, cred, dir, nil, pgbench, "-i", "-s", strconv.Itoa(scale), "-I", "dtGvp", "-q",
				"-h", sock, "-p", strconv.Itoa(port), "-U", postgresUser, "postgres")
			if err != nil {
				b.Fatalf("pgbench -i: %v\n%s", err, out)
			}
		},
	},
	"random": {
		name:     "random",
		describe: "%d × 96,000 rows of 128 random hex digits (md5 of random()), no index",
		table:    "noise",
		load: func(ctx context.Context, b *testing.B, cred *syscall.Credential, dir, sock string, port, scale int) {
			sql := fmt.Sprintf("CREATE TABLE noise AS SELECT g AS id, md5(random()::text) || md5(random()::text) || md5(random()::text) || md5(random()::text) AS payload FROM generate_series(1, %d) g",
				scale*96000)
			// Two -c: VACUUM cannot run in the transaction of one.
			out, _, err := runAs(ctx, cred, dir, nil, filepath.Join(pgBin, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
				"-h", sock, "-p", strconv.Itoa(port), "-U", postgresUser, "-d", "postgres", "-c", sql, "-c", "VACUUM ANALYZE noise")
			if err != nil {
				b.Fatalf("loading noise: %v\n%s", err, out)
			}
		},
	},
}

// sizeFigures are the ratios BenchmarkBackup1GiB reports as metrics.
type sizeFigures struct {
	backupRatio, restoreRatio float64
	rto                       time.Duration
}

// benchSize is the part of the benchmark with the large database: load,
// the two backups, the two restores.
func benchSize(ctx context.Context, b *testing.B, cred *syscall.Credential, s3 testbed.S3, base string, ds dataset, scale int, rep *strings.Builder) sizeFigures {
	b.Helper()
	dir := filepath.Join(base, "size-"+ds.name)
	data, sock, spool, logs, lock := filepath.Join(dir, "data"), filepath.Join(dir, "sock"), filepath.Join(dir, "spool"), filepath.Join(dir, "log"), filepath.Join(dir, "lock")
	ownedDirs(b, cred, dir, sock, spool, logs, lock)
	port := freePorts(b, 3)
	env := withEnv(repoEnv(s3, "/bench-size-"+ds.name, data, sock, port[0], spool, logs, lock),
		// The operator sets none: pgBackRest's default.
		"PGBACKREST_ARCHIVE_TIMEOUT=60")
	r := runner{cred: cred, dir: dir, env: env}

	// 1. The database, loaded before archiving is on, so the load's WAL
	// is not pushed.
	initdb(ctx, b, cred, data)
	loader := startServer(ctx, b, cred, "load", data, sock, port[0], nil)
	began := time.Now()
	ds.load(ctx, b, cred, dir, sock, port[0], scale)
	took := time.Since(began)
	var dbSize int64
	var accounts int64
	loader.query(ctx, b, "SELECT pg_database_size('postgres'), (SELECT count(*) FROM "+ds.table+")", &dbSize, &accounts)
	loader.query(ctx, b, "CHECKPOINT")
	loader.stop()
	fmt.Fprintf(rep, "Database %q: "+ds.describe+", %d rows in %s, pg_database_size %s, data directory %s; loaded in %v.\n\n",
		ds.name, scale, accounts, ds.table, mib(dbSize), mib(dirSize(b, data)), took.Round(100*time.Millisecond))

	// 2. The primary as the operator runs it: archiving with pgBackRest's
	// asynchronous push, archive_timeout 60 s.
	primary := startServer(ctx, b, cred, "primary", data, sock, port[0], env,
		"archive_mode=on",
		"archive_command=pgbackrest --stanza="+stanza+" --io-timeout=3 archive-push %p",
		"archive_timeout=60")
	if _, out, _, err := r.run(ctx, nil, "stanza-create"); err != nil {
		b.Fatalf("stanza-create: %v\n%s", err, out)
	}

	// 3. Backups: pg_basebackup to local disk first (whatever the page
	// cache holds of the data helps both alike: it was just written),
	// then pgBackRest with the operator's options.
	local := filepath.Join(dir, "basebackup")
	out, bbTook, err := runAs(ctx, cred, dir, nil, filepath.Join(pgBin, "pg_basebackup"), "-D", local, "-Fp", "-Xs", "-c", "fast",
		"-h", sock, "-p", strconv.Itoa(port[0]), "-U", postgresUser)
	if err != nil {
		b.Fatalf("pg_basebackup: %v\n%s", err, out)
	}
	localSize := dirSize(b, local)
	_, out, brTook, err := r.run(ctx, nil, "--type=full", "--start-fast", "--io-timeout=30",
		"--repo1-retention-full="+strconv.Itoa(benchRetentionFull), "backup")
	if err != nil {
		b.Fatalf("pgbackrest backup: %v\n%s", err, out)
	}
	info := r.info(ctx, b)
	if len(info.Backup) != 1 {
		b.Fatalf("info: want one backup, got %+v", info)
	}
	bk := info.Backup[0]
	own := time.Duration(bk.Timestamp.Stop-bk.Timestamp.Start) * time.Second
	primary.stop()
	killStragglers(b, dir)

	// 4. Restores, each into an empty directory and started as a new
	// instance that takes writes (out of recovery): the local copy by cp
	// and an fsync of each file (pgBackRest's restore fsyncs what it
	// writes), the repository's by pgBackRest's restore to the end of
	// the archive.
	copied := filepath.Join(dir, "copied")
	cpOut, cpTook, err := runAs(ctx, cred, dir, nil, "/bin/cp", "-a", local, copied)
	if err != nil {
		b.Fatalf("cp -a: %v\n%s", err, cpOut)
	}
	syncOut, syncTook, err := runAs(ctx, cred, dir, nil, "/bin/sh", "-c", `find "$1" -type f -exec sync {} +`, "sh", copied)
	if err != nil {
		b.Fatalf("sync: %v\n%s", err, syncOut)
	}
	copyStart, copyReady := startAndPromote(ctx, b, cred, "copied", copied, sock, port[1], nil, ds.table, accounts)

	restored, spool2, lock2 := filepath.Join(dir, "restored"), filepath.Join(dir, "spool-restored"), filepath.Join(dir, "lock-restored")
	ownedDirs(b, cred, restored, spool2, lock2)
	if err := os.Chmod(restored, 0o700); err != nil {
		b.Fatal(err)
	}
	restoredEnv := withEnv(env, "PGBACKREST_PG1_PATH="+restored, "PGBACKREST_PG1_PORT="+strconv.Itoa(port[2]),
		"PGBACKREST_SPOOL_PATH="+spool2, "PGBACKREST_LOCK_PATH="+lock2)
	_, out, rsTook, err := r.run(ctx, restoredEnv, "restore")
	if err != nil {
		b.Fatalf("restore: %v\n%s", err, out)
	}
	rsStart, rsReady := startAndPromote(ctx, b, cred, "restored", restored, sock, port[2], restoredEnv, ds.table, accounts)

	// 3 GiB on disk per dataset otherwise, until the end.
	for _, d := range []string{local, data} {
		if err := os.RemoveAll(d); err != nil {
			b.Fatal(err)
		}
	}
	localTotal := cpTook + syncTook + copyReady
	rto := rsTook + rsReady
	f := sizeFigures{backupRatio: brTook.Seconds() / bbTook.Seconds(), restoreRatio: rto.Seconds() / localTotal.Seconds(), rto: rto}
	fmt.Fprintf(rep, "| | pg_basebackup, local disk | pgBackRest, S3 store | ratio |\n|---|---|---|---|\n")
	fmt.Fprintf(rep, "| backup (command's wall time) | %v (%s/s) | %v (%s/s; its own start→stop %v) | %.2f |\n",
		bbTook.Round(100*time.Millisecond), mib(rate(dbSize, bbTook)), brTook.Round(100*time.Millisecond), mib(rate(dbSize, brTook)), own, f.backupRatio)
	fmt.Fprintf(rep, "| size of the copy | %s (plain files, with its WAL) | %s in the repository (gz), backup of %s | %.3f |\n",
		mib(localSize), mib(bk.Info.Repository.Size), mib(bk.Info.Size), float64(bk.Info.Repository.Size)/float64(localSize))
	fmt.Fprintf(rep, "| restore: files in place | %v (cp -a %v + fsync of each file %v) | %v (pgbackrest restore) | %.2f |\n",
		(cpTook + syncTook).Round(100*time.Millisecond), cpTook.Round(100*time.Millisecond), syncTook.Round(100*time.Millisecond),
		rsTook.Round(100*time.Millisecond), rsTook.Seconds()/(cpTook+syncTook).Seconds())
	fmt.Fprintf(rep, "| restore: start → takes connections → out of recovery | %v → %v | %v → %v | %.2f |\n",
		copyStart.Round(100*time.Millisecond), copyReady.Round(100*time.Millisecond), rsStart.Round(100*time.Millisecond), rsReady.Round(100*time.Millisecond),
		rsReady.Seconds()/copyReady.Seconds())
	fmt.Fprintf(rep, "| **restore to Running (RTO)** | **%v** | **%v** | **%.2f** |\n",
		localTotal.Round(100*time.Millisecond), rto.Round(100*time.Millisecond), f.restoreRatio)
	return f
}

// startAndPromote starts a restored data directory and returns how long
// it took to take connections and to be out of recovery (promoted: it
// takes writes), checking table has all its rows.
func startAndPromote(ctx context.Context, b *testing.B, cred *syscall.Credential, name, data, sock string, port int, env []string, table string, rows int64) (ready, promoted time.Duration) {
	b.Helper()
	began := time.Now()
	// archive_mode off: its new timeline must not go to the same stanza.
	s := startServer(ctx, b, cred, name, data, sock, port, env, "archive_mode=off")
	ready = time.Since(began)
	if err := s.promoted(ctx, b, 50*time.Millisecond); err != nil {
		b.Fatalf("%s did not finish recovery: %v\n%s", name, err, s.logTail(30))
	}
	promoted = time.Since(began)
	var n int64
	s.query(ctx, b, "SELECT count(*) FROM "+table, &n)
	if n != rows {
		b.Fatalf("%s has %d rows in %s, want %d", name, n, table, rows)
	}
	s.stop()
	if err := os.RemoveAll(data); err != nil {
		b.Fatal(err)
	}
	return ready, promoted
}

// rpoRun is one primary of the RPO part: its directories, its server and
// the client writing to it.
type rpoRun struct {
	name      string
	timeout   int           // archive_timeout, seconds
	killAfter time.Duration // after the writers start
	dir, data string
	env       []string
	r         runner
	srv       *server
	w         *writer

	// What was measured.
	lastCommitted, newestRestored time.Time
	sinceArchived                 time.Duration
	lastArchived                  string
	committed, restoredRows       int64
	restoreTook                   time.Duration
}

// benchRPO runs the RPO part: for each archive_timeout, runs primaries
// at once, each killed with its volume at its own point of one
// archive_timeout after its client starts, and each restored.
func benchRPO(ctx context.Context, b *testing.B, cred *syscall.Credential, s3 testbed.S3, base string, timeouts []int, rep *strings.Builder) {
	b.Helper()
	var runs []*rpoRun
	for _, t := range timeouts {
		for k := range *benchRPORuns {
			// Kill points at 1/6, 1/2, 5/6 of a cycle (for three runs),
			// one cycle after the client starts.
			frac := (float64(k) + 0.5) / float64(*benchRPORuns)
			runs = append(runs, &rpoRun{
				name:      fmt.Sprintf("rpo-%ds-%d", t, k+1),
				timeout:   t,
				killAfter: time.Duration((1 + frac) * float64(t) * float64(time.Second)),
			})
		}
	}
	if len(runs) == 0 {
		return // -rpo-runs=0
	}
	ports := freePorts(b, 2*len(runs))
	for i, run := range runs {
		run.dir = filepath.Join(base, run.name)
		run.data = filepath.Join(run.dir, "data")
		sock, spool, logs, lock := filepath.Join(run.dir, "sock"), filepath.Join(run.dir, "spool"), filepath.Join(run.dir, "log"), filepath.Join(run.dir, "lock")
		ownedDirs(b, cred, run.dir, sock, spool, logs, lock)
		run.env = withEnv(repoEnv(s3, "/bench-"+run.name, run.data, sock, ports[2*i], spool, logs, lock), "PGBACKREST_ARCHIVE_TIMEOUT=60")
		run.r = runner{cred: cred, dir: run.dir, env: run.env}
		initdb(ctx, b, cred, run.data)
		run.srv = startServer(ctx, b, cred, run.name, run.data, sock, ports[2*i], run.env,
			"archive_mode=on",
			"archive_command=pgbackrest --stanza="+stanza+" --io-timeout=3 archive-push %p",
			"archive_timeout="+strconv.Itoa(run.timeout))
		run.srv.query(ctx, b, "CREATE TABLE ticks (at timestamptz NOT NULL)")
	}
	// Their stanzas and first backups at once (no testing.B in the
	// goroutines: errors come back).
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i, run := range runs {
		wg.Go(func() {
			for _, args := range [][]string{{"stanza-create"}, {"--type=full", "--start-fast", "--io-timeout=30", "--repo1-retention-full=2", "backup"}} {
				if _, out, _, err := run.r.run(ctx, nil, args...); err != nil {
					errs[i] = fmt.Errorf("%s: %s: %w\n%s", run.name, args[len(args)-1], err, out)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}

	// The clients, then the kills in the order of their times.
	start := time.Now()
	for _, run := range runs {
		w, err := startWriter(ctx, run.srv)
		if err != nil {
			b.Fatalf("%s: %v", run.name, err)
		}
		run.w = w
	}
	order := slices.Clone(runs)
	slices.SortFunc(order, func(a, b *rpoRun) int { return cmp.Compare(a.killAfter, b.killAfter) })
	for _, run := range order {
		select {
		case <-time.After(time.Until(start.Add(run.killAfter))):
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		}
		var wal *string
		var at *time.Time
		run.srv.query(ctx, b, "SELECT last_archived_wal, last_archived_time FROM pg_stat_archiver", &wal, &at)
		// The pod and its volume are gone: every process of the
		// instance, the asynchronous push's included, then its data
		// directory and spool.
		killed := time.Now()
		_ = syscall.Kill(-run.srv.cmd.Process.Pid, syscall.SIGKILL)
		killStragglers(b, run.dir)
		<-run.srv.exited
		run.w.wait()
		if wal != nil && at != nil {
			run.lastArchived, run.sinceArchived = *wal, killed.Sub(*at)
		}
		run.lastCommitted, run.committed = run.w.last, run.w.n
		if run.committed == 0 {
			b.Fatalf("%s: its client committed nothing: %v", run.name, run.w.err)
		}
		for _, d := range []string{"data", "spool", "lock"} {
			if err := os.RemoveAll(filepath.Join(run.dir, d)); err != nil {
				b.Fatal(err)
			}
		}
	}

	// Restores from the repository alone, to the end of the archive.
	for i, run := range runs {
		restored, spool2, lock2 := filepath.Join(run.dir, "restored"), filepath.Join(run.dir, "spool-restored"), filepath.Join(run.dir, "lock-restored")
		ownedDirs(b, cred, restored, spool2, lock2)
		if err := os.Chmod(restored, 0o700); err != nil {
			b.Fatal(err)
		}
		env := withEnv(run.env, "PGBACKREST_PG1_PATH="+restored, "PGBACKREST_PG1_PORT="+strconv.Itoa(ports[2*i+1]),
			"PGBACKREST_SPOOL_PATH="+spool2, "PGBACKREST_LOCK_PATH="+lock2)
		began := time.Now()
		if _, out, _, err := run.r.run(ctx, env, "restore"); err != nil {
			b.Fatalf("%s: restore: %v\n%s", run.name, err, out)
		}
		s := startServer(ctx, b, cred, run.name+"-restored", restored, filepath.Join(run.dir, "sock"), ports[2*i+1], env, "archive_mode=off")
		if err := s.promoted(ctx, b, 50*time.Millisecond); err != nil {
			b.Fatalf("%s did not finish recovery: %v\n%s", run.name, err, s.logTail(30))
		}
		run.restoreTook = time.Since(began)
		var newest *time.Time
		s.query(ctx, b, "SELECT max(at), count(*) FROM ticks", &newest, &run.restoredRows)
		if newest != nil {
			run.newestRestored = *newest
		}
		s.stop()
	}

	fmt.Fprintf(rep, "| run | archive_timeout | killed after | rows committed | rows restored | **lost (s)** | last archived segment, its age at the kill | restore → out of recovery |\n|---|---|---|---|---|---|---|---|\n")
	for _, run := range runs {
		lost := "all (nothing restored)"
		if !run.newestRestored.IsZero() {
			lost = fmt.Sprintf("**%.1f**", run.lastCommitted.Sub(run.newestRestored).Seconds())
		}
		fmt.Fprintf(rep, "| %s | %d s | %v | %d | %d | %s | %s, %.1f s | %v |\n",
			run.name, run.timeout, run.killAfter.Round(100*time.Millisecond), run.committed, run.restoredRows, lost,
			run.lastArchived, run.sinceArchived.Seconds(), run.restoreTook.Round(100*time.Millisecond))
	}
}

// writer is an RPO run's client: one row a writeEvery, each its own
// transaction, the time of the last one whose commit came back.
type writer struct {
	mu   sync.Mutex
	last time.Time
	n    int64
	err  error
	done chan struct{}
}

func startWriter(ctx context.Context, s *server) (*writer, error) {
	conn, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	w := &writer{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer conn.Close(context.Background())
		tick := time.NewTicker(writeEvery)
		defer tick.Stop()
		for {
			var at time.Time
			if err := conn.QueryRow(ctx, "INSERT INTO ticks VALUES (clock_timestamp()) RETURNING at").Scan(&at); err != nil {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
				return
			}
			w.mu.Lock()
			w.last, w.n = at, w.n+1
			w.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w, nil
}

// wait returns once the client has stopped (its server is gone).
func (w *writer) wait() { <-w.done }

// runAs runs a program as cred in dir, with baseEnv and env, and returns
// its output and how long it took.
func runAs(ctx context.Context, cred *syscall.Credential, dir string, env []string, name string, args ...string) (string, time.Duration, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(append([]string{}, baseEnv...), env...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	began := time.Now()
	out, err := cmd.CombinedOutput()
	return string(out), time.Since(began), err
}

// dirSize is the sum of the sizes of the regular files under dir.
func dirSize(b *testing.B, dir string) int64 {
	b.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

func rate(bytes int64, d time.Duration) int64 { return int64(float64(bytes) / d.Seconds()) }

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
