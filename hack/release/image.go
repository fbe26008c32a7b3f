package main

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// refName is the OCI annotation naming an entry of a layout's index.json:
// `make image` names its image index by the version.
const refName = "org.opencontainers.image.ref.name"

// untar extracts the regular files and directories of the tar file at
// path into dir, refusing names that would land outside it.
func untar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		target := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(target, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("read %s: entry %q is outside the archive", path, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("read %s: entry %q of type %c is not a file", path, h.Name, h.Typeflag)
		}
	}
}

// openImage opens the oci-archive at path (`make image`'s) and returns
// its image index named version.
func openImage(path, version, dir string) (v1.ImageIndex, error) {
	if err := untar(path, dir); err != nil {
		return nil, err
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("open the OCI layout of %s: %w", path, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range m.Manifests {
		names = append(names, d.Annotations[refName])
		if d.Annotations[refName] == version {
			return top.ImageIndex(d.Digest)
		}
	}
	return nil, fmt.Errorf("%s holds no image index named %s (it has %q): was it built with make image VERSION=%s?", path, version, names, version)
}

// pushImage pushes the image index named version of the oci-archive at
// path to repo:version, reads it back and returns its digest, which the
// registry must report too.
func pushImage(ctx context.Context, path, version, repo string) (v1.Hash, error) {
	tag, err := name.NewTag(repo + ":" + version)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image repository %q: %w", repo, err)
	}
	dir, err := os.MkdirTemp("", "pgloop-image-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	idx, err := openImage(path, version, dir)
	if err != nil {
		return v1.Hash{}, err
	}
	want, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	if err := remote.WriteIndex(tag, idx, opts...); err != nil {
		return v1.Hash{}, fmt.Errorf("push %s: %w", tag, err)
	}
	got, err := remote.Head(tag, opts...)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("read back %s: %w", tag, err)
	}
	if got.Digest != want {
		return v1.Hash{}, fmt.Errorf("pushed %s as %s, but the registry has %s", tag, want, got.Digest)
	}
	return want, nil
}
