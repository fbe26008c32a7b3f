package pgsql

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestSettings(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	var rec recorder
	got, err := Settings(ctx, srv.endpoint(), []string{"work_mem", "Work_Mem", "no_such_setting", "listen_addresses"}, rec.options())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Setting{
		"work_mem":         {Name: "work_mem", Known: true, Current: "4MB"},
		"Work_Mem":         {Name: "Work_Mem", Known: true, Current: "4MB"},
		"no_such_setting":  {Name: "no_such_setting"},
		"listen_addresses": {Name: "listen_addresses", Known: true, Current: "127.0.0.1"},
	}
	if len(got) != len(want) {
		t.Errorf("got %d settings, want %d: %+v", len(got), len(want), got)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %+v, want %+v", name, got[name], w)
		}
	}
	if len(rec.outcomes) != 1 || rec.outcomes[0] != OutcomeOK {
		t.Errorf("observed %v, want one ok", rec.outcomes)
	}
}

// TestSettingsPendingRestart: a value in the files the server takes only on
// restart reads as in the file, not applied, restart pending.
func TestSettingsPendingRestart(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	srv.exec(t, "ALTER SYSTEM SET max_connections = 150")
	t.Cleanup(func() {
		srv.exec(t, "ALTER SYSTEM RESET max_connections")
		srv.exec(t, "SELECT pg_reload_conf()")
	})
	srv.exec(t, "SELECT pg_reload_conf()")

	// The postmaster rereads the files when it gets to its SIGHUP.
	var got Setting
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		settings, err := Settings(ctx, srv.endpoint(), []string{"max_connections"}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got = settings["max_connections"]; got.PendingRestart {
			break
		}
	}
	want := Setting{Name: "max_connections", Known: true, Current: "100", File: "150", InFile: true, PendingRestart: true,
		Error: "setting could not be applied"}
	if got != want {
		t.Errorf("max_connections: %+v, want %+v", got, want)
	}
}

// TestCheckParameters: what PostgreSQL would refuse is refused by name, with
// its words; what it takes, or cannot tell before a reload, passes.
func TestCheckParameters(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	ok := map[string]string{"work_mem": "8MB", "max_connections": "200", "pg_stat_statements.max": "5000", "Statement_Timeout": "5s"}
	if err := CheckParameters(ctx, srv.endpoint(), ok, Options{}); err != nil {
		t.Errorf("acceptable parameters refused: %v", err)
	}
	err := CheckParameters(ctx, srv.endpoint(), map[string]string{
		"work_mem": "lots", "no_such_setting": "1", "statement_timeout": "5s",
	}, Options{})
	if err == nil {
		t.Fatal("bad parameters accepted")
	}
	for _, want := range []string{`parameter no_such_setting: unrecognized configuration parameter`,
		`parameter work_mem = "lots": invalid value for parameter "work_mem": "lots"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error %q is not one line", err)
	}
	if strings.Contains(err.Error(), "statement_timeout") {
		t.Errorf("error %q names an acceptable parameter", err)
	}
}
