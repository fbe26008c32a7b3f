package convert

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// e2eToleration and e2eAffinity are what e2e TestAdopt puts in place of
// TOLERATION and AFFINITY (test/testbed: DataPlaneToleration, the process
// node's label).
const (
	e2eToleration = `{"key":"pgloop.dev/data-plane","operator":"Equal","value":"process","effect":"NoSchedule"}`
	e2eAffinity   = "{key: type, operator: In, values: [process]}"
)

// TestAdoptGolden converts, as `pgloop convert --adopt` does, the manifest
// e2e TestAdopt adopts (test/e2e/testdata/zalando-adopt.yaml), zalando's
// minimal example and one with a clone, and compares the output with
// testdata/adopt/*.golden (go test -update rewrites them).
func TestAdoptGolden(t *testing.T) {
	for _, in := range []string{"../../test/e2e/testdata/zalando-adopt.yaml", "testdata/minimal.yaml", "testdata/clone.yaml"} {
		t.Run(filepath.Base(in), func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			// The e2e test's placeholders, filled in as it does.
			input := strings.NewReplacer("name: NAME", "name: acid-adopt",
				"- TOLERATION", "- "+e2eToleration, "- AFFINITY", "- "+e2eAffinity).Replace(string(data))
			convs, err := Convert(filepath.Base(in), strings.NewReader(input))
			if err != nil {
				t.Fatal(err)
			}
			Adopt(convs)
			out, err := Render(convs)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "adopt", strings.TrimSuffix(filepath.Base(in), ".yaml")+".golden")
			if *update {
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != string(want) {
				t.Errorf("output differs from %s (go test -update rewrites it):\n%s", golden, out)
			}
			var pg v1.Postgresql
			if err := yaml.UnmarshalStrict(out, &pg); err != nil {
				t.Fatalf("the adopting manifest does not decode strictly: %v", err)
			}
			if !pg.AdoptRequested() || pg.Spec.Clone != nil {
				t.Errorf("annotations %v, clone %v: want %s=%s and no clone", pg.Annotations, pg.Spec.Clone, v1.AnnotationAdopt, v1.AdoptZalando)
			}
			if errs := pg.Validate(); len(errs) != 0 {
				t.Errorf("the adopting manifest does not validate: %v", errs)
			}
		})
	}
}
