// Package samples hands the tests of pkg/cluster and pkg/effects the
// clusters of manifests/samples and a deterministic random source. It
// imports only the API types, so pkg/cluster's own tests can use it. Only
// tests import it.
package samples

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Names are the manifests under manifests/samples, by file name.
var Names = []string{"minimal", "full"}

// UID is the UID given to sample clusters, so owner references are
// deterministic.
const UID = types.UID("6f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a00")

// Load reads manifests/samples/<name>.yaml as a cluster in namespace "db",
// the way the apiserver would hand it over (with a UID). It fails t when
// the sample does not decode strictly or does not validate.
func Load(t testing.TB, name string) *v1.Postgresql {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "..", "..", "manifests", "samples", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pg := &v1.Postgresql{}
	if err := yaml.UnmarshalStrict(data, pg); err != nil {
		t.Fatalf("decode sample %s: %v", name, err)
	}
	if errs := pg.Validate(); len(errs) > 0 {
		t.Fatalf("sample %s is invalid: %v", name, errs.ToAggregate())
	}
	pg.Namespace = "db"
	pg.UID = UID
	return pg
}

// Seeded returns a deterministic random source, for golden files and
// passwords that must not change between runs.
func Seeded(seed byte) *rand.ChaCha8 {
	var s [32]byte
	s[0] = seed
	return rand.NewChaCha8(s)
}
