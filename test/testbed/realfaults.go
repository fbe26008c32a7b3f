package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// The process kubelet's fault hooks (test/kubelet: hold, freeze, freeze
// PostgreSQL alone), done to a container of the real node from the host:
// its processes are host processes, which containerd lists. A container is
// named by its ID as its pod's status gives it ("containerd://ID").

// ContainerProcesses returns the host PIDs of a container's task: its first
// process and every process of it (the first among them).
func (n RealNode) ContainerProcesses(ctx context.Context, containerID string) (first int, all []int, err error) {
	id := strings.TrimPrefix(containerID, "containerd://")
	if id == "" {
		return 0, nil, errors.New("no container ID: the container has not started")
	}
	out, err := ctr(ctx, n.Containerd, "tasks", "ls")
	if err != nil {
		return 0, nil, err
	}
	for line := range strings.Lines(out) {
		// TASK PID STATUS
		if f := strings.Fields(line); len(f) >= 2 && f[0] == id {
			first, _ = strconv.Atoi(f[1])
		}
	}
	if first == 0 {
		return 0, nil, fmt.Errorf("container %s has no task on %s", id, n.Name)
	}
	if out, err = ctr(ctx, n.Containerd, "tasks", "ps", id); err != nil {
		return 0, nil, err
	}
	for line := range strings.Lines(out) {
		// PID INFO
		if f := strings.Fields(line); len(f) > 0 {
			if pid, err := strconv.Atoi(f[0]); err == nil {
				all = append(all, pid)
			}
		}
	}
	return first, all, nil
}

// Hold crashes what a container runs and keeps it down, as the process
// kubelet's hold does: its first process (pgloop's start-up program, which
// supervises Patroni) is stopped, every other process (Patroni, PostgreSQL)
// killed, so the container neither runs nor exits. Resume ends the hold:
// the first process finds Patroni gone and exits, and the kubelet restarts
// the container, on its volumes.
func (n RealNode) Hold(ctx context.Context, containerID string) error {
	first, all, err := n.ContainerProcesses(ctx, containerID)
	if err != nil {
		return err
	}
	if err := syscall.Kill(first, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stopping process %d: %w", first, err)
	}
	// Twice: a child forked between the listing and the kill (PostgreSQL
	// starts backends) is in the second listing.
	for range 2 {
		for _, pid := range all {
			if pid != first {
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
					return fmt.Errorf("killing process %d: %w", pid, err)
				}
			}
		}
		if _, all, err = n.ContainerProcesses(ctx, containerID); err != nil {
			return err
		}
	}
	return nil
}

// Freeze stops (SIGSTOP) the processes of a container, every one when comm
// is "", else those whose command (/proc/PID/comm) is comm: "postgres"
// stops PostgreSQL while Patroni goes on answering. Resume continues them.
func (n RealNode) Freeze(ctx context.Context, containerID, comm string) error {
	_, all, err := n.ContainerProcesses(ctx, containerID)
	if err != nil {
		return err
	}
	stopped := 0
	for _, pid := range all {
		if comm != "" {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if err != nil || strings.TrimSpace(string(b)) != comm {
				continue
			}
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("stopping process %d: %w", pid, err)
		}
		stopped++
	}
	if stopped == 0 {
		return fmt.Errorf("container %s runs no process %q", containerID, comm)
	}
	return nil
}

// Resume continues (SIGCONT) every process of a container that Hold or
// Freeze stopped.
func (n RealNode) Resume(ctx context.Context, containerID string) error {
	_, all, err := n.ContainerProcesses(ctx, containerID)
	if err != nil {
		return err
	}
	for _, pid := range all {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("continuing process %d: %w", pid, err)
		}
	}
	return nil
}
