package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/pgloop/pgloop/pkg/version"
)

// commit is the git commit the binary was built from, set by the linker
// (-X main.commit=..., `make build`, `make image`, hack/release): Go's own
// VCS stamp is missing from builds with -buildvcs=false, outside a
// checkout, or from a git worktree.
var commit string

// buildCommit is commit, else the VCS stamp of the build, else "unknown".
func buildCommit(info *debug.BuildInfo, ok bool) string {
	if commit != "" {
		return commit
	}
	if ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// versionLine describes the build in one line: pgloop <version> (commit
// <commit>, <go version>, <os>/<arch>).
func versionLine() string {
	info, ok := debug.ReadBuildInfo()
	return fmt.Sprintf("pgloop %s (commit %s, %s, %s/%s)", version.Version, buildCommit(info, ok),
		runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and the commit it was built from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionLine())
			return err
		},
	}
}
