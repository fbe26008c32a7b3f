package cluster

import (
	"testing"

	"sigs.k8s.io/yaml"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	pgsamples "github.com/pgloop/pgloop/pkg/internal/samples"
)

// The samples and the seeded random source are shared with the other
// package that builds clusters in its tests (pkg/internal/samples).
var (
	samples    = pgsamples.Names
	loadSample = pgsamples.Load
	seeded     = pgsamples.Seeded
)

// buildAll builds every object of pg with default options and a seeded
// random source.
func buildAll(t testing.TB, pg *v1.Postgresql) *Objects {
	t.Helper()
	objs, err := Build(pg, Options{}, seeded(1))
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return objs
}

// encode renders objects as a multi-document YAML stream.
func encode(t testing.TB, objs []Object) []byte {
	t.Helper()
	var out []byte
	for i, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatalf("encode %T %s: %v", o, o.GetName(), err)
		}
		if i > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, b...)
	}
	return out
}
