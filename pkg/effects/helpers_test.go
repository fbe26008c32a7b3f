package effects

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// samples are the manifests under manifests/samples, by file name.
var samples = []string{"minimal", "full"}

// testUID is the UID given to test clusters, so owner references are
// deterministic.
const testUID = types.UID("6f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a00")

// loadSample reads manifests/samples/<name>.yaml as a cluster in namespace
// "db", the way the apiserver would hand it over (with a UID).
func loadSample(t testing.TB, name string) *v1.Postgresql {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "manifests", "samples", name+".yaml"))
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
	pg.UID = testUID
	return pg
}

// seeded returns a deterministic random source.
func seeded(seed byte) *rand.ChaCha8 {
	var s [32]byte
	s[0] = seed
	return rand.NewChaCha8(s)
}

// buildAll builds every object of pg with default options and a seeded
// random source.
func buildAll(t testing.TB, pg *v1.Postgresql) *cluster.Objects {
	t.Helper()
	objs, err := cluster.Build(pg, cluster.Options{}, seeded(1))
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return objs
}
