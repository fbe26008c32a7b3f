package kubelet

// Images mapped to binaries: the third kind of container this kubelet runs
// (after Spilo's Patroni and the pooler's PgBouncer). A container whose
// image Options.ImageBinaries maps to a binary of this machine runs that
// binary as the image's entrypoint, the way a kubelet runs a container
// (container.go): its command and args, its environment, the service
// account token where client-go's in-cluster configuration reads it, its
// user, and its probes. There is no image to pull: "pulling" copies the
// binary into the node's image store, <root>/images/sha256-<digest>/, and
// the digest is the container's imageID.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// imagesDir holds the pulled binaries under the root.
const imagesDir = "images"

// ParseImageBinary parses REF=PATH, the --image-binary flag: REF is an
// image reference (repository, with or without a tag or digest), PATH an
// absolute path to a binary. PATH need not exist yet: it is read when a
// container of that image starts.
func ParseImageBinary(s string) (ref, path string, err error) {
	ref, path, ok := strings.Cut(s, "=")
	switch {
	case !ok || ref == "" || path == "":
		return "", "", fmt.Errorf("image binary %q: want REF=PATH", s)
	case !filepath.IsAbs(path):
		return "", "", fmt.Errorf("image binary %q: the path must be absolute", s)
	}
	return ref, path, nil
}

// imageRepository is ref without its tag and digest: ghcr.io/pgloop/pgloop
// for ghcr.io/pgloop/pgloop:v1 or ghcr.io/pgloop/pgloop@sha256:... A colon
// in the registry's host (a port) is not a tag.
func imageRepository(ref string) string {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	slash := strings.LastIndexByte(ref, '/')
	if i := strings.LastIndexByte(ref, ':'); i > slash {
		ref = ref[:i]
	}
	return ref
}

// imageBinary returns the binary that image runs, from images (reference
// or repository to path): an exact reference wins over its repository,
// which stands for every tag and digest of it.
func imageBinary(images map[string]string, image string) (string, bool) {
	if image == "" {
		return "", false
	}
	if p, ok := images[image]; ok {
		return p, true
	}
	p, ok := images[imageRepository(image)]
	return p, ok
}

// imageEntrypoint is the path of the binary inside the image: the mapped
// binary's name at the image's root (/pgloop for .../bin/pgloop), as pgloop's
// image has it (hack/release/image).
func imageEntrypoint(binary string) string { return "/" + filepath.Base(binary) }

// pullImage copies binary into the image store under root, named by its
// digest, unless a copy is there, and returns the copy's path and the
// image ID (sha256:<digest>). The copy is 0755 root: any user the
// container runs as can execute it, and a binary rebuilt later does not
// change what a running pod runs.
func pullImage(root, binary string) (path, imageID string, err error) {
	src, err := os.Open(binary)
	if errors.Is(err, os.ErrNotExist) {
		return "", "", fmt.Errorf("the binary %s of the image does not exist (yet)", binary)
	}
	if err != nil {
		return "", "", err
	}
	defer src.Close()
	h := sha256.New()
	if _, err := io.Copy(h, src); err != nil {
		return "", "", fmt.Errorf("read %s: %w", binary, err)
	}
	digest := hex.EncodeToString(h.Sum(nil))
	dir := filepath.Join(root, imagesDir, "sha256-"+digest)
	path = filepath.Join(dir, filepath.Base(binary))
	imageID = "sha256:" + digest
	if isFile(path) {
		return path, imageID, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return "", "", err
	}
	tmp, err := os.CreateTemp(dir, ".pull-*")
	if err != nil {
		return "", "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return "", "", fmt.Errorf("copy %s: %w", binary, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", "", err
	}
	if err := tmp.Close(); err != nil {
		return "", "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", "", err
	}
	return path, imageID, nil
}
