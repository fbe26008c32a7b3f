//go:build images

package main

// The tests of the images `make images` wrote: `make test-images` builds
// them first and runs these with -tags images, so they never run without
// the tarballs (a missing one fails).

import (
	"archive/tar"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var (
	imagesDir = flag.String("images", "../../../bin", "where make images wrote pgloop-instance-image.tar, pgloop-pooler-image.tar and linux-amd64/pgloop")
	version   = flag.String("version", "", "the VERSION make images was given")
	tags      = map[string]*string{
		"instance": flag.String("instance-tag", "", "the instance image's tag (pgloop version --images); empty means by -version"),
		"pooler":   flag.String("pooler-tag", "", "the pooler image's tag (pgloop version --images); empty means by -version"),
	}
)

// wantTag is the tag the image of kind k must have.
func wantTag(k kind) string {
	if t := *tags[k.Name]; t != "" {
		return t
	}
	return k.tag(*version)
}

func TestImages(t *testing.T) {
	if *version == "" {
		t.Fatal("-version: the VERSION make images was given (make test-images passes it)")
	}
	bin, err := os.ReadFile(filepath.Join(*imagesDir, "linux-amd64", "pgloop"))
	if err != nil {
		t.Fatalf("pgloop's binary (make images): %v", err)
	}
	for _, c := range []struct {
		kind  kind
		files []string // executables the packages must have installed
		env   []string
	}{
		{kinds["instance"], []string{"usr/lib/postgresql/15/bin/postgres", "usr/lib/postgresql/15/bin/initdb", "usr/bin/patroni", "usr/bin/pgbackrest"},
			[]string{"LC_ALL=C.UTF-8", "PGHOME=/home/postgres"}},
		{kinds["pooler"], []string{"usr/sbin/pgbouncer"}, []string{"LC_ALL=C.UTF-8"}},
	} {
		t.Run(c.kind.Name, func(t *testing.T) {
			img := openArchive(t, filepath.Join(*imagesDir, "pgloop-"+c.kind.Name+"-image.tar"), wantTag(c.kind))
			checkConfig(t, img, c.kind, c.env)
			layers, err := img.Layers()
			if err != nil {
				t.Fatal(err)
			}
			if len(layers) != 2 {
				t.Fatalf("%d layers, want 2: the packages' root file system, then pgloop", len(layers))
			}
			for i, l := range layers {
				if mt, _ := l.MediaType(); mt != types.OCILayer {
					t.Errorf("layer %d: media type %s, want %s", i, mt, types.OCILayer)
				}
			}
			cf, _ := img.ConfigFile()
			checkRootfs(t, layerEntries(t, layers[0]), c.kind, c.files, cf.Config.Labels[labelPackages])
			checkBinary(t, layerEntries(t, layers[1]), bin)
		})
	}
}

// openArchive opens an oci-archive of one image index named tag, of one
// linux/amd64 image.
func openArchive(t *testing.T, path, tag string) v1.Image {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the image (make images): %v", err)
	}
	defer f.Close()
	for name, e := range readTar(t, f, func(string) bool { return true }) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if e.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, e.body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].MediaType != types.OCIImageIndex || tm.Manifests[0].Annotations[refName] != tag {
		t.Fatalf("index.json %+v, want one image index named %s", tm.Manifests, tag)
	}
	// make images names the whole reference for containerd's importer,
	// which the test plane's real node loads the archives with.
	if name := tm.Manifests[0].Annotations[containerdName]; !strings.HasSuffix(name, ":"+tag) || !strings.Contains(name, "/") {
		t.Errorf("index.json names the image %q for containerd (%s), want a whole reference ending in :%s", name, containerdName, tag)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Platform == nil || im.Manifests[0].Platform.Architecture != "amd64" || im.Manifests[0].Platform.OS != "linux" {
		t.Fatalf("image index %+v, want one linux/amd64 image", im.Manifests)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s", mt)
	}
	return img
}

func checkConfig(t *testing.T, img v1.Image, k kind, env []string) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
	if c.User != "101:103" {
		t.Errorf("user %q, want 101:103 (postgres)", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/pgloop", k.Name}) {
		t.Errorf("entrypoint %q, want [/usr/local/bin/pgloop %s]", c.Entrypoint, k.Name)
	}
	if c.WorkingDir != "/home/postgres" {
		t.Errorf("working dir %q, want /home/postgres", c.WorkingDir)
	}
	for _, e := range env {
		if !slices.Contains(c.Env, e) {
			t.Errorf("env %q lacks %s", c.Env, e)
		}
	}
	path := ""
	for _, e := range c.Env {
		if p, ok := strings.CutPrefix(e, "PATH="); ok {
			path = p
		}
	}
	if k.Name == "instance" && !slices.Contains(strings.Split(path, ":"), "/usr/lib/postgresql/15/bin") {
		t.Errorf("PATH %q lacks /usr/lib/postgresql/15/bin", path)
	}
	if !slices.Contains(strings.Split(path, ":"), "/usr/local/bin") {
		t.Errorf("PATH %q lacks /usr/local/bin", path)
	}
	if v := c.Labels["org.opencontainers.image.version"]; v != *version {
		t.Errorf("label version %q, want %q", v, *version)
	}
	for _, l := range []string{"org.opencontainers.image.source", "org.opencontainers.image.created", "org.opencontainers.image.title"} {
		if c.Labels[l] == "" {
			t.Errorf("no label %s", l)
		}
	}
	for _, m := range k.Main {
		if !strings.Contains(","+c.Labels[labelPackages], ","+m+"=") {
			t.Errorf("label %s=%q names no %s", labelPackages, c.Labels[labelPackages], m)
		}
	}
}

