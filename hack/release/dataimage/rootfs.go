package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// essentialHook runs after mmdebstrap installed the Essential packages,
// before the others: postgresql-15's postinst makes no cluster main.
const essentialHook = `mkdir -p "$1/etc/postgresql-common/createcluster.d" && ` +
	`printf '# pgloop: Patroni initialises the data directory.\ncreate_main_cluster = false\n' ` +
	`>"$1/etc/postgresql-common/createcluster.d/pgloop.conf"`

// packagesFile lists name=version of every package in the image.
const packagesFile = "usr/share/pgloop/packages.txt"

// cachedLayer is a root file system's layer in the cache, a directory
// named by its key holding layer.tar.gz and layer.json (this).
type cachedLayer struct {
	Key      string   `json:"key"`
	Digest   string   `json:"digest"`
	DiffID   string   `json:"diffID"`
	Size     int64    `json:"size"`     // the gzip file's
	TarSize  int64    `json:"tarSize"`  // the uncompressed tar's
	Seconds  float64  `json:"seconds"`  // what building it took
	Packages []string `json:"packages"` // name=version, as packages.txt
	dir      string
}

func (c cachedLayer) blob() string { return filepath.Join(c.dir, "layer.tar.gz") }

// rootfsLayer returns k's root file system layer for the versions
// Debian's mirrors serve now: from the cache under cacheDir when its key
// is there, else built with mmdebstrap (as root) and stored there. Older
// layers of the same kind are removed from the cache.
func rootfsLayer(cacheDir string, k kind, log func(string, ...any)) (cachedLayer, error) {
	// One user of the cache at a time on the machine (two make images, or
	// CI beside a user): apt's lists are shared, and the second build of a
	// key waits, then finds the first's layer.
	lock, err := os.OpenFile(filepath.Join(cacheDir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return cachedLayer{}, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return cachedLayer{}, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	a := apt{dir: filepath.Join(cacheDir, "apt")}
	if err := a.update(); err != nil {
		// Offline: the lists of the last update still say what the cache
		// may hold.
		if lists, _ := filepath.Glob(filepath.Join(a.dir, "lists", "*_Packages*")); len(lists) == 0 {
			return cachedLayer{}, err
		}
		log("warning: %v; resolving with the lists of the last update", err)
	}
	versions, err := a.resolve(k.Packages)
	if err != nil {
		return cachedLayer{}, err
	}
	key := cacheKey(k, versions)
	dir := filepath.Join(cacheDir, key)
	if c, err := readCached(dir); err == nil {
		log("%s: rootfs layer %s from the cache (%s)", k.Name, c.Digest, dir)
		return c, nil
	}
	log("%s: building the rootfs of %d packages (%s) with mmdebstrap", k.Name, len(versions), key)
	start := time.Now()
	tmp, err := os.MkdirTemp(cacheDir, key+".tmp-")
	if err != nil {
		return cachedLayer{}, err
	}
	defer os.RemoveAll(tmp)
	root := filepath.Join(tmp, "rootfs")
	if err := mmdebstrap(k, root, tmp); err != nil {
		return cachedLayer{}, err
	}
	status, err := os.ReadFile(filepath.Join(root, "var/lib/dpkg/status"))
	if err != nil {
		return cachedLayer{}, err
	}
	pkgs := installed(status)
	if !slices.Equal(pkgs, versions) {
		log("warning: %s: installed packages differ from the resolved ones (the key holds the resolved ones)", k.Name)
	}
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(packagesFile)), 0o755); err != nil {
		return cachedLayer{}, err
	}
	if err := os.WriteFile(filepath.Join(root, packagesFile), []byte(strings.Join(pkgs, "\n")+"\n"), 0o644); err != nil {
		return cachedLayer{}, err
	}
	entry := filepath.Join(tmp, "entry")
	if err := os.Mkdir(entry, 0o755); err != nil {
		return cachedLayer{}, err
	}
	c := cachedLayer{Key: key, Packages: pkgs, dir: entry}
	// Everything the build made is newer than its start, to the second.
	since := start.Truncate(time.Second)
	c.Digest, c.DiffID, err = gzipLayer(root, packOptions{Epoch: rootfsEpoch, Since: since, Skip: []string{"dev", "proc", "sys"}}, c.blob())
	if err != nil {
		return cachedLayer{}, fmt.Errorf("pack %s: %w", root, err)
	}
	fi, err := os.Stat(c.blob())
	if err != nil {
		return cachedLayer{}, err
	}
	c.Size = fi.Size()
	if c.TarSize, err = treeTarSize(root); err != nil {
		return cachedLayer{}, err
	}
	c.Seconds = time.Since(start).Seconds()
	meta, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return cachedLayer{}, err
	}
	if err := os.WriteFile(filepath.Join(entry, "layer.json"), meta, 0o644); err != nil {
		return cachedLayer{}, err
	}
	if err := os.Rename(entry, dir); err != nil {
		// Made meanwhile by a build that took no lock: the same key, the
		// same layer.
		if c, cerr := readCached(dir); cerr == nil {
			return c, nil
		}
		return cachedLayer{}, err
	}
	c.dir = dir
	log("%s: rootfs layer %s, %d MB gzipped (%d MB of tar) in %.0f s", k.Name, c.Digest, c.Size>>20, c.TarSize>>20, c.Seconds)
	pruneCache(cacheDir, k, key, log)
	return c, nil
}

