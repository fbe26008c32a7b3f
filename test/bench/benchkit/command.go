package benchkit

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/pgloop/pgloop/test/pgtest"
)

// Paths are where a bench's command works: the repository above the
// working directory (its docs/ get the results), the tree whose operator
// is built and whose CRDs are applied, and the directory kept for logs.
type Paths struct {
	Repo, Source, WorkDir string
}

// ResolvePaths finds the repository, and makes source (empty: the
// repository) and workDir (empty: none) absolute.
func ResolvePaths(source, workDir string) (Paths, error) {
	repo, err := pgtest.RepoRoot()
	if err != nil {
		return Paths{}, err
	}
	p := Paths{Repo: repo, Source: repo}
	if source != "" {
		if p.Source, err = filepath.Abs(source); err != nil {
			return Paths{}, err
		}
	}
	if workDir != "" {
		if p.WorkDir, err = filepath.Abs(workDir); err != nil {
			return Paths{}, err
		}
	}
	return p, nil
}

// CommandContext is a bench command's context: cancelled by Ctrl-C or
// SIGTERM (the bench then stops what it started), and after timeout.
func CommandContext(timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	return ctx, func() { cancel(); stop() }
}
