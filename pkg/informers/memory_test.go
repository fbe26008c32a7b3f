package informers

import (
	"fmt"
	"runtime"
	"testing"

	"k8s.io/client-go/tools/cache"
)

// BenchmarkCacheMemory measures the live heap the informers' caches hold
// per cluster, kind by kind: N clusters' objects as a watch hands them over
// (apiCluster: defaulted, with status, managed fields and Patroni's
// annotations, decoded from JSON), each through the caches' transform
// (slim alone, or with share: transform) into a store indexed as its
// informer's is. Nothing else is live
// meanwhile, so the heap's growth is what the caches keep. One op is the
// transform of one pod as the API returns it.
//
//	go test ./pkg/informers -run '^$' -bench CacheMemory -benchtime 2000x
func BenchmarkCacheMemory(b *testing.B) {
	const clusters = 1000
	for _, bc := range []struct {
		instances int32
		name      string
		transform func(any) (any, error)
	}{{1, "slim", slim}, {1, "slim+share", transform}, {3, "slim+share", transform}} {
		instances := bc.instances
		b.Run(fmt.Sprintf("clusters=%d/instances=%d/transform=%s", clusters, instances, bc.name), func(b *testing.B) {
			kinds := []struct {
				name    string
				cluster bool // indexed byCluster too
				objs    func(c *apiCluster) []any
			}{
				{"postgresqls", false, func(c *apiCluster) []any { return []any{c.pg} }},
				{"statefulsets", false, func(c *apiCluster) []any { return []any{c.statefulSet} }},
				{"pods", true, func(c *apiCluster) []any { return asAny(c.pods) }},
				{"services", false, func(c *apiCluster) []any { return asAny(c.services) }},
				{"secrets", false, func(c *apiCluster) []any { return asAny(c.secrets) }},
				{"pdbs", false, func(c *apiCluster) []any { return []any{c.budget} }},
				{"claims", true, func(c *apiCluster) []any { return asAny(c.claims) }},
				{"configmaps", false, func(c *apiCluster) []any { return asAny(c.configMaps) }},
			}
			stores := make([]cache.Indexer, len(kinds))
			for i, k := range kinds {
				indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
				if k.cluster {
					indexers[byCluster] = clusterIndex
				}
				stores[i] = cache.NewIndexer(cache.MetaNamespaceKeyFunc, indexers)
			}
			empty := liveHeap()
			for i := range clusters {
				c := newAPICluster(fmt.Sprintf("ns-%d", i/100), fmt.Sprintf("c%d", i), instances)
				for j, k := range kinds {
					for _, o := range k.objs(&c) {
						o, err := bc.transform(o)
						if err != nil {
							b.Fatal(err)
						}
						if err := stores[j].Add(o); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			// Each kind's share is what dropping its store frees.
			// (Reported after the loop: ResetTimer deletes metrics.)
			full := liveHeap()
			metrics := map[string]float64{"cache-B/cluster": float64(full-empty) / clusters}
			for j, k := range kinds {
				before := liveHeap()
				stores[j] = nil
				metrics[k.name+"-B/cluster"] = float64(before-liveHeap()) / clusters
			}

			p := newAPICluster("ns", "c", 1).pods[0]
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				q := p.DeepCopy()
				b.StartTimer()
				if _, err := bc.transform(q); err != nil {
					b.Fatal(err)
				}
			}
			for unit, v := range metrics {
				b.ReportMetric(v, unit)
			}
		})
	}
}

func asAny[T any](s []T) []any {
	out := make([]any, len(s))
	for i, o := range s {
		out[i] = o
	}
	return out
}

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
