package testbed

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A real node changes the host: sysctls, a bridge, iptables chains, mounts,
// cgroups, network namespaces and the processes of its containers. Only one
// plane at a time may have one on a machine (hostLock), and what it changed
// is written down before it changes it (hostJournal), so that the next
// plane undoes what a killed one left (recoverHost) before it starts.
const (
	// realNodeStateDir holds the lock and the journal of the plane that
	// runs a real node. /run is emptied by a reboot, as is what they
	// describe.
	realNodeStateDir = "/run/pgloop-testbed"
	hostLockFile     = "realnode.lock"
	hostJournalFile  = "realnode.json"

	// BridgeName is the real node's bridge, its pods' gateway.
	BridgeName = "pgloop0"
	// apiserverChain was the nat chain of planes that sent the kubernetes
	// Service's address to an apiserver on loopback: a journal of one is
	// still restored.
	apiserverChain = "PGLOOP-APISERVER"
	// kubeCgroup is where the kubelet puts pods (cgroupfs driver, cgroup
	// root /), in every cgroup v1 hierarchy and in the unified one.
	kubeCgroup = "kubepods"
	// netnsDir is where containerd 1.6 mounts its pods' network
	// namespaces (cni-<uuid>).
	netnsDir = "/var/run/netns"
	// cniCacheDir is libcni's cache of attachment results.
	cniCacheDir = "/var/lib/cni"
	// containerLogLinks is where the kubelet links its containers' logs,
	// whatever its pod log directory.
	containerLogLinks = "/var/log/containers"
)

// hostJournal is what a real node changed on the host, written before the
// change: enough for recoverHost to undo it after a crash.
type hostJournal struct {
	// Owner is the process that holds the lock (processIdentity).
	Owner string `json:"owner"`
	// Dir is the plane's directory: mounts below it are the node's.
	Dir string `json:"dir"`
	// ContainerdRoot and ContainerdState are containerd's directories;
	// mounts below the state directory are its containers' root file
	// systems.
	ContainerdRoot  string `json:"containerdRoot"`
	ContainerdState string `json:"containerdState"`
	// Address is containerd's socket: its shims name it on their command
	// line.
	Address string `json:"address"`
	// Sysctls are the values found before the node started, by path
	// under /proc/sys.
	Sysctls map[string]string `json:"sysctls"`
}

// hostSysctls are the sysctls the node, the kubelet or kube-proxy set, and
// so the ones saved and restored. The kubelet sets vm.overcommit_memory
// and kernel.panic*; the bridge needs forwarding and br_netfilter's hook
// (pod to Service to pod on one bridge); kube-proxy would set
// route_localnet for node ports on localhost (turned off, kept in case).
var hostSysctls = []string{
	"net/ipv4/ip_forward",
	"net/bridge/bridge-nf-call-iptables",
	"vm/overcommit_memory",
	"kernel/panic",
	"kernel/panic_on_oops",
	"net/ipv4/conf/all/route_localnet",
}

// hostLock is the flock that makes a real node one per machine. The kernel
// releases it when its holder dies, however it dies.
type hostLock struct{ f *os.File }

