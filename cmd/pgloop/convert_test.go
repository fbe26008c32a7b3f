package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
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

// TestConvertGolden converts each testdata/convert/*.yaml and compares the
// output, and the error if any (as trailing comments), with its .golden
// file. go test -update rewrites them.
func TestConvertGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/convert/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	for _, in := range inputs {
		t.Run(filepath.Base(in), func(t *testing.T) {
			out, err := runConvertCmd(t, "", in)
			got := out
			if err != nil {
				got += "# error:\n# " + strings.ReplaceAll(err.Error(), "\n", "\n# ") + "\n"
			}
			golden := strings.TrimSuffix(in, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("output differs from %s (go test -update rewrites it):\n%s", golden, got)
			}
		})
	}
}

// TestConvertDecodesStrictly decodes every converted manifest of the
// goldens strictly into pgloop's type: no field pgloop does not know is
// left, and every value has the type pgloop's API wants.
func TestConvertDecodesStrictly(t *testing.T) {
	goldens, _ := filepath.Glob("testdata/convert/*.golden")
	if len(goldens) == 0 {
		t.Fatal("no goldens")
	}
	for _, g := range goldens {
		data, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(data), "\n---\n") {
			var pg v1.Postgresql
			if err := yaml.UnmarshalStrict([]byte(doc), &pg); err != nil {
				t.Errorf("%s, document %d: %v", g, i+1, err)
				continue
			}
			if pg.APIVersion != v1.SchemeGroupVersion.String() || pg.Kind != v1.PostgresqlKind || pg.Name == "" {
				t.Errorf("%s, document %d: apiVersion %q kind %q name %q", g, i+1, pg.APIVersion, pg.Kind, pg.Name)
			}
		}
	}
}

