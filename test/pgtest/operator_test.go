package pgtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// startShell starts /bin/sh -c script as the operator: the mechanics do not
// depend on what runs. The process is killed when t ends.
func startShell(t *testing.T, script string, onLine func(string)) (*Operator, string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "operator.log")
	o, err := StartOperator("/bin/sh", []string{"-c", script}, logPath, onLine)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Kill)
	return o, logPath
}

func waitExited(t *testing.T, o *Operator) {
	t.Helper()
	select {
	case <-o.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the process did not exit")
	}
}

// waitLine waits until the process has written a line containing s.
func waitLine(t *testing.T, o *Operator, s string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(o.Tail(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no line with %q; tail:\n%s", s, o.Tail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Every line, stdout's and stderr's, of any length, reaches the file, the
// callback and the tail, in order, by the time Exited is closed.
func TestOperatorOutput(t *testing.T) {
	long := strings.Repeat("x", 200<<10) // longer than the read buffer
	var mu sync.Mutex
	var seen []string
	o, logPath := startShell(t, `echo one; echo two >&2; head -c 204800 /dev/zero | tr '\0' x; echo; printf 'no newline'`,
		func(line string) { mu.Lock(); seen = append(seen, line); mu.Unlock() })
	waitExited(t, o)
	if o.Err() != nil {
		t.Fatalf("exit: %v", o.Err())
	}
	want := []string{"one", "two", long, "no newline"}
	mu.Lock()
	if !slices.Equal(seen, want) {
		t.Errorf("onLine saw %d lines, want %d: one, two, the long one, no newline", len(seen), len(want))
	}
	mu.Unlock()
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(data); got != "one\ntwo\n"+long+"\nno newline" {
		t.Errorf("log file of %d bytes, want the four lines", len(got))
	}
	if got := o.Tail(); got != strings.Join(want, "\n") {
		t.Errorf("Tail of %d bytes, want the four lines", len(got))
	}
}

// The tail keeps the last tailLines lines.
func TestOperatorTail(t *testing.T) {
	o, _ := startShell(t, `i=1; while [ $i -le 100 ]; do echo "line $i"; i=$((i+1)); done`, nil)
	waitExited(t, o)
	lines := strings.Split(o.Tail(), "\n")
	if len(lines) != tailLines || lines[0] != "line 61" || lines[len(lines)-1] != "line 100" {
		t.Errorf("Tail has %d lines, %q..%q; want %d, line 61..line 100", len(lines), lines[0], lines[len(lines)-1], tailLines)
	}
}

// A line is in the file as soon as it is written, while the process runs:
// the e2e suites read the file to wait for a line.
func TestOperatorLogUnbuffered(t *testing.T) {
	o, logPath := startShell(t, `echo ready; while :; do sleep 1; done`, nil)
	waitLine(t, o, "ready")
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != "ready\n" {
		t.Errorf("log file %q while running, want %q", data, "ready\n")
	}
}

// Neither KUBECONFIG nor PGLOOP_ variables reach the process.
func TestOperatorEnv(t *testing.T) {
	t.Setenv("KUBECONFIG", "/elsewhere")
	t.Setenv("PGLOOP_WORKERS", "99")
	t.Setenv("PGTEST_KEPT", "yes")
	o, _ := startShell(t, `env`, nil)
	waitExited(t, o)
	tail := o.Tail()
	for _, gone := range []string{"KUBECONFIG=", "PGLOOP_WORKERS="} {
		if strings.Contains(tail, gone) {
			t.Errorf("the process got %s", gone)
		}
	}
	if !strings.Contains(tail, "PGTEST_KEPT=yes") {
		t.Errorf("the process lost the rest of the environment:\n%s", tail)
	}
}

func TestOperatorStop(t *testing.T) {
	for _, tc := range []struct {
		name, onTerm string
		wantErr      string // "" for none
	}{
		{"clean exit on SIGTERM", "exit 0", ""},
		{"failure on SIGTERM", "exit 3", "exited with exit status 3 after SIGTERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// sleep in the background and wait, so the trap runs at once.
			o, _ := startShell(t, `trap '`+tc.onTerm+`' TERM; echo ready; while :; do sleep 1 & wait $!; done`, nil)
			waitLine(t, o, "ready")
			err := o.Stop()
			if got := errString(err); got != tc.wantErr {
				t.Errorf("Stop() = %q, want %q", got, tc.wantErr)
			}
			waitExited(t, o)
			if err := o.Stop(); err != nil {
				t.Errorf("Stop() after exit = %v, want nil", err)
			}
		})
	}
}

// Kill ends a process that ignores SIGTERM, and the exit is a signal's.
func TestOperatorKill(t *testing.T) {
	o, _ := startShell(t, `trap '' TERM; echo ready; while :; do sleep 1; done`, nil)
	waitLine(t, o, "ready")
	o.Kill()
	waitExited(t, o)
	if got := errString(o.Err()); got != "signal: killed" {
		t.Errorf("Err() = %q, want signal: killed", got)
	}
	o.Kill() // a no-op once exited
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
