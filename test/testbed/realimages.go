package testbed

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The real node's images come from the archives `make images` writes
// (OCI layouts in a tar), loaded into containerd with ctr: pods then run
// them as a cluster that pulled them would, and an image the node lacks
// fails to pull (there is no registry to reach), as a wrong reference does
// on a real cluster. containerd's root outlives planes: an archive whose
// image is there already, same digest, is not loaded again.

// DefaultNodeImages are the archives a real node loads when
// Options.NodeImages is nil, in bin/: pgloop's instance and pooler images.
var DefaultNodeImages = []string{"pgloop-instance-image.tar", "pgloop-pooler-image.tar"}

// containerdImageName is the annotation of index.json that names an image
// by its whole reference for containerd's importer (`make images` writes
// it); the OCI ref.name beside it is the tag alone.
const (
	containerdImageName = "io.containerd.image.name"
	ociRefName          = "org.opencontainers.image.ref.name"
)

// archiveImage is an image of an OCI archive: its whole reference (""
// when index.json gives none), its tag, and the digest of what index.json
// points at.
type archiveImage struct {
	Ref, Tag, Digest string
}

// readArchive reads the images index.json of an OCI archive names.
func readArchive(path string) ([]archiveImage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: no index.json: not an OCI archive", path)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if strings.TrimPrefix(h.Name, "./") != "index.json" {
			continue
		}
		var idx struct {
			Manifests []struct {
				Digest      string            `json:"digest"`
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(tr).Decode(&idx); err != nil {
			return nil, fmt.Errorf("%s: index.json: %w", path, err)
		}
		var out []archiveImage
		for _, m := range idx.Manifests {
			out = append(out, archiveImage{Ref: m.Annotations[containerdImageName], Tag: m.Annotations[ociRefName], Digest: m.Digest})
		}
		return out, nil
	}
}

// repository is a reference without its tag or digest.
func repository(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// imageDigests lists containerd's images and their digests.
func imageDigests(ctx context.Context, socket string) (map[string]string, error) {
	out, err := ctr(ctx, socket, "images", "list")
	if err != nil {
		return nil, err
	}
	digests := map[string]string{}
	for i, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 3 {
			continue
		}
		digests[f[0]] = f[2]
	}
	return digests, nil
}

// loadImages loads the pause image and the node's archives into containerd
// unless there already, then tags the aliases.
func (p *Plane) loadImages(ctx context.Context, n RealNode, step func(string, ...any)) error {
	pause := filepath.Join(n.Root, "pause-image.tar")
	if err := writePauseImage(p.bins.path(binPause), pause); err != nil {
		return err
	}
	if _, err := ctr(ctx, n.Containerd, "images", "import", "--base-name", repository(pauseImage), pause); err != nil {
		return err
	}
	have, err := imageDigests(ctx, n.Containerd)
	if err != nil {
		return err
	}
	wanted := map[string]bool{pauseImage: true}
	archives := p.opts.NodeImages
	if archives == nil {
		for _, name := range DefaultNodeImages {
			archives = append(archives, p.bins.path(name))
		}
	}
	for _, path := range archives {
		imgs, err := readArchive(path)
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %s is missing: run \"make images\" at the repository root", ErrMissingBinaries, path)
		}
		if err != nil {
			return err
		}
		if slices.ContainsFunc(imgs, func(img archiveImage) bool { return img.Ref == "" }) {
			return fmt.Errorf("%s: index.json names an image without its whole reference (%s): run \"make images\" again", path, containerdImageName)
		}
		fresh := true
		for _, img := range imgs {
			fresh = fresh && have[img.Ref] == img.Digest
			wanted[img.Ref] = true
		}
		if fresh {
			continue
		}
		began := time.Now()
		if _, err := ctr(ctx, n.Containerd, "images", "import", path); err != nil {
			return err
		}
		step("loaded %s into containerd in %v", imgs[0].Ref, time.Since(began).Round(time.Millisecond))
	}
	for _, alias := range slices.Sorted(maps.Keys(p.opts.ImageAliases)) {
		if _, err := ctr(ctx, n.Containerd, "images", "tag", "--force", p.opts.ImageAliases[alias], alias); err != nil {
			return err
		}
		wanted[alias] = true
	}
	return pruneImages(ctx, n.Containerd, wanted)
}

// pruneImages removes the images of containerd's root that the node was
// not given: another plane's aliases, images of archives since rebuilt.
// The CRI names each image a second time by its config's digest
// (sha256:...); those of kept images stay.
func pruneImages(ctx context.Context, socket string, wanted map[string]bool) error {
	have, err := imageDigests(ctx, socket)
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for ref, digest := range have {
		if wanted[ref] {
			keep[digest] = true
		}
	}
	var stale []string
	for ref, digest := range have {
		if !wanted[ref] && (!strings.HasPrefix(ref, "sha256:") || !keep[digest]) {
			stale = append(stale, ref)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	_, err = ctr(ctx, socket, append([]string{"images", "remove"}, stale...)...)
	return err
}

// writePauseImage writes a docker archive (what `docker save` writes, which
// ctr imports) of an image holding only bin, the sandbox's process, as
// /pause: any static program that sleeps until SIGTERM will do.
func writePauseImage(bin, out string) error {
	prog, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMissingBinaries, err)
	}
	epoch := time.Unix(0, 0)
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	if err := lw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(prog)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := lw.Write(prog); err != nil {
		return err
	}
	if err := lw.Close(); err != nil {
		return err
	}
	sum := sha256.Sum256(layer.Bytes())
	diffID := "sha256:" + hex.EncodeToString(sum[:])
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{"/pause"}, "User": "65535:65535"},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal([]map[string]any{{
		"Config": "config.json", "RepoTags": []string{pauseImage}, "Layers": []string{"layer.tar"},
	}})
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, file := range []struct {
		name string
		body []byte
	}{{"layer.tar", layer.Bytes()}, {"config.json", config}, {"manifest.json", manifest}} {
		if err := tw.WriteHeader(&tar.Header{Name: file.name, Mode: 0o644, Size: int64(len(file.body)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			f.Close()
			return err
		}
		if _, err := tw.Write(file.body); err != nil {
			f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// LoadImage imports an OCI archive whose index names its image by a tag
// alone (org.opencontainers.image.ref.name, as pgloop's operator image
// does) into every real node's containerd, as repository:tag, and names it
// by each of refs too: an image a test builds while the plane runs. The
// next plane's start removes it (pruneImages).
func (p *Plane) LoadImage(ctx context.Context, archive, repository string, refs ...string) error {
	imgs, err := readArchive(archive)
	if err != nil {
		return err
	}
	if len(imgs) != 1 || imgs[0].Tag == "" {
		return fmt.Errorf("%s: want one image named by a tag (%s), index.json has %+v", archive, ociRefName, imgs)
	}
	// ctr names it base-name:tag.
	name := repository + ":" + imgs[0].Tag
	for _, n := range p.realNodes {
		if _, err := ctr(ctx, n.Containerd, "images", "import", "--base-name", repository, archive); err != nil {
			return err
		}
		for _, ref := range refs {
			if _, err := ctr(ctx, n.Containerd, "images", "tag", "--force", name, ref); err != nil {
				return err
			}
		}
	}
	return nil
}
