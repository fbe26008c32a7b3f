package backup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgBin is where Debian's postgresql-15 puts its programs.
const pgBin = "/usr/lib/postgresql/15/bin"

// pgBackRest is Debian's pgbackrest (make data-plane-deps).
const pgBackRest = "/usr/bin/pgbackrest"

// postgresUser runs PostgreSQL and pgBackRest: PostgreSQL refuses to run as
// root, and pgBackRest must read the data directory and write the spool.
const postgresUser = "postgres"

// baseEnv is the environment every program here starts from: no
// PGBACKREST_* variable of ours leaks in.
var baseEnv = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}

// credential returns what PostgreSQL and pgBackRest run as: postgres when
// we are root, else ourselves.
func credential(t testing.TB) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup(postgresUser)
	if err != nil {
		t.Fatalf("PostgreSQL must not run as root, and there is no user %s: %v (make data-plane-deps)", postgresUser, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
}

// ownedDirs makes each directory, 0755 (0700 for PostgreSQL's data
// directories, which initdb and restore want so), owned by cred.
func ownedDirs(t testing.TB, cred *syscall.Credential, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if cred != nil {
			if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// traversable lets the postgres user reach dir from / (t.TempDir makes
// 0700 directories).
func traversable(t testing.TB, dir string) {
	t.Helper()
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o011 != 0o011 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// server is one PostgreSQL 15 that the test runs, on a Unix socket only.
type server struct {
	name    string
	data    string
	sock    string
	port    int
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
}

// initdb makes a data directory.
func initdb(ctx context.Context, t testing.TB, cred *syscall.Credential, data string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(pgBin, "initdb"), "-D", data, "-U", postgresUser, "-A", "trust",
		"-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions")
	cmd.Env, cmd.Dir = baseEnv, filepath.Dir(data)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
}

// startServer starts postgres on data with env added to its environment
// (the archiver's, so archive_command's and restore_command's) and settings
// as -c flags, and waits until it takes a connection. t.Cleanup stops it.
func startServer(ctx context.Context, t testing.TB, cred *syscall.Credential, name, data, sock string, port int, env []string, settings ...string) *server {
	t.Helper()
	s := &server{name: name, data: data, sock: sock, port: port, logPath: filepath.Join(filepath.Dir(data), name+".log"), exited: make(chan struct{})}
	logFile, err := os.Create(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	args := []string{"-D", data, "-k", sock, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=",
		"-c", "fsync=off",
		"-c", "logging_collector=off",
	}
	for _, kv := range settings {
		args = append(args, "-c", kv)
	}
	s.cmd = exec.Command(filepath.Join(pgBin, "postgres"), args...)
	s.cmd.Env = append(append([]string{}, baseEnv...), env...)
	s.cmd.Dir = filepath.Dir(data)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	// Setpgid: its archive commands are in its group, which stop kills
	// last. Pdeathsig: a test binary that dies takes it along.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting postgres %s: %v", name, err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(s.stop)
	err = poll(ctx, 50*time.Millisecond, func() (bool, error) {
		select {
		case <-s.exited:
			return false, fmt.Errorf("postgres %s exited: %s\n%s", name, s.cmd.ProcessState, s.logTail(30))
		default:
		}
		conn, err := s.connect(ctx)
		if err != nil {
			return false, nil
		}
		conn.Close(ctx)
		return true, nil
	})
	if err != nil {
		t.Fatalf("postgres %s did not take a connection: %v\n%s", name, err, s.logTail(30))
	}
	return s
}

func (s *server) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=prefer connect_timeout=5", s.sock, s.port, postgresUser))
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// query runs sql and scans its one row into dest.
func (s *server) query(ctx context.Context, t testing.TB, sql string, dest ...any) {
	t.Helper()
	conn, err := s.connect(ctx)
	if err != nil {
		t.Fatalf("connecting to %s: %v", s.name, err)
	}
	defer conn.Close(ctx)
	if len(dest) == 0 {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s on %s: %v", sql, s.name, err)
		}
		return
	}
	if err := conn.QueryRow(ctx, sql).Scan(dest...); err != nil {
		t.Fatalf("%s on %s: %v", sql, s.name, err)
	}
}

// stop shuts postgres down: fast, then immediate after 10 s (its archiver
// may be stuck in an archive command whose store is down), then SIGKILL to
// its group.
func (s *server) stop() {
	select {
	case <-s.exited:
		return // stopped already: its pid may be another's now
	default:
	}
	for _, step := range []struct {
		sig   syscall.Signal
		group bool
		wait  time.Duration
	}{{syscall.SIGINT, false, 10 * time.Second}, {syscall.SIGQUIT, false, 5 * time.Second}, {syscall.SIGKILL, true, time.Minute}} {
		pid := s.cmd.Process.Pid
		if step.group {
			pid = -pid
		}
		_ = syscall.Kill(pid, step.sig)
		select {
		case <-s.exited:
			// Its group's stragglers (archive commands it started).
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			return
		case <-time.After(step.wait):
		}
	}
}

// logTail returns the last n lines of the server's log.
func (s *server) logTail(n int) string {
	data, _ := os.ReadFile(s.logPath)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// promoted waits, asking every interval, until the server is out of
// recovery: it takes writes.
func (s *server) promoted(ctx context.Context, t testing.TB, interval time.Duration) error {
	return poll(ctx, interval, func() (bool, error) {
		var inRecovery bool
		s.query(ctx, t, "SELECT pg_is_in_recovery()", &inRecovery)
		return !inRecovery, nil
	})
}

// poll calls check every interval until it is done, fails, or ctx ends.
func poll(ctx context.Context, interval time.Duration, check func() (bool, error)) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		done, err := check()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
}

// killStragglers kills the pgBackRest processes still running with dir in
// their command line: archive-push's asynchronous process detaches from
// PostgreSQL's process group, so stopping PostgreSQL leaves it running
// while the store is down.
func killStragglers(t testing.TB, dir string) {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "pgbackrest" || !strings.Contains(string(cmdline), dir) {
			continue
		}
		t.Logf("killing pgbackrest %d left running: %s", pid, strings.Join(args, " "))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// freePorts returns n distinct free TCP ports of 127.0.0.1; PostgreSQL
// listens on a Unix socket only, but its port names the socket, and
// distinct ones keep the test's servers apart from others.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out
}
