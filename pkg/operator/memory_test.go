package operator

import (
	"context"
	"io"
	"math"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
		file       int64
		want       int64
		why        string
	}{
		{name: "the container's limit", limit: 1 << 30, want: 1020054710,
			why: "95% of --memory-limit 1073741824 less 0 bytes of resident file-backed memory"},
		{name: "the binary's pages taken off", limit: 1 << 30, file: 73 << 20, want: 1020054710 - 73<<20,
			why: "95% of --memory-limit 1073741824 less 76546048 bytes of resident file-backed memory"},
		{name: "never below half the limit", limit: 128 << 20, file: 100 << 20, want: 64 << 20,
			why: "95% of --memory-limit 134217728 less 104857600 bytes of resident file-backed memory"},
		{name: "GOMEMLIMIT wins", limit: 1 << 30, gomemlimit: "800MiB", file: 73 << 20, want: 0,
			why: "GOMEMLIMIT=800MiB from the environment (--memory-limit 1073741824 not used)"},
		{name: "GOMEMLIMIT alone", gomemlimit: "off", want: 0, why: "GOMEMLIMIT=off from the environment (--memory-limit 0 not used)"},
		{name: "none", file: 73 << 20, want: 0, why: "--memory-limit 0 and no GOMEMLIMIT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := softMemoryLimit(tt.limit, tt.gomemlimit, tt.file)
			if got != tt.want || why != tt.why {
				t.Errorf("softMemoryLimit(%d, %q, %d) = %d, %q; want %d, %q", tt.limit, tt.gomemlimit, tt.file, got, why, tt.want, tt.why)
			}
		})
	}
}

func TestRssFile(t *testing.T) {
	const status = "Name:\tpgloop\nVmRSS:\t  489060 kB\nRssAnon:\t  414132 kB\nRssFile:\t   74928 kB\nRssShmem:\t       0 kB\n"
	if got := rssFile(status); got != 74928<<10 {
		t.Errorf("rssFile = %d, want %d", got, 74928<<10)
	}
	for _, bad := range []string{"", "VmRSS:\t 1 kB\n", "RssFile:\t lots kB\n", "RssFile:\t 12 MB\n"} {
		if got := rssFile(bad); got != 0 {
			t.Errorf("rssFile(%q) = %d, want 0", bad, got)
		}
	}
	// This process's own, on Linux.
	if f := residentFile(); f <= 0 {
		t.Errorf("residentFile() = %d, want the test binary's resident pages", f)
	}
}

// TestSetMemoryLimit sets the test process's own soft limit, and puts the
// one it had back.
func TestSetMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	log, hook := test.NewNullLogger()
	log.SetOutput(io.Discard)

	if !setMemoryLimit(1<<30, "", log) {
		t.Error("no soft limit set after --memory-limit 1Gi")
	}
	// 95 % of 1 GiB less the test binary's resident pages (some MB).
	got := debug.SetMemoryLimit(-1)
	if got >= 1020054710 || got < 1020054710-256<<20 {
		t.Errorf("soft limit %d after --memory-limit 1Gi, want 1020054710 less the resident file-backed memory", got)
	}
	if e := hook.LastEntry(); e == nil || e.Data["softMemoryLimit"] != got {
		t.Errorf("logged %v, want the soft limit in effect", e)
	}

	debug.SetMemoryLimit(math.MaxInt64)
	if setMemoryLimit(1<<30, "800MiB", log) {
		t.Error("a soft limit set with GOMEMLIMIT in the environment")
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("soft limit %d with GOMEMLIMIT set, want the runtime's own (none here)", got)
	}
	if e := hook.LastEntry(); e == nil || e.Data["softMemoryLimit"] != "none" || e.Level != logrus.InfoLevel {
		t.Errorf("logged %v, want none in effect at info level", e)
	}
}

// TestKeepMemoryLimit: the soft limit follows the resident file-backed
// memory once it moved by fileMoved or more, not for less.
func TestKeepMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	log, _ := test.NewNullLogger()
	var file atomic.Int64
	file.Store(10 << 20)
	const limit = 1 << 30
	want := func(f int64) int64 { s, _ := softMemoryLimit(limit, "", f); return s }
	debug.SetMemoryLimit(want(10 << 20))
	ctx, cancel := context.WithCancel(context.Background())
	done, first := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var reads atomic.Int64
	read := func() int64 {
		defer once.Do(func() { close(first) })
		defer reads.Add(1)
		return file.Load()
	}
	go func() {
		defer close(done)
		keepMemoryLimit(ctx, limit, time.Millisecond, read, log)
	}()
	t.Cleanup(func() { cancel(); <-done })
	<-first
	wait := func(what string, v int64) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for debug.SetMemoryLimit(-1) != v {
			if time.Now().After(deadline) {
				t.Fatalf("%s: soft limit %d, want %d", what, debug.SetMemoryLimit(-1), v)
			}
			time.Sleep(time.Millisecond)
		}
	}
	file.Store(80 << 20)
	wait("the binary's pages read in", want(80<<20))
	// Less than fileMoved: read three times, and the limit stays.
	file.Store(80<<20 + fileMoved/2)
	for n := reads.Load() + 3; reads.Load() < n; {
		time.Sleep(time.Millisecond)
	}
	if got := debug.SetMemoryLimit(-1); got != want(80<<20) {
		t.Errorf("soft limit %d after a move of %d bytes, want %d", got, fileMoved/2, want(80<<20))
	}
	file.Store(40 << 20)
	wait("pages dropped", want(40<<20))
}
