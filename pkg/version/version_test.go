package version

import (
	"runtime/debug"
	"testing"
)

func TestRevision(t *testing.T) {
	stamped := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "f00d"}}}
	tests := []struct {
		name   string
		linked string
		info   *debug.BuildInfo
		ok     bool
		want   string
	}{
		{name: "linker's", linked: "c0ffee", info: stamped, ok: true, want: "c0ffee"},
		{name: "VCS stamp", info: stamped, ok: true, want: "f00d"},
		{name: "no stamp", info: &debug.BuildInfo{}, ok: true, want: "unknown"},
		{name: "no build info", want: "unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := revision(tc.linked, tc.info, tc.ok); got != tc.want {
				t.Errorf("revision = %q, want %q", got, tc.want)
			}
		})
	}
}
