package kubelet

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/types"
)

// dataDirDepth is how deep under a volume's directory a data directory is
// looked for: Spilo's layout puts it at pgroot/pgdata.
const dataDirDepth = 3

// Cleanup kills whatever an earlier kubelet of root left running: a kubelet
// killed outright takes its Patroni processes with it (Pdeathsig), but not
// the postmasters they setsid()ed. It SIGKILLs
//
//  1. every postmaster whose postmaster.pid lies under <root>/pv/*/ (a few
//     levels deep), after checking its command line names that data
//     directory, with its children;
//  2. every other process whose working directory is under root or whose
//     command line mentions root (Patroni, and backends of a postmaster
//     already gone), except this process and its ancestors;
//
// waits until they are gone, and removes the socket directories of the pods
// under root. SIGKILL ends processes stopped by FreezeAnnotation too: none
// needs a SIGCONT first. The kubelet calls it at start and after its last instance has
// stopped; the plane calls it before removing a stale directory. A missing
// root is not an error.
func Cleanup(root string) error {
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	spare := selfAndAncestors()
	var victims []int
	for _, dir := range postmasterDirs(filepath.Join(root, pvDir), dataDirDepth+1) {
		pid, dataDir, err := readPostmasterPID(dir)
		if err != nil || pid == 0 || spare[pid] || !isPostmaster(cmdline(pid), dataDir) {
			continue
		}
		for _, p := range append(descendants(pid), pid) {
			_ = syscall.Kill(p, syscall.SIGKILL)
			victims = append(victims, p)
		}
	}
	for _, pid := range processesUnder(root) {
		if spare[pid] {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		victims = append(victims, pid)
	}
	var errs []error
	if left := waitGone(victims, goneTimeout); len(left) > 0 {
		errs = append(errs, fmt.Errorf("processes %v under %s survived SIGKILL", left, root))
	}
	pods, _ := os.ReadDir(filepath.Join(root, podsDir))
	for _, p := range pods {
		if err := os.RemoveAll(socketDir(types.UID(p.Name()))); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// postmasterDirs returns the directories holding a postmaster.pid under
// dir, at most depth levels below it.
func postmasterDirs(dir string, depth int) []string {
	var dirs []string
	base := strings.Count(filepath.Clean(dir), string(filepath.Separator))
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: skip
		}
		if d.IsDir() && strings.Count(path, string(filepath.Separator))-base > depth {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == postmasterPIDFile {
			dirs = append(dirs, filepath.Dir(path))
		}
		return nil
	})
	return dirs
}

// processesUnder returns the pids whose working directory is under root or
// whose command line refers to root.
func processesUnder(root string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		if refersTo(cwd, root) || slices.ContainsFunc(cmdline(pid), func(arg string) bool { return refersTo(arg, root) }) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// refersTo reports whether s contains the path root as a whole path: root
// itself or something under it, not /tmp/x2 for /tmp/x.
func refersTo(s, root string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], root)
		if j < 0 {
			return false
		}
		end := i + j + len(root)
		if end == len(s) || s[end] == '/' {
			return true
		}
		i = end
	}
}

// selfAndAncestors returns this process and its ancestors, whose command
// lines may well mention the root (`pgkubelet --root ...`).
func selfAndAncestors() map[int]bool {
	out := map[int]bool{}
	for pid := os.Getpid(); pid > 1 && !out[pid]; {
		out[pid] = true
		pid = parentOf(pid)
	}
	return out
}

// parentOf returns the parent pid of pid from /proc, 0 if unknown.
func parentOf(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	end := strings.LastIndexByte(string(data), ')')
	if end < 0 {
		return 0
	}
	fields := strings.Fields(string(data[end+1:]))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}
