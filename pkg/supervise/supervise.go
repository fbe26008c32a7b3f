// Package supervise runs a container's main program the way a container's
// first process must: it forwards the signals the container gets to the
// program, reaps every orphan that comes back to it (PostgreSQL's
// postmaster, which Patroni double-forks, is one), and when the program
// ends, ends what it left behind before returning the program's status.
//
// pgloop's start-up programs (pgloop instance, pgloop pooler) end with Run:
// in a container they are PID 1, which the kernel gives every orphan of
// the container; outside one (the test plane's process kubelet) Run makes
// its process a child subreaper, which has the same effect for its own
// descendants.
package supervise

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Forwarded are the signals Run passes on to the program: what a kubelet or
// a user sends a container (SIGTERM to stop, SIGINT, SIGHUP to reload,
// SIGQUIT), and SIGUSR1/SIGUSR2, which programs use for their own ends
// (Patroni's stacks, PgBouncer's pause and resume).
var Forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// LeftoverGrace is how long the processes the program left behind get after
// SIGTERM before SIGKILL. A postmaster whose Patroni died gets a fast
// shutdown's time; in a container the kernel would kill it at once when
// PID 1 returns.
const LeftoverGrace = 5 * time.Second

// Command is the program Run runs.
type Command struct {
	// Argv is the program and its arguments; Argv[0] is looked up in PATH
	// when it has no slash.
	Argv []string
	// Env is its environment, "NAME=value"; nil gives it none.
	Env []string
	// Dir is its working directory; "" keeps Run's.
	Dir string
	// Logf reports what Run does beside the program (signals forwarded,
	// leftovers ended); nil reports nothing.
	Logf func(format string, args ...any)
}

// Run starts c's program with Run's own standard input, output and error,
// and supervises it until it ends; it returns the program's exit code (128
// + the signal's number when a signal ended it). An error means the program
// could not start.
func Run(c Command) (int, error) {
	if len(c.Argv) == 0 {
		return 0, errors.New("supervise: no program to run")
	}
	logf := c.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	prog := c.Argv[0]
	if !strings.Contains(prog, "/") {
		p, err := lookPath(prog, c.Env)
		if err != nil {
			return 0, err
		}
		prog = p
	}
	// Orphans of the program's descendants come back to this process:
	// PID 1 gets them anyway; anywhere else this makes it so.
	if os.Getpid() != 1 {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return 0, fmt.Errorf("supervise: while becoming a child subreaper: %w", err)
		}
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD}, Forwarded...)...)
	defer signal.Stop(sigs)

	proc, err := os.StartProcess(prog, c.Argv, &os.ProcAttr{
		Dir:   c.Dir,
		Env:   c.Env,
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
	})
	if err != nil {
		return 0, fmt.Errorf("supervise: while starting %s: %w", c.Argv[0], err)
	}
	pid := proc.Pid
	proc.Release() // Run waits for it itself, with every other child.

	var status syscall.WaitStatus
	ended := false
	for !ended {
		sig := <-sigs
		if sig != syscall.SIGCHLD {
			logf("forwarding %v to %s (pid %d)", sig, c.Argv[0], pid)
			_ = syscall.Kill(pid, sig.(syscall.Signal))
			continue
		}
		reap(func(p int, ws syscall.WaitStatus) {
			if p == pid {
				status, ended = ws, true
			}
		})
	}
	endLeftovers(sigs, logf)
	if status.Signaled() {
		return 128 + int(status.Signal()), nil
	}
	return status.ExitStatus(), nil
}

// reap collects every child that has ended, telling each to done.
func reap(done func(pid int, ws syscall.WaitStatus)) {
	for {
		var ws syscall.WaitStatus
		p, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || p <= 0 {
			return
		}
		done(p, ws)
	}
}

// endLeftovers ends the children that remain once the program has ended
// (orphans that came back to this process): SIGTERM, then SIGKILL after
// LeftoverGrace, reaping them as they go. Signals to forward are dropped:
// there is no program left to take them.
func endLeftovers(sigs <-chan os.Signal, logf func(string, ...any)) {
	left := children(os.Getpid())
	if len(left) == 0 {
		return
	}
	logf("the program left %d processes (%v): sending SIGTERM", len(left), left)
	for _, p := range left {
		_ = syscall.Kill(p, syscall.SIGTERM)
	}
	deadline := time.NewTimer(LeftoverGrace)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		reap(func(int, syscall.WaitStatus) {})
		left = children(os.Getpid())
		if len(left) == 0 {
			return
		}
		select {
		case <-sigs:
		case <-tick.C:
		case <-deadline.C:
			logf("%d processes still there after %v (%v): sending SIGKILL", len(left), LeftoverGrace, left)
			for _, p := range left {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			for len(children(os.Getpid())) > 0 {
				reap(func(int, syscall.WaitStatus) {})
				time.Sleep(10 * time.Millisecond)
			}
			return
		}
	}
}

// children lists the processes whose parent is parent, from /proc.
func children(parent int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if parentOf(pid) == parent {
			out = append(out, pid)
		}
	}
	return out
}

// parentOf reads the parent's pid from /proc/PID/stat; -1 when pid is gone.
func parentOf(pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// The command name in parentheses may hold spaces and parentheses:
	// the fields that follow start after the last ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return ppid
}

// lookPath finds prog in the PATH of env (the program's own), else in
// Run's.
func lookPath(prog string, env []string) (string, error) {
	path := os.Getenv("PATH")
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for dir := range strings.SplitSeq(path, ":") {
		if dir == "" {
			continue
		}
		p := dir + "/" + prog
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("supervise: %s is not in PATH (%s)", prog, path)
}
