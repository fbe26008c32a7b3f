package main

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// customizeScript is mmdebstrap's customize hook; its text is part of the
// cache key, so changing it rebuilds the root file systems.
//
//go:embed customize.sh
var customizeScript string

// keyring is the Debian archive's, which the host's apt uses too.
const keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// mirrors are the host's (/etc/apt/sources.list.d/debian.sources): the
// suite, its updates and its security updates.
func mirrors() []string {
	return []string{
		"deb [signed-by=" + keyring + "] http://deb.debian.org/debian " + suite + " main",
		"deb [signed-by=" + keyring + "] http://deb.debian.org/debian " + suite + "-updates main",
		"deb [signed-by=" + keyring + "] http://deb.debian.org/debian-security " + suite + "-security main",
	}
}

// dpkgOptions leave out documentation (but for copyright files), manual
// pages and translations; lintian overrides too.
var dpkgOptions = []string{
	"path-exclude=/usr/share/doc/*",
	"path-include=/usr/share/doc/*/copyright",
	"path-exclude=/usr/share/man/*",
	"path-exclude=/usr/share/info/*",
	"path-exclude=/usr/share/locale/*",
	"path-exclude=/usr/share/lintian/*",
}

// apt is an apt of its own under dir: its own sources list (mirrors), its
// own lists and an empty dpkg status, so that it answers what a new root
// file system would get, whatever the host has installed or configured.
type apt struct{ dir string }

// The options go into a configuration file of its own, APT_CONFIG, which
// apt reads before the host's /etc/apt/apt.conf.d (options on the command
// line come after it, too late for Dir::Etc::Parts).
func (a apt) options() []string {
	d := a.dir
	return []string{
		"-o", "Dir::State=" + d, "-o", "Dir::State::Lists=" + filepath.Join(d, "lists"),
		"-o", "Dir::State::status=" + filepath.Join(d, "status"), "-o", "Dir::Cache=" + filepath.Join(d, "cache"),
		"-o", "Dir::Etc=" + filepath.Join(d, "etc"), "-o", "Dir::Etc::SourceList=" + filepath.Join(d, "etc", "sources.list"),
		"-o", "Dir::Etc::SourceParts=" + filepath.Join(d, "etc", "sources.list.d"),
		"-o", "Dir::Etc::Parts=" + filepath.Join(d, "etc", "apt.conf.d"),
		"-o", "Dir::Etc::PreferencesParts=" + filepath.Join(d, "etc", "preferences.d"),
		"-o", "APT::Architecture=amd64", "-o", "APT::Architectures::=amd64",
		"-o", "APT::Install-Recommends=false", "-o", "APT::Install-Suggests=false",
		"-o", "Debug::NoLocking=1",
	}
}

// command is apt-get with args, configured by a's file alone.
func (a apt) command(args ...string) *exec.Cmd {
	var conf strings.Builder
	opts := a.options()
	for i := 1; i < len(opts); i += 2 {
		k, v, _ := strings.Cut(opts[i], "=")
		if strings.HasSuffix(k, "::") {
			fmt.Fprintf(&conf, "%s { %q; };\n", strings.TrimSuffix(k, "::"), v)
			continue
		}
		fmt.Fprintf(&conf, "%s %q;\n", k, v)
	}
	path := filepath.Join(a.dir, "apt.conf")
	cmd := exec.Command("apt-get", args...)
	cmd.Env = append(os.Environ(), "APT_CONFIG="+path)
	if err := os.WriteFile(path, []byte(conf.String()), 0o644); err != nil {
		// apt-get then says it cannot read it.
		cmd.Env = append(cmd.Env, "PGLOOP_APT_CONFIG_ERROR="+err.Error())
	}
	return cmd
}

// update makes the directories and fetches the lists (only what changed:
// apt asks with If-Modified-Since).
func (a apt) update() error {
	for _, sub := range []string{"lists/partial", "cache/archives/partial", "etc/apt.conf.d", "etc/preferences.d", "etc/sources.list.d"} {
		if err := os.MkdirAll(filepath.Join(a.dir, sub), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(a.dir, "status"), nil, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(a.dir, "etc", "sources.list"), []byte(strings.Join(mirrors(), "\n")+"\n"), 0o644); err != nil {
		return err
	}
	cmd := a.command("-q", "update")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("apt-get update (%s): %w", a.dir, err)
	}
	return nil
}

var instLine = regexp.MustCompile(`^Inst (\S+) \((\S+) `)

// resolve returns name=version, sorted, of every package a root file
// system of mmdebstrap's apt variant with packages would have: the
// Essential ones, apt, packages, and their dependencies without
// recommends, as apt-get --simulate installs them on an empty system.
func (a apt) resolve(packages []string) ([]string, error) {
	out, err := a.command(append([]string{"--simulate", "install", "?essential", "apt"}, packages...)...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		return nil, fmt.Errorf("apt-get --simulate install: %w\n%s", err, stderr)
	}
	var versions []string
	for _, line := range strings.Split(string(out), "\n") {
		if m := instLine.FindStringSubmatch(line); m != nil {
			versions = append(versions, m[1]+"="+m[2])
		}
	}
	if len(versions) == 0 {
		return nil, fmt.Errorf("apt-get --simulate install installs nothing:\n%s", out)
	}
	slices.Sort(versions)
	return versions, nil
}

// cacheKey names a root file system's layer in the cache: the suite, the
// mirrors, the packages asked for, the versions they resolve to, how
// mmdebstrap is run (dpkg's options, the hook, the epoch) and the image's
// ids. A version Debian publishes changes the resolved versions, hence the
// key.
func cacheKey(k kind, versions []string) string {
	h := sha256.New()
	fmt.Fprintf(h, "suite %s\nmirrors %q\npackages %q\ndpkg %q\nepoch %d\nids %d:%d\n",
		suite, mirrors(), k.Packages, dpkgOptions, rootfsEpoch.Unix(), postgresUID, postgresGID)
	fmt.Fprintf(h, "essential %s\ncustomize %s\nversions\n%s\n", essentialHook, customizeScript, strings.Join(versions, "\n"))
	return k.Name + "-" + suite + "-" + hex.EncodeToString(h.Sum(nil))[:20]
}
