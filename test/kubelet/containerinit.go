package kubelet

// The container's init: what a container runtime does between fork and the
// entrypoint's exec, done by this kubelet's own binary re-executed as the
// container's first process (InitCommand). The kubelet forks it in new
// mount and UTS namespaces (CLONE_NEWNS, CLONE_NEWUTS; Go makes every mount
// of the new namespace private before the exec, so nothing mounted there
// reaches the host's namespace). As root, it
//
//  1. sets the hostname to the pod's name, as a pod's hostname is;
//  2. mounts each volume at its mount path: a bind mount of the volume's
//     host directory, read-only when the mount is. A mount path that does
//     not exist is made on a tmpfs covering its nearest existing parent
//     (the host's /run for /var/run/secrets/...): the container then sees
//     an empty /run, as a container does, and the host's /run is
//     untouched;
//  3. with readOnlyRootFilesystem, remounts every other mount read-only but
//     /proc, /sys and /dev, so the container can write only to its
//     volumes;
//  4. drops to the container's user and groups, asks again for SIGKILL when
//     the kubelet dies (a change of credentials clears it), and execs the
//     entrypoint with the container's environment.
//
// Anything that fails is written to the container's log (stderr) and ends
// the process with exit code 127: the kubelet restarts it under its
// back-off, as a runtime error would.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// InitCommand is the first argument that makes the kubelet's binary run
// ContainerInit with the arguments after it instead of a kubelet.
const InitCommand = "__container-init"

// initSpec is what the container's init does, passed as JSON in its
// second argument.
type initSpec struct {
	Hostname     string      `json:"hostname"`
	Mounts       []initMount `json:"mounts,omitempty"`
	ReadOnlyRoot bool        `json:"readOnlyRoot,omitempty"`
	UID          uint32      `json:"uid"`
	GID          uint32      `json:"gid"`
	Groups       []uint32    `json:"groups,omitempty"`
	Dir          string      `json:"dir,omitempty"`
	Argv         []string    `json:"argv"`
}

// initMount is one volume mount.
type initMount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// initArgv returns the command line that runs spec through self, the
// kubelet's binary.
func initArgv(self string, spec initSpec) ([]string, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	return []string{self, InitCommand, string(b)}, nil
}

// ContainerInit runs the container's init (see the top of this file) with
// args, the arguments after InitCommand. It returns only on failure.
func ContainerInit(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: " + InitCommand + " SPEC")
	}
	var s initSpec
	if err := json.Unmarshal([]byte(args[0]), &s); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	if len(s.Argv) == 0 {
		return errors.New("spec: no command")
	}
	// Go did this before the exec; again in case this runs otherwise.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make every mount private: %w", err)
	}
	if s.Hostname != "" {
		if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
			return fmt.Errorf("set the hostname: %w", err)
		}
	}
	var covered []string // tmpfs made to hold missing mount paths
	for _, m := range s.Mounts {
		if err := mountVolume(m, &covered); err != nil {
			return err
		}
	}
	for _, dir := range covered {
		if err := remountReadOnly(dir); err != nil {
			return fmt.Errorf("remount %s read-only: %w", dir, err)
		}
	}
	if s.ReadOnlyRoot {
		keep := []string{"/proc", "/sys", "/dev"}
		for _, m := range s.Mounts {
			keep = append(keep, m.Target)
		}
		if err := readOnlyRoot(keep, covered); err != nil {
			return err
		}
	}
	// Go's Setgroups, Setgid and Setuid change every thread of the
	// process.
	groups := make([]int, len(s.Groups))
	for i, g := range s.Groups {
		groups[i] = int(g)
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(int(s.GID)); err != nil {
		return fmt.Errorf("setgid %d: %w", s.GID, err)
	}
	if err := syscall.Setuid(int(s.UID)); err != nil {
		return fmt.Errorf("setuid %d: %w", s.UID, err)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("set the parent death signal: %w", err)
	}
	if os.Getppid() == 1 {
		return errors.New("the kubelet is gone")
	}
	dir := s.Dir
	if dir == "" {
		dir = "/"
	}
	if err := os.Chdir(dir); err != nil {
		return fmt.Errorf("workingDir: %w", err)
	}
	if err := syscall.Exec(s.Argv[0], s.Argv, os.Environ()); err != nil {
		return fmt.Errorf("exec %s: %w", s.Argv[0], err)
	}
	return nil
}

// ContainerInitMain is the main of a binary run as InitCommand: it runs
// ContainerInit and, if it returns, says why on stderr and exits 127.
func ContainerInitMain(args []string) {
	err := ContainerInit(args)
	fmt.Fprintf(os.Stderr, "container init: %v\n", err)
	os.Exit(127)
}

// mountVolume bind-mounts m, making its target on a tmpfs over its
// nearest existing parent when it does not exist; that parent is added to
// covered.
func mountVolume(m initMount, covered *[]string) error {
	if !filepath.IsAbs(m.Target) {
		return fmt.Errorf("mount path %s is not absolute", m.Target)
	}
	if _, err := os.Stat(m.Target); errors.Is(err, os.ErrNotExist) {
		parent, err := existingParent(m.Target)
		if err != nil {
			return err
		}
		if parent == "/" {
			return fmt.Errorf("mount path %s: no parent but / exists", m.Target)
		}
		if !slices.Contains(*covered, parent) {
			if err := unix.Mount("tmpfs", parent, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
				return fmt.Errorf("mount a tmpfs on %s for %s: %w", parent, m.Target, err)
			}
			*covered = append(*covered, parent)
		}
		if err := os.MkdirAll(m.Target, 0o755); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if err := unix.Mount(m.Source, m.Target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", m.Source, m.Target, err)
	}
	if m.ReadOnly {
		if err := remountReadOnly(m.Target); err != nil {
			return fmt.Errorf("remount %s read-only: %w", m.Target, err)
		}
	}
	return nil
}

// existingParent is the nearest parent of path that exists, symbolic links
// resolved (/run for /var/run/secrets/x when /var/run -> /run).
func existingParent(path string) (string, error) {
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			return filepath.EvalSymlinks(d)
		}
		if d == "/" {
			return "/", nil
		}
	}
}

// remountReadOnly makes the mount at dir read-only in this namespace only
// (a bind remount changes the mount, not the file system), keeping the
// flags a remount may not clear.
func remountReadOnly(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	keep := uintptr(0)
	for _, f := range []struct{ statfs, mount uintptr }{
		{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(st.Flags)&f.statfs != 0 {
			keep |= f.mount
		}
	}
	return unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|keep, "")
}

// readOnlyRoot remounts read-only every mount of this namespace but those at
// or under keep and those already done (covered, the volumes).
func readOnlyRoot(keep, covered []string) error {
	points, err := mountPoints()
	if err != nil {
		return err
	}
	under := func(p string, dirs []string) bool {
		for _, d := range dirs {
			if p == d || strings.HasPrefix(p, strings.TrimSuffix(d, "/")+"/") {
				return true
			}
		}
		return false
	}
	for _, p := range points {
		if under(p, keep) || slices.Contains(covered, p) {
			continue
		}
		if err := remountReadOnly(p); err != nil {
			return fmt.Errorf("readOnlyRootFilesystem: remount %s read-only: %w", p, err)
		}
	}
	return nil
}

// mountPoints lists this namespace's mount points, from /proc/self/mountinfo.
func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountPath(fields[4])
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, sc.Err()
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
