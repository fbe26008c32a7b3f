package operator

import (
	"io"
	"math"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

func TestBytesSet(t *testing.T) {
	tests := []struct {
		in   string
		want Bytes
		err  string // a substring of the error; empty means none
	}{
		{in: "1Gi", want: 1 << 30},
		{in: "1073741824", want: 1 << 30}, // the downward API's limits.memory
		{in: "512Mi", want: 512 << 20},
		{in: "1.5Gi", want: 3 << 29},
		{in: "2G", want: 2e9},
		{in: "0", want: 0},
		{in: "lots", err: `"lots" is not a quantity of bytes`},
		{in: "1.5", err: `"1.5" is not a whole number of bytes`},
		{in: "100m", err: `"100m" is not a whole number of bytes`},
		{in: "8Ei", err: `"8Ei" is too large`},
		{in: "8Ei-1", err: `"8Ei-1" is not a quantity of bytes`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			b := Bytes(7)
			err := b.Set(tt.in)
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("Set(%q): %v", tt.in, err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("Set(%q) error %v, want one with %q", tt.in, err, tt.err)
			case tt.err != "" && b != 7:
				t.Errorf("a failed Set(%q) changed the value to %d", tt.in, b)
			case tt.err == "" && b != tt.want:
				t.Errorf("Set(%q) = %d, want %d", tt.in, b, tt.want)
			}
		})
	}
}

func TestSoftMemoryLimit(t *testing.T) {
	tests := []struct {
		name       string
		limit      Bytes
		gomemlimit string
		want       int64
		why        string
	}{
		{name: "the container's limit", limit: 1 << 30, want: 966367620, why: "90% of --memory-limit 1073741824"},
		{name: "GOMEMLIMIT wins", limit: 1 << 30, gomemlimit: "800MiB", want: 0,
			why: "GOMEMLIMIT=800MiB from the environment (--memory-limit 1073741824 not used)"},
		{name: "GOMEMLIMIT alone", gomemlimit: "off", want: 0, why: "GOMEMLIMIT=off from the environment (--memory-limit 0 not used)"},
		{name: "none", want: 0, why: "--memory-limit 0 and no GOMEMLIMIT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := softMemoryLimit(tt.limit, tt.gomemlimit)
			if got != tt.want || why != tt.why {
				t.Errorf("softMemoryLimit(%d, %q) = %d, %q; want %d, %q", tt.limit, tt.gomemlimit, got, why, tt.want, tt.why)
			}
		})
	}
}

// TestSetMemoryLimit sets the test process's own soft limit, and puts the
// one it had back.
func TestSetMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	log, hook := test.NewNullLogger()
	log.SetOutput(io.Discard)

	setMemoryLimit(1<<30, "", log)
	if got := debug.SetMemoryLimit(-1); got != 966367620 {
		t.Errorf("soft limit %d after --memory-limit 1Gi, want 966367620", got)
	}
	if e := hook.LastEntry(); e == nil || e.Data["softMemoryLimit"] != int64(966367620) {
		t.Errorf("logged %v, want the soft limit in effect", e)
	}

	debug.SetMemoryLimit(math.MaxInt64)
	setMemoryLimit(1<<30, "800MiB", log)
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("soft limit %d with GOMEMLIMIT set, want the runtime's own (none here)", got)
	}
	if e := hook.LastEntry(); e == nil || e.Data["softMemoryLimit"] != "none" || e.Level != logrus.InfoLevel {
		t.Errorf("logged %v, want none in effect at info level", e)
	}
}