// lockHost takes the lock, waiting while another plane of this machine
// holds it (tests of several packages run at once), until ctx ends.
func lockHost(ctx context.Context, log func(string, ...any)) (*hostLock, error) {
	if err := os.MkdirAll(realNodeStateDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(realNodeStateDir, hostLockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	logged := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return &hostLock{f}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("while locking %s: %w", f.Name(), err)
		}
		if !logged {
			log("another plane runs a real node on this machine: waiting for it")
			logged = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("while waiting for another plane's real node to stop: %w", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (l *hostLock) release() {
	if l != nil {
		l.f.Close()
	}
}

func journalPath() string { return filepath.Join(realNodeStateDir, hostJournalFile) }

func writeJournal(j *hostJournal) error {
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	tmp := journalPath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, journalPath())
}

func readJournal() (*hostJournal, error) {
	b, err := os.ReadFile(journalPath())
	if err != nil {
		return nil, err
	}
	var j hostJournal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("%s: %w", journalPath(), err)
	}
	return &j, nil
}

// saveSysctls reads the current values of hostSysctls; missing ones (no
// br_netfilter) are left out.
func saveSysctls() map[string]string {
	out := map[string]string{}
	for _, k := range hostSysctls {
		if b, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil {
			out[k] = strings.TrimSpace(string(b))
		}
	}
	return out
}

func writeSysctl(key, value string) error {
	return os.WriteFile(filepath.Join("/proc/sys", key), []byte(value+"\n"), 0o644)
}

// recoverHost undoes what the journal's plane changed, when there is a
// journal: that plane was killed before its Stop finished. The caller holds
// the lock, so no plane uses what it removes.
func recoverHost(log func(string, ...any)) error {
	j, err := readJournal()
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	log("a real node of a plane that did not stop (%s, %s) left host state: restoring it", j.Owner, j.Dir)
	if err := restoreHost(j, log); err != nil {
		return fmt.Errorf("while restoring what the real node of %s left: %w", j.Dir, err)
	}
	// Its directory too: nothing runs there any more.
	if j.Dir != "" {
		_ = os.RemoveAll(j.Dir)
	}
	return nil
}

// restoreHost undoes the changes of a real node whose processes (kubelet,
// kube-proxy, containerd) are gone: it kills its containers and shims,
// unmounts what they mounted, removes the bridge, the iptables rules, the
// network namespaces and the cgroups, puts the sysctls back and removes
// the journal. Each step runs even when one before failed.
func restoreHost(j *hostJournal, log func(string, ...any)) error {
	var errs []error
	errs = append(errs, killContainers(j, log))
	errs = append(errs, unmountUnder(log, j.Dir, j.ContainerdState, netnsDir))
	errs = append(errs, removeNetns())
	errs = append(errs, removeIPTables(log))
	if err := run("ip", "link", "delete", BridgeName); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		errs = append(errs, err)
	}
	errs = append(errs, removeCgroups())
	errs = append(errs, removeUnder(containerLogLinks, func(path string) bool {
		target, err := os.Readlink(path)
		return err == nil && j.Dir != "" && strings.HasPrefix(target, j.Dir)
	}))
	errs = append(errs, removeCNICache())
	for _, k := range slices.Sorted(maps.Keys(j.Sysctls)) {
		if err := writeSysctl(k, j.Sysctls[k]); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.Remove(journalPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// killContainers SIGKILLs containerd's shims of this node (they name its
// socket) and every process in the kubelet's cgroups: the containers
// outlive containerd and the kubelet, reparented to init.
func killContainers(j *hostJournal, log func(string, ...any)) error {
	var pids []int
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") && j.Address != "" && slices.Contains(args, j.Address) {
			pids = append(pids, pid)
		}
	}
	pids = append(pids, cgroupPids()...)
	slices.Sort(pids)
	pids = slices.Compact(pids)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if len(pids) > 0 {
		log("killed %d processes of the real node's containers", len(pids))
	}
	// A killed process leaves its cgroup once reaped; give init a moment.
	deadline := time.Now().Add(10 * time.Second)
	for len(cgroupPids()) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if left := cgroupPids(); len(left) > 0 {
		return fmt.Errorf("processes %v are still in the kubelet's cgroups", left)
	}
	return nil
}

// cgroupRoots are the mounted cgroup hierarchies (v1 controllers and the
// unified one).
func cgroupRoots() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		i := slices.Index(fields, "-")
		if i < 0 || i+1 >= len(fields) {
			continue
		}
		if fs := fields[i+1]; fs == "cgroup" || fs == "cgroup2" {
			out = append(out, unescapeMount(fields[4]))
		}
	}
	return out
}

