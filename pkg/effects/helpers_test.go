package effects

import (
	"testing"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
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
func buildAll(t testing.TB, pg *v1.Postgresql) *cluster.Objects {
	t.Helper()
	objs, err := cluster.Build(pg, cluster.Options{}, seeded(1))
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return objs
}
