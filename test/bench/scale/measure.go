package scale

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/bench/benchkit"
	"github.com/pgloop/pgloop/test/pgtest"
	"github.com/pgloop/pgloop/test/testbed"
)

// wall records how long a phase of a row took.
func (b *bench) wall(walls *[]Wall, name string, began time.Time) {
	*walls = append(*walls, Wall{Name: name, Took: time.Since(began)})
}

// atN measures the row's N on a plane of its own: the idle baseline, the
// burst with one more cluster, the memory, then the idle period and the
// restart.
func (b *bench) atN(ctx context.Context, row *Row) (err error) {
	n := row.N
	began := time.Now()
	s, err := b.startStage(ctx, fmt.Sprintf("n%d", n), n+b.cfg.Probes+1, n, true)
	defer func() { err = errors.Join(s.err(err), s.stop()) }()
	if err != nil {
		return err
	}
	row.Nodes = nodesFor(n+b.cfg.Probes+1, b.cfg.PodsPerNode)
	b.logf("N=%d: labeller client at %g requests/s, burst %d", n, b.cfg.LabellerQPS, b.cfg.LabellerBurst)
	if err := s.operatorUp(); err != nil {
		return err
	}
	b.wall(&row.Walls, "plane and operator up", began)

	began = time.Now()
	if row.Memory0, err = s.memory(); err != nil {
		return err
	}
	if row.RTT, err = s.rtt(); err != nil {
		return err
	}
	for i := range b.cfg.Probes {
		p, reqs, err := s.probeIdle(fmt.Sprintf("idle-%d", i))
		if err != nil {
			return err
		}
		row.Idle = append(row.Idle, p)
		row.CreateRequests = append(row.CreateRequests, reqs)
		b.logf("N=%d: idle probe %s Running in %v (segments %s); its create made %s", n, p.Name, benchkit.Ms(p.ToRunning),
			benchkit.SegmentsText(p), reqs.Writes())
	}
	b.logf("N=%d: API round trip %v; memory with no cluster: RSS %s, Go heap in use %s", n, benchkit.Ms(row.RTT),
		mib(row.Memory0.RSS), mib(row.Memory0.Heap))
	b.wall(&row.Walls, "idle probes", began)

	began = time.Now()
	if row.Burst, row.OneMore, err = s.burst(n); err != nil {
		return err
	}
	if err := s.quiet("after the burst"); err != nil {
		return err
	}
	b.wall(&row.Walls, "burst", began)
	row.Clusters = n + b.cfg.Probes + max(1, b.cfg.OneMore)
	if row.MemoryN, err = s.memory(); err != nil {
		return err
	}
	b.logf("N=%d: memory with %d clusters: RSS %s, Go heap in use %s", n, row.Clusters, mib(row.MemoryN.RSS), mib(row.MemoryN.Heap))

	if b.cfg.Has(PhaseIdle) {
		began = time.Now()
		if row.IdleWindow, err = s.idle(); err != nil {
			return err
		}
		b.logf("N=%d: idle for %v: %s; writes: %s", n, benchkit.Ms(row.IdleWindow.Took), row.IdleWindow.Requests, row.IdleWindow.Requests.Writes())
		b.wall(&row.Walls, "idle", began)
	}
	if b.cfg.Has(PhaseRestart) {
		began = time.Now()
		if row.Restart, err = s.restart(); err != nil {
			return err
		}
		b.wall(&row.Walls, "restart", began)
	}
	return nil
}

// memory reads the operator's RSS and Go heap in use five times, a second
// apart, and returns the medians.
func (s *stage) memory() (Memory, error) {
	var rss, heap []int64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		r, err := testbed.Process{PID: s.op.PID()}.RSS()
		if err != nil {
			return Memory{}, err
		}
		m, err := s.env.Metrics.Scrape(s.ctx)
		if err != nil {
			return Memory{}, err
		}
		rss, heap = append(rss, r), append(heap, int64(m.Get("go_memstats_heap_inuse_bytes")))
		if len(rss) == 5 {
			slices.Sort(rss)
			slices.Sort(heap)
			return Memory{RSS: rss[2], Heap: heap[2]}, nil
		}
		select {
		case <-tick.C:
		case <-s.ctx.Done():
			return Memory{}, context.Cause(s.ctx)
		}
	}
}

