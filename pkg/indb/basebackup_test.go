package indb

import (
	"strings"
	"testing"
	"time"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// infoJSON is pgBackRest 2.45's info --output=json of a stanza with a full
// and a differential backup (trimmed of fields pgloop does not read).
const infoJSON = `[{"archive":[{"database":{"id":1,"repo-key":1},"id":"15-1","max":"000000010000000000000006","min":"000000010000000000000003"}],
"backup":[
 {"archive":{"start":"000000010000000000000003","stop":"000000010000000000000003"},"error":false,
  "info":{"delta":23065153,"repository":{"delta":3073176,"size":3073176},"size":23065153},
  "label":"20261203-090743F","prior":null,"timestamp":{"start":1764752863,"stop":1764752868},"type":"full"},
 {"archive":{"start":"000000010000000000000004","stop":"000000010000000000000005"},"error":false,
  "info":{"delta":8192,"repository":{"delta":1024,"size":3073177},"size":23065152},
  "label":"20261203-090743F_20261203-090749D","prior":"20261203-090743F","timestamp":{"start":1764752869,"stop":1764752871},"type":"diff"},
 {"archive":{"start":"000000010000000000000006","stop":"000000010000000000000006"},"error":true,
  "info":{"delta":1,"repository":{"delta":1,"size":1},"size":1},
  "label":"20261203-091000F","prior":null,"timestamp":{"start":1764753000,"stop":1764753005},"type":"full"}],
"cipher":"none","name":"bk","status":{"code":0,"message":"ok"}}]`

func TestParseInfo(t *testing.T) {
	got, err := parseInfo([]byte(infoJSON))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d backups, want 2 (the damaged one left out): %+v", len(got), got)
	}
	full, diff := got[0], got[1]
	if full.Label != "20261203-090743F" || full.Type != v1.BackupFull || full.Size != 23065153 || full.RepoSize != 3073176 ||
		full.WALStart != "000000010000000000000003" || !full.Start.Time.Equal(time.Unix(1764752863, 0)) || full.Stop.Sub(full.Start.Time) != 5*time.Second {
		t.Errorf("full backup %+v", full)
	}
	if diff.Type != v1.BackupDifferential || diff.RepoSize != 1024 || diff.WALStop != "000000010000000000000005" {
		t.Errorf("diff backup %+v: want its repository delta as RepoSize", diff)
	}
	for _, bad := range []string{"", "{", `[]`, `[{"backup":[],"status":{"code":99,"message":"other"}}]`} {
		if _, err := parseInfo([]byte(bad)); err == nil {
			t.Errorf("parseInfo(%q): no error", bad)
		}
	}
	if got, err := parseInfo([]byte(`[{"backup":[],"status":{"code":2,"message":"no valid backups"}}]`)); err == nil && len(got) != 0 {
		t.Errorf("an empty repository: %+v", got)
	}
}

func TestBackupWords(t *testing.T) {
	for _, c := range []struct{ log, want string }{
		{"", ""},
		{"2026-12-03 09:07:43.123 P00   WARN: a warning\n", "a warning"},
		{"WARN: w\nERROR: [049]: unable to load info file '/x/backup.info':\n       HostConnectError: unable to connect to '127.0.0.1:1': [111] Connection refused\n       HINT: is the bucket there?\n",
			"[049]: unable to load info file '/x/backup.info': HostConnectError: unable to connect to '127.0.0.1:1': [111] Connection refused"},
	} {
		if got := backupWords(c.log); got != c.want {
			t.Errorf("backupWords(%q) = %q, want %q", c.log, got, c.want)
		}
	}
}

// verifyOK is pgBackRest 2.45's verify output of a sound repository, and
// verifyGap that of one with segment 3 deleted (both run here, on a
// repository on disk).
const (
	verifyOK = `2026-12-03 09:13:22.164 P00   INFO: verify command begin 2.45: --config=/dev/null
2026-12-03 09:13:22.472 P00 DETAIL: archiveId: 15-1, wal start: 000000010000000000000001, wal stop: 000000010000000000000004
stanza: v
status: ok
  archiveId: 15-1, total WAL checked: 4, total valid WAL: 4
    missing: 0, checksum invalid: 0, size invalid: 0, other: 0
  backup: 20261203-091311F, status: valid, total files checked: 964, total valid files: 964
    missing: 0, checksum invalid: 0, size invalid: 0, other: 0
2026-12-03 09:13:22.473 P00   INFO: verify command end: completed successfully (311ms)
exit 0
`
	verifyGap = `2026-12-03 09:13:22.472 P00 DETAIL: archiveId: 15-1, wal start: 000000010000000000000001, wal stop: 000000010000000000000002
2026-12-03 09:13:22.472 P00 DETAIL: archiveId: 15-1, wal start: 000000010000000000000004, wal stop: 000000010000000000000004
2026-12-03 09:13:22.472 P00 DETAIL: archiveId: 15-1, wal start: 000000020000000000000005, wal stop: 000000020000000000000006
stanza: v
status: ok
  archiveId: 15-1, total WAL checked: 3, total valid WAL: 3
    missing: 0, checksum invalid: 0, size invalid: 0, other: 0
  backup: 20261203-091311F, status: valid, total files checked: 964, total valid files: 964
    missing: 0, checksum invalid: 0, size invalid: 0, other: 0
exit 0
`
)

