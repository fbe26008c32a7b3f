package v1

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

// fuzzSeedFiles are the manifests users start from: the samples and make
// run's own cluster. FuzzDecodeValidate and pkg/cluster's FuzzBuild start
// from them; testdata/fuzz/FuzzDecodeValidate holds the other seeds and the
// inputs that once failed.
var fuzzSeedFiles = []string{
	filepath.Join(samplesDir, "minimal.yaml"),
	filepath.Join(samplesDir, "full.yaml"),
	filepath.Join(samplesDir, "..", "..", "hack", "samples", "local.yaml"),
}

// decoded is what one decoding and validation of a manifest gives.
type decoded struct {
	pg        *Postgresql
	decodeErr string
	errs      []string
}

// decodeValidate decodes data (YAML or JSON) as the apiserver's clients do,
// without refusing unknown fields, and validates what it decoded.
func decodeValidate(data []byte) decoded {
	pg := &Postgresql{}
	if err := yaml.Unmarshal(data, pg); err != nil {
		return decoded{decodeErr: err.Error()}
	}
	d := decoded{pg: pg}
	for _, e := range pg.Validate() {
		d.errs = append(d.errs, e.Error())
	}
	return d
}

// FuzzDecodeValidate decodes arbitrary bytes as a Postgresql and validates
// it. It checks that neither step panics, that both are deterministic (the
// same input gives the same object and the same errors), that Validate does
// not modify the object, and that a valid object stays valid, and the same,
// once it went through JSON as the apiserver stores and serves it.
func FuzzDecodeValidate(f *testing.F) {
	for _, name := range fuzzSeedFiles {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		j, err := yaml.YAMLToJSON(data)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(j)
	}
	valid, err := json.Marshal(validCluster())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)

	f.Fuzz(func(t *testing.T, data []byte) {
		first := decodeValidate(data)
		second := decodeValidate(data)
		if first.decodeErr != second.decodeErr {
			t.Fatalf("decoding is not deterministic: %q, then %q", first.decodeErr, second.decodeErr)
		}
		if first.pg == nil {
			return
		}
		if !reflect.DeepEqual(first.pg, second.pg) {
			t.Fatalf("decoding is not deterministic:\n%#v\n%#v", first.pg, second.pg)
		}
		if !reflect.DeepEqual(first.errs, second.errs) {
			t.Fatalf("validation is not deterministic:\n%q\n%q", first.errs, second.errs)
		}

		before := first.pg.DeepCopy()
		_ = first.pg.Validate()
		if !reflect.DeepEqual(before, first.pg) {
			t.Fatalf("Validate modified the object:\nbefore %#v\nafter  %#v", before, first.pg)
		}

		if len(first.errs) > 0 {
			return
		}
		stored, err := json.Marshal(first.pg)
		if err != nil {
			t.Fatalf("encode a valid cluster: %v", err)
		}
		again := decodeValidate(stored)
		switch {
		case again.decodeErr != "":
			t.Fatalf("a valid cluster does not decode from its own JSON %s: %s", stored, again.decodeErr)
		case len(again.errs) > 0:
			t.Fatalf("a valid cluster is invalid once encoded as %s: %q", stored, again.errs)
		case !apiequality.Semantic.DeepEqual(first.pg.Spec, again.pg.Spec):
			t.Fatalf("the spec changed through JSON:\n%#v\n%#v", first.pg.Spec, again.pg.Spec)
		}
	})
}
