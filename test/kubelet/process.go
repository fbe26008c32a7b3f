package kubelet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pgloop/pgloop/test/internal/osthread"
)

// reapInterval is a safety net under SIGCHLD, which the kernel and the
// runtime coalesce.
const reapInterval = time.Second

// exitStatus is how one child ended, as the reaper saw it.
type exitStatus struct {
	pid    int
	status syscall.WaitStatus
	at     time.Time
}

// termination turns an exit status into what the pod status reports.
func (e exitStatus) termination(started time.Time) termination {
	t := termination{StartedAt: started, FinishedAt: e.at, ContainerID: containerID(e.pid), Reason: "Error"}
	switch {
	case e.status.Signaled():
		t.Signal = int32(e.status.Signal())
		t.ExitCode = 128 + t.Signal
	default:
		t.ExitCode = int32(e.status.ExitStatus())
		if t.ExitCode == 0 {
			t.Reason = "Completed"
		}
	}
	return t
}

// containerID is the container ID of the process pid, in the
// <runtime>://<id> form a kubelet reports.
func containerID(pid int) string { return fmt.Sprintf("process://%d", pid) }

// reaper does the waiting for this process's children: as a child
// subreaper this kubelet inherits every orphan of its instances (Patroni
// double-forks the postmaster), and unreaped zombies stall Patroni's
// shutdown: it waits for a postmaster that is a zombie, for the whole grace
// period (30 s seen, against 0.5-1.7 s when reaped). One loop, woken by
// SIGCHLD, reaps
//
//  1. the processes started through start, handing each status to its
//     owner;
//  2. every other zombie child that does not run as root: orphans of the
//     instances, which all run as postgres.
//
// A zombie child running as root and not started through start belongs to
// an exec.Cmd of this process (spilo.go runs `postgres --version`), whose
// Wait reaps it: wait4(-1) would steal its status.
type reaper struct {
	mu      sync.Mutex
	waiting map[int]chan<- exitStatus
}

func newReaper() *reaper { return &reaper{waiting: map[int]chan<- exitStatus{}} }

// becomeSubreaper makes this process the reaper of its descendants' orphans.
func becomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("while becoming a child subreaper: %w", err)
	}
	return nil
}

// run reaps on every SIGCHLD until ctx ends.
func (r *reaper) run(ctx context.Context) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	defer signal.Stop(sigs)
	ticker := time.NewTicker(reapInterval)
	defer ticker.Stop()
	for {
		r.reap()
		select {
		case <-ctx.Done():
			return
		case <-sigs:
		case <-ticker.C:
		}
	}
}

// reap collects the children it may (see reaper) that have exited.
func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	self := os.Getpid()
	for _, pid := range zombieChildren(self) {
		ch, mine := r.waiting[pid]
		if !mine && processUID(pid) == 0 {
			continue
		}
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		for errors.Is(err, syscall.EINTR) {
			got, err = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		}
		if err != nil || got != pid {
			continue
		}
		if mine {
			delete(r.waiting, pid)
			ch <- exitStatus{pid: pid, status: ws, at: time.Now()} // buffered, one send per pid
		}
	}
}

// zombieChildren lists the children of parent that have exited and wait to
// be reaped, from /proc.
func zombieChildren(parent int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s := procState(pid); (s == 'Z' || s == 'X') && parentOf(pid) == parent {
			out = append(out, pid)
		}
	}
	return out
}

// processUID returns the real uid of pid, -1 if unknown.
func processUID(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				uid, err := strconv.Atoi(f[0])
				if err == nil {
					return uid
				}
			}
		}
	}
	return -1
}

// start runs fork, which returns the pid of a new child, and registers exits
// for its status. Holding the lock across the fork keeps the reaper from
// collecting a child that dies at once before anyone waits for it.
func (r *reaper) start(fork func() (int, error), exits chan<- exitStatus) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := fork()
	if err != nil {
		return 0, err
	}
	r.waiting[pid] = exits
	return pid, nil
}

// launcher forks every Patroni from one OS thread (osthread explains why
// Pdeathsig needs it). Its thread lives until Close.
type launcher struct{ *osthread.Thread }

func newLauncher() *launcher { return &launcher{osthread.New()} }

// process is one running Patroni.
type process struct {
	pid     int
	started time.Time
	// exits receives its exit status, once.
	exits chan exitStatus
	// stacks: see spawnSpec.
	stacks syscall.Signal
}

// spawnSpec is what spawn starts.
type spawnSpec struct {
	argv     []string
	env      []string
	dir      string
	logPath  string
	uid, gid uint32
	// unshare: namespaces the child gets of its own (CLONE_NEW*), before
	// its exec; Go makes the mounts of a new mount namespace private.
	unshare uintptr
	// stacks is the signal on which the program writes its threads'
	// stacks and goes on (slowstop.go); 0 when it has none.
	stacks syscall.Signal
}

// spawn starts a process as uid/gid in its own process group, with stdin
// from /dev/null and stdout and stderr appended to logPath. It dies with
// the launcher's thread (Pdeathsig), that is with this kubelet.
func spawn(l *launcher, r *reaper, s spawnSpec) (*process, error) {
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("while opening %s: %w", s.logPath, err)
	}
	defer logFile.Close() // the child has its own copy
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devNull.Close()
	attr := &syscall.ProcAttr{
		Dir:   s.dir,
		Env:   s.env,
		Files: []uintptr{devNull.Fd(), logFile.Fd(), logFile.Fd()},
		Sys: &syscall.SysProcAttr{
			// Groups empty: drop root's supplementary groups.
			Credential:   &syscall.Credential{Uid: s.uid, Gid: s.gid, Groups: []uint32{}},
			Setpgid:      true,
			Pdeathsig:    syscall.SIGKILL,
			Unshareflags: s.unshare,
		},
	}
	p := &process{exits: make(chan exitStatus, 1), stacks: s.stacks}
	l.Do(func() {
		p.pid, err = r.start(func() (int, error) { return syscall.ForkExec(s.argv[0], s.argv, attr) }, p.exits)
	})
	if err != nil {
		return nil, fmt.Errorf("while starting %s: %w", s.argv[0], err)
	}
	p.started = time.Now()
	return p, nil
}
