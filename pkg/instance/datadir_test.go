package instance

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDataDirMode(t *testing.T) {
	for _, c := range []struct {
		name   string
		mode   fs.FileMode // 0: not made
		want   fs.FileMode
		logged bool
	}{
		{"missing: Patroni makes it", 0, 0, false},
		{"0700 kept", 0o700, 0o700, false},
		{"0750 kept", 0o750, 0o750, false},
		{"fsGroup's 2770 made 0700", 0o770 | fs.ModeSetgid, 0o700, true},
		{"0775 made 0700", 0o775, 0o700, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "pgdata")
			if c.mode != 0 {
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dir, c.mode); err != nil {
					t.Fatal(err)
				}
			}
			var logs []string
			if err := dataDirMode(dir, func(f string, a ...any) { logs = append(logs, f) }); err != nil {
				t.Fatal(err)
			}
			if (len(logs) > 0) != c.logged {
				t.Errorf("logged %q, want a line: %v", logs, c.logged)
			}
			if c.mode == 0 {
				if _, err := os.Stat(dir); !os.IsNotExist(err) {
					t.Errorf("a missing data directory was made: %v", err)
				}
				return
			}
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode() & (fs.ModePerm | fs.ModeSetgid); got != c.want {
				t.Errorf("mode %v, want %v", got, c.want)
			}
			if c.logged && !strings.Contains(logs[0], "made 0700") {
				t.Errorf("log %q", logs[0])
			}
		})
	}
}
