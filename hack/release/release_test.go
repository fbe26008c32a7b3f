package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// imageArchive writes a random two-image index into an oci-archive the
// way `make image` (./image) does: an OCI layout in a tar file whose
// index.json names the image index by version.
func imageArchive(t *testing.T, version string) (string, v1.ImageIndex) {
	t.Helper()
	idx, err := random.Index(512, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p, err := layout.Write(filepath.Join(dir, "layout"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{refName: version})); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "image.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	root := filepath.Join(dir, "layout")
	err = filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Typeflag: tar.TypeReg, Size: info.Size()}
		if info.IsDir() {
			h.Name, h.Mode, h.Typeflag, h.Size = h.Name+"/", 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil || info.IsDir() {
			return err
		}
		body, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = tw.Write(body)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path, idx
}

// testRegistry runs go-containerregistry's registry on 127.0.0.1 (a free
// port) for the test, and returns its host:port.
func testRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// pulledDigests reads repo:version back and returns the digests of the
// index and of each image it lists.
func pulledDigests(t *testing.T, ref string) []v1.Hash {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(tag)
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	return indexDigests(t, idx)
}

func indexDigests(t *testing.T, idx v1.ImageIndex) []v1.Hash {
	t.Helper()
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	out := []v1.Hash{d}
	for _, desc := range m.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		// Every layer must be in the registry, not only the manifests.
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range layers {
			rc, err := l.Compressed()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, rc); err != nil {
				t.Fatalf("layer of %s: %v", desc.Digest, err)
			}
			rc.Close()
		}
		out = append(out, desc.Digest)
	}
	return out
}

func TestPushImage(t *testing.T) {
	archive, idx := imageArchive(t, "v1.2.3")
	repo := testRegistry(t) + "/pgloop/pgloop"
	want := indexDigests(t, idx)

	got, err := pushImage(context.Background(), archive, "v1.2.3", repo)
	if err != nil {
		t.Fatal(err)
	}
	if got != want[0] {
		t.Errorf("pushImage returned %s, want %s", got, want[0])
	}
	if pulled := pulledDigests(t, repo+":v1.2.3"); !slices.Equal(pulled, want) {
		t.Errorf("pulled %v, pushed %v", pulled, want)
	}

	if _, err := pushImage(context.Background(), archive, "v9.9.9", repo); err == nil || !strings.Contains(err.Error(), "no image index named v9.9.9") {
		t.Errorf("push of a version the archive does not hold: %v", err)
	}
}

