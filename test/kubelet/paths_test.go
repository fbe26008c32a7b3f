package kubelet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestSocketDir(t *testing.T) {
	for _, tc := range []struct {
		uid  types.UID
		want string
	}{
		{uid: "43c5b21a-df28-46c6-a506-351c3c80cffd", want: "/tmp/pgk-43c5b21a"},
		{uid: "4-3c5b21a-df28", want: "/tmp/pgk-43c5b21a"},
		{uid: "abc", want: "/tmp/pgk-abc"},
	} {
		if got := socketDir(tc.uid); got != tc.want {
			t.Errorf("socketDir(%s) = %s, want %s", tc.uid, got, tc.want)
		}
	}
}

func TestCheckTraversable(t *testing.T) {
	const uid, gid = 101, 104 // not the owner of the test's directories
	// Not t.TempDir: its parent is 0700.
	top, err := os.MkdirTemp("", "pgkubelet-paths-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	mk := func(path string, mode os.FileMode) string {
		t.Helper()
		dir := filepath.Join(top, path)
		if err := os.Mkdir(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil { // beyond the umask
			t.Fatal(err)
		}
		return dir
	}
	open := mk("open", 0o755)
	closed := mk("closed", 0o700)
	mk("closed/inner", 0o755)
	searchOnly := mk("search-only", 0o711)

	// top's parents (/tmp) are traversable; only the test's own
	// directories vary.
	for _, tc := range []struct {
		name   string
		root   string
		badDir string // "" when traversable
	}{
		{name: "under a 0755 directory", root: filepath.Join(open, "root")},
		{name: "under a 0711 directory", root: filepath.Join(searchOnly, "root")},
		{name: "under a 0700 directory", root: filepath.Join(closed, "root"), badDir: closed},
		{name: "deeper under a 0700 directory", root: filepath.Join(closed, "inner", "root"), badDir: closed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkTraversable(tc.root, uid, gid)
			if tc.badDir == "" {
				if err != nil {
					t.Fatalf("checkTraversable(%s) = %v", tc.root, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "directory "+tc.badDir+" ") {
				t.Fatalf("checkTraversable(%s) = %v, want an error naming %s", tc.root, err, tc.badDir)
			}
		})
	}
}
