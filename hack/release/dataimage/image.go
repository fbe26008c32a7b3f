package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// options say what goes into an image besides its root file system.
type options struct {
	Binary                    string // pgloop for linux/amd64
	Version, Revision, Source string
	// Tag is the image's tag (its ref.name in the archive).
	Tag string
	// Name, when set, is the image's whole reference (repository and
	// tag), written as containerd's image name annotation: `ctr images
	// import` names the image by it, where ref.name alone is a tag.
	Name string
	// Created is the image's creation time and the mtime of the second
	// layer's files (SOURCE_DATE_EPOCH: the commit's time).
	Created time.Time
}

const (
	refName = "org.opencontainers.image.ref.name"
	// containerdName is the annotation containerd's importer names an
	// image by.
	containerdName = "io.containerd.image.name"
)

// tag is the image's tag, and its name in the OCI layout's index.json.
func (k kind) tag(version string) string { return k.Tag + version }

// mainVersions is the label dev.pgloop.packages: name=version of k's
// main packages, comma-separated, in k.Main's order.
func (k kind) mainVersions(pkgs []string) string {
	var out []string
	for _, m := range k.Main {
		for _, p := range pkgs {
			if strings.HasPrefix(p, m+"=") {
				out = append(out, p)
			}
		}
	}
	return strings.Join(out, ",")
}

func (k kind) labels(o options, pkgs []string) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       k.Title,
		"org.opencontainers.image.description": k.Description,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.created":     o.Created.Format(time.RFC3339),
		"org.opencontainers.image.base.name":   "debian:" + suite,
		labelPackages:                          k.mainVersions(pkgs),
	}
	if o.Revision != "" {
		l["org.opencontainers.image.revision"] = o.Revision
	}
	return l
}

// buildImage assembles k's image for linux/amd64: the cached root file
// system layer, then a small layer of pgloop's binary and its version,
// so that a new pgloop build reuses the first.
func buildImage(k kind, rootfs cachedLayer, o options) (v1.Image, error) {
	base, err := tarball.LayerFromFile(rootfs.blob(), tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, err
	}
	top, err := binaryLayer(bin, o)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, base, top); err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: o.Created}
	labels := k.labels(o, rootfs.Packages)
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", postgresUID, postgresGID),
		Entrypoint: k.Entrypoint,
		WorkingDir: pgHome,
		Env:        k.Env,
		Labels:     labels,
	}
	cf.History = []v1.History{
		{Created: v1.Time{Time: rootfsEpoch}, CreatedBy: fmt.Sprintf("mmdebstrap --variant=apt --include=%s %s", strings.Join(k.Packages, ","), suite), Comment: rootfs.Key},
		{Created: v1.Time{Time: o.Created}, CreatedBy: "pgloop " + o.Version + " at /" + binPath},
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

// binaryLayer is the second layer: /usr/local/bin/pgloop and
// /usr/share/pgloop/version, root's, with the mtime o.Created. Its
// directories are as the root file system has them (root, 0755).
func binaryLayer(bin []byte, o options) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	version := fmt.Sprintf("version=%s\nrevision=%s\n", o.Version, o.Revision)
	for _, e := range []struct {
		name string
		mode int64
		body []byte
	}{
		{"usr/", 0o755, nil}, {"usr/local/", 0o755, nil}, {"usr/local/bin/", 0o755, nil},
		{binPath, 0o755, bin},
		{"usr/share/", 0o755, nil}, {"usr/share/pgloop/", 0o755, nil},
		{"usr/share/pgloop/version", 0o644, []byte(version)},
	} {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: o.Created, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(e.body))}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// writeArchive writes img as an image index of one platform, linux/amd64,
// named tag in index.json, as an OCI layout in the tar file out (an
// oci-archive, as `make image` writes the operator's).
func writeArchive(img v1.Image, tag, name string, labels map[string]string, out string, at time.Time) (v1.Hash, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
		Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}})
	idx = mutate.Annotations(idx, labels).(v1.ImageIndex)
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	dir, err := os.MkdirTemp(filepath.Dir(out), ".pgloop-image-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("write the OCI layout: %w", err)
	}
	ann := map[string]string{refName: tag}
	if name != "" {
		ann[containerdName] = name
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(ann)); err != nil {
		return v1.Hash{}, fmt.Errorf("write the OCI layout: %w", err)
	}
	return digest, tarDir(dir, out, at)
}

// tarDir writes the files under dir into the tar file out, in lexical
// order, root's, with the mtime at.
func tarDir(dir, out string, at time.Time) error {
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: at, Format: tar.FormatPAX, Typeflag: tar.TypeReg}
		if d.IsDir() {
			h.Name, h.Mode, h.Typeflag = h.Name+"/", 0o755, tar.TypeDir
			return tw.WriteHeader(h)
		}
		body, err := os.Open(path)
		if err != nil {
			return err
		}
		defer body.Close()
		fi, err := body.Stat()
		if err != nil {
			return err
		}
		h.Size = fi.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = io.Copy(tw, body)
		return err
	})
	if cerr := tw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
