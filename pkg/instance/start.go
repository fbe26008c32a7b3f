package instance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/pgloop/pgloop/pkg/supervise"
)

// Options say what Start runs.
type Options struct {
	// Env is the container's environment, as pgloop's pod spec gives it.
	Env map[string]string
	// Machine is where it runs (Detect in a container).
	Machine Machine
	// ConfigFile is where Patroni's configuration goes; empty means
	// $PGHOME/postgres.yml, Spilo's.
	ConfigFile string
	// Patroni is the command that runs Patroni, the configuration file's
	// path appended; empty means patroni from PATH.
	Patroni []string
	// Logf receives what the start-up program says beside Patroni.
	Logf func(format string, args ...any)
}

// patroniEnvKept are the variables of the container's environment Patroni
// gets, besides PGBACKREST_* and KUBERNETES_SERVICE_*/PORT*: Spilo's runit
// script unsets every other before it starts Patroni, so that passwords
// and libpq's defaults (PGPASSWORD..., PGUSER, PGPORT) reach neither
// Patroni nor PostgreSQL's children.
var patroniEnvKept = []string{"PATH", "HOME", "LANG", "LC_ALL", "USER", "HOSTNAME", "PGHOME", "POD_IP", "POD_NAMESPACE", "ENABLE_PG_MON", "TZ"}

// Prepare checks the environment, writes Patroni's configuration (and a
// certificate when the pod mounts none) and returns the command that runs
// Patroni. On an error nothing is written but, possibly, the certificate.
func Prepare(o Options) (supervise.Command, error) {
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	cfg, dropped, err := patroniConfig(o.Env, o.Machine)
	if err != nil {
		return supervise.Command{}, err
	}
	for _, d := range dropped {
		logf("left out of Spilo's configuration: %s", d)
	}
	env, err := patroniEnv(o.Env, o.Machine)
	if err != nil {
		return supervise.Command{}, err
	}
	file := o.ConfigFile
	if file == "" {
		if file, err = o.Machine.local(path.Join(envOr(o.Env, "PGHOME", "/home/postgres"), "postgres.yml")); err != nil {
			return supervise.Command{}, fmt.Errorf("the configuration file of Patroni: %w (give one)", err)
		}
	}
	if pg, ok := cfg["postgresql"].(map[string]any); ok {
		dir, _ := pg["data_dir"].(string)
		if err := dataDirMode(dir, logf); err != nil {
			return supervise.Command{}, err
		}
	}
	name, _ := cfg["name"].(string)
	made, err := Certificate(cfg, name)
	if err != nil {
		return supervise.Command{}, fmt.Errorf("TLS: %w", err)
	}
	if made {
		logf("made a self-signed certificate for %s (the pod mounts none)", name)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cfg); err != nil {
		return supervise.Command{}, fmt.Errorf("encode patroni config: %w", err)
	}
	// It holds the passwords: the postgres user's only.
	if err := writeFile(file, buf.Bytes(), 0o600); err != nil {
		return supervise.Command{}, err
	}
	argv := slices.Clone(o.Patroni)
	if len(argv) == 0 {
		argv = []string{"patroni"}
	}
	return supervise.Command{
		Argv: append(argv, file),
		Env:  env,
		Dir:  path.Dir(file),
		Logf: logf,
	}, nil
}

// dataDirMode gives an existing data directory the mode PostgreSQL demands
// (0700, or 0750) when it has another: a kubelet that mounts the volume
// with the pod's fsGroup makes every directory in it group-writable and
// setgid (fsGroupChangePolicy Always, the default), and PostgreSQL then
// refuses to start ("data directory ... has invalid permissions"), so a
// pod that is only re-created could never start again. Spilo's start-up
// does the same. A directory not there yet is Patroni's to make.
func dataDirMode(dir string, logf func(string, ...any)) error {
	if dir == "" {
		return nil
	}
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("the data directory: %w", err)
	}
	mode := fi.Mode()
	if !mode.IsDir() || (mode.Perm() == 0o700 || mode.Perm() == 0o750) && mode&(fs.ModeSetgid|fs.ModeSetuid|fs.ModeSticky) == 0 {
		return nil
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("the data directory %s has mode %v, which PostgreSQL refuses, and cannot be made 0700: %w", dir, mode, err)
	}
	logf("the data directory %s had mode %v (a volume's fsGroup): made 0700, as PostgreSQL requires", dir, mode)
	return nil
}

// Start prepares (see Prepare) and runs Patroni until it ends, with the
// signals the container gets forwarded to it, orphans reaped, and
// what it leaves behind ended; it returns Patroni's exit code.
func Start(o Options) (int, error) {
	cmd, err := Prepare(o)
	if err != nil {
		return 0, err
	}
	return supervise.Run(cmd)
}

// patroniEnv is Patroni's environment: patroniEnvKept, the API server's
// service variables, the PGBACKREST_* variables (PgBackRestEnv) and, out of
// a cluster, the kubeconfig.
func patroniEnv(env map[string]string, m Machine) ([]string, error) {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(env)) {
		if slices.Contains(patroniEnvKept, name) ||
			strings.HasPrefix(name, "KUBERNETES_SERVICE_") || strings.HasPrefix(name, "KUBERNETES_PORT") {
			out = append(out, name+"="+env[name])
		}
	}
	if _, ok := env["HOME"]; !ok {
		out = append(out, "HOME="+envOr(env, "PGHOME", "/home/postgres"))
	}
	if _, ok := env["LC_ALL"]; !ok {
		out = append(out, "LC_ALL="+fallbackLocale)
	}
	backrest, err := PgBackRestEnv(env, m)
	if err != nil {
		return nil, fmt.Errorf("pgBackRest's environment: %w", err)
	}
	out = append(out, backrest...)
	if m.Kubeconfig != "" {
		// Patroni reads KUBECONFIG when it loads; 3.0 uses the context
		// "kind-kind" unless told otherwise.
		out = append(out, "KUBECONFIG="+m.Kubeconfig, "PATRONI_KUBERNETES_CONTEXT="+m.KubeContext)
	}
	if !slices.ContainsFunc(out, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		return nil, errors.New("PATH is not set: Patroni finds pg_ctl's helpers and pgbackrest through it")
	}
	return out, nil
}
