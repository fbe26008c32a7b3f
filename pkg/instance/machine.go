package instance

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Machine is what the start-up program knows of where it runs, beyond the
// container's environment. In pgloop's image Detect fills it; the test
// plane's process kubelet, which runs pods as processes of its own host
// rather than in containers, gives the differences as flags (Mounts,
// ListenOnPodIP, SocketDir, Kubeconfig, SharedBuffers).
type Machine struct {
	// PodIP is the pod's address: POD_IP.
	PodIP string
	// Name is Patroni's member name: the container's hostname (the pod's
	// name in a StatefulSet).
	Name string
	// MemoryMB is the container's memory (its cgroup's limit, at most the
	// host's), which sizes max_connections and shared_buffers as Spilo
	// does.
	MemoryMB float64
	// BinDir is PostgreSQL's bin directory; empty picks the one of
	// PGVERSION under /usr/lib/postgresql.
	BinDir string
	// SocketDir is PostgreSQL's socket directory, where pgpass goes too:
	// /run/postgresql, Debian's and Spilo's.
	SocketDir string
	// Mounts maps container paths to paths of this machine, for a process
	// that runs outside a container (the longest mount path holding a
	// path wins); nil in a container, where every path is itself.
	Mounts map[string]string
	// ListenOnPodIP binds PostgreSQL and the REST API to PodIP only
	// rather than to every address: outside a container, every pod's
	// addresses are the host's.
	ListenOnPodIP bool
	// Kubeconfig and KubeContext point Patroni at the API server outside
	// a cluster; empty in a pod, where Patroni uses its service account.
	Kubeconfig, KubeContext string
	// SharedBuffers replaces Spilo's shared_buffers (a fifth of
	// MemoryMB) unless SPILO_CONFIGURATION sets it: many instances on one
	// test machine run on 16MB.
	SharedBuffers string
}

// DefaultSocketDir is PostgreSQL's socket directory in Debian's packages
// and in Spilo's image, where Spilo also keeps pgpass.
const DefaultSocketDir = "/run/postgresql"

// Detect returns the Machine of a container whose environment is env.
func Detect(env map[string]string) Machine {
	name, _ := os.Hostname()
	return Machine{
		PodIP:     env["POD_IP"],
		Name:      name,
		MemoryMB:  containerMemoryMB(),
		SocketDir: DefaultSocketDir,
	}
}

// containerMemoryMB is the memory limit of this process's cgroup (v2, else
// v1), at most the host's memory, in MiB.
func containerMemoryMB() float64 {
	var info unix.Sysinfo_t
	mem := math.MaxFloat64
	if unix.Sysinfo(&info) == nil {
		mem = float64(info.Totalram) * float64(info.Unit) / 1048576
	}
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64); err == nil && v > 0 {
			mem = min(mem, v/1048576)
		}
		break
	}
	return mem
}

func (m Machine) validate() error {
	ip, err := netip.ParseAddr(m.PodIP)
	switch {
	case m.PodIP == "":
		return errors.New("no pod IP: POD_IP is not set (pgloop's pods set it from status.podIP)")
	case err != nil:
		return fmt.Errorf("pod IP %q: %w", m.PodIP, err)
	case ip.IsUnspecified():
		return fmt.Errorf("pod IP %s is the wildcard address", m.PodIP)
	case m.Mounts != nil && (ip == netip.MustParseAddr("127.0.0.1") || ip == netip.IPv6Loopback()):
		// Outside a container, connections between pods arrive from
		// 127.0.0.1: it must stay nobody's pod IP.
		return fmt.Errorf("pod IP %s is the host's own loopback address", m.PodIP)
	case m.Name == "":
		return errors.New("no member name (the container's hostname)")
	case m.SocketDir == "" || !filepath.IsAbs(m.SocketDir):
		return fmt.Errorf("socket directory %q is not an absolute path", m.SocketDir)
	case len(m.SocketDir)+len("/.s.PGSQL.65535") > 107:
		return fmt.Errorf("socket directory %s is too long for a unix socket path (107 bytes)", m.SocketDir)
	case (m.Kubeconfig == "") != (m.KubeContext == ""):
		return errors.New("a kubeconfig and its context name go together (Patroni 3.0 needs both out of a pod, neither in one)")
	}
	for mp, dir := range m.Mounts {
		if !path.IsAbs(mp) || !filepath.IsAbs(dir) {
			return fmt.Errorf("mount %s -> %s: both must be absolute", mp, dir)
		}
	}
	return nil
}

// local maps an absolute container path to this machine: itself in a
// container, else through the mount that holds it (the longest mount path
// that is a prefix).
func (m Machine) local(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("%q is not an absolute path", p)
	}
	if m.Mounts == nil {
		return path.Clean(p), nil
	}
	p = path.Clean(p)
	best := ""
	for mp := range m.Mounts {
		mp = path.Clean(mp)
		if (p == mp || strings.HasPrefix(p, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best = mp
		}
	}
	if best == "" {
		return "", fmt.Errorf("%s is on no mounted volume", p)
	}
	dir := m.Mounts[best]
	if dir == "" {
		dir = m.Mounts[best+"/"]
	}
	return filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(p, best))), nil
}

var (
	// spiloBinDir matches Spilo's binary directories, by major version.
	spiloBinDir = regexp.MustCompile(`^/usr/lib/postgresql/([0-9.]+)/bin/?$`)
	// postgresVersion matches the output of postgres --version.
	postgresVersion = regexp.MustCompile(`^\S+ \S+ (\d+)(?:\.(\d+))?`)
)

// binVersions caches binVersion.
var binVersions sync.Map

// binVersion returns the major version of the postgres binary in binDir,
// as Spilo's get_binary_version reads it ("15", or "9.6" before 10).
func binVersion(binDir string) (string, error) {
	if v, ok := binVersions.Load(binDir); ok {
		return v.(string), nil
	}
	out, err := exec.Command(filepath.Join(binDir, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("while reading the version of %s/postgres: %w", binDir, err)
	}
	m := postgresVersion.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("%s/postgres --version: unexpected output %q", binDir, out)
	}
	v := string(m[1])
	if major, _ := strconv.Atoi(v); major < 10 {
		v += "." + string(m[2])
	}
	binVersions.Store(binDir, v)
	return v, nil
}

// installedLocale reports whether this machine has the locale (initdb
// fails on a missing one). Tests replace it.
var installedLocale = func(name string) bool { return machineLocales()[normalizeLocale(name)] }

var machineLocales = sync.OnceValue(func() map[string]bool {
	out, _ := exec.Command("locale", "-a").Output()
	have := map[string]bool{"c.utf8": true} // glibc 2.35+ has it built in
	for l := range strings.FieldsSeq(string(out)) {
		have[normalizeLocale(l)] = true
	}
	return have
})

// normalizeLocale folds the spellings of a locale name: en_US.UTF-8 and
// en_US.utf8 are the same locale.
func normalizeLocale(name string) string {
	lang, codeset, ok := strings.Cut(name, ".")
	if !ok {
		return strings.ToLower(lang)
	}
	return strings.ToLower(lang) + "." + strings.ReplaceAll(strings.ToLower(codeset), "-", "")
}
