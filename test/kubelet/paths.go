package kubelet

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/types"
)

// Layout of the root directory:
//
//	<root>/lock                         held by the running kubelet
//	<root>/pv/<pv name>/                one per PersistentVolume: the data, 0700 postgres
//	<root>/pods/<uid>/home/patroni.yml  Patroni's configuration, 0600 postgres,
//	                                    written by pgloop instance
//	<root>/pods/<uid>/certs/            the container's /run/certs, 0700 postgres
//	<root>/pods/<uid>/kubeconfig        Patroni's credentials, 0600 postgres
//	<root>/pods/<uid>/patroni.log       Patroni's (and PostgreSQL's) output
//	<root>/pods/<uid>/environ            the container's environment, 0600
//	<root>/pods/<uid>/home/             $HOME of the instance, 0700 postgres
//	<root>/pods/<uid>/volumes/<name>/   emptyDir volumes, 0700 postgres;
//	                                    Secret and ConfigMap volumes, 0755
//	                                    root (volumes.go)
//
// and for a connection-pooler pod (pooler.go), in <root>/pods/<uid>/:
// pgbouncer.ini, auth_file.txt (the pooler user's password),
// pgbouncer.crt and pgbouncer.key (0600 postgres), and pgbouncer.log.
//
// and the instance's unix socket directory, /tmp/pgk-<8 hex digits of the
// uid>: socket paths must stay under 107 bytes, which a root under a test's
// temporary directory may not leave room for.
const (
	pvDir      = "pv"
	podsDir    = "pods"
	lockFile   = "lock"
	configFile = homeDir + "/patroni.yml"
	// certsDir is the container's /run/certs (certsMountPath).
	certsDir   = "certs"
	kubeconfig = "kubeconfig"
	logFile    = "patroni.log"
	// stacksFile is where Patroni dumps its threads' stacks on
	// stacksSignal (slowstop.go).
	stacksFile = "patroni-stacks.txt"
	// environFile is the container's resolved environment (Environ).
	environFile = "environ"
	homeDir     = "home"
	volumesDir  = "volumes"

	socketDirPrefix = "/tmp/pgk-"
)

func pvPath(root, pv string) string             { return filepath.Join(root, pvDir, pv) }
func podPath(root string, uid types.UID) string { return filepath.Join(root, podsDir, string(uid)) }

// socketDir is the unix socket directory of the pod with this uid.
func socketDir(uid types.UID) string {
	hex := strings.ReplaceAll(string(uid), "-", "")
	if len(hex) > 8 {
		hex = hex[:8]
	}
	return socketDirPrefix + hex
}

// checkTraversable returns an error naming the first ancestor of dir that
// the user uid/gid cannot enter: Patroni and PostgreSQL run as postgres and
// must reach their files under the root.
func checkTraversable(dir string, uid, gid uint32) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if !canEnter(fi, uid, gid) {
			return fmt.Errorf("directory %s (mode %v) is not traversable by user postgres, who runs Patroni and needs every parent of the root %s: choose a root under a 0755 directory, or chmod o+x %s", d, fi.Mode(), dir, d)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// canEnter reports whether uid/gid may search directory fi (x permission for
// owner, group or others, as the kernel picks).
func canEnter(fi fs.FileInfo, uid, gid uint32) bool {
	mode := fi.Mode().Perm()
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return mode&0o001 != 0
	}
	switch {
	case st.Uid == uid:
		return mode&0o100 != 0
	case st.Gid == gid:
		return mode&0o010 != 0
	default:
		return mode&0o001 != 0
	}
}

// mkdirOwned creates dir (and missing parents, owned by root) with mode perm
// and hands it to uid/gid.
func mkdirOwned(dir string, perm fs.FileMode, uid, gid uint32) error {
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	if err := os.Chmod(dir, perm); err != nil {
		return err
	}
	return os.Chown(dir, int(uid), int(gid))
}

// writeOwned writes a file readable by uid/gid only: it may hold passwords
// or a token.
func writeOwned(path string, data []byte, uid, gid uint32) error {
	tmp := path + ".tmp"
	_ = os.Remove(tmp) // WriteFile keeps the mode of a file that exists
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	if err := os.Chown(tmp, int(uid), int(gid)); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
