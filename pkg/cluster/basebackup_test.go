package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// TestBackupProgram runs the programs COPY ... TO PROGRAM would, with a
// stand-in pgbackrest on PATH: each phase (backup, verify, drill) returns
// at once and leaves its files, a second start of the same ID's phase does
// nothing, and the next run clears the previous run's files.
func TestBackupProgram(t *testing.T) {
	for _, sh := range []string{"sh", "setsid", "base64"} {
		if _, err := exec.LookPath(sh); err != nil {
			t.Fatalf("%s is missing: %v", sh, err)
		}
	}
	dir := t.TempDir()
	bin, spool := filepath.Join(dir, "bin"), filepath.Join(dir, "spool")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// The stand-in logs its arguments; backup sleeps a little and fails
	// when FAIL is set; info prints a listing.
	fake := `#!/bin/sh
echo "$*" >>"` + dir + `/calls"
case "$*" in
*backup) sleep 0.3; [ -n "$FAIL" ] && { echo "ERROR: [049]: unable to load info file"; exit 49; }; echo "WARN: a warning"; exit 0;;
*verify) echo "status: ok";;
*restore) echo restored;;
*info) echo '[{"backup":[]}]';;
esac
`
	if err := os.WriteFile(filepath.Join(bin, "pgbackrest"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	// The program finds pg_ctl beside the server that runs it: here a
	// copy of sh named postgres, in bin, with a stand-in pg_ctl.
	shell, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(shell); err != nil || os.WriteFile(filepath.Join(bin, "postgres"), data, 0o755) != nil {
		t.Fatal(err)
	}
	pgctl := "#!/bin/sh\necho \"pg_ctl $*\" >>\"" + dir + "/calls\"\n"
	if err := os.WriteFile(filepath.Join(bin, "pg_ctl"), []byte(pgctl), 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(program string, err error, env ...string) time.Duration {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		// As PostgreSQL's popen: sh -c, its parent the server.
		cmd := exec.Command(filepath.Join(bin, "postgres"), "-c", `sh -c "$P"; true`)
		cmd.Env = append([]string{"P=" + program, "PATH=" + bin + ":" + os.Getenv("PATH"), "PGBACKREST_SPOOL_PATH=" + spool}, env...)
		began := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return time.Since(began)
	}
	run := func(id string, r v1.BackupRetention, env ...string) time.Duration {
		t.Helper()
		program, err := BackupProgram(id, BackupOptions{Retention: r})
		return start(program, err, env...)
	}
	// wait waits for file in the runs' directory to have a line that
	// ends the phase (the backup's exit code, verify's "exit N", the
	// drill's "drill ...") and returns the file. The line is whole: the
	// shell makes ID.exit empty before it writes the code into it.
	wait := func(file, last string) string {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			if b, err := os.ReadFile(filepath.Join(spool, "backup", file)); err == nil && strings.Contains(string(b), last) && strings.HasSuffix(string(b), "\n") {
				return strings.TrimSpace(string(b))
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s never ended", file)
		return ""
	}

	id := "20261203-091500-full"
	if took := run(id, v1.BackupRetention{Full: 2}); took > 250*time.Millisecond {
		t.Logf("the program took %v: it should return before the backup ends", took)
	}
	run(id, v1.BackupRetention{Full: 2}) // a second start: nothing
	if code := wait(id+".exit", ""); code != "0" {
		t.Errorf("exit %s, want 0", code)
	}
	// Then its verify and its drill, each a program of its own, started
	// twice: each runs once.
	for range 2 {
		start(VerifyProgram(id))
	}
	if out := wait(id+".verify", "exit "); !strings.HasSuffix(out, "exit 0") {
		t.Errorf("verify:\n%s", out)
	}
	for range 2 {
		start(DrillProgram(id))
	}
	wait(id+".drill", "drill ")
	calls, _ := os.ReadFile(filepath.Join(dir, "calls"))
	if n := strings.Count(string(calls), " backup\n"); n != 1 {
		t.Errorf("pgbackrest backup ran %d times, want 1:\n%s", n, calls)
	}
	if !strings.Contains(string(calls), "--type=full --start-fast --io-timeout=30 --repo1-retention-full=2 backup") {
		t.Errorf("calls:\n%s", calls)
	}
	if n := strings.Count(string(calls), " verify\n"); n != 1 {
		t.Errorf("pgbackrest verify ran %d times, want 1:\n%s", n, calls)
	}
	drill, _ := os.ReadFile(filepath.Join(spool, "backup", id+".drill"))
	if !strings.Contains(string(drill), "drill ok restore ") {
		t.Errorf("drill:\n%s", drill)
	}
	for _, want := range []string{"--type=immediate --target-action=pause --archive-mode=off --io-timeout=30 restore",
		"pg_ctl -D " + spool + "/backup/drill -w -t 3600", "pg_ctl -D " + spool + "/backup/drill -m immediate stop"} {
		if !strings.Contains(string(calls), want) {
			t.Errorf("no %q in the calls:\n%s", want, calls)
		}
	}
	if _, err := os.Stat(filepath.Join(spool, "backup", "drill")); !os.IsNotExist(err) {
		t.Errorf("the drill's directory is still there: %v", err)
	}
	if n := strings.Count(string(calls), " restore\n"); n != 1 {
		t.Errorf("pgbackrest restore ran %d times, want 1:\n%s", n, calls)
	}
	for _, f := range []string{id + ".log", id + ".verify", id + ".drill", "info.json", id + ".started", id + ".verify.started", id + ".drill.started"} {
		if _, err := os.Stat(filepath.Join(spool, "backup", f)); err != nil {
			t.Error(err)
		}
	}

	next := "20261203-101500-diff"
	run(next, v1.BackupRetention{FullDays: 14}, "FAIL=1")
	if code := wait(next+".exit", ""); code != "49" {
		t.Errorf("exit %s, want 49", code)
	}
	log, _ := os.ReadFile(filepath.Join(spool, "backup", next+".log"))
	if !strings.Contains(string(log), "[049]") {
		t.Errorf("log %q", log)
	}
	for _, f := range []string{id + ".log", id + ".verify", id + ".drill", id + ".verify.started", id + ".drill.started"} {
		if _, err := os.Stat(filepath.Join(spool, "backup", f)); !os.IsNotExist(err) {
			t.Errorf("the previous run's %s is still there: %v", f, err)
		}
	}
	calls, _ = os.ReadFile(filepath.Join(dir, "calls"))
	if !strings.Contains(string(calls), "--type=diff --start-fast --io-timeout=30 --repo1-retention-full-type=time --repo1-retention-full=14 backup") {
		t.Errorf("calls:\n%s", calls)
	}

	for _, bad := range []string{"", "x; rm -rf /", "20261203-091500-full'", "20261203-091500-other"} {
		if _, err := BackupProgram(bad, BackupOptions{Retention: v1.BackupRetention{Full: 1}}); err == nil {
			t.Errorf("BackupProgram(%q): no error", bad)
		}
		if _, err := VerifyProgram(bad); err == nil {
			t.Errorf("VerifyProgram(%q): no error", bad)
		}
		if _, err := DrillProgram(bad); err == nil {
			t.Errorf("DrillProgram(%q): no error", bad)
		}
	}
	if _, err := BackupProgram(id, BackupOptions{}); err == nil {
		t.Error("a retention that keeps nothing: no error")
	}
}

// TestSpreadSchedule: the operator's schedule is delayed by each cluster's
// own offset, less than the spread, the same every day; a spec's schedule
// is kept exactly.
func TestSpreadSchedule(t *testing.T) {
	daily, err := v1.ParseBackupSchedule(DefaultBackupSchedule)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{BackupScheduleSpread: time.Hour}
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	offsets := map[time.Duration]bool{}
	for i := range 20 {
		pg := &v1.Postgresql{}
		pg.UID = types.UID(fmt.Sprintf("0c7e1d52-%04d-4f0e-9d0a-3f6a9b1c2d3e", i))
		s := SpreadSchedule(pg, opts, daily)
		next := s.Next(now)
		base := time.Date(2026, 12, 4, 0, 30, 0, 0, time.UTC)
		if next.Before(base) || !next.Before(base.Add(time.Hour)) {
			t.Fatalf("%s: next %v, want from %v within the hour", pg.UID, next, base)
		}
		if again := s.Next(now); !again.Equal(next) {
			t.Errorf("%s: next %v then %v", pg.UID, next, again)
		}
		if after := s.Next(next); !after.Equal(next.Add(24 * time.Hour)) {
			t.Errorf("%s: after %v comes %v, want a day later", pg.UID, next, after)
		}
		if before := s.Next(next.Add(-time.Second)); !before.Equal(next) {
			t.Errorf("%s: a second before %v, next is %v", pg.UID, next, before)
		}
		offsets[next.Sub(base)] = true
	}
	if len(offsets) < 15 {
		t.Errorf("20 clusters got %d offsets", len(offsets))
	}

	own := &v1.Postgresql{Spec: v1.PostgresqlSpec{Backup: &v1.Backup{Schedule: "0 2 * * *"}}}
	own.UID = "0c7e1d52-0001-4f0e-9d0a-3f6a9b1c2d3e"
	if s := SpreadSchedule(own, opts, daily); s != Schedule(daily) {
		t.Errorf("a spec's schedule was spread: %v", s)
	}
	if s := SpreadSchedule(&v1.Postgresql{}, Options{}, daily); s != Schedule(daily) {
		t.Errorf("no spread: %v", s)
	}
}