// TestConvertKeepsPgloopFields converts pgloop's full sample, which sets
// every spec field, dressed as a zalando manifest: every field must come
// through unchanged, so a field added to pgloop's API is kept by convert.
func TestConvertKeepsPgloopFields(t *testing.T) {
	sample, err := os.ReadFile("../../manifests/samples/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want v1.Postgresql
	if err := yaml.UnmarshalStrict(sample, &want); err != nil {
		t.Fatal(err)
	}
	zalando := strings.Replace(strings.Replace(string(sample),
		"apiVersion: pgloop.dev/v1", "apiVersion: acid.zalan.do/v1", 1), "kind: Postgresql", "kind: postgresql", 1)
	out, err := runConvertCmd(t, zalando)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "# dropped:") || strings.Contains(out, "# changed:") {
		t.Errorf("a field of pgloop's sample was dropped or changed:\n%s", out)
	}
	var got v1.Postgresql
	if err := yaml.UnmarshalStrict([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Spec, want.Spec) || !reflect.DeepEqual(got.ObjectMeta, want.ObjectMeta) {
		t.Errorf("converted:\n%+v\nwant:\n%+v", got, want)
	}
}

func TestConvertStdin(t *testing.T) {
	in, err := os.ReadFile("testdata/convert/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile("testdata/convert/minimal.golden")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(string(golden), "(testdata/convert/minimal.yaml, document 1)", "(stdin, document 1)", 1)
	for _, args := range [][]string{nil, {"-"}} {
		out, err := runConvertCmd(t, string(in), args...)
		if err != nil {
			t.Fatalf("args %q: %v", args, err)
		}
		if out != want {
			t.Errorf("args %q: output\n%s\nwant\n%s", args, out, want)
		}
	}
}

func TestConvertErrors(t *testing.T) {
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
		{name: "a pgloop manifest", stdin: "# comment only\n---\napiVersion: pgloop.dev/v1\nkind: Postgresql\nmetadata: {name: db}\n",
			wantErr: []string{"stdin, document 1: ", "it is a pgloop manifest already"}},
		{name: "a List item", stdin: "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n",
			wantErr: []string{`stdin, document 1, item 1: apiVersion "v1", kind "ConfigMap"`}},
		{name: "not a quantity", stdin: strings.Replace(minimal, "size: 1Gi}", "size: 1e3Gi}, resources: {limits: {cpu: \"1.5.0\"}}", 1),
			wantErr: []string{`spec.resources.limits.cpu: "1.5.0" is not a quantity`, `spec.volume.size: "1e3Gi" is not a quantity`}},
		{name: "wrong type", stdin: strings.Replace(minimal, "teamId: t,", "teamId: t, patroni: {ttl: \"40\"},", 1),
			wantErr: []string{"stdin, document 1: the converted manifest does not decode as a pgloop Postgresql"}},
		{name: "no spec", stdin: "apiVersion: acid.zalan.do/v1\nkind: postgresql\nmetadata: {name: db}\n",
			wantErr: []string{"stdin, document 1: no spec"}},
		{name: "a scalar", stdin: "just text\n", wantErr: []string{"stdin, document 1: not an object"}},
		{name: "no such file", args: []string{"testdata/convert/none.yaml"}, wantErr: []string{"none.yaml: no such file"}},
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
			if errors.Is(err, errRefused) != tc.refused {
				t.Errorf("errors.Is(err, errRefused) = %v, want %v", !tc.refused, tc.refused)
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

func TestConvertUnknownField(t *testing.T) {
	in := "apiVersion: acid.zalan.do/v1\nkind: postgresql\nmetadata: {name: db, color: blue}\n" +
		"spec: {teamId: t, volume: {size: 1Gi, speed: 9}, postgresql: {version: \"17\"}, numberOfInstance: 2}\nextra: 1\n"
	out, err := runConvertCmd(t, in)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"# dropped: extra: not a field of a Postgresql\n",
		"# dropped: metadata.color: not a field of metadata\n",
		"# dropped: spec.numberOfInstance: not a zalando field pgloop knows\n",
		"# dropped: spec.volume.speed: not a zalando field pgloop knows\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// TestMigratingDoc keeps docs/migrating.md's example output and its table
// of unsupported fields generated by convert. go test -update rewrites them.
func TestMigratingDoc(t *testing.T) {
	const path = "../../docs/migrating.md"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)

	// The example: the first yaml block between the markers is the input,
	// the second what convert prints for it.
	const exBegin, exEnd = "<!-- convert-example:begin", "<!-- convert-example:end -->"
	i, j := strings.Index(text, exBegin), strings.Index(text, exEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the convert-example markers", path)
	}
	blocks := strings.Split(text[i:j], "```yaml\n")
	if len(blocks) != 3 {
		t.Fatalf("%s: want two yaml blocks in the example, got %d", path, len(blocks)-1)
	}
	input, _, _ := strings.Cut(blocks[1], "```\n")
	out, err := runConvertCmd(t, input)
	if err != nil {
		t.Fatalf("the example does not convert: %v", err)
	}
	out = strings.Replace(out, "(stdin, document 1)", "(acid-orders.yaml, document 1)", 1)
	k := i + strings.LastIndex(text[i:j], "```yaml\n") + len("```yaml\n")
	want := text[:k] + out + "```\n" + text[j:]

	// The table of unsupported fields.
	const tBegin, tEnd = "<!-- convert-fields:begin (generated from cmd/pgloop/convert.go; go test -update rewrites it) -->\n", "<!-- convert-fields:end -->"
	i, j = strings.Index(want, tBegin), strings.Index(want, tEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the convert-fields markers", path)
	}
	want = want[:i+len(tBegin)] + unsupportedFieldsMarkdown() + want[j:]

	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if text != want {
		t.Fatalf("%s's example or field table is out of date: run go test ./cmd/pgloop -update", path)
	}
}

// TestZalandoFieldsUnsupported keeps the table of reasons honest: a field
// pgloop came to support must leave it, or its stale reason would be shown
// wherever the table is read (docs/migrating.md).
func TestZalandoFieldsUnsupported(t *testing.T) {
	for key := range zalandoFields {
		if pgloopHas(key) {
			t.Errorf("zalandoFields[%q] says why pgloop drops it, but pgloop has it now: remove the line", key)
		}
	}
}

func TestPgloopHas(t *testing.T) {
	for key, want := range map[string]bool{
		"teamId": true, "volume.size": true, "volume.iops": false, "patroni.pg_hba": true, "clone": false,
		"resources.requests.cpu": true, "resources.requests.hugepages-2Mi": false, "users.*": true,
		"connectionPooler.resources.limits.memory": true, "teamId.x": false,
	} {
		if got := pgloopHas(key); got != want {
			t.Errorf("pgloopHas(%q) = %v, want %v", key, got, want)
		}
	}
}
