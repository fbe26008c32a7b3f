package informers

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/controller"
	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/facts"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/internal/fixtures"
)

// memoryClusters is the number of clusters the memory benchmarks make.
var memoryClusters = flag.Int("memory-clusters", 1000, "clusters of BenchmarkCacheMemory and BenchmarkClusterMemory")

// memoryProfile is where BenchmarkClusterMemory writes a heap profile
// while every cluster is held (go tool pprof -sample_index=inuse_space;
// run with -test.memprofilerate=512 for the small objects).
var memoryProfile = flag.String("memory-profile", "", "heap profile of BenchmarkClusterMemory, taken with every cluster held")

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
	clusters := *memoryClusters
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
			metrics := map[string]float64{"cache-B/cluster": float64(full-empty) / float64(clusters)}
			for j, k := range kinds {
				before := liveHeap()
				stores[j] = nil
				metrics[k.name+"-B/cluster"] = float64(before-liveHeap()) / float64(clusters)
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

// BenchmarkClusterMemory measures the live heap per cluster of what the
// operator keeps of N clusters without a plane: the informers (New, over
// fake clientsets whose lists are decoded from JSON as the apiserver's
// are), then the facts' memory (facts.Deriver) and the state machines
// (controller.Controller) once each cluster has handled one signal. The
// fake clientsets' own copies are there before the informers start, and
// not counted. The loop, the executor and the effects' memory are not
// here (pkg/controller's BenchmarkLoopDispatch measures the loop's).
//
//	go test ./pkg/informers -run '^$' -bench ClusterMemory -benchtime 1x
func BenchmarkClusterMemory(b *testing.B) {
	clusters := *memoryClusters
	var kubeObjs []kruntime.Object
	var pgs []*v1.Postgresql
	for i := range clusters {
		c := newAPICluster(fmt.Sprintf("ns-%d", i/100), fmt.Sprintf("c%d", i), 1)
		pgs = append(pgs, c.pg)
		kubeObjs = append(kubeObjs, c.statefulSet, c.budget.(kruntime.Object))
		for _, list := range [][]kruntime.Object{objects(c.pods), objects(c.services), objects(c.secrets), objects(c.claims), objects(c.configMaps)} {
			kubeObjs = append(kubeObjs, list...)
		}
	}
	kube := fake.NewClientset(kubeObjs...)
	pgc := newPGClient(pgs...)
	decodeLists(&kube.Fake, kube.Tracker())
	decodeLists(&pgc.Fake, pgc.Tracker())
	kubeObjs, pgs = nil, nil
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	base := liveHeap()
	inf := New(kube, pgc, Options{}, discard{})
	inf.Start(ctx)
	if err := inf.WaitForCacheSync(ctx); err != nil {
		b.Fatal(err)
	}
	keys := inf.Keys()
	if len(keys) != clusters {
		b.Fatalf("%d clusters in the cache, want %d", len(keys), clusters)
	}
	caches := liveHeap()
	log := logrus.New()
	log.SetOutput(io.Discard)
	obs := facts.NewObserver(inf, facts.NewDeriver(cluster.Options{}, true), func() time.Time { return fixtures.Now })
	ctrl := controller.New(fsm.DefaultConfig(), obs, noSteps{}, clocktesting.NewFakePassiveClock(fixtures.Now), logrus.NewEntry(log))
	// Each cluster resumed (its status says Running), its plan (the
	// ensure and the in-database sync the status does not record)
	// done: Running with nothing in flight, as an idle fleet is.
	for _, key := range keys {
		ev := eventloop.Event{Key: key, Kind: eventloop.Signal, Name: SignalPods}
		for range 3 {
			out := ctrl.Handle(ev)
			if out.Plan == nil {
				break
			}
			ev = eventloop.Event{Key: key, Kind: eventloop.PlanDone, PlanID: out.Plan.ID}
		}
		if st := ctrl.Machine(key).State(); st != fsm.Running {
			b.Fatalf("%s: state %s, want %s", key, st, fsm.Running)
		}
	}
	all := liveHeap()
	if *memoryProfile != "" {
		f, err := os.Create(*memoryProfile)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	metrics := map[string]float64{
		"caches-B/cluster":         float64(caches-base) / float64(clusters),
		"facts+machines-B/cluster": float64(all-caches) / float64(clusters),
		"total-B/cluster":          float64(all-base) / float64(clusters),
	}
	key := keys[0]
	b.ResetTimer()
	for b.Loop() {
		ctrl.Handle(eventloop.Event{Key: key, Kind: eventloop.Signal, Name: SignalPods})
	}
	b.StopTimer()
	for unit, v := range metrics {
		b.ReportMetric(v, unit)
	}
	runtime.KeepAlive(inf)
	runtime.KeepAlive(ctrl)
}

// noSteps turns every plan into no step: the effects are not measured.
type noSteps struct{}

func (noSteps) Steps(string, *fsm.Plan) []eventloop.Step { return nil }

func objects[T kruntime.Object](s []T) []kruntime.Object {
	out := make([]kruntime.Object, len(s))
	for i, o := range s {
		out[i] = o
	}
	return out
}

// decodeLists makes the lists of f, a fake clientset over tracker, hand
// out objects decoded from JSON, as a real client's are: no string shared
// with the tracker's copies, nor between two objects.
func decodeLists(f *k8stesting.Fake, tracker k8stesting.ObjectTracker) {
	react := k8stesting.ObjectReaction(tracker)
	f.PrependReactor("list", "*", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		handled, obj, err := react(a)
		if err != nil || obj == nil {
			return handled, obj, err
		}
		return true, roundTrip(obj), nil
	})
}

// BenchmarkTransform measures the caches' transform of one object as the
// API returns it, slim alone and with share: its cost on every watch
// event, and on every object of the lists at the operator's start.
func BenchmarkTransform(b *testing.B) {
	c := newAPICluster("ns", "c", 1)
	for _, obj := range []kruntime.Object{c.pods[0], c.statefulSet, c.services[0], c.configMaps[0], c.pg} {
		for _, t := range []struct {
			name      string
			transform func(any) (any, error)
		}{{"slim", slim}, {"slim+share", transform}} {
			b.Run(fmt.Sprintf("%T/%s", obj, t.name), func(b *testing.B) {
				copies := make([]kruntime.Object, 256)
				for b.Loop() {
					b.StopTimer()
					for i := range copies {
						copies[i] = obj.DeepCopyObject()
					}
					b.StartTimer()
					for _, o := range copies {
						if _, err := t.transform(o); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(copies)), "ns/object")
			})
		}
	}
}
