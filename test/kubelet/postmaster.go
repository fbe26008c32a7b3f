package kubelet

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// postmasterPIDFile is the lock file PostgreSQL keeps in its data directory
// while it runs.
const postmasterPIDFile = "postmaster.pid"

// goneTimeout bounds the wait for a SIGKILLed process to disappear.
const goneTimeout = 10 * time.Second

// parsePostmasterPID reads the first two lines of a postmaster.pid: the
// postmaster's pid and its data directory. Later lines (start time, port,
// socket directory, listen address, shared memory key, status) are not
// needed.
func parsePostmasterPID(data []byte) (pid int, dataDir string, err error) {
	lines := strings.SplitN(string(data), "\n", 3)
	if len(lines) < 2 || strings.TrimSpace(lines[1]) == "" {
		return 0, "", errors.New("postmaster.pid: fewer than two lines")
	}
	pid, err = strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 0 {
		return 0, "", fmt.Errorf("postmaster.pid: bad pid %q", strings.TrimSpace(lines[0]))
	}
	return pid, strings.TrimSpace(lines[1]), nil
}

// readPostmasterPID returns the pid and data directory recorded in
// dataDir/postmaster.pid; pid 0 when there is no such file (PostgreSQL is
// stopped cleanly, or was never started).
func readPostmasterPID(dataDir string) (int, string, error) {
	data, err := os.ReadFile(filepath.Join(dataDir, postmasterPIDFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", err
	}
	return parsePostmasterPID(data)
}

// cmdline returns the arguments of pid, nil if it is gone.
func cmdline(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(data) == 0 {
		return nil
	}
	return strings.Split(string(bytes.TrimRight(data, "\x00")), "\x00")
}

// isPostmaster reports whether cmd is the command line of a PostgreSQL
// server of dataDir. A postmaster.pid may be stale and its pid reused, by
// another plane's postmaster too: both the program and the data directory
// must match before anything is killed.
func isPostmaster(cmd []string, dataDir string) bool {
	if len(cmd) == 0 || !strings.Contains(filepath.Base(cmd[0]), "postgres") {
		return false
	}
	for i, arg := range cmd {
		if arg == dataDir || arg == "-D"+dataDir || (arg == "-D" && i+1 < len(cmd) && cmd[i+1] == dataDir) {
			return true
		}
	}
	return false
}

// procState returns the state letter of pid from /proc/<pid>/stat, or 0 when
// the process does not exist.
func procState(pid int) byte {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	end := bytes.LastIndexByte(data, ')')
	if end < 0 || end+2 >= len(data) {
		return 0
	}
	return data[end+2]
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	s := procState(pid)
	return s != 0 && s != 'Z' && s != 'X'
}

// waitGone waits until none of pids is alive, or timeout. The processes'
// parents reap them: the reaper, or init for orphans of another kubelet.
// It returns the pids still alive.
func waitGone(pids []int, timeout time.Duration) []int {
	deadline := time.Now().Add(timeout)
	for {
		var left []int
		for _, pid := range pids {
			if alive(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killPostmaster SIGKILLs the PostgreSQL server of dataDir, if
// postmaster.pid names a live one, with its children, and waits until they
// are gone. Patroni setsid()s the postmaster, so killing Patroni's process
// group leaves it running, and each child of the postmaster has a session of
// its own: they are found by parentage. Children are killed first, so none
// is left attached to the shared memory a new postmaster checks.
func killPostmaster(dataDir string) (killed bool, err error) {
	pid, err := livePostmaster(dataDir)
	if err != nil || pid == 0 {
		return false, err
	}
	victims := append(descendants(pid), pid)
	for _, p := range victims {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	if left := waitGone(victims, goneTimeout); len(left) > 0 {
		return true, fmt.Errorf("postmaster %d of %s or its children %v survived SIGKILL for %v", pid, dataDir, left, goneTimeout)
	}
	return true, nil
}

// livePostmaster returns the pid of the PostgreSQL server of dataDir if
// postmaster.pid names a live one, 0 if there is none: stopped, or a stale
// file whose pid now belongs to something else.
func livePostmaster(dataDir string) (int, error) {
	pid, dir, err := readPostmasterPID(dataDir)
	if err != nil || pid == 0 {
		return 0, err
	}
	if !isPostmaster(cmdline(pid), dir) {
		return 0, nil
	}
	return pid, nil
}

// descendants returns the live descendants of pid, from one scan of /proc.
func descendants(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp := parentOf(p); pp > 0 {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := children[pid]
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, p)
		queue = append(queue, children[p]...)
	}
	return out
}
