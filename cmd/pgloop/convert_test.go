package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/pgloop/pgloop/pkg/convert"
)

// runConvertCmd runs `pgloop convert args...` with stdin as its standard
// input and returns what it printed on stdout.
func runConvertCmd(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(append([]string{"convert"}, args...))
	err := cmd.Execute()
	return out.String(), err
}

// testdata is pkg/convert's, where the conversion is tested: here only how
// the command reads its inputs and writes their conversion.
const testdata = "../../pkg/convert/testdata/"

// TestConvertInputs reads standard input when there is no FILE or FILE is
// -, and each FILE in order, naming each in the output's comments.
func TestConvertInputs(t *testing.T) {
	in, err := os.ReadFile(testdata + "minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile(testdata + "minimal.golden")
	if err != nil {
		t.Fatal(err)
	}
	from := func(name string) string {
		return strings.Replace(string(golden), "(testdata/minimal.yaml, document 1)", "("+name+", document 1)", 1)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{args: nil, want: from("stdin")},
		{args: []string{"-"}, want: from("stdin")},
		{args: []string{testdata + "minimal.yaml"}, want: from(testdata + "minimal.yaml")},
		{args: []string{testdata + "minimal.yaml", "-"}, want: from(testdata+"minimal.yaml") + "---\n" + from("stdin")},
	} {
		out, err := runConvertCmd(t, string(in), tc.args...)
		if err != nil {
			t.Fatalf("args %q: %v", tc.args, err)
		}
		if out != tc.want {
			t.Errorf("args %q: output\n%s\nwant\n%s", tc.args, out, tc.want)
		}
	}
}

// TestConvertExitStatus: the command fails and prints nothing when a
// document cannot be converted, and fails with the output printed when
// pgloop's validation refuses values that were kept.
func TestConvertExitStatus(t *testing.T) {
	const minimal = "apiVersion: acid.zalan.do/v1\nkind: postgresql\nmetadata: {name: db}\n" +
		"spec: {teamId: t, volume: {size: 1Gi}, postgresql: {version: \"17\"}}\n"
	tests := []struct {
		name    string
		stdin   string
		args    []string
		wantErr []string
		refused bool // the output is printed, the command fails
	}{
		{name: "a Service after a cluster", stdin: minimal + "---\napiVersion: v1\nkind: Service\nmetadata: {name: db}\n",
			wantErr: []string{`stdin, document 2: apiVersion "v1", kind "Service" is not a zalando postgresql`}},
		{name: "no such file", args: []string{"testdata/none.yaml"}, wantErr: []string{"none.yaml: no such file"}},
		{name: "a file after one that fails", stdin: "just text\n", args: []string{"-", testdata + "minimal.yaml"},
			wantErr: []string{"stdin, document 1: not an object"}},
		{name: "refused values", stdin: strings.Replace(minimal, `version: "17"`, `version: "12"`, 1), refused: true,
			wantErr: []string{"pgloop would refuse values", `stdin, document 1 (db): spec.postgresql.version: Unsupported value: "12"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runConvertCmd(t, tc.stdin, tc.args...)
			if err == nil {
				t.Fatalf("no error; output:\n%s", out)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if errors.Is(err, convert.ErrRefused) != tc.refused {
				t.Errorf("errors.Is(err, convert.ErrRefused) = %v, want %v", !tc.refused, tc.refused)
			}
			switch {
			case tc.refused && !strings.Contains(out, "# REFUSED by pgloop's validation, kept: spec.postgresql.version"):
				t.Errorf("output lacks the REFUSED comment:\n%s", out)
			case !tc.refused && out != "":
				t.Errorf("output on error:\n%s", out)
			}
		})
	}
}

// TestConvertAdoptFlag: --adopt writes the annotation that asks for the
// adoption; without it there is none.
func TestConvertAdoptFlag(t *testing.T) {
	in, err := os.ReadFile(testdata + "minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{nil, {"--adopt"}} {
		out, err := runConvertCmd(t, string(in), args...)
		if err != nil {
			t.Fatalf("convert %v: %v", args, err)
		}
		if got, want := strings.Contains(out, "pgloop.dev/adopt: zalando"), len(args) > 0; got != want {
			t.Errorf("convert %v: annotation written %v, want %v:\n%s", args, got, want, out)
		}
	}
}
