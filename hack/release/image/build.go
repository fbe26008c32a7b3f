package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Options say what goes into the image.
type Options struct {
	// Binaries are the pgloop binaries by platform ("linux/amd64").
	Binaries map[string]string
	// Version, Revision and Source become the OCI labels and annotations
	// org.opencontainers.image.version, .revision and .source.
	Version, Revision, Source string
	// Created is the images' creation time, also every file's mtime: the
	// same inputs make the same image (SOURCE_DATE_EPOCH).
	Created time.Time
}

// The image's user, as distroless's nonroot: the operator needs no
// privilege, and manifests/operator runs it with runAsNonRoot.
const (
	refName    = "org.opencontainers.image.ref.name"
	userID     = 65532
	entrypoint = "/pgloop"
	metricsTCP = "8080/tcp"
)

func (o Options) platforms() []string {
	var out []string
	for p := range o.Binaries {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// labels are the OCI labels (annotations keys) of the images.
func (o Options) labels() map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "pgloop",
		"org.opencontainers.image.description": "pgloop, a PostgreSQL operator for Kubernetes",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.created":     o.Created.Format(time.RFC3339),
	}
	if o.Revision != "" {
		l["org.opencontainers.image.revision"] = o.Revision
	}
	return l
}

// Build writes the OCI image index of o's platforms as an OCI layout tar
// file at out.
func Build(out string, o Options) error {
	if len(o.Binaries) == 0 {
		return fmt.Errorf("no binary: give -bin linux/ARCH=PATH")
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, platform := range o.platforms() {
		img, err := image(platform, o)
		if err != nil {
			return err
		}
		_, arch, _ := strings.Cut(platform, "/")
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	idx = mutate.Annotations(idx, o.labels()).(v1.ImageIndex)
	dir, err := os.MkdirTemp("", "pgloop-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// index.json holds one entry, the image index, named by the version
	// (oci-archive:FILE:VERSION), as skopeo and podman expect.
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write the OCI layout: %w", err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{refName: o.Version})); err != nil {
		return fmt.Errorf("write the OCI layout: %w", err)
	}
	return tarDir(dir, out, o.Created)
}

// image is one platform's image: its binary's layer on no base.
func image(platform string, o Options) (v1.Image, error) {
	bin, err := os.ReadFile(o.Binaries[platform])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", platform, err)
	}
	layerTar, err := rootfs(bin, o.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	_, arch, _ := strings.Cut(platform, "/")
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: o.Created}
	cf.Config = v1.Config{
		User:         fmt.Sprintf("%d:%d", userID, userID),
		Entrypoint:   []string{entrypoint},
		WorkingDir:   "/",
		Env:          []string{"PATH=/", "HOME=/tmp"},
		ExposedPorts: map[string]struct{}{metricsTCP: {}},
		Labels:       o.labels(),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, o.labels()).(v1.Image), nil
}

// rootfs is the layer's tar: /pgloop, /etc/passwd and /etc/group naming
// root and the nonroot user, and /tmp (1777), owned by root, mtime at.
func rootfs(bin []byte, at time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries := []struct {
		name string
		mode int64
		body string
		dir  bool
	}{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, body: fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", userID)},
		{name: "etc/passwd", mode: 0o644, body: fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/tmp:/sbin/nologin\n", userID, userID)},
		{name: "pgloop", mode: 0o755, body: string(bin)},
		{name: "tmp/", mode: 0o1777, dir: true},
	}
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: at, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(e.body))}
		if e.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarDir writes the files under dir into the tar file out, in a fixed
// order with the mtime at.
func tarDir(dir, out string, at time.Time) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
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
		body, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(body)
		return err
	})
	if cerr := tw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
