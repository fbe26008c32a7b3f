package pgsql

import (
	"context"
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
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
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
