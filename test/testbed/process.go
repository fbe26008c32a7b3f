package testbed

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/pgloop/pgloop/test/internal/osthread"
)

// errPortInUse marks a start-up failure caused by a port that another program
// took between our probe and the bind; Start retries on fresh ports.
var errPortInUse = errors.New("port already in use")

// launcher starts the plane's processes from one OS thread (osthread
// explains why Pdeathsig needs it). The thread lives until Stop has reaped
// every child; the whole test binary dying still takes the thread, and so
// the children, with it.
type launcher struct{ *osthread.Thread }

func newLauncher() *launcher { return &launcher{osthread.New()} }

// process is one program of the plane, started in its own process group with
// its output in a log file.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once Wait has reaped the process
	waitErr error         // valid once exited is closed
	// grace is how long it may take to exit after SIGTERM.
	grace time.Duration
	// cleanup, when set, runs once the process has exited, to remove what
	// it may have left behind.
	cleanup func() error
}

func (l *launcher) start(name, bin, logPath string, args, env []string) (*process, error) {
	return l.startIn("", name, bin, logPath, args, env)
}

// startIn is start with dir as the working directory; "" keeps ours.
func (l *launcher) startIn(dir, name, bin, logPath string, args, env []string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("while creating the log of %s: %w", name, err)
	}
	// The child inherits its own copy of the descriptor.
	defer logFile.Close()

	cmd := exec.Command(bin, args...)
	// Both *os.File: no copying goroutine, so the fork happens on this thread.
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = env
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	l.Do(func() { err = cmd.Start() })
	if err != nil {
		return nil, fmt.Errorf("while starting %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{}), grace: stopGrace}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// hasExited reports whether the process has ended and been reaped.
func (p *process) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// stop asks the process group to terminate, kills it after p.grace, and
// returns once the process is reaped. It reports whether SIGKILL was needed.
func (p *process) stop() (killed bool) {
	grace := p.grace
	if p.hasExited() {
		return false
	}
	// A negative pid signals the group, which holds only what we started:
	// Setpgid made the child its leader.
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.exited:
		return false
	case <-timer.C:
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.exited
		return true
	}
}

// kill sends SIGKILL to the process group and waits until the process is
// reaped.
func (p *process) kill() {
	if p.hasExited() {
		return
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	<-p.exited
}

// failure wraps err with the end of the process's log, which is where the
// reason of a failed start-up always is.
func (p *process) failure(err error) error {
	tail := p.logTail(40)
	if p.hasExited() {
		err = fmt.Errorf("%s exited (%v): %w", p.name, p.waitErr, err)
	}
	if strings.Contains(tail, "address already in use") {
		err = fmt.Errorf("%w: %w", errPortInUse, err)
	}
	return fmt.Errorf("%w\n--- last lines of %s ---\n%s", err, p.logPath, tail)
}

// logTail returns at most the last n lines of the process's log.
func (p *process) logTail(n int) string {
	const maxBytes = 16 << 10
	f, err := os.Open(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > maxBytes {
		_, _ = f.Seek(-maxBytes, io.SeekEnd)
	}
	data, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// RSS returns the resident memory of the process in bytes, from
// /proc/<pid>/status.
func (p Process) RSS() (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.PID))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kib int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kib); err != nil {
				return 0, fmt.Errorf("while parsing VmRSS of %d: %w", p.PID, err)
			}
			return kib << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", p.PID)
}
