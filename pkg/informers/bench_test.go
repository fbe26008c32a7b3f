package informers

import (
	"testing"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// BenchmarkObserve measures Observe of a healthy 3-pod cluster, the loop's
// hot path: every event of every cluster starts with it.
func BenchmarkObserve(b *testing.B) {
	pg := newPG("c1", 3)
	inf, _, _ := start(b, Options{}, discard{}, []*v1.Postgresql{pg},
		statefulSet(pg), lock(pg, "c1-0"), pod(pg, 0, master), pod(pg, 1), pod(pg, 2))
	if f, _ := inf.Observe("db/c1"); !f.ObjectsCurrent || f.Primary != "c1-0" {
		b.Fatalf("not a healthy cluster: %+v", f)
	}
	b.ReportAllocs()
	for b.Loop() {
		inf.Observe("db/c1")
	}
}
