package status

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/status/ -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test ./pkg/status/ -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

func TestListGolden(t *testing.T) {
	pg := &fakeAPI{items: items(clusters())}
	tests := []struct {
		golden string
		ns     string
		o      PrintOptions
	}{
		{"list.golden", "default", PrintOptions{}},
		{"list-all.golden", "", PrintOptions{AllNamespaces: true}},
		{"list-wide.golden", "", PrintOptions{AllNamespaces: true, Wide: true}},
		{"list-color.golden", "", PrintOptions{AllNamespaces: true, Color: true}},
		{"list-empty.golden", "nobody-here", PrintOptions{}},
	}
	for _, tc := range tests {
		t.Run(tc.golden, func(t *testing.T) {
			rows, err := List(context.Background(), pg.client(), tc.ns, tc.o.AllNamespaces)
			if err != nil {
				t.Fatal(err)
			}
			tc.o.Now = now
			var out bytes.Buffer
			if err := PrintTable(&out, rows, tc.o); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.golden, out.Bytes())
		})
	}
}

func TestDetailGolden(t *testing.T) {
	pg := &fakeAPI{items: items(clusters())}
	kube := fake.NewClientset(append(pods(), deployments()...)...)
	for _, c := range clusters() {
		for _, color := range []bool{false, true} {
			name := "detail-" + strings.TrimPrefix(c.Name, "db-")
			if color {
				if c.Name != "db-degraded" {
					continue
				}
				name += "-color"
			}
			t.Run(name, func(t *testing.T) {
				v, err := Detail(context.Background(), pg.client(), kube, c.Namespace, c.Name)
				if err != nil {
					t.Fatal(err)
				}
				var out bytes.Buffer
				if err := PrintDetail(&out, v, PrintOptions{Color: color, Now: now}); err != nil {
					t.Fatal(err)
				}
				golden(t, name+".golden", out.Bytes())
			})
		}
	}
}

func TestDetailPods(t *testing.T) {
	pg := &fakeAPI{items: items(clusters())}
	v, err := Detail(context.Background(), pg.client(), fake.NewClientset(pods()...), "default", "db-running")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range v.Pods {
		names = append(names, p.Name+"="+p.Role)
	}
	// db-other-0 shares the namespace, not the selector.
	if got, want := strings.Join(names, ","), "db-running-0=master,db-running-1=replica,db-running-2=replica"; got != want {
		t.Errorf("pods %s, want %s", got, want)
	}
}

func TestMachineOutput(t *testing.T) {
	pg := &fakeAPI{items: items(clusters())}
	rows, err := List(context.Background(), pg.client(), "", true)
	if err != nil {
		t.Fatal(err)
	}
	v, err := Detail(context.Background(), pg.client(), fake.NewClientset(pods()...), "team-b", "db-degraded")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		golden string
		print  func(*bytes.Buffer) error
	}{
		{"list.json.golden", func(b *bytes.Buffer) error { return PrintJSON(b, rows) }},
		{"list.yaml.golden", func(b *bytes.Buffer) error { return PrintYAML(b, rows) }},
		{"list-empty.json.golden", func(b *bytes.Buffer) error { return PrintJSON(b, []Row{}) }},
		{"detail-degraded.json.golden", func(b *bytes.Buffer) error { return PrintJSON(b, ForOutput(v.Cluster)) }},
		{"detail-degraded.yaml.golden", func(b *bytes.Buffer) error { return PrintYAML(b, ForOutput(v.Cluster)) }},
	}
	for _, tc := range tests {
		t.Run(tc.golden, func(t *testing.T) {
			var out bytes.Buffer
			if err := tc.print(&out); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.golden, out.Bytes())
		})
	}
	if v.Cluster.APIVersion != "" || len(v.Cluster.ManagedFields) == 0 {
		t.Error("ForOutput modified the cluster it was given")
	}
}

func TestUseColor(t *testing.T) {
	defer func(f func(*os.File) bool) { isTerminal = f }(isTerminal)
	isTerminal = func(*os.File) bool { return true }
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "NO_COLOR" {
				return v
			}
			return ""
		}
	}
	tests := []struct {
		name    string
		w       any
		noColor string
		want    bool
	}{
		{"terminal", os.Stdout, "", true},
		{"terminal, NO_COLOR", os.Stdout, "1", false},
		{"buffer", &bytes.Buffer{}, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.w.(interface{ Write([]byte) (int, error) })
			if got := UseColor(w, env(tc.noColor)); got != tc.want {
				t.Errorf("UseColor = %v, want %v", got, tc.want)
			}
		})
	}
	isTerminal = func(*os.File) bool { return false }
	if UseColor(os.Stdout, env("")) {
		t.Error("UseColor on a file that is not a terminal")
	}
}
