package model

import (
	"reflect"
	"testing"
	"time"
)

// handParams make every duration easy to add up by hand: no rate limit, a
// healthy event (or plan) takes 100ms + 2 x 10ms = 120ms, a stuck legacy
// event 10m, and no polling.
func handParams() Params {
	p := DefaultParams()
	p.QPS = 0
	p.Calls = 2
	p.CallLatency = 10 * time.Millisecond
	p.Service = 100 * time.Millisecond
	p.PollInterval = 0
	return p
}

const healthy = 120 * time.Millisecond

func n(at time.Duration, c int, k Kind) Notification {
	return Notification{At: at, Cluster: c, Kind: k}
}

// startup returns the startup list of clusters 0..count-1.
func startup(count int) []Notification {
	var ns []Notification
	for c := range count {
		ns = append(ns, n(0, c, Sync))
	}
	return ns
}

func findWait(t *testing.T, r Result, c int, k Kind, at time.Duration) Wait {
	t.Helper()
	for _, w := range r.Waits {
		if w.Cluster == c && w.Kind == k && w.At == at {
			return w
		}
	}
	t.Fatalf("no wait for cluster %d %s at %v in %+v", c, k, at, r.Waits)
	return Wait{}
}

type wantWait struct {
	cluster     int
	kind        Kind
	at          time.Duration
	start, done time.Duration // absolute times
}

func TestHandComputed(t *testing.T) {
	const T = 10 * time.Minute
	edits := append(startup(2), n(time.Minute, 0, Update), n(2*time.Minute, 1, Update))
	resync := append(startup(3), n(30*time.Minute, 0, Resync), n(30*time.Minute, 1, Resync), n(30*time.Minute, 2, Resync))
	tests := []struct {
		name    string
		design  Design
		workers int
		stuck   []bool
		events  []Notification
		want    []wantWait
		intake  time.Duration
	}{
		{
			// Cluster 0 -> worker 0, 1 -> worker 1, 2 -> worker 0. The
			// intake blocks on worker 0's lock until the stuck event times
			// out; then cluster 2 starts.
			name:   "legacy, one stuck cluster, two workers: the other cluster on its worker waits exactly the timeout",
			design: Legacy, workers: 2, stuck: []bool{true, false, false}, events: startup(3),
			want: []wantWait{
				{1, Sync, 0, 0, healthy},
				{2, Sync, 0, T, T + healthy},
			},
			intake: T,
		},
		{
			name:   "legacy, workers >= clusters, nobody touches the stuck one: nobody waits",
			design: Legacy, workers: 3, stuck: []bool{true, false, false}, events: startup(3),
			want: []wantWait{
				{1, Sync, 0, 0, healthy},
				{2, Sync, 0, 0, healthy},
			},
		},
		{
			// The edit of cluster 0 at 1m must be added to worker 0, busy
			// until 10m: the intake blocks for 9m and cluster 1's edit at
			// 2m, on another worker, waits behind it for 8m.
			name:   "legacy, an edit of a stuck cluster blocks the intake and a cluster on another worker",
			design: Legacy, workers: 2, stuck: []bool{true, false}, events: edits,
			want: []wantWait{
				{1, Update, 2 * time.Minute, T, T + healthy},
			},
			intake: T - time.Minute,
		},
		{
			name:   "legacy, the same with twice as many workers as clusters: the same wait",
			design: Legacy, workers: 4, stuck: []bool{true, false}, events: edits,
			want: []wantWait{
				{1, Update, 2 * time.Minute, T, T + healthy},
			},
			intake: T - time.Minute,
		},
		{
			// At 30m worker 0 is idle again and takes cluster 0's SYNC,
			// which blocks it for 10m; cluster 2's SYNC waits for it.
			name:   "legacy, a resync behind a stuck cluster waits the timeout",
			design: Legacy, workers: 2, stuck: []bool{true, false, false}, events: resync,
			want: []wantWait{
				{1, Resync, 30 * time.Minute, 30 * time.Minute, 30*time.Minute + healthy},
				{2, Resync, 30 * time.Minute, 40 * time.Minute, 40*time.Minute + healthy},
			},
			intake: 2 * T,
		},
		{
			name:   "goroutine per cluster, an edit of a stuck cluster delays no other cluster",
			design: GoroutinePerCluster, stuck: []bool{true, false}, events: edits,
			want: []wantWait{
				{1, Update, 2 * time.Minute, 2 * time.Minute, 2*time.Minute + healthy},
			},
		},
		{
			name:   "goroutine per cluster, a resync behind a stuck cluster does not wait",
			design: GoroutinePerCluster, stuck: []bool{true, false, false}, events: resync,
			want: []wantWait{
				{2, Resync, 30 * time.Minute, 30 * time.Minute, 30*time.Minute + healthy},
			},
		},
		{
			// The loop dispatches cluster 1's edit after its 5µs cost and
			// reports the plan's result 5µs after the plan's 120ms.
			name:   "pgloop, an edit of a stuck cluster delays no other cluster",
			design: Pgloop, stuck: []bool{true, false}, events: edits,
			want: []wantWait{
				{1, Update, 2 * time.Minute, 2*time.Minute + 5*time.Microsecond, 2*time.Minute + healthy + 10*time.Microsecond},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := handParams()
			p.Workers = tt.workers
			r := Run(tt.design, p, &Workload{Stuck: tt.stuck, Events: tt.events, Duration: time.Hour})
			for _, w := range tt.want {
				got := findWait(t, r, w.cluster, w.kind, w.at)
				if !got.Finished || got.Start != w.start || got.Done != w.done {
					t.Errorf("cluster %d %s at %v: start %v done %v (finished %v), want start %v done %v",
						w.cluster, w.kind, w.at, got.Start, got.Done, got.Finished, w.start, w.done)
				}
			}
			if r.IntakeBlocked != tt.intake {
				t.Errorf("intake blocked %v, want %v", r.IntakeBlocked, tt.intake)
			}
			if r.Unfinished != 0 {
				t.Errorf("%d notifications never processed", r.Unfinished)
			}
		})
	}
}

