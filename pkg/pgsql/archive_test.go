package pgsql

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestArchiveStatus(t *testing.T) {
	srv := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The server does not archive (archive_mode off): no success, no
	// failure, a WAL being written, nothing ready.
	a, err := ArchiveStatus(ctx, srv.endpoint(), []string{"../spool/archive/db/out", "../spool"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a.ArchivedCount != 0 || a.LastArchivedWAL != "" || !a.LastArchivedTime.IsZero() || a.Failing() {
		t.Errorf("archived %d %q %v, failing %v: want nothing", a.ArchivedCount, a.LastArchivedWAL, a.LastArchivedTime, a.Failing())
	}
	if len(a.CurrentWAL) != 24 || a.WALBytes <= 0 || a.Ready != 0 {
		t.Errorf("current %q, pg_wal %d bytes, ready %d", a.CurrentWAL, a.WALBytes, a.Ready)
	}
	if len(a.Errors) != 0 || a.ErrorText() != "" {
		t.Errorf("errors %v with no error directory", a.Errors)
	}

	// The archiver's error files, beside the data directory, as
	// pgBackRest's asynchronous archive-push leaves them.
	dir := filepath.Join(srv.base, "spool", "archive", "db", "out")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Join(srv.base, "spool")) })
	files := map[string]string{
		"000000010000000000000003.error": "103\nunable to find a valid repository:\n  repo1: [HostConnectError] unable to connect\n",
		"global.error":                   "39\nHTTP request failed: 403 Forbidden\nHINT: is the bucket yours?\nHTTP request failed: 403 Forbidden\n",
		"000000010000000000000004.error": "103\nunable to find a valid repository:\n  repo1: [HostConnectError] unable to connect\n",
		"000000010000000000000002.ok":    "",
	}
	if err := os.WriteFile(filepath.Join(srv.base, "spool", "stanza-create.error"), []byte("ERROR: [049]: unable to connect\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a, err = ArchiveStatus(ctx, srv.endpoint(), []string{"../spool/archive/db/out", "../spool"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Errors) != 4 {
		t.Errorf("errors %v, want the four .error files of the two directories", a.Errors)
	}
	want := "[39] HTTP request failed: 403 Forbidden; [103] unable to find a valid repository: repo1: [HostConnectError] unable to connect; ERROR: [049]: unable to connect"
	if got := a.ErrorText(); got != want {
		t.Errorf("ErrorText %q, want %q", got, want)
	}

	// A role that may not read server files is told so, not misled.
	srv.exec(t, "DROP ROLE IF EXISTS archive_reader")
	srv.exec(t, "CREATE ROLE archive_reader LOGIN PASSWORD 'secret-reader'")
	ep := srv.endpoint()
	ep.User, ep.Passwords = "archive_reader", []string{"secret-reader"}
	if _, err := ArchiveStatus(ctx, ep, []string{"../spool/archive/db/out"}, Options{}); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("a plain role read the error files: %v", err)
	}
}

func TestArchiverFailing(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name string
		a    Archiver
		want bool
	}{
		{"nothing yet", Archiver{}, false},
		{"archived", Archiver{ArchivedCount: 3, LastArchivedTime: t0}, false},
		{"failed, then archived", Archiver{ArchivedCount: 3, LastArchivedTime: t0, FailedCount: 1, LastFailedTime: t0.Add(-time.Second)}, false},
		{"archived, then failed", Archiver{ArchivedCount: 3, LastArchivedTime: t0, FailedCount: 1, LastFailedTime: t0.Add(time.Second)}, true},
		{"never archived, failed", Archiver{FailedCount: 2, LastFailedTime: t0}, true},
	} {
		if got := tt.a.Failing(); got != tt.want {
			t.Errorf("%s: Failing = %v, want %v", tt.name, got, tt.want)
		}
	}
}
