package kubelet

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildPgloop builds pgloop from this tree (cmd/pgloop), whose start-up
// programs run the pods (Options.Pgloop), into a fresh directory that
// postgres can traverse (t.TempDir's parent is 0700): the kubelet runs it
// as postgres. The directory goes when t ends; the external tests
// (package kubelet_test) build pgkubelet beside it, where pgkubelet looks
// by default.
func BuildPgloop(ctx context.Context, t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgloop-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "pgloop")
	// In pgloop's own module (the repository's root, two up from this
	// package), with its dependencies, not this test module's.
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/pgloop")
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build pgloop: %v\n%s", err, out)
	}
	return bin
}
