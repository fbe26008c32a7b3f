package main

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	"github.com/pgloop/pgloop/pkg/fsm"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{}, args...)) // nil would be os.Args
	err := cmd.Execute()
	return out.String(), err
}

func TestFSMCommand(t *testing.T) {
	tests := []struct {
		args    []string
		want    string
		wantErr string
	}{
		{args: []string{"fsm"}, want: fsm.Mermaid("")},
		{args: []string{"fsm", "--current", "Running"}, want: fsm.Mermaid("Running")},
		{args: []string{"fsm", "--markdown"}, want: fsm.Markdown()},
		{args: []string{"fsm", "--current", "Sleeping"}, wantErr: `unknown state "Sleeping"`},
		{args: []string{"fsm", "extra"}, wantErr: "unknown command"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := run(t, tc.args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out != tc.want {
				t.Errorf("output:\n%s\nwant:\n%s", out, tc.want)
			}
		})
	}
}

func TestVersionCommand(t *testing.T) {
	out, err := run(t, "version")
	if err != nil || !strings.HasPrefix(out, "pgloop ") {
		t.Fatalf("version: %q, %v", out, err)
	}
}

var update = flag.Bool("update", false, "rewrite generated documentation")