// TestRelease runs a whole release, for the host's platform only (the
// cross builds are the same go build with GOOS and GOARCH), with the
// repository's chart, CRD and krew template, into a temporary dist/, and
// pushes to a registry on 127.0.0.1.
func TestRelease(t *testing.T) {
	defer func(p []platform) { krewPlatforms = p }(krewPlatforms)
	host := platform{runtime.GOOS, runtime.GOARCH}
	krewPlatforms = []platform{host}

	const version = "v0.0.0-test.1"
	archive, idx := imageArchive(t, version)
	registry := testRegistry(t)
	instance, instanceIdx := imageArchive(t, "15-"+version)
	pooler, _ := imageArchive(t, version)
	o := options{
		root: "../..", version: version, commit: "0123456789abcdef0123456789abcdef01234567",
		imageTar: archive, push: registry + "/pgloop", dist: t.TempDir(),
		urlBase: "https://example.com/" + version, modTime: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		dataImages: []dataImage{
			{name: "instance", tar: instance, tag: "15-" + version, push: registry + "/postgres"},
			{name: "pooler", tar: pooler, tag: version, push: registry + "/pgbouncer"},
		},
	}
	var out bytes.Buffer
	if err := release(context.Background(), o, &out); err != nil {
		t.Fatalf("release: %v\n%s", err, out.String())
	}
	t.Logf("release said:\n%s", out.String())
	dir := filepath.Join(o.dist, version)

	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	wantFiles := []string{"SHA256SUMS", host.archiveName(), "pgloop-0.0.0-test.1.tgz", "pgloop-image-" + version + ".tar",
		"pgloop-instance-image-" + version + ".tar", "pgloop-pooler-image-" + version + ".tar", "pgloop.yaml", crdFile}
	slices.Sort(wantFiles)
	if !slices.Equal(files, wantFiles) {
		t.Errorf("assets %v, want %v", files, wantFiles)
	}

	// SHA256SUMS holds every other file's sum.
	sums := map[string]string{}
	f, err := os.Open(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for s := bufio.NewScanner(f); s.Scan(); {
		sum, file, ok := strings.Cut(s.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", s.Text())
		}
		sums[file] = sum
	}
	for _, file := range wantFiles {
		if file == "SHA256SUMS" {
			continue
		}
		if got, _ := fileSHA256(filepath.Join(dir, file)); sums[file] != got {
			t.Errorf("SHA256SUMS says %s of %s, its sum is %s", sums[file], file, got)
		}
	}

	// The krew manifest: valid, and its archive's sum and URL are those
	// of the asset.
	manifest, err := os.ReadFile(filepath.Join(dir, "pgloop.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	plugin, err := validateKrewManifest(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if plugin.Name != "pgloop" || plugin.Spec.Version != version || len(plugin.Spec.Platforms) != 1 {
		t.Fatalf("krew manifest: name %q, version %q, %d platforms", plugin.Name, plugin.Spec.Version, len(plugin.Spec.Platforms))
	}
	pl := plugin.Spec.Platforms[0]
	if pl.Sha256 != sums[host.archiveName()] || pl.URI != o.urlBase+"/"+host.archiveName() || pl.Bin != pluginBin {
		t.Errorf("krew platform %+v, want the sum %s and URL of %s", pl, sums[host.archiveName()], host.archiveName())
	}
	if got := pl.Selector.MatchLabels; got["os"] != host.OS || got["arch"] != host.Arch {
		t.Errorf("krew selector %v, want %v", got, host)
	}

	// What krew installs: the archive's bin, which knows its version and
	// commit and calls itself kubectl pgloop.
	bin := extractPlugin(t, filepath.Join(dir, host.archiveName()), pl.Bin)
	if got, err := exec.Command(bin, "version").CombinedOutput(); err != nil || !strings.HasPrefix(string(got), "pgloop "+version+" (commit "+o.commit+", ") {
		t.Errorf("kubectl-pgloop version: %v: %q", err, got)
	}
	if got, err := exec.Command(bin, "--help").CombinedOutput(); err != nil || !strings.Contains(string(got), "kubectl pgloop [command]") {
		t.Errorf("kubectl-pgloop --help does not say kubectl pgloop: %v\n%s", err, got)
	}

	// The chart, stamped; the CRD, the repository's.
	ch, err := loader.Load(filepath.Join(dir, "pgloop-0.0.0-test.1.tgz"))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != "0.0.0-test.1" || ch.Metadata.AppVersion != version {
		t.Errorf("chart version %s, appVersion %s", ch.Metadata.Version, ch.Metadata.AppVersion)
	}
	crd, _ := os.ReadFile(filepath.Join(dir, crdFile))
	if want, _ := os.ReadFile(filepath.Join(crdDir, "pgloop.dev_postgresqls.yaml")); !bytes.Equal(crd, want) {
		t.Error("the CRD asset differs from manifests/crds")
	}

	// The image: pushed, and the same when pulled back.
	if pulled, want := pulledDigests(t, o.push+":"+version), indexDigests(t, idx); !slices.Equal(pulled, want) {
		t.Errorf("pulled %v, pushed %v", pulled, want)
	}
	if !strings.Contains(out.String(), "pushed "+o.push+":"+version+"@") {
		t.Errorf("release did not say what it pushed:\n%s", out.String())
	}
	// The instance's image too, under its own repository and tag.
	if pulled, want := pulledDigests(t, registry+"/postgres:15-"+version), indexDigests(t, instanceIdx); !slices.Equal(pulled, want) {
		t.Errorf("instance image: pulled %v, pushed %v", pulled, want)
	}
	for _, ref := range []string{registry + "/postgres:15-" + version, registry + "/pgbouncer:" + version} {
		if !strings.Contains(out.String(), "pushed "+ref+"@") {
			t.Errorf("release did not say it pushed %s:\n%s", ref, out.String())
		}
	}
}

// extractPlugin extracts the archive as krew does and returns the path of
// its bin, which must be executable.
func extractPlugin(t *testing.T, archive, bin string) string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	dir := t.TempDir()
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(h.Name)), body, os.FileMode(h.Mode)); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, bin)
	info, err := os.Stat(path)
	if err != nil || info.Mode()&0o111 == 0 {
		t.Fatalf("the archive's %s: %v, mode %v", bin, err, info.Mode())
	}
	return path
}