// A new event merges into a queued one of the same type and cluster. With
// an intake that never blocks, edits that come while the cluster is busy
// merge; in the legacy design the intake cannot add while the worker holds
// its FIFO's lock, so nothing is ever queued to merge into.
func TestQueuedEditsMerge(t *testing.T) {
	ms := time.Millisecond
	events := []Notification{n(0, 0, Update), n(10*ms, 0, Update), n(20*ms, 0, Update), n(30*ms, 0, Update)}
	tests := []struct {
		design Design
		merged int
		start  []time.Duration // of the edits at 10, 20 and 30ms
	}{
		{GoroutinePerCluster, 2, []time.Duration{120 * ms, 120 * ms, 120 * ms}},
		{Legacy, 0, []time.Duration{120 * ms, 240 * ms, 360 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.design.String(), func(t *testing.T) {
			p := handParams()
			p.Workers = 1
			r := Run(tt.design, p, &Workload{Stuck: []bool{false}, Events: events, Duration: time.Hour})
			if r.Merged != tt.merged {
				t.Errorf("merged %d, want %d", r.Merged, tt.merged)
			}
			for i, want := range tt.start {
				at := time.Duration(i+1) * 10 * ms
				if got := findWait(t, r, 0, Update, at); got.Start != want || got.Done != want+healthy {
					t.Errorf("edit at %v: start %v done %v, want %v and %v", at, got.Start, got.Done, want, want+healthy)
				}
			}
		})
	}
}

func TestPgloopPlanWaitsAtMostForTheDeadline(t *testing.T) {
	us := time.Microsecond
	tests := []struct {
		name       string
		hang       time.Duration
		start      time.Duration
		done       time.Duration
		executors  int
		editAt     time.Duration
		stuckFirst bool
	}{
		{
			// The stuck cluster's plan starts at 5µs and holds the only
			// executor slot for 120ms + its 30s deadline (the hang of 1m
			// is cut short); its result is dispatched 5µs later and frees
			// the slot; the edit's plan runs then.
			name: "one slot, stuck plan hangs past the deadline", hang: time.Minute, executors: 1, editAt: time.Millisecond,
			start: time.Millisecond + 5*us,
			done:  5*us + healthy + 30*time.Second + 5*us + healthy + 5*us,
		},
		{
			name: "one slot, stuck plan fails at once", hang: 0, executors: 1, editAt: time.Millisecond,
			start: time.Millisecond + 5*us,
			done:  5*us + healthy + 5*us + healthy + 5*us,
		},
		{
			name: "two slots, stuck plan hangs", hang: time.Minute, executors: 2, editAt: time.Millisecond,
			start: time.Millisecond + 5*us,
			done:  time.Millisecond + 5*us + healthy + 5*us,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := handParams()
			p.Executors = tt.executors
			p.StuckHang = tt.hang
			w := &Workload{Stuck: []bool{true, false}, Events: []Notification{n(0, 0, Sync), n(tt.editAt, 1, Update)}, Duration: time.Hour}
			got := findWait(t, Run(Pgloop, p, w), 1, Update, tt.editAt)
			if got.Start != tt.start || got.Done != tt.done {
				t.Errorf("start %v done %v, want %v and %v", got.Start, got.Done, tt.start, tt.done)
			}
		})
	}
}