// rtt is the median of five GETs of the probe namespace: one API round
// trip on the idle plane.
func (s *stage) rtt() (time.Duration, error) {
	var ds []time.Duration
	for range 5 {
		began := time.Now()
		if _, err := s.env.Kube.CoreV1().Namespaces().Get(s.ctx, s.probeNS, metav1.GetOptions{}); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(began))
	}
	return benchkit.Summarize(ds).Median, nil
}

// probeIdle creates one cluster in the probe namespace and measures it,
// and the operator's requests from before its Create until the operator is
// quiet again.
func (s *stage) probeIdle(name string) (benchkit.Probe, Requests, error) {
	before, err := s.env.Metrics.Scrape(s.ctx)
	if err != nil {
		return benchkit.Probe{}, nil, err
	}
	p, err := s.env.Probe(s.ctx, pgtest.Cluster(s.probeNS, name, 1), s.b.cfg.ProbeTimeout)
	if err != nil {
		return p, nil, err
	}
	if err := s.quiet("after " + name); err != nil {
		return p, nil, err
	}
	after, err := s.env.Metrics.Scrape(s.ctx)
	if err != nil {
		return p, nil, err
	}
	return p, RequestsOf(benchkit.Delta(before, after)), nil
}

// createAll runs create(i) for i in [0, n) on workers goroutines at once.
// It returns the first error; the other workers then stop.
func createAll(ctx context.Context, n, workers int, create func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := create(ctx, i); err != nil {
					once.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr == nil {
		return ctx.Err()
	}
	return firstErr
}

// sampler reads the operator's /metrics every second until stopped: the
// largest inbox and number of plans waiting, and every 30 seconds a line
// of progress.
type sampler struct {
	stop func() (maxInbox, maxWaiting int)
}

func (s *stage) sample(progress func() string) sampler {
	ctx, cancel := context.WithCancel(s.ctx)
	done := make(chan struct{})
	var inbox, waiting float64
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last := time.Now()
		for {
			// A failed scrape is no peak; the measurement's own scrapes
			// report a dead operator.
			if m, err := s.env.Metrics.Scrape(ctx); err == nil {
				inbox = max(inbox, m.Get("pgloop_loop_inbox_depth"))
				waiting = max(waiting, m.Get("pgloop_loop_plans_waiting"))
				if time.Since(last) >= 30*time.Second {
					last = time.Now()
					s.b.logf("%s: %s; inbox %.0f, plans running %.0f, waiting %.0f", s.name, progress(),
						m.Get("pgloop_loop_inbox_depth"), m.Get("pgloop_loop_plans_running"), m.Get("pgloop_loop_plans_waiting"))
				}
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return sampler{stop: func() (int, int) {
		cancel()
		<-done
		return int(inbox), int(waiting)
	}}
}

// burst creates n clusters at once, then one more cluster at once, and
// waits until all are Running.
func (s *stage) burst(n int) (*Burst, *benchkit.Probe, error) {
	cfg := s.b.cfg
	bu := &Burst{}
	for i := range n {
		s.env.Tracker.Expect(s.burstNamespace(i)+"/"+s.burstName(i), 1)
	}
	before, err := s.env.Metrics.Scrape(s.ctx)
	if err != nil {
		return nil, nil, err
	}
	created := make([]time.Time, n)
	smp := s.sample(func() string {
		c := s.env.Tracker.Count(s.burstNS...)
		return fmt.Sprintf("burst: %d of %d Running (%d pods Ready, %d labelled)", c.Running, n, c.AllReady, c.Labelled)
	})
	defer smp.stop()
	began := time.Now()
	ctx, cancel := context.WithTimeout(s.ctx, cfg.BurstTimeout)
	defer cancel()
	err = createAll(ctx, n, cfg.Workers, func(ctx context.Context, i int) error {
		pg := pgtest.Cluster(s.burstNamespace(i), s.burstName(i), 1)
		if _, err := s.env.PG.PgloopV1().Postgresqls(pg.Namespace).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("while creating cluster %s/%s: %w", pg.Namespace, pg.Name, err)
		}
		created[i] = time.Now()
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	bu.Created = time.Since(began)
	s.b.logf("%s: %d clusters created in %v (%.0f/s); one more at once", s.name, n, benchkit.Ms(bu.Created), float64(n)/bu.Created.Seconds())

	one, err := s.oneMore(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range one {
		bu.OneMore = append(bu.OneMore, p.ToRunning)
	}
	if err := s.env.Tracker.WaitCounts(ctx, s.burstNS, func(c Counts) bool { return c.Running >= n }); err != nil {
		c := s.env.Tracker.Count(s.burstNS...)
		return nil, nil, fmt.Errorf("not all %d clusters Running within %v: %d are (%d with their pod Ready, %d labelled): %w",
			n, cfg.BurstTimeout, c.Running, c.AllReady, c.Labelled, err)
	}
	bu.AllRunning = time.Since(began)
	bu.MaxInbox, bu.MaxWaiting = smp.stop()
	after, err := s.env.Metrics.Scrape(s.ctx)
	if err != nil {
		return nil, nil, err
	}
	d := benchkit.Delta(before, after)
	bu.LagP99 = d.Quantile("pgloop_loop_lag_seconds", 0.99)
	bu.Degraded = intoDegraded(d)
	bu.Requests = RequestsOf(d)
	bu.Transitions = int(d.Sum("pgloop_transitions_total"))
	bu.EventsWritten = int(d.Sum("pgloop_events_written_total"))
	bu.EventsDropped = map[string]int{}
	for _, kind := range []string{"transition", "other"} {
		bu.EventsDropped[kind] = int(d.Sum("pgloop_events_dropped_total", `kind="`+kind+`"`))
	}
	bu.Segments, bu.Labeller = s.burstSegments(created)
	s.b.logf("%s: all %d Running %v after the first Create; loop lag p99 %s, largest inbox %d, %d plans waiting at most; %d transitions into Degraded",
		s.name, n, benchkit.Ms(bu.AllRunning), seconds(bu.LagP99), bu.MaxInbox, bu.MaxWaiting, bu.Degraded)
	s.b.logf("%s: labeller, last pod Ready → master label: median %v, p99 %v, max %v", s.name,
		benchkit.Ms(bu.Labeller.Median), benchkit.Ms(bu.Labeller.P99), benchkit.Ms(bu.Labeller.Max))
	return bu, &one[len(one)/2], nil
}

// oneMore creates Config.OneMore clusters at once in the probes'
// namespace, right after the burst's Creates returned, and returns their
// probes by create → Running. A single one is a noisy sample (833 ms to
// 12 s in runs of the same code); several in one namespace take turns
// among themselves in the write windows (docs/scale.md).
func (s *stage) oneMore(ctx context.Context) ([]benchkit.Probe, error) {
	k := max(1, s.b.cfg.OneMore)
	probes := make([]benchkit.Probe, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() {
			probes[i], errs[i] = s.env.Probe(ctx, pgtest.Cluster(s.probeNS, oneMoreName(i, k), 1), s.b.cfg.BurstTimeout)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.SortFunc(probes, func(a, b benchkit.Probe) int { return cmp.Compare(a.ToRunning, b.ToRunning) })
	for _, p := range probes {
		s.b.logf("%s: one more cluster %s Running in %v (segments %s)", s.name, p.Name, benchkit.Ms(p.ToRunning), benchkit.SegmentsText(p))
	}
	return probes, nil
}

// oneMoreName names the i-th of k clusters created right after a burst.
func oneMoreName(i, k int) string {
	if k == 1 {
		return "one-more"
	}
	return fmt.Sprintf("one-more-%d", i)
}

// Counts are a Tracker's counts.
type Counts = benchkit.Counts

// burstSegments summarizes the burst clusters' segments (as
// benchkit.Probe's, from their Create's return) and the labeller's
// latency, the last pod Ready to the master label.
func (s *stage) burstSegments(created []time.Time) ([5]benchkit.Summary, benchkit.Summary) {
	var segs [5][]time.Duration
	var lab []time.Duration
	for _, ns := range s.burstNS {
		s.env.Tracker.Each(ns, func(name string, seen *benchkit.Seen) {
			i, err := strconv.Atoi(strings.TrimPrefix(name, "burst-"))
			if err != nil || i >= len(created) {
				return
			}
			marks := []time.Time{created[i], seen.StatefulSet, seen.Pod, seen.AllReady, seen.Labelled, seen.Running}
			for j := range segs {
				if !marks[j].IsZero() && !marks[j+1].IsZero() {
					segs[j] = append(segs[j], marks[j+1].Sub(marks[j]))
				}
			}
			if !seen.AllReady.IsZero() && !seen.Labelled.IsZero() {
				lab = append(lab, seen.Labelled.Sub(seen.AllReady))
			}
		})
	}
	var out [5]benchkit.Summary
	for j := range segs {
		out[j] = benchkit.Summarize(segs[j])
	}
	return out, benchkit.Summarize(lab)
}

// idle counts the operator's requests during the idle period.
func (s *stage) idle() (*Window, error) {
	// The burst's Kubernetes Events may still be on their way: client-go's
	// broadcaster posts them one at a time and retries those the loaded
	// API refused, 10 s apart. The window starts once no request has gone
	// out for eventsSettle (at N = 1000, 58 of them fell into the window
	// when it started as soon as the loop was quiet).
	took, settled, err := s.settle(eventsSettle)
	if err != nil {
		return nil, err
	}
	s.b.logf("%s: no API request for %v, %v after the loop was quiet (settled: %t)", s.name, eventsSettle, benchkit.Ms(took), settled)
	before, err := s.env.Metrics.Scrape(s.ctx)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	s.b.logf("%s: idle for %v", s.name, s.b.cfg.Idle)
	timer := time.NewTimer(s.b.cfg.Idle)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-s.ctx.Done():
		return nil, context.Cause(s.ctx)
	}
	after, err := s.env.Metrics.Scrape(s.ctx)
	if err != nil {
		return nil, err
	}
	d := benchkit.Delta(before, after)
	return &Window{Took: time.Since(began), Requests: RequestsOf(d), Events: LoopEventsOf(d),
		CPU: time.Duration(d.Get("process_cpu_seconds_total") * float64(time.Second))}, nil
}

// eventsSettle is how long no request of pgloop's may go out before the
// idle window starts.
const eventsSettle = 15 * time.Second

// settle waits until pgloop made no API request (apiMetric) for quietFor,
// for at most the run's QuietTimeout; it returns how long it waited and
// whether it settled. /metrics is read every second.
func (s *stage) settle(quietFor time.Duration) (time.Duration, bool, error) {
	began := time.Now()
	deadline := time.NewTimer(s.b.cfg.QuietTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, since := -1.0, time.Now()
	for {
		m, err := s.env.Metrics.Scrape(s.ctx)
		if err != nil {
			return 0, false, err
		}
		if n := m.Sum(apiMetric); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= quietFor {
			return time.Since(began), true, nil
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return time.Since(began), false, nil
		case <-s.ctx.Done():
			return 0, false, context.Cause(s.ctx)
		}
	}
}

// restart SIGKILLs the operator, starts it again, and measures how long
// until every machine is back, and its requests over its first
// RestartWindow after ready (or until every machine was back, if later).
func (s *stage) restart() (*Restart, error) {
	before, err := s.env.Metrics.Scrape(s.ctx)
	if err != nil {
		return nil, err
	}
	r := &Restart{Clusters: int(before.Get("pgloop_loop_clusters")), Timers: int(before.Get("pgloop_loop_timers"))}
	if err := s.kill(false); err != nil {
		return nil, err
	}
	began := time.Now()
	if r.Ready, err = s.startOperator(); err != nil {
		return nil, err
	}
	ready := began.Add(r.Ready)
	s.b.logf("%s: operator killed with %d clusters and %d timers, started again: ready in %v; waiting until every machine is back",
		s.name, r.Clusters, r.Timers, benchkit.Ms(r.Ready))
	deadline := time.NewTimer(s.b.cfg.RestoreTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		m, err := s.env.Metrics.Scrape(s.ctx)
		if err != nil {
			return nil, err
		}
		if int(m.Get("pgloop_loop_clusters")) >= r.Clusters && int(m.Get("pgloop_loop_timers")) >= r.Timers &&
			m.Get("pgloop_loop_inbox_depth") == 0 && m.Get("pgloop_loop_plans_running") == 0 && m.Get("pgloop_loop_plans_waiting") == 0 {
			r.Restored = time.Since(began)
			break
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return nil, fmt.Errorf("the restarted operator did not restore %d clusters and %d timers within %v: %.0f clusters, %.0f timers, inbox %.0f",
				r.Clusters, r.Timers, s.b.cfg.RestoreTimeout, m.Get("pgloop_loop_clusters"), m.Get("pgloop_loop_timers"), m.Get("pgloop_loop_inbox_depth"))
		case <-s.ctx.Done():
			return nil, context.Cause(s.ctx)
		}
	}
	s.b.logf("%s: every machine back %v after the start; counting its requests until %v after ready", s.name,
		benchkit.Ms(r.Restored), s.b.cfg.RestartWindow)
	window := time.NewTimer(time.Until(ready.Add(s.b.cfg.RestartWindow)))
	defer window.Stop()
	select {
	case <-window.C:
	case <-s.ctx.Done():
		return nil, context.Cause(s.ctx)
	}
	m, err := s.env.Metrics.Scrape(s.ctx)
	if err != nil {
		return nil, err
	}
	r.Window = time.Since(ready)
	r.Requests = RequestsOf(m)
	s.b.logf("%s: the restarted operator's requests over %v: %s; writes: %s", s.name, benchkit.Ms(r.Window), r.Requests, r.Requests.Writes())
	return r, nil
}

// planeBaseline measures the plane alone, on a plane of its own: n bare
// StatefulSets of one replica, built as pgloop builds a cluster's (the
// same pod template and volume claim template), without owner, created at
// once; the time from the first Create until every pod is Ready.
func (b *bench) planeBaseline(ctx context.Context, row *Row) (err error) {
	n := row.N
	began := time.Now()
	s, err := b.startStage(ctx, fmt.Sprintf("plane-n%d", n), n+b.cfg.Probes+1, n, false)
	defer func() { err = errors.Join(s.err(err), s.stop()) }()
	if err != nil {
		return err
	}
	// The pods run as pgloop's ServiceAccount, which must exist.
	for _, ns := range append([]string{s.probeNS}, s.burstNS...) {
		sa := cluster.ServiceAccount(pgtest.Cluster(ns, "any", 1))
		if _, err := s.env.Kube.CoreV1().ServiceAccounts(ns).Create(s.ctx, sa, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("while creating ServiceAccount %s/%s: %w", ns, sa.Name, err)
		}
	}
	for i := range n {
		s.env.Tracker.Expect(s.burstNamespace(i)+"/"+s.burstName(i), 1)
	}
	b.wall(&row.Walls, "plane baseline: plane up", began)
	began = time.Now()
	for i := range b.cfg.Probes {
		d, err := s.bareProbe(s.ctx, fmt.Sprintf("bare-idle-%d", i), b.cfg.ProbeTimeout)
		if err != nil {
			return err
		}
		row.PlaneIdle = append(row.PlaneIdle, d)
	}
	b.logf("plane-n%d: %d bare StatefulSets one after another on the idle plane, create → pod Ready median %v", n, len(row.PlaneIdle),
		benchkit.Ms(benchkit.Summarize(row.PlaneIdle).Median))
	b.wall(&row.Walls, "plane baseline: idle probes", began)
	began = time.Now()
	ctx, cancel := context.WithTimeout(s.ctx, b.cfg.BurstTimeout)
	defer cancel()
	err = createAll(ctx, n, b.cfg.Workers, func(ctx context.Context, i int) error {
		sts := bareStatefulSet(s.burstNamespace(i), s.burstName(i), b.image)
		if _, err := s.env.Kube.AppsV1().StatefulSets(sts.Namespace).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("while creating StatefulSet %s/%s: %w", sts.Namespace, sts.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	row.PlaneCreated = time.Since(began)
	b.logf("plane-n%d: %d StatefulSets created in %v; one more at once, and waiting until all their pods are Ready", n, n, benchkit.Ms(row.PlaneCreated))
	type probed struct {
		d   time.Duration
		err error
	}
	one := make(chan probed, 1)
	go func() {
		d, err := s.bareProbe(ctx, "bare-one-more", b.cfg.BurstTimeout)
		one <- probed{d, err}
	}()
	progress := time.NewTicker(30 * time.Second)
	defer progress.Stop()
	done := make(chan error, 1)
	go func() {
		done <- s.env.Tracker.WaitCounts(ctx, s.burstNS, func(c Counts) bool { return c.AllReady >= n })
	}()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("not all %d pods Ready within %v: %d are: %w", n, b.cfg.BurstTimeout, s.env.Tracker.Count(s.burstNS...).AllReady, err)
			}
			row.Plane = time.Since(began)
			b.logf("plane-n%d: all %d pods Ready %v after the first Create", n, n, benchkit.Ms(row.Plane))
			p := <-one
			if p.err != nil {
				return p.err
			}
			row.PlaneOneMore = p.d
			b.logf("plane-n%d: one more bare StatefulSet's pod Ready %v after its Create", n, benchkit.Ms(row.PlaneOneMore))
			b.wall(&row.Walls, "plane baseline: burst", began)
			return nil
		case <-progress.C:
			b.logf("plane-n%d: %d of %d pods Ready", n, s.env.Tracker.Count(s.burstNS...).AllReady, n)
		}
	}
}

// bareProbe creates a bare StatefulSet named name in the probes' namespace
// and returns the time from its Create's return until the watch saw its
// pod Ready, waiting at most timeout.
func (s *stage) bareProbe(ctx context.Context, name string, timeout time.Duration) (time.Duration, error) {
	sts := bareStatefulSet(s.probeNS, name, s.b.image)
	key := sts.Namespace + "/" + sts.Name
	s.env.Tracker.Expect(key, 1)
	if _, err := s.env.Kube.AppsV1().StatefulSets(sts.Namespace).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		return 0, fmt.Errorf("while creating StatefulSet %s: %w", key, err)
	}
	created := time.Now()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := s.env.Tracker.Wait(wctx, func(m map[string]*benchkit.Seen) bool {
		seen := m[key]
		return seen != nil && !seen.AllReady.IsZero()
	}); err != nil {
		return 0, fmt.Errorf("pod of StatefulSet %s never Ready: %w", key, context.Cause(wctx))
	}
	return s.env.Tracker.Snapshot(key).AllReady.Sub(created), nil
}

// bareStatefulSet is the StatefulSet pgloop would make for a cluster of one
// instance named name, without its owner.
func bareStatefulSet(ns, name, image string) *appsv1.StatefulSet {
	sts := cluster.StatefulSet(pgtest.Cluster(ns, name, 1), cluster.Options{Image: image})
	sts.OwnerReferences = nil
	return sts
}

// fairness measures one more cluster while Busy clusters roll out: on a
// plane of its own, the idle baseline, then Busy clusters created at once
// and Running, then the operator restarted with another --spilo-image and
// one more cluster created as soon as it is ready.
func (b *bench) fairness(ctx context.Context, f *Fairness) (err error) {
	k := f.K
	began := time.Now()
	// Pods: the K, the idle probes and bare StatefulSets, the one more and
	// its bare one, the probes during the rollout and theirs, and one spare.
	s, err := b.startStage(ctx, fmt.Sprintf("fairness-k%d", k), k+4*b.cfg.Probes+3, k, true)
	defer func() { err = errors.Join(s.err(err), s.stop()) }()
	if err != nil {
		return err
	}
	if err := s.operatorUp(); err != nil {
		return err
	}
	b.wall(&f.Walls, "plane and operator up", began)
	began = time.Now()
	if f.RTT, err = s.rtt(); err != nil {
		return err
	}
	for i := range b.cfg.Probes {
		p, _, err := s.probeIdle(fmt.Sprintf("idle-%d", i))
		if err != nil {
			return err
		}
		f.Idle = append(f.Idle, p)
		b.logf("K=%d: idle probe %s Running in %v", k, p.Name, benchkit.Ms(p.ToRunning))
	}
	// The plane's own idle time for one pod, for planeExtra; the probes'
	// namespace has pgloop's ServiceAccount, which the pods run as.
	for i := range b.cfg.Probes {
		d, err := s.bareProbe(s.ctx, fmt.Sprintf("bare-idle-%d", i), b.cfg.ProbeTimeout)
		if err != nil {
			return err
		}
		f.PlaneIdle = append(f.PlaneIdle, d)
	}
	b.logf("K=%d: %d bare StatefulSets one after another on the idle plane, create → pod Ready median %v", k, len(f.PlaneIdle),
		benchkit.Ms(benchkit.Summarize(f.PlaneIdle).Median))
	b.wall(&f.Walls, "idle probes", began)

	began = time.Now()
	bu, _, err := s.burst(k)
	if err != nil {
		return err
	}
	f.Burst = bu.AllRunning
	if err := s.quiet("after the burst"); err != nil {
		return err
	}
	b.wall(&f.Walls, "burst", began)

	began = time.Now()
	f.Image = b.image + "-rollout"
	if err := s.kill(true); err != nil {
		return err
	}
	if f.Ready, err = s.startOperator("--spilo-image=" + f.Image); err != nil {
		return err
	}
	readyAt := time.Now()
	b.logf("K=%d: operator restarted with --spilo-image=%s, ready in %v; one more cluster and one more bare StatefulSet at once", k, f.Image, benchkit.Ms(f.Ready))
	if f.During, f.PlaneDuring, err = s.probeWithBare("during-rollout", "bare-during-rollout"); err != nil {
		return err
	}
	b.logf("K=%d: one more cluster Running in %v during the rollout (segments %s)", k, benchkit.Ms(f.During.ToRunning), benchkit.SegmentsText(f.During))
	// What the operator's request gate held back meanwhile (since its
	// start: the restarted operator's first urgent requests are the one
	// more's).
	if m, err := s.env.Metrics.Scrape(s.ctx); err == nil {
		f.Held, f.HeldFor = m.Get("pgloop_api_requests_held_total"), time.Duration(m.Get("pgloop_api_requests_held_seconds_total")*float64(time.Second))
		b.logf("K=%d: background requests held by the operator while urgent ones were in flight: %.0f, %v in all", k, f.Held, benchkit.Ms(f.HeldFor))
	}
	b.logf("K=%d: one more bare StatefulSet's pod Ready %v after its Create, during the rollout", k, benchkit.Ms(f.PlaneDuring))
	rolled := func(seen *benchkit.Seen) bool {
		if seen.State != fsm.Running || len(seen.Ready) < 1 || len(seen.Images) < 1 {
			return false
		}
		for _, image := range seen.Images {
			if image != f.Image {
				return false
			}
		}
		return true
	}
	keys := make([]string, k)
	for i := range keys {
		keys[i] = s.burstNamespace(i) + "/" + s.burstName(i)
	}
	left := func(m map[string]*benchkit.Seen) int {
		n := 0
		for _, key := range keys {
			if seen := m[key]; seen == nil || !rolled(seen) {
				n++
			}
		}
		return n
	}
	// Then Probes more, one after another as the idle ones, each with a
	// bare StatefulSet at once, while the K still roll (its first seconds,
	// the rollout's status writes going out), where the first one met the
	// restart's own second of work (its lists, every machine resumed).
	for i := range b.cfg.Probes {
		p, bare, err := s.probeWithBare(fmt.Sprintf("rolling-%d", i), fmt.Sprintf("bare-rolling-%d", i))
		if err != nil {
			return err
		}
		f.Rolling, f.PlaneRolling = append(f.Rolling, p), append(f.PlaneRolling, bare)
		_ = s.env.Tracker.Wait(s.ctx, func(m map[string]*benchkit.Seen) bool {
			f.RollingLeft = left(m)
			return true
		})
		b.logf("K=%d: one more cluster %s Running in %v while %d of the %d clusters still roll (segments %s); a bare StatefulSet with it %v",
			k, p.Name, benchkit.Ms(p.ToRunning), f.RollingLeft, k, benchkit.SegmentsText(p), benchkit.Ms(bare))
	}
	rctx, cancel := context.WithTimeout(s.ctx, b.cfg.RolloutTimeout)
	defer cancel()
	err = s.env.Tracker.Wait(rctx, func(m map[string]*benchkit.Seen) bool {
		f.Left = left(m)
		return f.Left == 0
	})
	// The one more cluster is measured: a rollout that does not end is
	// reported, not a failure of the run.
	switch {
	case s.ctx.Err() != nil:
		return context.Cause(s.ctx)
	case err != nil:
		b.logf("K=%d: the rollout did not end within %v: %d of the %d clusters not Running with %s", k, b.cfg.RolloutTimeout, f.Left, k, f.Image)
	default:
		f.Rollout = time.Since(readyAt)
		b.logf("K=%d: all %d clusters rolled out to %s and Running %v after the operator was ready", k, k, f.Image, benchkit.Ms(f.Rollout))
	}
	b.wall(&f.Walls, "rollout", began)
	return nil
}

// probeWithBare creates cluster name and a bare StatefulSet bareName at
// once, so that the plane's own part is measured under the same load, and
// waits for both (at most RolloutTimeout).
func (s *stage) probeWithBare(name, bareName string) (benchkit.Probe, time.Duration, error) {
	bareErr := make(chan error, 1)
	var bare time.Duration
	go func() {
		var err error
		bare, err = s.bareProbe(s.ctx, bareName, s.b.cfg.RolloutTimeout)
		bareErr <- err
	}()
	p, err := s.env.Probe(s.ctx, pgtest.Cluster(s.probeNS, name, 1), s.b.cfg.RolloutTimeout)
	if berr := <-bareErr; err == nil {
		err = berr
	}
	return p, bare, err
}

// mib renders bytes in MiB.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// seconds renders a duration in seconds, as /metrics has them.
func seconds(s float64) string {
	if s != s { // NaN: no observation
		return "n/a"
	}
	return benchkit.Ms(time.Duration(s * float64(time.Second))).String()
}

// intoDegraded counts the transitions into Degraded from another state in
// d: a cluster's retries in Degraded (Degraded -> Degraded) are
// transitions too, and not what a user sees as going Degraded.
func intoDegraded(d benchkit.Samples) int {
	return int(d.Sum("pgloop_transitions_total", `to="`+fsm.Degraded+`"`) -
		d.Sum("pgloop_transitions_total", `from="`+fsm.Degraded+`"`, `to="`+fsm.Degraded+`"`))
}
