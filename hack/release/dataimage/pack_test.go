package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// tree makes a small root file system under dir: files, a setuid one, a
// symlink, a hard link, a device directory with something in it.
func tree(t *testing.T, dir string) {
	t.Helper()
	for _, d := range []string{"etc", "usr/bin", "var/lib/postgresql", "dev/pts"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{"etc/passwd": "postgres:x:101:103::/home/postgres:/bin/bash\n", "usr/bin/su": "su", "usr/bin/a": "same", "dev/pts/x": "no"}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "usr/bin/su"), 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "usr/bin/a"), filepath.Join(dir, "usr/bin/b")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a", filepath.Join(dir, "usr/bin/c")); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(dir, "etc/passwd"), old, old); err != nil {
		t.Fatal(err)
	}
}

// TestPackDirDeterministic packs the same tree made twice, at different
// times, in different directories: the layers are the same bytes, hence
// the same digest. It needs no network and no root.
func TestPackDirDeterministic(t *testing.T) {
	epoch := time.Date(2023, 6, 10, 0, 0, 0, 0, time.UTC)
	var digests, diffIDs []string
	for i := range 2 {
		dir := t.TempDir()
		since := time.Now().Truncate(time.Second)
		tree(t, dir)
		if i == 1 {
			// The second tree is made a second later: what the build
			// made still gets the epoch.
			time.Sleep(1100 * time.Millisecond)
			if err := os.WriteFile(filepath.Join(dir, "usr/bin/su"), []byte("su"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		digest, diffID, err := gzipLayer(dir, packOptions{Epoch: epoch, Since: since, Skip: []string{"dev"}}, filepath.Join(t.TempDir(), "layer.tar.gz"))
		if err != nil {
			t.Fatal(err)
		}
		digests, diffIDs = append(digests, digest), append(diffIDs, diffID)
	}
	if digests[0] != digests[1] || diffIDs[0] != diffIDs[1] {
		t.Errorf("two packs of the same tree: digests %v, diff IDs %v", digests, diffIDs)
	}
}

// TestPackDirEntries checks what packDir writes: sorted names, owners
// from the tree, mtimes (the package's own kept, the build's the epoch),
// modes with setuid, links, and no contents of skipped directories.
func TestPackDirEntries(t *testing.T) {
	dir := t.TempDir()
	epoch := time.Date(2023, 6, 10, 0, 0, 0, 0, time.UTC)
	since := time.Now().Truncate(time.Second)
	tree(t, dir)
	r, w := io.Pipe()
	go func() {
		w.CloseWithError(packDir(dir, packOptions{Epoch: epoch, Since: since, Skip: []string{"dev"}}, w))
	}()
	tr := tar.NewReader(r)
	var names []string
	byName := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		byName[h.Name] = h
	}
	want := []string{"dev/", "etc/", "etc/passwd", "usr/", "usr/bin/", "usr/bin/a", "usr/bin/b", "usr/bin/c", "usr/bin/su", "var/", "var/lib/", "var/lib/postgresql/"}
	if !slices.Equal(names, want) {
		t.Fatalf("entries %v, want %v", names, want)
	}
	uid, gid := os.Getuid(), os.Getgid()
	for name, h := range byName {
		if h.Uid != uid || h.Gid != gid || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner %d:%d (%q:%q), want %d:%d and no names", name, h.Uid, h.Gid, h.Uname, h.Gname, uid, gid)
		}
		wantTime := epoch
		if name == "etc/passwd" {
			wantTime = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
		}
		if !h.ModTime.Equal(wantTime) {
			t.Errorf("%s: mtime %s, want %s", name, h.ModTime.UTC(), wantTime)
		}
	}
	if h := byName["usr/bin/su"]; h.Mode != 0o4755 {
		t.Errorf("su's mode %o, want 4755", h.Mode)
	}
	if h := byName["usr/bin/b"]; h.Typeflag != tar.TypeLink || h.Linkname != "usr/bin/a" {
		t.Errorf("b: type %c link %q, want a hard link to usr/bin/a", h.Typeflag, h.Linkname)
	}
	if h := byName["usr/bin/c"]; h.Typeflag != tar.TypeSymlink || h.Linkname != "a" {
		t.Errorf("c: type %c link %q, want a symlink to a", h.Typeflag, h.Linkname)
	}
}

func TestInstalled(t *testing.T) {
	status := strings.Join([]string{
		"Package: postgresql-15\nStatus: install ok installed\nVersion: 15.20-0+deb12u1\n",
		"Package: gone\nStatus: deinstall ok config-files\nVersion: 1\n",
		"Package: adduser\nStatus: install ok installed\nPriority: important\nVersion: 3.134\nDescription: add\n and remove users\n",
	}, "\n")
	got := installed([]byte(status))
	want := []string{"adduser=3.134", "postgresql-15=15.20-0+deb12u1"}
	if !slices.Equal(got, want) {
		t.Errorf("installed %v, want %v", got, want)
	}
	k := kinds["instance"]
	pkgs := []string{"patroni=3.0.2-1", "pgbackrest=2.45-1", "postgresql-15=15.20-0+deb12u1", "postgresql-client-15=15.20-0+deb12u1"}
	if got, want := k.mainVersions(pkgs), "postgresql-15=15.20-0+deb12u1,patroni=3.0.2-1,pgbackrest=2.45-1"; got != want {
		t.Errorf("label %q, want %q", got, want)
	}
}

// TestCacheKey: a new version of any package, or another hook, is
// another key; the same inputs the same key.
func TestCacheKey(t *testing.T) {
	k := kinds["instance"]
	a := cacheKey(k, []string{"libc6=2.36-9+deb12u13", "postgresql-15=15.20-0+deb12u1"})
	if b := cacheKey(k, []string{"libc6=2.36-9+deb12u13", "postgresql-15=15.20-0+deb12u1"}); a != b {
		t.Errorf("same inputs, keys %s and %s", a, b)
	}
	if b := cacheKey(k, []string{"libc6=2.36-9+deb12u14", "postgresql-15=15.20-0+deb12u1"}); a == b {
		t.Errorf("a new libc6 keeps the key %s", a)
	}
	if b := cacheKey(kinds["pooler"], []string{"libc6=2.36-9+deb12u13", "postgresql-15=15.20-0+deb12u1"}); a == b {
		t.Errorf("the pooler's key is the instance's")
	}
	if !strings.HasPrefix(a, "instance-bookworm-") {
		t.Errorf("key %s", a)
	}
}
