// Package pooler is the start-up of pgloop's connection-pooler image
// (`pgloop pooler`): it reads the environment pgloop gives a pooler pod
// (pkg/cluster's PoolerDeployment, the contract of zalando's pooler image),
// checks it, and writes PgBouncer's configuration, its auth file and a
// self-signed certificate, for PgBouncer to run on. The test plane's
// process kubelet runs the same program, with flags for what differs
// outside a container (Options).
package pooler

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The variables a pooler pod gets (PoolerDeployment), as zalando's image
// reads them.
const (
	EnvHost          = "PGHOST"
	EnvPort          = "PGPORT"
	EnvUser          = "PGUSER"
	EnvSchema        = "PGSCHEMA"
	EnvPassword      = "PGPASSWORD"
	EnvListenPort    = "CONNECTION_POOLER_PORT"
	EnvMode          = "CONNECTION_POOLER_MODE"
	EnvDefaultSize   = "CONNECTION_POOLER_DEFAULT_SIZE"
	EnvMinSize       = "CONNECTION_POOLER_MIN_SIZE"
	EnvReserveSize   = "CONNECTION_POOLER_RESERVE_SIZE"
	EnvMaxClientConn = "CONNECTION_POOLER_MAX_CLIENT_CONN"
	EnvMaxDBConn     = "CONNECTION_POOLER_MAX_DB_CONN"
	// The optional client certificate of spec.tls: paths in the pod.
	EnvClientTLSCert = "CONNECTION_POOLER_CLIENT_TLS_CRT"
	EnvClientTLSKey  = "CONNECTION_POOLER_CLIENT_TLS_KEY"
	EnvClientCAFile  = "CONNECTION_POOLER_CLIENT_CA_FILE"
)

// ClientTLSEnv are the variables that name files of spec.tls's Secret: a
// kubelet that maps a pod's paths to its own (the test plane's) rewrites
// them.
var ClientTLSEnv = []string{EnvClientTLSCert, EnvClientTLSKey, EnvClientCAFile}

// Settings is what the pooler's environment says.
type Settings struct {
	// Service is PGHOST: the master or replica Service of the cluster, in
	// the pod's namespace.
	Service string
	// Port is PGPORT, the Service's port.
	Port int
	// User and Schema are PGUSER and PGSCHEMA: the role PgBouncer logs in
	// as to look users up with Schema.user_lookup($1). Password is
	// PGPASSWORD, the User's.
	User, Schema, Password string
	// ListenPort is CONNECTION_POOLER_PORT.
	ListenPort int
	// Mode is CONNECTION_POOLER_MODE: "session" or "transaction".
	Mode string
	// The CONNECTION_POOLER_*_SIZE and _CONN numbers. MinSize is read
	// and checked, but not written: zalando's image leaves min_pool_size
	// commented out.
	DefaultSize, MinSize, ReserveSize, MaxClientConn, MaxDBConn int
	// CertFile, KeyFile and CAFile are CONNECTION_POOLER_CLIENT_TLS_CRT,
	// _KEY and CONNECTION_POOLER_CLIENT_CA_FILE (spec.tls's Secret):
	// PgBouncer serves them to its clients instead of a self-signed
	// certificate. Empty without spec.tls.
	CertFile, KeyFile, CAFile string
}

// identifier is what PGUSER and PGSCHEMA may be: they are written unquoted
// into a connection string and an SQL query.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParseSettings reads the settings from an environment. Every variable of
// the pod contract must be there and non-empty (zalando's envsubst would
// leave an empty value that PgBouncer refuses); the TLS ones are optional,
// the certificate and its key together. The error names every variable
// that is wrong.
func ParseSettings(env map[string]string) (Settings, error) {
	var s Settings
	var missing []string
	var errs []error
	str := func(name string) string {
		v, ok := env[name]
		if !ok || v == "" {
			missing = append(missing, name)
		}
		return v
	}
	num := func(name string, lowest int) int {
		v := str(name)
		if v == "" {
			return 0
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lowest {
			errs = append(errs, fmt.Errorf("%s=%q is not a whole number of at least %d", name, v, lowest))
		}
		return n
	}
	s.Service = str(EnvHost)
	s.Port = num(EnvPort, 1)
	s.User = str(EnvUser)
	s.Schema = str(EnvSchema)
	s.Password = str(EnvPassword)
	s.ListenPort = num(EnvListenPort, 1)
	s.Mode = str(EnvMode)
	s.DefaultSize = num(EnvDefaultSize, 1)
	s.MinSize = num(EnvMinSize, 0)
	s.ReserveSize = num(EnvReserveSize, 0)
	s.MaxClientConn = num(EnvMaxClientConn, 1)
	s.MaxDBConn = num(EnvMaxDBConn, 0)
	s.CertFile, s.KeyFile, s.CAFile = env[EnvClientTLSCert], env[EnvClientTLSKey], env[EnvClientCAFile]
	if len(missing) > 0 {
		return s, fmt.Errorf("the connection pooler needs %s, unset or empty", strings.Join(missing, ", "))
	}
	if s.Port > 65535 || s.ListenPort > 65535 {
		errs = append(errs, fmt.Errorf("%s %d or %s %d is not a port", EnvPort, s.Port, EnvListenPort, s.ListenPort))
	}
	if s.Mode != "session" && s.Mode != "transaction" {
		errs = append(errs, fmt.Errorf("%s=%q: want session or transaction", EnvMode, s.Mode))
	}
	for name, v := range map[string]string{EnvUser: s.User, EnvSchema: s.Schema} {
		if !identifier.MatchString(v) {
			errs = append(errs, fmt.Errorf("%s=%q: want a plain identifier (letters, digits, _)", name, v))
		}
	}
	if strings.ContainsAny(s.Service, " \t\n'\"=") {
		errs = append(errs, fmt.Errorf("%s=%q is not a Service name", EnvHost, s.Service))
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		errs = append(errs, fmt.Errorf("%s and %s go together: one is set, not the other", EnvClientTLSCert, EnvClientTLSKey))
	}
	if s.CAFile != "" && s.CertFile == "" {
		errs = append(errs, fmt.Errorf("%s without %s", EnvClientCAFile, EnvClientTLSCert))
	}
	for name, path := range map[string]string{EnvClientTLSCert: s.CertFile, EnvClientTLSKey: s.KeyFile, EnvClientCAFile: s.CAFile} {
		if path == "" {
			continue
		}
		if strings.ContainsAny(path, "\n\r") {
			errs = append(errs, fmt.Errorf("%s=%q is not a path", name, path))
		} else if !readableFile(path) {
			errs = append(errs, fmt.Errorf("%s=%s is not a readable file (is spec.tls's Secret mounted?)", name, path))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return s, errors.Join(errs...)
}

// readableFile reports whether this process can open path, a file, for
// reading: PgBouncer, which runs as the same user, will have to.
func readableFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	return err == nil && !st.IsDir()
}

// Environ turns os.Environ's "NAME=value" list into a map; a later entry
// wins, as in a shell.
func Environ(environ []string) map[string]string {
	env := make(map[string]string, len(environ))
	for _, kv := range environ {
		if name, v, ok := strings.Cut(kv, "="); ok {
			env[name] = v
		}
	}
	return env
}
