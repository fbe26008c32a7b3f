package main

import (
	"runtime"
	"testing"

	"github.com/pgloop/pgloop/pkg/version"
)

func TestVersionCommandLine(t *testing.T) {
	defer func(c, v string) { version.Commit, version.Version = c, v }(version.Commit, version.Version)
	version.Commit, version.Version = "c0ffee", "v1.2.3"
	out, err := run(t, "version")
	want := "pgloop v1.2.3 (commit c0ffee, " + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	if err != nil || out != want {
		t.Errorf("version: %q, %v; want %q", out, err, want)
	}
}