// checkRootfs checks the packages' layer: the executables, postgres as
// 101:103 and its directories, packages.txt agreeing with the label, and
// nothing of what must not ship.
func checkRootfs(t *testing.T, files map[string]entry, k kind, executables []string, label string) {
	t.Helper()
	for _, name := range executables {
		e, ok := files[name]
		if !ok {
			t.Errorf("no /%s", name)
			continue
		}
		if e.Typeflag == tar.TypeReg && e.Mode&0o111 == 0 {
			t.Errorf("/%s mode %o: not executable", name, e.Mode)
		}
	}
	passwd := string(files["etc/passwd"].body)
	if !strings.Contains("\n"+passwd, "\npostgres:x:101:103:") || !strings.Contains(passwd, ":/home/postgres:") {
		t.Errorf("/etc/passwd has no postgres 101:103 at /home/postgres:\n%s", passwd)
	}
	if !strings.Contains("\n"+string(files["etc/group"].body), "\npostgres:x:103:") {
		t.Errorf("/etc/group has no postgres 103:\n%s", files["etc/group"].body)
	}
	for _, dir := range []string{"home/postgres/", "run/postgresql/", "var/lib/postgresql/"} {
		e, ok := files[dir]
		if !ok || e.Uid != 101 || e.Gid != 103 {
			t.Errorf("/%s: present %v, owner %d:%d, want 101:103", dir, ok, e.Uid, e.Gid)
		}
	}
	for name, e := range files {
		bad := strings.HasPrefix(name, "var/lib/postgresql/15/main") || strings.HasPrefix(name, "etc/postgresql/15/main") ||
			strings.Contains(name, "snakeoil") || strings.HasPrefix(name, "var/lib/apt/lists/") && strings.HasSuffix(name, "_Packages") ||
			strings.HasPrefix(name, "var/cache/apt/archives/") && strings.HasSuffix(name, ".deb") ||
			strings.HasPrefix(name, "usr/share/man/") && e.Typeflag == tar.TypeReg ||
			strings.HasPrefix(name, "usr/share/locale/") && e.Typeflag == tar.TypeReg ||
			strings.HasPrefix(name, "usr/share/doc/") && e.Typeflag == tar.TypeReg && !strings.HasSuffix(name, "/copyright") ||
			strings.HasPrefix(name, "var/log/") && e.Typeflag == tar.TypeReg ||
			name == "etc/machine-id" && len(e.body) > 0 || name == "etc/hostname" || name == "etc/resolv.conf"
		if bad {
			t.Errorf("/%s is in the image", name)
		}
		if e.Uname != "" || e.Gname != "" {
			t.Errorf("/%s has owner names %q:%q, want numeric owners only", name, e.Uname, e.Gname)
		}
	}
	pkgs := strings.Fields(string(files[packagesFile].body))
	if len(pkgs) < 50 {
		t.Fatalf("/%s lists %d packages", packagesFile, len(pkgs))
	}
	if !slices.IsSorted(pkgs) {
		t.Errorf("/%s is not sorted", packagesFile)
	}
	for _, p := range strings.Split(label, ",") {
		if !slices.Contains(pkgs, p) {
			t.Errorf("label %s names %s, which /%s does not", labelPackages, p, packagesFile)
		}
	}
	if got := k.mainVersions(pkgs); got != label {
		t.Errorf("the main packages of /%s: %q, label %q", packagesFile, got, label)
	}
	if _, ok := files["usr/local/bin/pgloop"]; ok {
		t.Errorf("pgloop is in the packages' layer")
	}
}

// checkBinary checks pgloop's layer: the binary as built, executable,
// root's, and that it runs (it is static, for linux/amd64).
func checkBinary(t *testing.T, files map[string]entry, bin []byte) {
	t.Helper()
	e, ok := files[binPath]
	if !ok || e.Typeflag != tar.TypeReg || e.Mode != 0o755 || e.Uid != 0 || e.Gid != 0 {
		t.Fatalf("/%s: present %v, type %c, mode %o, owner %d:%d; want a file 0755 root's", binPath, ok, e.Typeflag, e.Mode, e.Uid, e.Gid)
	}
	if string(e.body) != string(bin) {
		t.Errorf("/%s is not make images' linux-amd64/pgloop", binPath)
	}
	if !strings.Contains(string(files["usr/share/pgloop/version"].body), "version="+*version+"\n") {
		t.Errorf("/usr/share/pgloop/version: %q", files["usr/share/pgloop/version"].body)
	}
	path := filepath.Join(t.TempDir(), "pgloop")
	if err := os.WriteFile(path, e.body, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), *version) {
		t.Errorf("the layer's pgloop version: %v: %s", err, out)
	}
}

type entry struct {
	*tar.Header
	body []byte
}

func layerEntries(t *testing.T, l v1.Layer) map[string]entry {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	return readTar(t, rc, func(name string) bool {
		return slices.Contains([]string{"etc/passwd", "etc/group", "etc/machine-id", packagesFile, binPath, "usr/share/pgloop/version"}, name)
	})
}

// readTar reads a tar stream, keeping the bodies of the files keep says.
func readTar(t *testing.T, r io.Reader, keep func(name string) bool) map[string]entry {
	t.Helper()
	files := map[string]entry{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		e := entry{Header: h}
		if h.Typeflag == tar.TypeReg && keep(h.Name) {
			if e.body, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
		files[h.Name] = e
	}
}