func TestVerifyResult(t *testing.T) {
	ok, msg := verifyResult(verifyOK, []string{"20261203-091311F"})
	if !ok || msg != "1 backups valid; WAL 000000010000000000000001-000000010000000000000004 without a gap" {
		t.Errorf("sound: %v %q", ok, msg)
	}
	ok, msg = verifyResult(verifyGap, []string{"20261203-091311F"})
	want := "WAL gap in 15-1 after 000000010000000000000002, up to 000000010000000000000004: no point in time past 000000010000000000000002 can be restored"
	if ok || msg != want {
		t.Errorf("gap (a new timeline is none): %v %q, want %q", ok, msg, want)
	}
	bad := strings.Replace(verifyOK, "missing: 0, checksum invalid: 0, size invalid: 0, other: 0\n  backup", "missing: 0, checksum invalid: 2, size invalid: 0, other: 0\n  backup", 1)
	bad = strings.Replace(bad, "status: valid", "status: invalid", 1)
	if ok, msg := verifyResult(bad, []string{"20261203-091311F"}); ok || !strings.Contains(msg, "archiveId: 15-1: missing: 0, checksum invalid: 2") || !strings.Contains(msg, "backup 20261203-091311F is invalid") {
		t.Errorf("damaged: %v %q", ok, msg)
	}
	if ok, msg := verifyResult("ERROR: [049]: unable to load info file\nexit 49\n", nil); ok || msg != "verify exited with code 49; [049]: unable to load info file" {
		t.Errorf("failed: %v %q", ok, msg)
	}
	if ok, _ := verifyResult("status: ok\n", nil); ok {
		t.Error("cut short: ok")
	}
	// An expired backup's directory left in the store (SeaweedFS keeps
	// empty directories) is no backup; one info lists is.
	leftover := strings.Replace(verifyOK, "  backup: 20261203-091311F", "  backup: 20261202-091311F, status: manifest missing, total files checked: 0, total valid files: 0\n  backup: 20261203-091311F", 1)
	if ok, msg := verifyResult(leftover, []string{"20261203-091311F"}); !ok || !strings.HasPrefix(msg, "1 backups valid") {
		t.Errorf("leftover: %v %q", ok, msg)
	}
	if ok, _ := verifyResult(leftover, []string{"20261202-091311F", "20261203-091311F"}); ok {
		t.Error("a listed backup without its manifest: ok")
	}
}

func TestDrillResult(t *testing.T) {
	ok := drillResult("restored\ndrill ok restore 4 start 2\n")
	if !ok.Succeeded || ok.RestoreSeconds != 4 || ok.StartSeconds != 2 || !strings.Contains(ok.Message, "restored in 4 s") {
		t.Errorf("ok: %+v", ok)
	}
	failed := drillResult("ERROR: PostgreSQL did not start on the restored backup:\nFATAL:  could not map anonymous shared memory\ndrill failed restore 3\n")
	if failed.Succeeded || failed.RestoreSeconds != 3 ||
		failed.Message != "the restore drill failed: PostgreSQL did not start on the restored backup: FATAL: could not map anonymous shared memory" {
		t.Errorf("failed: %+v", failed)
	}
	restore := drillResult("P00 ERROR: [075]: no backup set found to restore\ndrill failed\n")
	if restore.Succeeded || restore.Message != "the restore drill failed: [075]: no backup set found to restore" {
		t.Errorf("restore failed: %+v", restore)
	}
	if cut := drillResult("restored\n"); cut.Succeeded || cut.Message != "the restore drill did not finish" {
		t.Errorf("cut short: %+v", cut)
	}
}
