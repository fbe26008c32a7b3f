package kubelet

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// stacksScript stands for Patroni's entry script: it records its argv and
// __name__, starts a child with multiprocessing's spawn (as Patroni starts
// PostgreSQL), then waits in a function the stacks must name.
const stacksScript = `import multiprocessing, os, sys, time

def child(path):
    open(path, 'w').write('spawned')

def waiting_for_the_test():
    while True:
        time.sleep(0.1)

if __name__ == '__main__':
    p = multiprocessing.get_context('spawn').Process(target=child, args=(sys.argv[1] + '.child',))
    p.start()
    p.join()
    open(sys.argv[1] + '.tmp', 'w').write(__name__ + ' ' + ' '.join(sys.argv))
    os.replace(sys.argv[1] + '.tmp', sys.argv[1])
    waiting_for_the_test()
`

// TestPatroniArgvDumpsStacks: the prelude runs the entry script as
// __main__ with its own arguments, spawn still works under it, and
// stacksSignal writes every thread's stack to the stacks file without
// stopping the program.
func TestPatroniArgvDumpsStacks(t *testing.T) {
	const python = "/usr/bin/python3"
	requireInstalled(t, python)
	dir := t.TempDir()
	script, stacks, out := filepath.Join(dir, "patroni"), filepath.Join(dir, stacksFile), filepath.Join(dir, "argv")
	if err := os.WriteFile(script, []byte(stacksScript), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := createOwned(stacks, uint32(os.Getuid()), uint32(os.Getgid())); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, append(patroniArgv(python, script, stacks), out)[1:]...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	argv := waitForFile(ctx, t, out, func(s string) bool { return s != "" })
	if want := "__main__ " + script + " " + out; argv != want {
		t.Errorf("the script saw %q, want %q", argv, want)
	}
	if s, _ := os.ReadFile(out + ".child"); string(s) != "spawned" {
		t.Errorf("the spawned child wrote %q, want %q", s, "spawned")
	}
	if err := cmd.Process.Signal(stacksSignal); err != nil {
		t.Fatal(err)
	}
	dump := waitForFile(ctx, t, stacks, func(s string) bool { return strings.Contains(s, "waiting_for_the_test") })
	if !strings.Contains(dump, "most recent call first") {
		t.Errorf("stacks file holds no traceback:\n%s", dump)
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the program did not survive its stack dump: %v", err)
	}
}

// waitForFile returns the content of path once ok accepts it, polling
// until ctx ends.
func waitForFile(ctx context.Context, t *testing.T, path string, ok func(string) bool) string {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		data, _ := os.ReadFile(path)
		if ok(string(data)) {
			return string(data)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v; it holds %q", path, ctx.Err(), data)
		case <-tick.C:
		}
	}
}

// hungScript stands for a Patroni whose shutdown hangs: it ignores SIGTERM
// and waits in a function the stacks must name.
const hungScript = `import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)

def hung_in_shutdown():
    while True:
        time.sleep(0.1)

open(sys.argv[1], 'w').close()
hung_in_shutdown()
`

// TestSlowStopReported: an instance that has not stopped slowStop after
// its SIGTERM gets its processes logged and its stacks dumped, and is
// still killed at the end of its grace period.
func TestSlowStopReported(t *testing.T) {
	const python = "/usr/bin/python3"
	requireInstalled(t, python)
	k := containerKubelet(t)
	hook := logtest.NewLocal(k.log.(*logrus.Logger))
	defer func(d time.Duration) { slowStop = d }(slowStop)
	slowStop = 300 * time.Millisecond

	dir := t.TempDir()
	script, stacks, ready := filepath.Join(dir, "patroni"), filepath.Join(dir, stacksFile), filepath.Join(dir, "ready")
	if err := os.WriteFile(script, []byte(hungScript), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := createOwned(stacks, 0, 0); err != nil {
		t.Fatal(err)
	}
	proc, err := spawn(k.launcher, k.reaper, spawnSpec{
		argv: append(patroniArgv(python, script, stacks), ready), dir: dir,
		logPath: filepath.Join(dir, "patroni.log"), stacks: stacksSignal,
	})
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{k: k, key: "ns/hung-0", uid: "5ad0f1e2-slow-stop", log: k.log.WithField("pod", "ns/hung-0"), proc: proc}
	t.Cleanup(func() {
		if in.proc != nil {
			in.kill()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitForFile(ctx, t, ready, func(string) bool { _, err := os.Stat(ready); return err == nil })

	pid := proc.pid
	in.stop(3 * time.Second)
	if in.proc != nil || alive(pid) {
		t.Errorf("pid %d still there after stop", pid)
	}
	var reported, listed, killed bool
	for _, e := range hook.AllEntries() {
		switch {
		case strings.Contains(e.Message, "has not stopped yet"):
			reported = true
		case e.Message == "process of a slow stop" && e.Data["pid"] == pid:
			listed = e.Data["state"] == "S" && strings.Contains(e.Data["cmd"].(string), python)
		case strings.Contains(e.Message, "did not stop within the grace period"):
			killed = true
		}
	}
	if !reported || !listed || !killed {
		t.Errorf("reported %v, listed sleeping pid %d %v, killed at the grace period's end %v", reported, pid, listed, killed)
	}
	if dump, _ := os.ReadFile(stacks); !strings.Contains(string(dump), "hung_in_shutdown") {
		t.Errorf("stacks file does not name hung_in_shutdown:\n%s", dump)
	}
}
