package kubelet

import (
	"os"
	"testing"
)

// requireInstalled fails t when a program the data plane runs is missing:
// `make data-plane-deps` installs them all, so a missing one is a broken
// machine, never a reason to skip the check.
func requireInstalled(t testing.TB, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v: run `make data-plane-deps` (as root: it installs Debian's patroni, postgresql-15, pgbouncer and pgbackrest)", err)
		}
	}
}

// requireRoot fails t unless it runs as root, which the data plane needs
// to run PostgreSQL as postgres: `make test` runs as root.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root, to run PostgreSQL as postgres (as `make test` does)")
	}
}

// RequireInstalled is requireInstalled for the external tests
// (package kubelet_test).
var RequireInstalled = requireInstalled
