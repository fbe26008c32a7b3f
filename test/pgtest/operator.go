package pgtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StopGrace is how long Operator.Stop waits after SIGTERM before SIGKILL.
const StopGrace = 30 * time.Second

// tailLines is how many of the last lines Operator.Tail keeps.
const tailLines = 40

// Build builds pgloop (./cmd/pgloop) of the repository at repo into dir
// with $GO, else go, and returns the binary's path.
func Build(ctx context.Context, repo, dir string) (string, error) {
	bin := filepath.Join(dir, "pgloop")
	cmd := exec.CommandContext(ctx, GoCommand(), "build", "-o", bin, "./cmd/pgloop")
	cmd.Dir = repo
	// Static, as `make image` builds it: the same binary runs on this
	// host and in the operator's image, which has no C library.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/pgloop: %w\n%s", err, out)
	}
	return bin, nil
}

// GoCommand is the go command: $GO, else go from PATH.
func GoCommand() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// OperatorEnv is this process's environment without KUBECONFIG and the
// PGLOOP_ variables (which `pgloop operator` reads as flags), so only the
// command line decides which API server it talks to and how it runs.
func OperatorEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "KUBECONFIG=") || strings.HasPrefix(kv, "PGLOOP_")
	})
}

// Operator is a `pgloop operator` process that a suite or a benchmark
// started: in its own process group, killed by the kernel if the test
// program dies (Pdeathsig), its stdout and stderr copied line by line into a
// log file as they come.
type Operator struct {
	// LogPath holds its output.
	LogPath string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error // valid once exited is closed

	mu   sync.Mutex
	tail []string // the last tailLines lines
}

// StartOperator runs bin with args (the first one is "operator") and the
// environment of OperatorEnv, its output going to a new file at logPath.
// onLine, when not nil, sees every line of the output (without its
// newline), in order, from one goroutine, once it is in the file.
func StartOperator(bin string, args []string, logPath string, onLine func(line string)) (*Operator, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	// A pipe rather than the file itself, so the lines can be watched.
	pr, pw, err := os.Pipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.Env = OperatorEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	o := &Operator{LogPath: logPath, cmd: cmd, exited: make(chan struct{})}

	copied := make(chan struct{})
	go func() {
		defer close(copied)
		defer logFile.Close()
		o.copyLines(pr, logFile, onLine)
	}()

	// Pdeathsig fires when the forking thread exits: the goroutine that
	// forks stays locked to its thread until the process ends
	// (golang/go#27505), as testbed's launcher does.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			pw.Close()
			<-copied
			pr.Close()
			o.err = err
			started <- err
			close(o.exited)
			return
		}
		pw.Close() // the child holds its own copy
		started <- nil
		err := cmd.Wait()
		// The whole output is in the file before exited is closed.
		<-copied
		pr.Close()
		o.err = err
		close(o.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return o, nil
}

// copyLines writes each line of r to log unbuffered, so a reader of the
// file sees it at once, and hands it to onLine. It reads until r's end
// whatever happens to log, so the process never blocks on a full pipe, and
// takes lines of any length.
func (o *Operator) copyLines(r io.Reader, log io.Writer, onLine func(string)) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			_, _ = log.Write(line)
			text := strings.TrimSuffix(string(line), "\n")
			o.mu.Lock()
			o.tail = append(o.tail, text)
			if len(o.tail) > tailLines {
				o.tail = o.tail[len(o.tail)-tailLines:]
			}
			o.mu.Unlock()
			if onLine != nil {
				onLine(text)
			}
		}
		if err != nil {
			return
		}
	}
}

// PID is the process id, which is also its process group's.
func (o *Operator) PID() int { return o.cmd.Process.Pid }

// Exited returns a channel closed when the process has ended and its
// output is all in the log file.
func (o *Operator) Exited() <-chan struct{} { return o.exited }

// Err is what waiting for the process returned; valid once Exited is
// closed.
func (o *Operator) Err() error { return o.err }

// Tail returns the last lines the operator wrote.
func (o *Operator) Tail() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.tail, "\n")
}

func (o *Operator) done() bool {
	select {
	case <-o.exited:
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL to the process group and waits until the process is
// reaped: a crash, with no cleanup.
func (o *Operator) Kill() {
	if o.done() {
		return
	}
	_ = syscall.Kill(-o.PID(), syscall.SIGKILL)
	<-o.exited
}

// Stop sends SIGTERM to the process group and waits for the process to
// exit, at most StopGrace, then kills the group. It is an error if the
// process needed SIGKILL or exited with a failure on SIGTERM; a process
// that had already exited is no error here (its caller saw to that).
func (o *Operator) Stop() error {
	if o.done() {
		return nil
	}
	_ = syscall.Kill(-o.PID(), syscall.SIGTERM)
	timer := time.NewTimer(StopGrace)
	defer timer.Stop()
	select {
	case <-o.exited:
		var exitErr *exec.ExitError
		if errors.As(o.err, &exitErr) {
			return fmt.Errorf("exited with %v after SIGTERM", o.err)
		}
		return nil
	case <-timer.C:
		_ = syscall.Kill(-o.PID(), syscall.SIGKILL)
		<-o.exited
		return fmt.Errorf("ignored SIGTERM for %v, killed", StopGrace)
	}
}
