package main

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/pgloop/pgloop/pkg/version"
)

func TestBuildCommit(t *testing.T) {
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
			defer func(c string) { commit = c }(commit)
			commit = tc.linked
			if got := buildCommit(tc.info, tc.ok); got != tc.want {
				t.Errorf("buildCommit = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestVersionCommandLine(t *testing.T) {
	defer func(c, v string) { commit, version.Version = c, v }(commit, version.Version)
	commit, version.Version = "c0ffee", "v1.2.3"
	out, err := run(t, "version")
	want := "pgloop v1.2.3 (commit c0ffee, " + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	if err != nil || out != want {
		t.Errorf("version: %q, %v; want %q", out, err, want)
	}
}
