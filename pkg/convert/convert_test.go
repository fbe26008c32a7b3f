package convert

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ and docs/migrating.md's generated parts")

// convertString converts input, named name, and renders it as `pgloop
// convert` does: nothing when Convert fails, the manifests with the error
// when Render's is ErrRefused.
func convertString(t *testing.T, name, input string) (string, error) {
	t.Helper()
	convs, err := Convert(name, strings.NewReader(input))
	if err != nil {
		return "", err
	}
	out, err := Render(convs)
	return string(out), err
}

// TestConvertGolden converts each testdata/*.yaml and compares the output,
// and the error if any (as trailing comments), with its .golden file. go
// test -update rewrites them.
func TestConvertGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	for _, in := range inputs {
		t.Run(filepath.Base(in), func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			out, err := convertString(t, in, string(data))
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
	goldens, _ := filepath.Glob("testdata/*.golden")
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
	out, err := convertString(t, "stdin", zalando)
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

func TestConvertErrors(t *testing.T) {
	const minimal = "apiVersion: acid.zalan.do/v1\nkind: postgresql\nmetadata: {name: db}\n" +
		"spec: {teamId: t, volume: {size: 1Gi}, postgresql: {version: \"17\"}}\n"
	tests := []struct {
		name    string
		stdin   string
		wantErr []string
		refused bool // Render returns the output and ErrRefused
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
		{name: "refused values", stdin: strings.Replace(minimal, `version: "17"`, `version: "12"`, 1), refused: true,
			wantErr: []string{"pgloop would refuse values", `stdin, document 1 (db): spec.postgresql.version: Unsupported value: "12"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := convertString(t, "stdin", tc.stdin)
			if err == nil {
				t.Fatalf("no error; output:\n%s", out)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if errors.Is(err, ErrRefused) != tc.refused {
				t.Errorf("errors.Is(err, ErrRefused) = %v, want %v", !tc.refused, tc.refused)
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
	out, err := convertString(t, "stdin", in)
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
