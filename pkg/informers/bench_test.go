package informers

import (
	"testing"
	"time"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/facts"
)

// BenchmarkObserve measures the facts of a healthy 3-pod cluster read from
// the caches, the loop's hot path: every event of every cluster starts with
// it. BenchmarkFacts (pkg/facts) measures the derivation alone.
func BenchmarkObserve(b *testing.B) {
	pg := newPG("c1", 3)
	inf, _, _ := start(b, Options{}, discard{}, []*v1.Postgresql{pg},
		statefulSet(pg), lock(pg, "c1-0"), pod(pg, 0, master), pod(pg, 1), pod(pg, 2))
	obs := facts.NewObserver(inf, facts.NewDeriver(cluster.Options{}, true), func() time.Time { return now })
	if f, _ := obs.Observe("db/c1"); !f.ObjectsCurrent || f.Primary != "c1-0" {
		b.Fatalf("not a healthy cluster: %+v", f)
	}
	b.ReportAllocs()
	for b.Loop() {
		obs.Observe("db/c1")
	}
}
