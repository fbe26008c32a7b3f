package operator

import (
	"testing"
	"time"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/facts"
	"github.com/pgloop/pgloop/pkg/internal/fixtures"
)

// BenchmarkObserve measures the facts of a healthy 3-pod cluster read from
// the caches, the loop's hot path: every event of every cluster starts with
// it. BenchmarkFacts (pkg/facts) measures the derivation alone.
func BenchmarkObserve(b *testing.B) {
	pg := fixtures.NewPG("c1", 3)
	inf, _, _ := startInformers(b, []*v1.Postgresql{pg}, fixtures.StatefulSet(pg), fixtures.Lock(pg, "c1-0"),
		fixtures.Pod(pg, 0, fixtures.Master), fixtures.Pod(pg, 1), fixtures.Pod(pg, 2))
	obs := facts.NewObserver(inf, facts.NewDeriver(cluster.Options{}, true), func() time.Time { return fixtures.Now })
	if f, _ := obs.Observe("db/c1"); !f.ObjectsCurrent || f.Primary != "c1-0" {
		b.Fatalf("not a healthy cluster: %+v", f)
	}
	b.ReportAllocs()
	for b.Loop() {
		obs.Observe("db/c1")
	}
}
