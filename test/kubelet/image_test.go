package kubelet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseImageBinary(t *testing.T) {
	for _, tc := range []struct {
		in, ref, path, err string
	}{
		{in: "ghcr.io/pgloop/pgloop=/b/pgloop", ref: "ghcr.io/pgloop/pgloop", path: "/b/pgloop"},
		{in: "localhost:5000/x:v1=/b/x", ref: "localhost:5000/x:v1", path: "/b/x"},
		{in: "img", err: "want REF=PATH"},
		{in: "=/b/x", err: "want REF=PATH"},
		{in: "img=bin/x", err: "must be absolute"},
	} {
		ref, path, err := ParseImageBinary(tc.in)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseImageBinary(%q) = %v, want an error with %q", tc.in, err, tc.err)
			}
		case err != nil || ref != tc.ref || path != tc.path:
			t.Errorf("ParseImageBinary(%q) = %q, %q, %v; want %q, %q", tc.in, ref, path, err, tc.ref, tc.path)
		}
	}
}

func TestImageBinary(t *testing.T) {
	images := map[string]string{
		"ghcr.io/pgloop/pgloop":      "/any-tag",
		"ghcr.io/pgloop/pgloop:v2":   "/v2",
		"localhost:5000/pgloop":      "/local",
		"ghcr.io/pgloop/pgloop@sha1": "/digest",
	}
	for _, tc := range []struct {
		image, want string
	}{
		{"ghcr.io/pgloop/pgloop:latest", "/any-tag"},
		{"ghcr.io/pgloop/pgloop", "/any-tag"},
		{"ghcr.io/pgloop/pgloop:v2", "/v2"}, // the exact reference wins
		{"ghcr.io/pgloop/pgloop@sha1", "/digest"},
		{"ghcr.io/pgloop/pgloop@sha256:abc", "/any-tag"},
		{"localhost:5000/pgloop:v9", "/local"}, // the port is no tag
		{"localhost:5000/other:v9", ""},
		{"ghcr.io/zalando/spilo-15:3.0-p1", ""},
		{"", ""},
	} {
		got, ok := imageBinary(images, tc.image)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("imageBinary(%q) = %q, %v; want %q", tc.image, got, ok, tc.want)
		}
	}
}

func TestPullImage(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	bin := filepath.Join(dir, "build", "pgloop")
	if _, _, err := pullImage(root, bin); err == nil || !strings.Contains(err.Error(), "does not exist (yet)") {
		t.Fatalf("pull of a missing binary: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	path, id, err := pullImage(root, bin)
	if err != nil {
		t.Fatal(err)
	}
	// sha256sum of "#!/bin/sh\n".
	if want := "sha256:a8076d3d28d21e02012b20eaf7dbf75409a6277134439025f282e368e3305abf"; id != want {
		t.Errorf("image ID %s, want %s", id, want)
	}
	if want := filepath.Join(root, imagesDir, "sha256-"+strings.TrimPrefix(id, "sha256:"), "pgloop"); path != want {
		t.Errorf("pulled to %s, want %s", path, want)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("pulled binary mode %v, want 0755 (any user runs it)", fi.Mode())
	}
	again, id2, err := pullImage(root, bin)
	if err != nil || again != path || id2 != id {
		t.Errorf("second pull = %s, %s, %v; want the same copy", again, id2, err)
	}
	// A rebuilt binary is another image; the running one's copy stays.
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 1\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	other, id3, err := pullImage(root, bin)
	if err != nil || other == path || id3 == id {
		t.Errorf("pull of a rebuilt binary = %s, %s, %v; want another copy", other, id3, err)
	}
	if !isFile(path) {
		t.Errorf("the first copy is gone")
	}
}

func TestImageEntrypoint(t *testing.T) {
	if got := imageEntrypoint("/tmp/pgloop-e2e-1/pgloop"); got != "/pgloop" {
		t.Errorf("imageEntrypoint = %s, want /pgloop", got)
	}
}
