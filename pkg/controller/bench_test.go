package controller

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/utils/clock"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// flipping serves facts that the producer flips before each signal, between
// a converged cluster and one that lost a pod, so every signal the loop
// dispatches is a real transition (Running <-> Degraded) with a status
// write planned. The plan's result observes the same facts and ends there.
type flipping struct {
	index map[string]int // read-only once built
	lost  []atomic.Bool
}

func newFlipping(keys []string) *flipping {
	f := &flipping{index: make(map[string]int, len(keys)), lost: make([]atomic.Bool, len(keys))}
	for i, k := range keys {
		f.index[k] = i
	}
	return f
}

func (f *flipping) flip(i int) { f.lost[i].Store(!f.lost[i].Load()) }

func (f *flipping) Observe(key string) (fsm.Facts, *v1.PostgresqlStatus) {
	facts := fsm.Facts{Generation: 1, Desired: 3, Ready: 3, Primary: "p-0", ObjectsCurrent: true}
	if f.lost[f.index[key]].Load() {
		facts.Ready = 2
	}
	return facts, nil
}

// noEffects turns every plan into one step that does nothing: no I/O.
type noEffects struct{}

func (noEffects) Steps(string, *fsm.Plan) []eventloop.Step {
	return []eventloop.Step{{Name: "noop", Run: func(context.Context) error { return nil }}}
}

// BenchmarkLoopDispatch measures events dispatched per second through the
// loop and the state machines, effects doing no I/O. One op is a round: every
// cluster's facts flip and it gets a signal, then the loop drains. Each
// signal is a transition (Running <-> Degraded) whose plan comes back as a
// PlanDone event, so a round is 2 x clusters events. Run with -cpu 1 for the
// one-core figure: producer, loop and executor then share that core.
func BenchmarkLoopDispatch(b *testing.B) {
	for _, clusters := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("clusters=%d", clusters), func(b *testing.B) {
			keys := make([]string, clusters)
			for i := range keys {
				keys[i] = fmt.Sprintf("ns/c%d", i)
			}
			obs := newFlipping(keys)
			// Transitions are logged at Info in production; here the
			// level is Warn so the figure is the loop's and the FSM's.
			log := quiet()
			log.Logger.SetLevel(logrus.WarnLevel)
			// No loss grace: every lost pod is a transition, as the
			// figures in docs/performance.md were measured.
			cfg := fsm.DefaultConfig()
			cfg.LossGrace = 0
			ctrl := New(cfg, obs, noEffects{}, clock.RealClock{}, log)
			loop := eventloop.New(ctrl, eventloop.Options{Workers: 16, Log: quiet()})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- loop.Run(ctx) }()
			defer func() {
				cancel()
				<-done
			}()
			round := func() {
				for i, k := range keys {
					obs.flip(i)
					loop.Notify(k, "pods")
				}
				if err := loop.WaitIdle(ctx); err != nil {
					b.Fatal(err)
				}
			}
			heap := func() uint64 {
				var ms runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms)
				return ms.HeapAlloc
			}
			empty := heap()
			round() // every cluster exists
			// Live heap per cluster: machine, status, loop records, timers.
			perCluster := float64(heap()-empty) / float64(clusters)
			before := loop.Stats()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				round()
			}
			elapsed := time.Since(start)
			b.StopTimer()
			after := loop.Stats()
			events := after.Dispatched - before.Dispatched
			if want := uint64(2 * clusters * b.N); events < want {
				b.Fatalf("dispatched %d events, want at least %d (coalesced %d)", events, want, after.Coalesced-before.Coalesced)
			}
			b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
			b.ReportMetric(float64(elapsed.Nanoseconds())/float64(events), "ns/event")
			b.ReportMetric(perCluster, "heapB/cluster")
		})
	}
}
