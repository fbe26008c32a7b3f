package supervise

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunEndsOrphans: a program that leaves a process behind (double-forked,
// as Patroni leaves the postmaster) returns its own exit code, and the
// orphan, which came back to Run, is ended and reaped.
func TestRunEndsOrphans(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "orphan.pid")
	code, err := Run(Command{
		Argv: []string{"/bin/sh", "-c", `(sleep 300 & echo $! >"$1") ; exit 3`, "sh", pidFile},
		Env:  []string{"PATH=/usr/bin:/bin"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if code != 3 {
		t.Errorf("exit code %d, want 3", code)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	orphan, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := syscall.Kill(orphan, 0); err == nil {
		t.Errorf("orphan %d still runs", orphan)
		_ = syscall.Kill(orphan, syscall.SIGKILL)
	}
	if left := children(os.Getpid()); len(left) > 0 {
		t.Errorf("children left: %v", left)
	}
}

// TestRunForwardsSignals: SIGTERM to the supervisor reaches the program,
// whose trap decides the exit code.
func TestRunForwardsSignals(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	go func() {
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(ready); err == nil {
				_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
				return
			}
		}
	}()
	code, err := Run(Command{
		Argv: []string{"sh", "-c", `trap 'exit 7' TERM; : >"$1"; while :; do sleep 0.05; done`, "sh", ready},
		Env:  []string{"PATH=/usr/bin:/bin"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if code != 7 {
		t.Errorf("exit code %d, want 7 (the program's trap of SIGTERM)", code)
	}
}

// TestRunSignalExit: a program killed by a signal gives 128 + its number.
func TestRunSignalExit(t *testing.T) {
	code, err := Run(Command{Argv: []string{"/bin/sh", "-c", "kill -KILL $$"}})
	if err != nil {
		t.Fatal(err)
	}
	if code != 128+int(syscall.SIGKILL) {
		t.Errorf("exit code %d, want %d", code, 128+int(syscall.SIGKILL))
	}
}

func TestRunMissingProgram(t *testing.T) {
	if _, err := Run(Command{Argv: []string{"no-such-program-here"}, Env: []string{"PATH=/nonexistent"}}); err == nil || !strings.Contains(err.Error(), "not in PATH") {
		t.Errorf("err = %v, want one saying it is not in PATH", err)
	}
}
