package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// packOptions say how a root file system becomes a layer's tar.
type packOptions struct {
	// Epoch is the mtime of every entry changed at or after Since: what
	// the build made or touched (directories, users, maintainer scripts'
	// files, Python's byte code). Older entries, the packages' own files,
	// keep theirs, which come from the .deb and so from the version; their
	// byte code's recorded source mtimes stay valid.
	Epoch, Since time.Time
	// Skip are the directories whose contents are left out (the
	// directories stay): dev, proc, sys, filled by the runtime.
	Skip []string
}

// packDir writes the tree at root to w as a tar stream the same way for
// the same tree: entries in lexical order of their paths, numeric owners
// as the tree has them and no user or group names, mtimes per o, no access
// or change times, hard links as links to the first name. Device nodes,
// sockets and fifos are left out.
func packDir(root string, o packOptions, w io.Writer) error {
	tw := tar.NewWriter(w)
	links := map[[2]uint64]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if dir := filepath.ToSlash(filepath.Dir(rel)); slices.ContainsFunc(o.Skip, func(s string) bool {
			return dir == s || strings.HasPrefix(dir, s+"/")
		}) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat", path)
		}
		mtime := time.Unix(st.Mtim.Sec, 0)
		if !mtime.Before(o.Since) {
			mtime = o.Epoch
		}
		h := &tar.Header{Name: name, Mode: tarMode(fi.Mode()), Uid: int(st.Uid), Gid: int(st.Gid), ModTime: mtime, Format: tar.FormatPAX}
		var body *os.File
		switch m := fi.Mode(); {
		case m.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
		case m&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			h.Typeflag, h.Linkname = tar.TypeSymlink, target
		case m.IsRegular():
			key := [2]uint64{uint64(st.Dev), st.Ino}
			if first, ok := links[key]; ok && st.Nlink > 1 {
				h.Typeflag, h.Linkname = tar.TypeLink, first
				break
			}
			links[key] = name
			h.Typeflag, h.Size = tar.TypeReg, fi.Size()
			if body, err = os.Open(path); err != nil {
				return err
			}
			defer body.Close()
		default:
			return nil
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if body != nil {
			if _, err := io.Copy(tw, body); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// tarMode is fs.FileMode's permissions and setuid, setgid and sticky bits
// as tar's mode field has them.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// gzipLayer packs root as packDir does into a gzip file at out (the
// layer's blob, as the registry stores it) and returns the sha256 of the
// compressed file (the layer's digest) and of the tar (its diff ID).
func gzipLayer(root string, o packOptions, out string) (digest, diffID string, err error) {
	f, err := os.Create(out)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	compressed, uncompressed := sha256.New(), sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(f, compressed), 1<<20)
	zw, err := gzip.NewWriterLevel(bw, gzip.DefaultCompression)
	if err != nil {
		return "", "", err
	}
	if err := packDir(root, o, io.MultiWriter(zw, uncompressed)); err != nil {
		return "", "", err
	}
	if err := zw.Close(); err != nil {
		return "", "", err
	}
	if err := bw.Flush(); err != nil {
		return "", "", err
	}
	if err := f.Close(); err != nil {
		return "", "", err
	}
	return "sha256:" + hex.EncodeToString(compressed.Sum(nil)), "sha256:" + hex.EncodeToString(uncompressed.Sum(nil)), nil
}

// installed reads a dpkg status file (var/lib/dpkg/status) and returns
// name=version of every package installed, sorted: what the image is
// made of, for packages.txt and the labels.
func installed(status []byte) []string {
	var out []string
	for _, para := range bytes.Split(status, []byte("\n\n")) {
		var pkg, version, state string
		for _, line := range strings.Split(string(para), "\n") {
			k, v, ok := strings.Cut(line, ": ")
			if !ok {
				continue
			}
			switch k {
			case "Package":
				pkg = v
			case "Version":
				version = v
			case "Status":
				state = v
			}
		}
		if pkg != "" && state == "install ok installed" {
			out = append(out, pkg+"="+version)
		}
	}
	slices.Sort(out)
	return out
}
