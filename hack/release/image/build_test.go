package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// TestImage builds the image from pgloop's binary for this machine's
// architecture (built by the test) and a stand-in for the other, opens the
// tar file as an OCI layout and checks what `make image` promises: an
// index of linux/amd64 and linux/arm64, OCI media types, the non-root
// user, the binary as entrypoint, the OCI labels; and that the amd64 or
// arm64 binary taken out of its layer runs (`pgloop version`).
func TestImage(t *testing.T) {
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skipf("the image's platforms are linux/amd64 and linux/arm64, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	dir := t.TempDir()
	native := filepath.Join(dir, "pgloop")
	// The flags of an ordinary build, so the Go cache of the other tests
	// serves it; `make image` builds with -trimpath and CGO_ENABLED=0. It
	// builds in the operator's module, the repository's root: this one
	// (hack/release) does not require it.
	build := exec.Command("go", "build", "-ldflags=-X github.com/pgloop/pgloop/pkg/version.Version=v9.9.9-test", "-o", native, "./cmd/pgloop")
	build.Dir = "../../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	stand := filepath.Join(dir, "stand-in")
	if err := os.WriteFile(stand, []byte("not run"), 0o755); err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	out := filepath.Join(dir, "image.tar")
	opts := Options{
		Binaries: map[string]string{"linux/" + runtime.GOARCH: native, "linux/" + other: stand},
		Version:  "v9.9.9-test", Revision: "0123abc", Source: "https://github.com/pgloop/pgloop", Created: created,
	}
	if err := Build(out, opts); err != nil {
		t.Fatal(err)
	}

	// The same inputs make the same file.
	again := filepath.Join(dir, "again.tar")
	if err := Build(again, opts); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(again)
	if !bytes.Equal(a, b) {
		t.Errorf("two builds of the same inputs differ")
	}

	root := filepath.Join(dir, "layout")
	untar(t, out, root)
	top, err := layout.ImageIndexFromPath(root)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].MediaType != types.OCIImageIndex || tm.Manifests[0].Annotations[refName] != "v9.9.9-test" {
		t.Fatalf("index.json %+v, want one image index named v9.9.9-test", tm.Manifests)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s, want %s", im.MediaType, types.OCIImageIndex)
	}
	if v := im.Annotations["org.opencontainers.image.version"]; v != "v9.9.9-test" {
		t.Errorf("index version annotation %q", v)
	}
	var platforms []string
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s has no platform", d.Digest)
		}
		platforms = append(platforms, d.Platform.OS+"/"+d.Platform.Architecture)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkImage(t, img, d.Platform.Architecture, opts, d.Platform.Architecture == runtime.GOARCH, dir)
	}
	slices.Sort(platforms)
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Errorf("platforms %v, want %v", platforms, want)
	}
}

func checkImage(t *testing.T, img v1.Image, arch string, opts Options, native bool, dir string) {
	t.Helper()
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("%s: manifest media type %s", arch, mt)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != "linux" || cf.Architecture != arch {
		t.Errorf("config platform %s/%s, want linux/%s", cf.OS, cf.Architecture, arch)
	}
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/pgloop"}) {
		t.Errorf("%s: user %q entrypoint %v, want 65532:65532 and [/pgloop]", arch, c.User, c.Entrypoint)
	}
	if _, ok := c.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("%s: exposed ports %v, want 8080/tcp (metrics, probes)", arch, c.ExposedPorts)
	}
	for k, want := range map[string]string{"org.opencontainers.image.version": opts.Version,
		"org.opencontainers.image.source": opts.Source, "org.opencontainers.image.revision": opts.Revision,
		"org.opencontainers.image.created": "2026-12-03T12:00:00Z"} {
		if c.Labels[k] != want {
			t.Errorf("%s: label %s = %q, want %q", arch, k, c.Labels[k], want)
		}
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%s: %d layers (%v), want 1", arch, len(layers), err)
	}
	if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
		t.Errorf("%s: layer media type %s", arch, mt)
	}
	files := layerFiles(t, layers[0])
	want, _ := os.ReadFile(opts.Binaries["linux/"+arch])
	bin, ok := files["pgloop"]
	if !ok || !bytes.Equal(bin.body, want) || bin.mode != 0o755 {
		t.Fatalf("%s: /pgloop in the layer: present %v, mode %o, same as the binary %v", arch, ok, bin.mode, bytes.Equal(bin.body, want))
	}
	if !strings.Contains(string(files["etc/passwd"].body), "nonroot:x:65532:65532:") {
		t.Errorf("%s: /etc/passwd names no nonroot 65532: %q", arch, files["etc/passwd"].body)
	}
	if f, ok := files["tmp/"]; !ok || f.mode != 0o1777 {
		t.Errorf("%s: /tmp present %v mode %o, want 1777", arch, ok, f.mode)
	}
	if !native {
		return
	}
	path := filepath.Join(dir, "from-layer-"+arch)
	if err := os.WriteFile(path, bin.body, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "pgloop v9.9.9-test") {
		t.Errorf("%s: the layer's pgloop version: %v: %s", arch, err, out)
	}
}

type layerFile struct {
	mode int64
	body []byte
}

func layerFiles(t *testing.T, l v1.Layer) map[string]layerFile {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]layerFile{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s owned by %d:%d, want root", h.Name, h.Uid, h.Gid)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = layerFile{mode: h.Mode, body: body}
	}
}

func untar(t *testing.T, file, dir string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(path, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
