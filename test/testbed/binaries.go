package testbed

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EnvBin names the environment variable that points at the directory holding
// the plane's binaries, for when the tests do not run inside the repository.
const EnvBin = "PGLOOP_BIN"

// ErrMissingBinaries is returned by Start when a binary of the plane has not
// been built: the fix is always the same, so callers can say it.
var ErrMissingBinaries = errors.New(`control plane binaries missing: run "make testbed" at the repository root`)

const (
	binEtcd              = "etcd"
	binAPIServer         = "kube-apiserver"
	binControllerManager = "kube-controller-manager"
	binScheduler         = "kube-scheduler"
	binKwok              = "kwok"

	// kwokStagesDir is the directory of bin/ where test/tools/build.sh copies
	// the Stage YAMLs of the kwok module it installs, so stages and binary
	// always come from the same version.
	kwokStagesDir = "kwok-stages"

	rootModule = "module github.com/pgloop/pgloop"
)

// binaries holds the absolute paths of the plane's programs.
type binaries struct {
	dir    string
	stages []string
}

func (b binaries) path(name string) string { return filepath.Join(b.dir, name) }

// findBinaries locates the binaries: dir if given, else $PGLOOP_BIN, else the
// bin/ directory at the root of the repository holding the working directory
// (go test runs in the package's directory, so walking up finds it).
func findBinaries(dir string, processNodes, objectStore bool) (binaries, error) {
	b, err := findBinDir(dir)
	if err != nil {
		return binaries{}, err
	}
	names := []string{binEtcd, binAPIServer, binControllerManager, binScheduler, binKwok}
	if processNodes {
		names = append(names, binKubelet, binPgloop)
	}
	if objectStore {
		names = append(names, binWeed)
	}
	missing := missing(b, names...)
	b.stages, _ = filepath.Glob(filepath.Join(b.dir, kwokStagesDir, "*.yaml"))
	if len(b.stages) == 0 {
		missing = append(missing, kwokStagesDir+"/*.yaml")
	}
	if len(missing) > 0 {
		return binaries{}, fmt.Errorf("%w (missing in %s: %s)", ErrMissingBinaries, b.dir, strings.Join(missing, ", "))
	}
	return b, nil
}

// findBinDir returns the directory of the binaries (see findBinaries).
func findBinDir(dir string) (binaries, error) {
	if dir == "" {
		dir = os.Getenv(EnvBin)
	}
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return binaries{}, err
		}
		dir = filepath.Join(root, "bin")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return binaries{}, fmt.Errorf("while resolving %s: %w", dir, err)
	}
	return binaries{dir: dir}, nil
}

// missing returns those of names that are not executable files in b.
func missing(b binaries, names ...string) []string {
	var out []string
	for _, name := range names {
		fi, err := os.Stat(b.path(name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			out = append(out, name)
		}
	}
	return out
}

// missingBinaries is ErrMissingBinaries naming those of names that b lacks,
// or nil.
func missingBinaries(b binaries, names ...string) error {
	if m := missing(b, names...); len(m) > 0 {
		return fmt.Errorf("%w (missing in %s: %s)", ErrMissingBinaries, b.dir, strings.Join(m, ", "))
	}
	return nil
}

// repoRoot walks up from the working directory to the directory whose go.mod
// declares the pgloop module.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("while finding the repository root: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if isRootModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("%w (no pgloop go.mod above %s; set %s to the binaries' directory)", ErrMissingBinaries, wd, EnvBin)
		}
	}
}

func isRootModule(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if strings.HasPrefix(line, "module ") {
			return line == rootModule
		}
	}
	return false
}
