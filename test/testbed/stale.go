package testbed

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pgloop/pgloop/test/kubelet"
)

// dirPrefix starts the name of every plane's directory.
const dirPrefix = "pgloop-testbed-"

// ownerFile, in a plane's directory, names the process that owns it by pid and
// start time (a pid alone may have been reused). A plane whose owner was
// killed outright loses its processes (Pdeathsig) but not its directory; the
// next Start removes it.
const ownerFile = "owner"

// processIdentity returns "pid starttime" for pid, from /proc/<pid>/stat.
func processIdentity(pid int) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// The command name, in parentheses, may hold spaces: fields start after
	// its closing parenthesis, with the state as field 3.
	end := strings.LastIndexByte(string(data), ')')
	if end < 0 {
		return "", fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(data[end+1:]))
	const startTime = 22 - 3
	if len(fields) <= startTime {
		return "", fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	return fmt.Sprintf("%d %s", pid, fields[startTime]), nil
}

func writeOwner(dir string) error {
	id, err := processIdentity(os.Getpid())
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ownerFile), []byte(id+"\n"), 0o644)
}

// removeStaleDirs removes the directories under parent of planes whose owner
// is gone. Directories without an owner file (kept ones, others') stay.
func removeStaleDirs(parent string, log func(format string, args ...any)) {
	if parent == "" {
		parent = os.TempDir()
	}
	dirs, _ := filepath.Glob(filepath.Join(parent, dirPrefix+"*"))
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		owner := strings.TrimSpace(string(data))
		var pid int
		if _, err := fmt.Sscanf(owner, "%d", &pid); err != nil {
			continue
		}
		if id, err := processIdentity(pid); err == nil && id == owner {
			continue
		}
		// A killed plane's real node left mounts in there (volumes,
		// containers' root file systems): the next plane with a real node
		// restores the host, then removes the directory (recoverHost).
		if j, err := readJournal(); err == nil && j.Dir == dir {
			continue
		}
		// A killed plane's process kubelets died with it, but the
		// PostgreSQL servers they ran detach (Patroni setsid()s them).
		roots, _ := filepath.Glob(filepath.Join(dir, "kubelet", "*"))
		for _, root := range roots {
			if err := kubelet.Cleanup(root); err != nil {
				log("cleaning up %s: %v", root, err)
			}
		}
		// weed's gRPC sockets in /tmp, if the plane had an object store.
		removeStaleSockets(dir)
		if err := os.RemoveAll(dir); err == nil {
			log("removed %s, left by a killed plane", dir)
		}
	}
}
