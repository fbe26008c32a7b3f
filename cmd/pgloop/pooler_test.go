package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPoolerCommandBadInput: a wrong environment or flag is an error that
// says what is wrong, before anything is written or run.
func TestPoolerCommandBadInput(t *testing.T) {
	good := []string{
		"HOME=/nonexistent", "PGHOST=db", "PGPORT=5432", "PGUSER=pooler", "PGSCHEMA=pooler", "PGPASSWORD=x",
		"CONNECTION_POOLER_PORT=5432", "CONNECTION_POOLER_MODE=transaction", "CONNECTION_POOLER_DEFAULT_SIZE=1",
		"CONNECTION_POOLER_MIN_SIZE=0", "CONNECTION_POOLER_RESERVE_SIZE=0", "CONNECTION_POOLER_MAX_CLIENT_CONN=10",
		"CONNECTION_POOLER_MAX_DB_CONN=2",
	}
	for _, tc := range []struct {
		name    string
		environ []string
		change  func(*poolerFlags)
		want    string
	}{
		{"no environment", nil, nil, "needs PGHOST, PGPORT"},
		{"mode", append(good[:len(good):len(good)], "CONNECTION_POOLER_MODE=statement"), nil, `CONNECTION_POOLER_MODE="statement"`},
		{"listen address", good, func(f *poolerFlags) { f.listenAddr = "all" }, `listen address "all"`},
		{"upstream", good, func(f *poolerFlags) { f.upstream = "db" }, `upstream "db"`},
		{"pgbouncer", good, func(f *poolerFlags) { f.pgbouncer = "/nonexistent/pgbouncer" }, "--pgbouncer /nonexistent/pgbouncer is not an executable file"},
		{"no home", []string{"PGHOST=db"}, func(f *poolerFlags) { f.configDir = "" }, "no --config-dir and no HOME"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "pgbouncer")
			f := poolerFlags{configDir: dir, listenAddr: "*", serverTLSMode: "require", pgbouncer: "/bin/true"}
			if tc.change != nil {
				tc.change(&f)
			}
			var stderr bytes.Buffer
			_, err := runPooler(&stderr, f, tc.environ, time.Now())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("%s was made: %v", dir, err)
			}
			if stderr.Len() > 0 {
				t.Errorf("logged %q though nothing started", stderr.String())
			}
		})
	}
}

// TestPoolerCommandHidden: the command is there, out of users' help.
func TestPoolerCommandHidden(t *testing.T) {
	out, err := run(t, "--help")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "pooler") {
		t.Errorf("pgloop --help lists the pooler's entrypoint:\n%s", out)
	}
	out, err = run(t, "pooler", "--help")
	if err != nil || !strings.Contains(out, "--config-dir") || !strings.Contains(out, "PGHOST") {
		t.Errorf("pgloop pooler --help: %v\n%s", err, out)
	}
}

func TestExitError(t *testing.T) {
	e := exitError{code: 3, what: "pgbouncer"}
	if e.ExitCode() != 3 || e.Error() != "pgbouncer exited with code 3" {
		t.Errorf("%v %d", e, e.ExitCode())
	}
}
