package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgloop/pgloop/pkg/pooler"
	"github.com/pgloop/pgloop/pkg/supervise"
)

// debianPgBouncer is where Debian's package puts pgbouncer: the pooler
// image's, and the test plane's (`make data-plane-deps`).
const debianPgBouncer = "/usr/sbin/pgbouncer"

// poolerFlags are what differs between the pooler image and the test
// plane (pooler.Options), and the pgbouncer to run.
type poolerFlags struct {
	configDir, listenAddr, upstream, serverTLSMode, pgbouncer string
}

func newPoolerCmd() *cobra.Command {
	f := poolerFlags{listenAddr: pooler.DefaultListenAddr, serverTLSMode: pooler.DefaultServerTLSMode, pgbouncer: "pgbouncer"}
	cmd := &cobra.Command{
		Use:   "pooler",
		Short: "Start PgBouncer in a connection-pooler pod (the pooler image's entrypoint)",
		Long: "The entrypoint of pgloop's pooler image. Reads the environment pgloop gives a pooler pod:\n" +
			"  PGHOST, PGPORT           the cluster's master or replica Service and its port\n" +
			"  PGUSER, PGSCHEMA         the pooler's role and the schema of its user_lookup function\n" +
			"  PGPASSWORD               the role's password\n" +
			"  CONNECTION_POOLER_PORT, _MODE (session|transaction), _DEFAULT_SIZE, _MIN_SIZE,\n" +
			"  _RESERVE_SIZE, _MAX_CLIENT_CONN, _MAX_DB_CONN\n" +
			"  CONNECTION_POOLER_CLIENT_TLS_CRT, _KEY, CONNECTION_POOLER_CLIENT_CA_FILE (optional: spec.tls)\n" +
			"  HOSTNAME                 the self-signed certificate's name\n" +
			"checks it, writes pgbouncer.ini, auth_file.txt and (without spec.tls) a self-signed\n" +
			"pgbouncer.crt/.key into --config-dir, each file whole, then runs pgbouncer on it as the\n" +
			"container's first process (signals forwarded, orphans reaped) and exits with its code.\n" +
			"A wrong environment or flag: a message on stderr, exit code 1, nothing written.\n" +
			"The flags are for running outside a container (the test plane's process kubelet).\n" +
			"docs/pooler-image.md says more.",
		// An image's entrypoint, not a command for users: kept out of
		// `pgloop help` (and `kubectl pgloop help`).
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			code, err := runPooler(cmd.ErrOrStderr(), f, os.Environ(), time.Now())
			if err != nil {
				return err
			}
			if code != 0 {
				return exitError{code: code, what: "pgbouncer"}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.configDir, "config-dir", "", "where to write pgbouncer.ini, the auth file and the certificate (made 0700); default: $HOME/pgbouncer, /home/postgres/pgbouncer in the image")
	fl.StringVar(&f.listenAddr, "listen-addr", f.listenAddr, "PgBouncer's listen_addr: * (every address of the pod) or one IP address")
	fl.StringVar(&f.upstream, "upstream", "", "host:port PgBouncer connects to instead of PGHOST:PGPORT (where there is no DNS)")
	fl.StringVar(&f.serverTLSMode, "server-tls-sslmode", f.serverTLSMode, "PgBouncer's server_tls_sslmode towards PostgreSQL")
	fl.StringVar(&f.pgbouncer, "pgbouncer", f.pgbouncer, "the pgbouncer to run: a path, or a name looked up in PATH, then "+debianPgBouncer)
	return cmd
}

// runPooler writes PgBouncer's files from environ and f, then runs
// pgbouncer until it ends and returns its exit code. An error means
// nothing ran: the environment or a flag is wrong, a file could not be
// written, or pgbouncer could not start.
func runPooler(stderr io.Writer, f poolerFlags, environ []string, now time.Time) (int, error) {
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, "pgloop pooler: "+format+"\n", args...) }
	env := pooler.Environ(environ)
	bin, err := findPgBouncer(f.pgbouncer)
	if err != nil {
		return 0, err
	}
	dir := f.configDir
	if dir == "" {
		home := env["HOME"]
		if home == "" || home == "/" {
			return 0, fmt.Errorf("no --config-dir and no HOME to put %s in", filepath.Join("$HOME", "pgbouncer"))
		}
		dir = filepath.Join(home, "pgbouncer")
	}
	ini, err := pooler.Prepare(env, pooler.Options{
		Dir: dir, ListenAddr: f.listenAddr, Upstream: f.upstream, ServerTLSMode: f.serverTLSMode, Name: env["HOSTNAME"],
	}, now)
	if err != nil {
		return 0, err
	}
	upstream := env[pooler.EnvHost] + ":" + env[pooler.EnvPort]
	if f.upstream != "" {
		upstream = f.upstream + " (for " + upstream + ")"
	}
	logf("wrote %s: listening on %s:%s, upstream %s; starting %s", ini, f.listenAddr, env[pooler.EnvListenPort], upstream, bin)
	return supervise.Run(pooler.Command(bin, ini, environ, logf))
}

// findPgBouncer resolves --pgbouncer: a path as it is, a name in PATH, else
// Debian's; checked before anything is written.
func findPgBouncer(name string) (string, error) {
	if filepath.Base(name) != name {
		if st, err := os.Stat(name); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("--pgbouncer %s is not an executable file", name)
		}
		return name, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	if name == "pgbouncer" {
		if st, err := os.Stat(debianPgBouncer); err == nil && st.Mode()&0o111 != 0 {
			return debianPgBouncer, nil
		}
	}
	return "", fmt.Errorf("%s is not in PATH (%s) nor at %s", name, os.Getenv("PATH"), debianPgBouncer)
}

// exitError is a program's non-zero exit code, which pgloop exits with
// (main).
type exitError struct {
	code int
	what string
}

func (e exitError) Error() string { return fmt.Sprintf("%s exited with code %d", e.what, e.code) }

// ExitCode is the code pgloop exits with.
func (e exitError) ExitCode() int { return e.code }
