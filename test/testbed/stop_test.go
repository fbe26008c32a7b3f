package testbed_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pgloop/pgloop/test/testbed"
)

// Stop leaves none of the processes it started, and no directory. This plane
// runs beside the shared one, which also shows that planes do not collide
// (the object stores' too).
func TestStopLeavesNoProcess(t *testing.T) {
	ctx := testContext(t)
	p, err := testbed.Start(ctx, testbed.Options{Nodes: 1, ObjectStore: true})
	if err != nil {
		t.Fatal(err)
	}
	procs := p.Processes()
	if len(procs) != 6 {
		t.Errorf("got %d processes, want 6: %v", len(procs), procs)
	}
	sockets, err := os.ReadFile(filepath.Join(p.ObjectStore.Dir, "grpc-sockets"))
	if err != nil {
		t.Fatal(err)
	}
	for _, proc := range procs {
		if !alive(proc.PID) {
			t.Errorf("%s (pid %d) is not running before Stop", proc.Name, proc.PID)
		}
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	// Stop returns once each process is reaped, so no wait is needed.
	for _, proc := range procs {
		if alive(proc.PID) {
			t.Errorf("%s (pid %d) still exists after Stop", proc.Name, proc.PID)
		}
	}
	if _, err := os.Stat(p.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists after Stop (stat: %v)", p.Dir, err)
	}
	// weed's, which it makes in /tmp whatever its flags say.
	for _, sock := range strings.Fields(string(sockets)) {
		if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists after Stop (lstat: %v)", sock, err)
		}
	}
}

// alive reports whether pid exists, zombie or not.
func alive(pid int) bool {
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// When the program holding a plane is killed outright (SIGKILL: no deferred
// Stop runs), the plane's processes die with it.
func TestKilledParentLeavesNoProcess(t *testing.T) {
	ctx := testContext(t)
	// Orphans are re-parented to us rather than to init, so we can wait for
	// (and reap) them instead of polling.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), envChild+"=1")
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var report childReport
	line, err := bufio.NewReader(out).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &report)
	}
	if err != nil {
		_ = child.Process.Kill()
		_ = child.Wait()
		t.Fatalf("reading the child's processes: %v", err)
	}
	// Nothing will Stop that plane: its directory is ours to remove, and
	// so are the sockets its object store left in /tmp.
	t.Cleanup(func() {
		sockets, _ := os.ReadFile(filepath.Join(report.Dir, "objectstore", "grpc-sockets"))
		for _, sock := range strings.Fields(string(sockets)) {
			os.Remove(sock)
		}
		os.RemoveAll(report.Dir)
	})
	procs := report.Processes
	if len(procs) != 6 {
		t.Errorf("child started %d processes, want 6: %v", len(procs), procs)
	}

	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	for _, proc := range procs {
		if err := waitGone(ctx, proc.PID); err != nil {
			t.Errorf("%s (pid %d) survived its parent: %v", proc.Name, proc.PID, err)
			_ = syscall.Kill(proc.PID, syscall.SIGKILL)
		}
	}
}

// waitGone waits for our orphaned descendant pid to exit, and reaps it.
func waitGone(ctx context.Context, pid int) error {
	done := make(chan error, 1)
	go func() {
		for {
			_, err := syscall.Wait4(pid, nil, 0, nil)
			if !errors.Is(err, syscall.EINTR) {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		if errors.Is(err, syscall.ECHILD) {
			// Already reaped, or never ours: then it must be gone.
			if alive(pid) {
				return errors.New("alive, and not our child")
			}
			return nil
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
