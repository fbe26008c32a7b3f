package kubelet

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParsePostmasterPID(t *testing.T) {
	const full = "4436\n/r/pv/pvc-1/pgroot/pgdata\n1764472699\n5432\n/tmp/pgk-43c5b21a\n127.1.7.3\n  5432001    3\nready   \n"
	for _, tc := range []struct {
		name    string
		data    string
		pid     int
		dir     string
		wantErr bool
	}{
		{name: "running server", data: full, pid: 4436, dir: "/r/pv/pvc-1/pgroot/pgdata"},
		{name: "starting server, two lines", data: "12\n/data\n", pid: 12, dir: "/data"},
		{name: "no trailing newline", data: "12\n/data", pid: 12, dir: "/data"},
		{name: "one line", data: "12\n", wantErr: true},
		{name: "empty", data: "", wantErr: true},
		{name: "not a pid", data: "x\n/data\n", wantErr: true},
		{name: "negative pid", data: "-1\n/data\n", wantErr: true},
		{name: "no directory", data: "12\n\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid, dir, err := parsePostmasterPID([]byte(tc.data))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && (pid != tc.pid || dir != tc.dir) {
				t.Errorf("got %d, %q; want %d, %q", pid, dir, tc.pid, tc.dir)
			}
		})
	}
}

func TestReadPostmasterPIDMissing(t *testing.T) {
	pid, _, err := readPostmasterPID(t.TempDir())
	if pid != 0 || err != nil {
		t.Fatalf("readPostmasterPID of a stopped server = %d, %v; want 0, nil", pid, err)
	}
}

func TestIsPostmaster(t *testing.T) {
	const dir = "/r/pv/pvc-1/pgroot/pgdata"
	for _, tc := range []struct {
		name string
		cmd  []string
		want bool
	}{
		{name: "as Patroni starts it", cmd: []string{"/usr/lib/postgresql/15/bin/postgres", "-D", dir, "--config-file=" + dir + "/postgresql.conf", "--port=5432"}, want: true},
		{name: "-D joined", cmd: []string{"postgres", "-D" + dir}, want: true},
		{name: "another data directory", cmd: []string{"/usr/lib/postgresql/15/bin/postgres", "-D", "/r/pv/pvc-2/pgroot/pgdata"}},
		{name: "a prefix of the directory", cmd: []string{"postgres", "-D", dir + "2"}},
		{name: "a pid reused by something else", cmd: []string{"/bin/sleep", dir}},
		{name: "a backend, retitled", cmd: []string{"postgres: demo: checkpointer "}},
		{name: "gone", cmd: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := isPostmaster(tc.cmd, dir); got != tc.want {
				t.Errorf("isPostmaster(%q) = %v, want %v", tc.cmd, got, tc.want)
			}
		})
	}
}

func TestRefersTo(t *testing.T) {
	const root = "/tmp/pgkubelet-1"
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{s: root, want: true},
		{s: root + "/pods/u/patroni.yml", want: true},
		{s: "--root=" + root, want: true},
		{s: root + "2/pods", want: false},
		{s: root + "2/pods " + root + "/x", want: true},
		{s: "/tmp/pgkubelet-", want: false},
		{s: "", want: false},
	} {
		t.Run(tc.s, func(t *testing.T) {
			if got := refersTo(tc.s, root); got != tc.want {
				t.Errorf("refersTo(%q) = %v, want %v", tc.s, got, tc.want)
			}
		})
	}
}

func TestPostmasterDirs(t *testing.T) {
	pv := t.TempDir()
	for _, f := range []string{
		"pvc-1/pgroot/pgdata/postmaster.pid", // Spilo's layout
		"pvc-2/data/postmaster.pid",
		"pvc-3/pgroot/pgdata/base/1/postmaster.pid", // deeper than any data directory
		"pvc-4/pgroot/pgdata/PG_VERSION",
	} {
		path := filepath.Join(pv, f)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := postmasterDirs(pv, dataDirDepth+1)
	want := []string{filepath.Join(pv, "pvc-1/pgroot/pgdata"), filepath.Join(pv, "pvc-2/data")}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("postmasterDirs = %q, want %q", got, want)
	}
}