// cgroupPids lists the processes in the kubelet's cgroups.
func cgroupPids() []int {
	var pids []int
	for _, root := range cgroupRoots() {
		_ = filepath.WalkDir(filepath.Join(root, kubeCgroup), func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// removeCgroups removes the kubelet's cgroups, deepest first (a cgroup is
// removed with rmdir once it has no children and no processes).
func removeCgroups() error {
	var errs []error
	for _, root := range cgroupRoots() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(root, kubeCgroup), func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for _, d := range slices.Backward(dirs) {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// unmountUnder unmounts every mount point below one of dirs, deepest first.
func unmountUnder(log func(string, ...any), dirs ...string) error {
	for i, d := range dirs {
		if d != "" {
			dirs[i] = realPath(d)
		}
	}
	var points []string
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		for _, d := range dirs {
			if d != "" && (mp == d || strings.HasPrefix(mp, strings.TrimSuffix(d, "/")+"/")) {
				points = append(points, mp)
				break
			}
		}
	}
	f.Close()
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, mp := range points {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("umount %s: %w", mp, err))
		}
	}
	if len(points) > 0 {
		log("unmounted %d mounts of the real node", len(points))
	}
	return errors.Join(errs...)
}

// realPath is path with its symbolic links resolved, as mountinfo names
// mount points (/var/run is a link to /run); path itself when it does not
// resolve.
func realPath(path string) string {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		return p
	}
	return path
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeNetns removes containerd's pod network namespaces (cni-*), already
// unmounted: with the lock held, they are this node's or a dead one's.
func removeNetns() error {
	return removeUnder(netnsDir, func(path string) bool { return strings.HasPrefix(filepath.Base(path), "cni-") })
}

// removeCNICache removes libcni's cached results of the node's network.
func removeCNICache() error {
	return removeUnder(filepath.Join(cniCacheDir, "results"), func(path string) bool {
		return strings.HasPrefix(filepath.Base(path), cniNetwork+"-")
	})
}

// removeUnder removes the entries of dir that match; a missing dir is
// nothing to remove.
func removeUnder(dir string, match func(path string) bool) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if match(path) {
			if err := os.RemoveAll(path); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeIPTables removes kube-proxy's chains and rules (its --cleanup does
// the same, but needs the binary; these are its chain names) and the
// node's own chain.
func removeIPTables(log func(string, ...any)) error {
	var errs []error
	for _, table := range []string{"nat", "filter", "mangle"} {
		out, err := exec.Command("iptables", "-w", "-t", table, "-S").Output()
		if err != nil {
			errs = append(errs, fmt.Errorf("iptables -t %s -S: %w", table, err))
			continue
		}
		var chains []string
		removed := 0
		for line := range strings.Lines(string(out)) {
			f := splitRule(line)
			if len(f) < 2 {
				continue
			}
			switch {
			case f[0] == "-N" && ownChain(f[1]):
				chains = append(chains, f[1])
			case f[0] == "-A" && jumpsToOwn(f):
				// The same rule with -D in place of -A deletes it.
				args := append([]string{"-w", "-t", table, "-D"}, f[1:]...)
				if err := exec.Command("iptables", args...).Run(); err != nil {
					errs = append(errs, fmt.Errorf("iptables %s: %w", strings.Join(args, " "), err))
				}
				removed++
			}
		}
		for _, c := range chains {
			_ = exec.Command("iptables", "-w", "-t", table, "-F", c).Run()
		}
		for _, c := range chains {
			if err := exec.Command("iptables", "-w", "-t", table, "-X", c).Run(); err != nil {
				errs = append(errs, fmt.Errorf("iptables -t %s -X %s: %w", table, c, err))
			}
		}
		if removed+len(chains) > 0 {
			log("removed %d chains and %d jumps from iptables' %s table", len(chains), removed, table)
		}
	}
	return errors.Join(errs...)
}

// splitRule splits a line of `iptables -S` into its arguments: words, or
// double-quoted strings with backslash escapes (comments).
func splitRule(line string) []string {
	var out []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == '"':
			quoted, inWord = !quoted, true
		case !quoted && (c == ' ' || c == '\t' || c == '\n'):
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}

// ownChain tells the chains of kube-proxy, the kubelet and the node.
func ownChain(name string) bool {
	return strings.HasPrefix(name, "KUBE-") || name == apiserverChain || strings.HasPrefix(name, "CNI-")
}

// jumpsToOwn tells a rule of a built-in chain that jumps to one of ours.
func jumpsToOwn(rule []string) bool {
	if ownChain(rule[1]) {
		return false
	}
	i := slices.Index(rule, "-j")
	return i >= 0 && i+1 < len(rule) && ownChain(rule[i+1])
}

// run runs a command, its output in the error.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
