// Package version holds pgloop's build information, set by the linker
// (-X github.com/pgloop/pgloop/pkg/version.Version=...).
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the release, or "dev" for a local build.
var Version = "dev"

// String describes the build in one line.
func String() string {
	rev := "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	return fmt.Sprintf("pgloop %s (revision %s, %s, %s/%s)", Version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
