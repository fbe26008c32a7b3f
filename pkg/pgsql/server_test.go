package pgsql

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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgBin is where Debian's postgresql-15 puts its programs.
const pgBin = "/usr/lib/postgresql/15/bin"

// superPassword is the test server's superuser password.
const superPassword = "super-secret-0"

// server is a PostgreSQL 15 the tests start: scram-sha-256 for every
// connection, every statement logged to logPath and kept by
// pg_stat_statements.
type server struct {
	base    string // owned by the OS user postgres: data/, sock/, pwfile
	logPath string // the server's stderr
	port    int
	cmd     *exec.Cmd
	exited  chan struct{}
}

// shared is the one server of the package's tests, started by the first
// test that asks and stopped by TestMain.
var shared struct {
	once sync.Once
	srv  *server
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.srv != nil {
		shared.srv.stop()
	}
	os.Exit(code)
}

// startServer returns the package's server, starting it on first use.
func startServer(t testing.TB) *server {
	t.Helper()
	if _, err := os.Stat(filepath.Join(pgBin, "postgres")); err != nil {
		t.Fatalf("PostgreSQL 15 is missing (%v): run `make data-plane-deps`", err)
	}
	shared.once.Do(func() { shared.srv, shared.err = newServer() })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.srv
}

// credential returns what the server's processes run as: the OS user
// postgres when we are root (PostgreSQL refuses to run as root), else
// ourselves.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL must not run as root, and there is no user postgres: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// newServer runs initdb in a new directory under os.TempDir() and starts
// postgres on a free port of 127.0.0.1, then waits until it takes a
// connection.
func newServer() (_ *server, err error) {
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp("", "pgloop-pgsql-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(base)
		}
	}()
	// The postgres user must reach base; data/ is made by initdb, as it
	// wants it (0700, its own).
	if err := os.Chmod(base, 0o755); err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(base, "sock"), 0o755); err != nil {
		return nil, err
	}
	pwfile := filepath.Join(base, "pwfile")
	if err := os.WriteFile(pwfile, []byte(superPassword+"\n"), 0o600); err != nil {
		return nil, err
	}
	if cred != nil {
		for _, p := range []string{base, filepath.Join(base, "sock"), pwfile} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, err
			}
		}
	}
	sysProc := func() *syscall.SysProcAttr {
		// Setpgid: a Ctrl-C of `go test` reaches the test, which stops the
		// server itself. Pdeathsig: a test binary that dies takes the server
		// with it.
		return &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}
	}
	env := []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}

	initdb := exec.Command(filepath.Join(pgBin, "initdb"), "-D", filepath.Join(base, "data"),
		"-U", "postgres", "-A", "scram-sha-256", "--pwfile", pwfile,
		"-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions")
	initdb.Dir, initdb.Env, initdb.SysProcAttr = base, env, sysProc()
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}

	port, err := freePort()
	if err != nil {
		return nil, err
	}
	srv := &server{base: base, logPath: filepath.Join(base, "server.log"), port: port, exited: make(chan struct{})}
	logFile, err := os.Create(srv.logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the server has its own copy
	srv.cmd = exec.Command(filepath.Join(pgBin, "postgres"), "-D", filepath.Join(base, "data"),
		"-k", filepath.Join(base, "sock"), "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off",
		"-c", "logging_collector=off",
		// Every way a statement's text reaches the log, on: the tests check
		// that no password does.
		"-c", "log_statement=all",
		"-c", "log_min_duration_statement=0",
		"-c", "log_min_error_statement=error",
		// And where else a statement's text is kept.
		"-c", "shared_preload_libraries=pg_stat_statements")
	srv.cmd.Dir, srv.cmd.Env, srv.cmd.SysProcAttr = base, env, sysProc()
	srv.cmd.Stdout, srv.cmd.Stderr = logFile, logFile
	if err := srv.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	go func() {
		_ = srv.cmd.Wait()
		close(srv.exited)
	}()

	deadline := time.Now().Add(30 * time.Second)
	for {
		err := srv.login(context.Background(), "postgres", superPassword, "postgres")
		if err == nil {
			return srv, nil
		}
		select {
		case <-srv.exited:
			log, _ := os.ReadFile(srv.logPath)
			return nil, fmt.Errorf("postgres exited: %s\n%s", srv.cmd.ProcessState, log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			srv.stop()
			return nil, fmt.Errorf("postgres did not take a connection within 30s: %w", err)
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// stop shuts the server down (SIGINT: fast shutdown), waits for it, and
// removes its directory.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	os.RemoveAll(s.base)
}

// endpoint is the server as the superuser reaches it.
func (s *server) endpoint() Endpoint {
	return Endpoint{Label: "primary", Host: "127.0.0.1", Port: s.port, User: "postgres", Passwords: []string{superPassword}}
}

// connect opens a connection as user to db, for a test to look.
func (s *server) connect(ctx context.Context, user, password, db string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig("sslmode=disable connect_timeout=5")
	if err != nil {
		return nil, err
	}
	cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.Database = "127.0.0.1", uint16(s.port), user, password, db
	return pgx.ConnectConfig(ctx, cfg)
}

// login says whether user gets into db with password, and is who it says.
func (s *server) login(ctx context.Context, user, password, db string) error {
	conn, err := s.connect(ctx, user, password, db)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var who, where string
	if err := conn.QueryRow(ctx, "SELECT current_user, current_database()").Scan(&who, &where); err != nil {
		return err
	}
	if who != user || where != db {
		return fmt.Errorf("logged in as %s to %s, want %s to %s", who, where, user, db)
	}
	return nil
}

// super opens a superuser connection, closed when the test ends.
func (s *server) super(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := s.connect(ctx, "postgres", superPassword, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return conn
}

// exec runs sql as the superuser.
func (s *server) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := s.super(t).Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// recorder collects what Options.Observe is told.
type recorder struct {
	mu       sync.Mutex
	outcomes []string
}

func (r *recorder) observe(outcome string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes = append(r.outcomes, outcome)
}

func (r *recorder) count(outcome string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, o := range r.outcomes {
		if o == outcome {
			n++
		}
	}
	return n
}

func (r *recorder) options() Options {
	return Options{ConnectTimeout: 5 * time.Second, StatementTimeout: 5 * time.Second, Observe: r.observe}
}