func readCached(dir string) (cachedLayer, error) {
	meta, err := os.ReadFile(filepath.Join(dir, "layer.json"))
	if err != nil {
		return cachedLayer{}, err
	}
	var c cachedLayer
	if err := json.Unmarshal(meta, &c); err != nil {
		return cachedLayer{}, err
	}
	c.dir = dir
	if _, err := os.Stat(c.blob()); err != nil {
		return cachedLayer{}, err
	}
	return c, nil
}

// pruneCache removes k's layers other than key's: a new Debian version
// replaces the old one.
func pruneCache(cacheDir string, k kind, key string, log func(string, ...any)) {
	old, _ := filepath.Glob(filepath.Join(cacheDir, k.Name+"-"+suite+"-*"))
	for _, dir := range old {
		if filepath.Base(dir) != key {
			log("%s: removing %s from the cache", k.Name, dir)
			os.RemoveAll(dir)
		}
	}
}

// treeTarSize is the size of the tar the layer holds, from its directory
// (du's apparent size would count the directories' blocks).
func treeTarSize(root string) (int64, error) {
	out, err := exec.Command("du", "-sb", root).Output()
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return 0, fmt.Errorf("du -sb %s: %q", root, out)
	}
	return strconv.ParseInt(f[0], 10, 64)
}

// mmdebstrap makes k's root file system at root: the apt variant (the
// Essential packages and apt) with k's packages, no recommends, no
// documentation, manual pages or translations, apt's lists and caches
// removed, then customize.sh. Files go in scratch.
func mmdebstrap(k kind, root, scratch string) error {
	hook := filepath.Join(scratch, "customize.sh")
	if err := os.WriteFile(hook, []byte(customizeScript), 0o755); err != nil {
		return err
	}
	args := []string{"--mode=root", "--variant=apt", "--format=directory", "--skip=cleanup/run",
		"--aptopt=APT::Install-Recommends \"false\"", "--aptopt=APT::Install-Suggests \"false\""}
	for _, o := range dpkgOptions {
		args = append(args, "--dpkgopt="+o)
	}
	args = append(args, "--essential-hook="+essentialHook, "--customize-hook=sh "+hook+` "$1"`,
		"--include="+strings.Join(k.Packages, ","), suite, root)
	args = append(args, mirrors()...)
	cmd := exec.Command("mmdebstrap", args...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("SOURCE_DATE_EPOCH=%d", rootfsEpoch.Unix()), "TMPDIR="+scratch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mmdebstrap: %w", err)
	}
	return nil
}
