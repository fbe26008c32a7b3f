// Package version holds pgloop's build information, set by the linker
// (-X github.com/pgloop/pgloop/pkg/version.Version=... and .Commit=...:
// `make build`, `make image`, hack/release).
package version

import (
	"runtime/debug"
)

// Version is the release, or "dev" for a local build.
var Version = "dev"

// Commit is the git commit the binary was built from. Go's own VCS stamp
// is missing from builds with -buildvcs=false, outside a checkout, or from
// a git worktree, so the builds set it.
var Commit string

// Revision is Commit, else the VCS stamp of the build, else "unknown".
func Revision() string {
	info, ok := debug.ReadBuildInfo()
	return revision(Commit, info, ok)
}

func revision(commit string, info *debug.BuildInfo, ok bool) string {
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
