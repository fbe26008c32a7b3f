package isolation

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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

// buildOperator builds pgloop from the repository at repo into dir.
func buildOperator(ctx context.Context, repo, dir string) (string, error) {
	bin := filepath.Join(dir, "pgloop")
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.CommandContext(ctx, goCmd, "build", "-o", bin, "./cmd/pgloop")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/pgloop: %w\n%s", err, out)
	}
	return bin, nil
}

// operator is a `pgloop operator` process: in its own process group, killed
// by the kernel if this program dies (Pdeathsig), its output copied line by
// line into a log file.
type operator struct {
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	err     error // valid once exited is closed

	mu   sync.Mutex
	addr string        // the health server's address, once logged
	up   chan struct{} // closed when addr is known
	tail []string      // last lines, for error messages
}

// startOperator runs bin with args, its output going to logPath.
func startOperator(bin string, args []string, logPath string) (*operator, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = pw, pw
	// Only the flags decide which API server it talks to.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "KUBECONFIG=") || strings.HasPrefix(kv, "PGLOOP_")
	})
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	o := &operator{cmd: cmd, logPath: logPath, exited: make(chan struct{}), up: make(chan struct{})}

	copied := make(chan struct{})
	go func() {
		defer close(copied)
		defer logFile.Close()
		w := bufio.NewWriterSize(logFile, 64<<10)
		defer w.Flush()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			w.WriteString(line)
			w.WriteByte('\n')
			o.saw(line)
		}
	}()

	// Pdeathsig fires when the forking thread exits: the goroutine that
	// forks stays locked to its thread until the process ends
	// (golang/go#27505), as testbed's launcher does.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			pw.Close()
			pr.Close()
			started <- err
			o.err = err
			close(o.exited)
			return
		}
		pw.Close() // the child holds its own copy
		started <- nil
		err := cmd.Wait()
		<-copied
		pr.Close()
		o.err = err
		close(o.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("while starting the operator: %w", err)
	}
	return o, nil
}

// saw looks at one line of the operator's output.
func (o *operator) saw(line string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.tail = append(o.tail, line)
	if len(o.tail) > 40 {
		o.tail = o.tail[len(o.tail)-40:]
	}
	if o.addr != "" || !strings.Contains(line, "serving /healthz") {
		return
	}
	var entry struct {
		Addr string `json:"addr"`
	}
	if json.Unmarshal([]byte(line), &entry) == nil && entry.Addr != "" {
		o.addr = entry.Addr
		close(o.up)
	}
}

// Tail returns the last lines the operator wrote.
func (o *operator) Tail() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.tail, "\n")
}

// waitReady waits until the operator has logged its health address and
// its /readyz answers OK (its caches synced, the loop running), and
// returns the address. /readyz is polled every 100ms: an HTTP endpoint has
// no watch.
func (o *operator) waitReady(ctx context.Context) (string, error) {
	select {
	case <-o.up:
	case <-o.exited:
		return "", fmt.Errorf("the operator exited (%v) before serving /readyz:\n%s", o.err, o.Tail())
	case <-ctx.Done():
		return "", fmt.Errorf("the operator logged no health address: %w\n%s", ctx.Err(), o.Tail())
	}
	o.mu.Lock()
	addr := o.addr
	o.mu.Unlock()
	client := &http.Client{Timeout: 5 * time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr, nil
			}
		}
		select {
		case <-tick.C:
		case <-o.exited:
			return "", fmt.Errorf("the operator exited (%v) before it was ready:\n%s", o.err, o.Tail())
		case <-ctx.Done():
			return "", fmt.Errorf("the operator's /readyz never answered OK: %w\n%s", ctx.Err(), o.Tail())
		}
	}
}

// Exited returns a channel closed when the process has ended.
func (o *operator) Exited() <-chan struct{} { return o.exited }

// stop sends SIGTERM to the operator's process group and waits for it to
// exit, at most 30s, then kills the group.
func (o *operator) stop() error {
	select {
	case <-o.exited:
		return nil
	default:
	}
	pid := o.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case <-o.exited:
		var exitErr *exec.ExitError
		if errors.As(o.err, &exitErr) {
			return fmt.Errorf("the operator exited with %v after SIGTERM", o.err)
		}
		return nil
	case <-timer.C:
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-o.exited
		return errors.New("the operator ignored SIGTERM for 30s: killed")
	}
}