// With a worker per cluster and nobody editing stuck clusters, the legacy
// operator's healthy clusters never wait: raising workers above the number
// of clusters works, as long as no one touches the stuck ones.
func TestLegacyWorkersAboveClusters(t *testing.T) {
	wc := WorkloadConfig{Clusters: 40, StuckFraction: 0.1, Duration: 2 * time.Hour, Seed: 3, ResyncPeriod: 30 * time.Minute}
	tests := []struct {
		workers     int
		stuckEdits  float64
		wantNoWait  bool
		wantBlocked bool
	}{
		{workers: 40, wantNoWait: true},
		{workers: 80, wantNoWait: true},
		{workers: 8, wantBlocked: true},
		{workers: 80, stuckEdits: 4, wantBlocked: true},
	}
	for _, tt := range tests {
		wc := wc
		wc.StuckEditsPerHour = tt.stuckEdits
		w := Generate(wc)
		p := handParams()
		p.Workers = tt.workers
		r := Run(Legacy, p, w)
		noWait := r.Start.Max == 0
		if noWait != tt.wantNoWait || (r.IntakeBlocked > 0) != tt.wantBlocked {
			t.Errorf("W=%d, %g edits/h of stuck clusters: max wait to start %v, intake blocked %v; want no wait %v, blocked %v",
				tt.workers, tt.stuckEdits, r.Start.Max, r.IntakeBlocked, tt.wantNoWait, tt.wantBlocked)
		}
	}
}

// A healthy cluster of the goroutine-per-cluster design waits only for its
// own previous event, whatever the others do; the legacy design with a
// worker per cluster does not have that property once stuck clusters are
// edited.
func TestGoroutinePerClusterWaitsOnlyForItself(t *testing.T) {
	w := Generate(WorkloadConfig{
		Clusters: 50, StuckFraction: 0.2, Duration: 2 * time.Hour, Seed: 5,
		EditsPerHour: 6, StuckEditsPerHour: 6, NewClustersPerHour: 10, ResyncPeriod: 30 * time.Minute,
	})
	p := DefaultParams() // with the shared rate limit
	crossWaits := func(r Result) int {
		done := map[int]map[time.Duration]bool{}
		for _, wt := range r.Waits {
			if done[wt.Cluster] == nil {
				done[wt.Cluster] = map[time.Duration]bool{}
			}
			done[wt.Cluster][wt.Done] = true
		}
		n := 0
		for _, wt := range r.Waits {
			if wt.Start > wt.At && !done[wt.Cluster][wt.Start] {
				n++ // it started when none of its own cluster's events ended
			}
		}
		return n
	}
	g := Run(GoroutinePerCluster, p, w)
	if n := crossWaits(g); n != 0 || g.IntakeBlocked != 0 {
		t.Errorf("goroutine per cluster: %d waits for other clusters, intake blocked %v", n, g.IntakeBlocked)
	}
	p.Workers = 200
	l := Run(Legacy, p, w)
	if n := crossWaits(l); n == 0 || l.IntakeBlocked == 0 {
		t.Errorf("legacy with a worker per cluster: %d waits for other clusters, intake blocked %v; want both > 0", n, l.IntakeBlocked)
	}
}

// pgloop's healthy clusters see the same waits however many clusters are
// stuck: the loop's cost per event, round-robin across clusters.
func TestPgloopHealthyWaitIndependentOfStuck(t *testing.T) {
	p := handParams()
	var first Result
	for i, frac := range []float64{0, 0.1, 0.3, 0.5} {
		w := Generate(WorkloadConfig{
			Clusters: 100, StuckFraction: frac, Duration: 2 * time.Hour, Seed: 9,
			EditsPerHour: 2, StuckEditsPerHour: 4, NewClustersPerHour: 10, ResyncPeriod: 30 * time.Minute,
		})
		r := Run(Pgloop, p, w)
		// Round robin: ahead of an event are at most one event per cluster
		// per turn, and a cluster has at most a signal, a timer and a plan
		// result waiting.
		if bound := time.Duration(3*len(w.Stuck)) * p.LoopCost; r.Start.Max > bound {
			t.Errorf("%g stuck: max wait to start %v, above %v", frac, r.Start.Max, bound)
		}
		if r.Unfinished != 0 {
			t.Errorf("%g stuck: %d unfinished", frac, r.Unfinished)
		}
		if i == 0 {
			first = r
			continue
		}
		if r.UserStart != first.UserStart || r.UserDone.P50 != first.UserDone.P50 {
			t.Errorf("%g stuck: user actions wait %+v to start, %v to done (p50); with none stuck %+v, %v",
				frac, r.UserStart, r.UserDone.P50, first.UserStart, first.UserDone.P50)
		}
	}
}

