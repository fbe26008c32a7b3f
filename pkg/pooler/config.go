package pooler

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Files of the configuration directory (Options.Dir).
const (
	ConfigFile = "pgbouncer.ini"
	AuthFile   = "auth_file.txt"
	CertFile   = "pgbouncer.crt"
	KeyFile    = "pgbouncer.key"
)

// Defaults of Options for a container.
const (
	// DefaultListenAddr: in a container PgBouncer listens on every
	// address of the pod.
	DefaultListenAddr = "*"
	// DefaultServerTLSMode is zalando's: pgloop's instances have TLS
	// (Spilo's self-signed certificate, or spec.tls's).
	DefaultServerTLSMode = "require"
)

// serverTLSModes are PgBouncer's server_tls_sslmode values.
var serverTLSModes = []string{"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}

// Options is what differs between a container and the test plane's
// process kubelet: everything else comes from the environment (Settings).
type Options struct {
	// Dir holds pgbouncer.ini, the auth file and the self-signed
	// certificate; made (0700) when missing.
	Dir string
	// ListenAddr is PgBouncer's listen_addr: DefaultListenAddr, or one
	// address (the pod IP on the test plane, where every pooler listens on
	// the same port).
	ListenAddr string
	// Upstream, "host:port", replaces PGHOST:PGPORT in [databases]: the
	// test plane has no DNS, and its kubelet stands in for the Service.
	// Empty in a container.
	Upstream string
	// ServerTLSMode is server_tls_sslmode: DefaultServerTLSMode, or
	// prefer on the test plane, whose PostgreSQL has no TLS.
	ServerTLSMode string
	// Name is the self-signed certificate's name: the pod's (HOSTNAME).
	Name string
}

// validate checks o, with every default filled in by the caller.
func (o Options) validate() error {
	var errs []error
	if o.Dir == "" || !filepath.IsAbs(o.Dir) {
		errs = append(errs, fmt.Errorf("the configuration directory %q is not an absolute path", o.Dir))
	}
	if o.ListenAddr != DefaultListenAddr {
		if _, err := netip.ParseAddr(o.ListenAddr); err != nil {
			errs = append(errs, fmt.Errorf("listen address %q: want %s or an IP address", o.ListenAddr, DefaultListenAddr))
		}
	}
	if o.Upstream != "" {
		if _, _, err := splitUpstream(o.Upstream); err != nil {
			errs = append(errs, err)
		}
	}
	if !slices.Contains(serverTLSModes, o.ServerTLSMode) {
		errs = append(errs, fmt.Errorf("server TLS mode %q: want one of %s", o.ServerTLSMode, strings.Join(serverTLSModes, ", ")))
	}
	return errors.Join(errs...)
}

// splitUpstream reads "host:port".
func splitUpstream(up string) (string, int, error) {
	host, p, err := net.SplitHostPort(up)
	if err != nil {
		return "", 0, fmt.Errorf("upstream %q: want host:port: %w", up, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 || host == "" || strings.ContainsAny(host, " \t\n'\"=") {
		return "", 0, fmt.Errorf("upstream %q: want host:port", up)
	}
	return host, port, nil
}

// Config returns pgbouncer.ini and its auth file: zalando's
// pgbouncer.ini.tmpl filled from s, with these differences:
//
//  1. No logfile and no pidfile: PgBouncer logs to stderr, the
//     container's log.
//  2. No unix socket (unix_socket_dir empty): nothing in the pod uses it,
//     and on the test plane every pooler would take the same one.
//  3. Left out for Debian's PgBouncer 1.18 (the image's): stats_users_prefix
//     (a patch of zalando's PgBouncer) and auth_dbname (1.19; in 1.18
//     auth_query runs in the database the client asks for).
//     server_tls_ca_file too: unused without verification.
//  4. listen_addr, the upstream and server_tls_sslmode come from o.
//
// Client TLS is required, with spec.tls's certificate when the pod has
// one, else the self-signed one in o.Dir. o must be valid.
func Config(s Settings, o Options) (ini, authFile []byte) {
	host, port := s.Service, s.Port
	if o.Upstream != "" {
		host, port, _ = splitUpstream(o.Upstream)
	}
	db := fmt.Sprintf("host=%s port=%d auth_user=%s", host, port, s.User)
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("; Written by `pgloop pooler` from the pod's environment, after zalando's")
	line("; connection-pooler image's pgbouncer.ini.tmpl (docs/pooler-image.md).")
	if o.Upstream != "" {
		line("; %s=%s %s=%d stood in for by %s:%d.", EnvHost, s.Service, EnvPort, s.Port, host, port)
	}
	line("[databases]")
	line("* = %s", db)
	line("postgres = %s", db)
	line("")
	line("[pgbouncer]")
	line("pool_mode = %s", s.Mode)
	line("listen_addr = %s", o.ListenAddr)
	line("listen_port = %d", s.ListenPort)
	line("unix_socket_dir =")
	line("auth_type = md5")
	line("auth_file = %s", filepath.Join(o.Dir, AuthFile))
	line("admin_users = %s", s.User)
	line("auth_query = SELECT * FROM %s.user_lookup($1)", s.Schema)
	line("")
	line("server_tls_sslmode = %s", o.ServerTLSMode)
	line("server_tls_protocols = secure")
	line("client_tls_sslmode = require")
	if s.CertFile != "" {
		line("client_tls_key_file = %s", s.KeyFile)
		line("client_tls_cert_file = %s", s.CertFile)
		if s.CAFile != "" {
			line("client_tls_ca_file = %s", s.CAFile)
		}
	} else {
		line("client_tls_key_file = %s", filepath.Join(o.Dir, KeyFile))
		line("client_tls_cert_file = %s", filepath.Join(o.Dir, CertFile))
	}
	line("")
	line("log_connections = 0")
	line("log_disconnections = 0")
	line("default_pool_size = %d", s.DefaultSize)
	line("reserve_pool_size = %d", s.ReserveSize)
	line("max_client_conn = %d", s.MaxClientConn)
	line("max_db_connections = %d", s.MaxDBConn)
	line("idle_transaction_timeout = 600")
	line("server_login_retry = 5")
	line("ignore_startup_parameters = extra_float_digits,options")
	return []byte(b.String()), []byte(authLine(s.User, s.Password))
}

// authLine is one line of PgBouncer's auth file: both fields in double
// quotes, a double quote inside doubled.
func authLine(user, password string) string {
	q := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	return q(user) + " " + q(password) + "\n"
}