func TestDeterministic(t *testing.T) {
	cfg := WorkloadConfig{
		Clusters: 60, StuckFraction: 0.1, Duration: time.Hour, Seed: 42,
		EditsPerHour: 2, StuckEditsPerHour: 2, NewClustersPerHour: 10, ResyncPeriod: 30 * time.Minute,
	}
	a, b := Generate(cfg), Generate(cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two workloads")
	}
	cfg.Seed++
	if reflect.DeepEqual(a, Generate(cfg)) {
		t.Fatal("another seed gave the same workload")
	}
	p := DefaultParams()
	p.StuckHang = 10 * time.Second
	for _, d := range []Design{Legacy, GoroutinePerCluster, Pgloop} {
		if r1, r2 := Run(d, p, a), Run(d, p, b); !reflect.DeepEqual(r1, r2) {
			t.Errorf("%s: two runs of one workload differ", d)
		}
	}
}

func TestBucket(t *testing.T) {
	b := newBucket(10, 20, time.Minute)
	var got []time.Duration
	for range 25 {
		got = append(got, b.take(0))
	}
	for i, g := range got {
		want := time.Duration(0)
		if i >= 20 {
			want = time.Duration(i-19) * 100 * time.Millisecond
		}
		if g != want {
			t.Errorf("call %d granted at %v, want %v", i, g, want)
		}
	}
	// After 10s idle the bucket is full again.
	for i := range 20 {
		if g := b.take(10 * time.Second); g != 10*time.Second {
			t.Errorf("call %d after idling granted at %v", i, g)
		}
	}
	if g := b.take(10 * time.Second); g != 10*time.Second+100*time.Millisecond {
		t.Errorf("21st call after idling granted at %v", g)
	}
	if b.calls != 46 {
		t.Errorf("counted %d calls, want 46", b.calls)
	}
	if g := newBucket(0, 0, time.Minute).take(time.Second); g != time.Second {
		t.Errorf("unlimited bucket granted at %v", g)
	}
}

func TestGenerate(t *testing.T) {
	cfg := WorkloadConfig{
		Clusters: 200, StuckFraction: 0.05, Duration: 2 * time.Hour, Seed: 1,
		EditsPerHour: 1, StuckEditsPerHour: 1, NewClustersPerHour: 10, ResyncPeriod: 30 * time.Minute,
	}
	w := Generate(cfg)
	stuck := 0
	for c := range cfg.Clusters {
		if w.Stuck[c] {
			stuck++
		}
	}
	if stuck != 10 {
		t.Errorf("%d stuck clusters at the start, want 10", stuck)
	}
	born := map[int]time.Duration{}
	resyncs := map[time.Duration]int{}
	for i, e := range w.Events {
		if i < cfg.Clusters && (e.At != 0 || e.Kind != Sync || e.Cluster != i) {
			t.Fatalf("event %d is %+v, want the startup list first", i, e)
		}
		if i > 0 && e.At < w.Events[i-1].At {
			t.Fatalf("events not sorted at %d", i)
		}
		if e.At >= cfg.Duration {
			t.Fatalf("event %+v after the end", e)
		}
		switch e.Kind {
		case Sync, Add:
			born[e.Cluster] = e.At
		case Update:
			if b, ok := born[e.Cluster]; !ok || e.At < b {
				t.Fatalf("edit %+v before the cluster exists", e)
			}
		case Resync:
			resyncs[e.At]++
		}
	}
	if len(born) != len(w.Stuck) {
		t.Errorf("%d clusters appear, %d known", len(born), len(w.Stuck))
	}
	for _, at := range []time.Duration{30 * time.Minute, time.Hour, 90 * time.Minute} {
		want := 0
		for _, b := range born {
			if b < at {
				want++
			}
		}
		if resyncs[at] != want {
			t.Errorf("resync at %v: %d notifications, want %d", at, resyncs[at], want)
		}
	}
}

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	if got, want := summarize(ds), (Stats{P50: 50, P99: 99, Max: 100}); got != want {
		t.Errorf("summarize = %+v, want %+v", got, want)
	}
	if got := summarize(nil); got != (Stats{}) {
		t.Errorf("summarize(nil) = %+v", got)
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0"},
		{7 * time.Microsecond, "7µs"},
		{340 * time.Millisecond, "340ms"},
		{4200 * time.Millisecond, "4.2s"},
		{9*time.Minute + 58*time.Second, "9m58s"},
		{65 * time.Minute, "1h05m"},
	}
	for _, tt := range tests {
		if got := FormatDuration(tt.d); got != tt.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
