// Package isolation measures, on the local control plane, whether clusters
// that cannot converge slow down healthy ones (issue 6, item 3): in one run,
// on one fresh plane with one `pgloop operator` process, it creates K stuck
// clusters (K = 0, 10, 100, 1000 by default, cumulatively), waits until every one
// is Degraded with its cause, waits for the operator to be quiet, then
// creates healthy clusters one after another and measures each one's
// create → Running time and the operator-added latency (last pod Ready →
// status Running), and writes the table into docs/isolation.md.
//
// The frozen mode (Config.Frozen, issue 13; frozen.go) measures the same
// next to K hung primaries instead: clusters running real Patroni and
// PostgreSQL on the plane's process node, their PostgreSQL frozen while a
// sync of their users is under way, so that each try of the sync holds an
// executor worker until its connect deadline.
//
// Every wait is a watch (two informers: every Postgresql, and the healthy
// namespace's pods) or, for the operator's quiet condition, its /metrics,
// under a deadline; nothing sleeps for a fixed time. The command is
// test/bench/cmd/bench-isolation, run by `make bench-isolation`.
package isolation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/fsm"
	pgclient "github.com/pgloop/pgloop/pkg/generated/clientset/versioned"
	"github.com/pgloop/pgloop/test/bench/benchkit"
	"github.com/pgloop/pgloop/test/labeller"
	"github.com/pgloop/pgloop/test/pgtest"
	"github.com/pgloop/pgloop/test/testbed"
)

// Config is one run of the bench.
type Config struct {
	// Repo is the root of the pgloop tree whose operator is built and
	// whose CRDs are applied.
	Repo string
	// Revision is recorded as the operator's revision; empty means git's
	// (with "+dirty" when pkg/ or cmd/ have changes).
	Revision string
	// Stuck are the numbers of stuck clusters measured, in increasing
	// order, the first 0: the run adds stuck clusters to reach each.
	Stuck []int
	// Frozen, when set, are the numbers of hung primaries measured next
	// to instead (the frozen mode; Stuck must then be empty: each mode has
	// a plane of its own), in increasing order, the first 0. For each K,
	// K clusters of one instance are made on the plane's process node,
	// then frozen mid-sync (frozen.go); those of the previous K are
	// deleted first, so that every K's are hung for the same short time.
	Frozen []int
	// Healthy is the number of healthy clusters measured per K, created
	// one after another; WarmUp more are created first and not measured.
	Healthy, WarmUp int
	// Instances of each healthy cluster.
	Instances int
	// CreateTimeout is the operator's --create-timeout: short, so the
	// stuck clusters become Degraded within the run.
	CreateTimeout time.Duration
	// OperatorArgs are more flags for the operator, after the bench's
	// own (a later flag wins).
	OperatorArgs []string
	// Nodes of the plane.
	Nodes int
	// MaxRatio is the highest acceptable ratio of the healthy median with
	// the most stuck clusters to the median with none.
	MaxRatio float64
	// StuckTimeout bounds the wait for a batch of stuck clusters to be
	// Degraded, beyond CreateTimeout; QuietTimeout the wait for the
	// operator to be quiet; ClusterTimeout one healthy cluster's wait for
	// Running.
	StuckTimeout, QuietTimeout, ClusterTimeout time.Duration
	// FrozenTimeout bounds each wait of a batch of frozen clusters: to be
	// Running with their roles synced, to stop answering once frozen, to
	// show their sync hung, and to be gone with their pods.
	FrozenTimeout time.Duration
	// RetryRound, when set, adds a measurement after the last K: the
	// healthy clusters are created as soon as at least half of the stuck
	// clusters' retry timers have fired together (a retry round: they
	// were created in one burst, so their timers stay in step), instead
	// of once the operator is quiet. RetryRoundTimeout bounds the wait
	// for such a round (the operator's --retry-max is 5 minutes).
	RetryRound        bool
	RetryRoundTimeout time.Duration
	// WorkDir, when set, keeps the operator's log and the plane's
	// directory there; otherwise they go to a temporary directory that
	// is removed after a successful run.
	WorkDir string
	// Out receives the progress and the table.
	Out io.Writer
}

// DefaultFrozen are the values of K of `make bench-isolation-frozen`: at
// most half of the operator's default 16 workers (docs/isolation.md says
// why), and as many real PostgreSQL servers as two cores start in a
// minute.
var DefaultFrozen = []int{0, 4, 8}

// DefaultConfig is what `make bench-isolation` runs.
func DefaultConfig() Config {
	return Config{
		Stuck:             []int{0, 10, 100, 1000},
		Healthy:           20,
		WarmUp:            2,
		Instances:         1,
		CreateTimeout:     15 * time.Second,
		Nodes:             3,
		MaxRatio:          1.1,
		StuckTimeout:      10 * time.Minute,
		QuietTimeout:      3 * time.Minute,
		ClusterTimeout:    3 * time.Minute,
		FrozenTimeout:     4 * time.Minute,
		RetryRound:        true,
		RetryRoundTimeout: 6 * time.Minute,
		Out:               os.Stdout,
	}
}

// Phase is the measurement next to K clusters that cannot converge: stuck
// ones, or in the frozen mode hung primaries.
type Phase struct {
	K int
	// Retries is, for a measurement during a retry round, how many retry
	// timers had fired in the round when it began.
	Retries int
	// StuckAfter is how long the last batch of stuck clusters took,
	// from its first Create to all Degraded with their cause; Settle how
	// long the operator then took to be quiet (Quiet false: it never was
	// within QuietTimeout, and the phase was measured anyway).
	StuckAfter, Settle time.Duration
	Quiet              bool
	// States counts the operator's clusters by state when the healthy
	// clusters' measurement began.
	States map[string]int
	// Load is the load average when the measurement began.
	Load     string
	Clusters []benchkit.Probe
	// Window is the duration of the healthy measurements; Background what
	// the operator's metrics counted during it.
	Window     time.Duration
	Background benchkit.Samples
	// PeakRunning and PeakWaiting are the most plans seen running (on the
	// executor's workers, in its hung lane, or detached past --slow-after),
	// and waiting for their cluster's running plan, a free worker or a
	// place of the hung lane, during the window (/metrics read every 250ms).
	PeakRunning, PeakWaiting int
	// CPU is what the machine's CPUs did during the window.
	CPU CPU

	// In the frozen mode: ReadyAfter is how long the K frozen clusters
	// took from the first Create to all Running with their roles synced
	// and configuration applied; HungAfter from the first freeze to all
	// showing their sync hung, HungMessage one of them saying so;
	// HungAtEnd how many still did at the end of the window.
	ReadyAfter, HungAfter time.Duration
	HungMessage           string
	HungAtEnd             int
	// Unfrozen is, in the frozen mode, the measurement next to the same K
	// clusters Running, before they were frozen: what K real Patroni and
	// PostgreSQL cost the healthy clusters without a hung primary (not in
	// the verdict).
	Unfrozen *Phase
}

// ToRunning summarizes the phase's create → Running times.
func (p *Phase) ToRunning() benchkit.Summary {
	return benchkit.Summarize(collect(p.Clusters, func(h benchkit.Probe) time.Duration { return h.ToRunning }))
}

// ReadyToRunning summarizes the phase's operator-added latencies.
func (p *Phase) ReadyToRunning() benchkit.Summary {
	return benchkit.Summarize(collect(p.Clusters, func(h benchkit.Probe) time.Duration { return h.ReadyToRunning }))
}

// Segment summarizes segment i of the phase's clusters.
func (p *Phase) Segment(i int) benchkit.Summary {
	return benchkit.Summarize(collect(p.Clusters, func(h benchkit.Probe) time.Duration { return h.Segments[i] }))
}

// LabelledToRunning summarizes the phase's labelled → Running latencies.
func (p *Phase) LabelledToRunning() benchkit.Summary {
	return benchkit.Summarize(collect(p.Clusters, func(h benchkit.Probe) time.Duration { return h.LabelledToRunning }))
}

func collect(hs []benchkit.Probe, f func(benchkit.Probe) time.Duration) []time.Duration {
	out := make([]time.Duration, 0, len(hs))
	for _, h := range hs {
		out = append(out, f(h))
	}
	return out
}

// Result is a whole run.
type Result struct {
	Config     Config
	Start, End time.Time
	// Nproc and the load averages (as /proc/loadavg has them) at the
	// start and the end of the run.
	Nproc              int
	LoadStart, LoadEnd string
	// Revision is the tree's git revision ("+dirty" when it has
	// changes), GoVersion the toolchain's.
	Revision, GoVersion string
	// OperatorFlags are the operator's flags, without the run's
	// kubeconfig and namespaces. HungFlags, in the frozen mode, are those
	// that bound what a hung primary costs, as in effect: from
	// OperatorFlags, else the defaults the operator's --help shows.
	OperatorFlags []string
	HungFlags     string
	Phases        []Phase
	// RetryRound is the measurement during a retry round of the stuck
	// clusters (Config.RetryRound), nil when not made or no round came.
	RetryRound *Phase
}

// Ratio is the healthy median with the most stuck clusters over the one
// with none.
func (r *Result) Ratio() float64 {
	if len(r.Phases) < 2 {
		return 1
	}
	return benchkit.Ratio(r.Phases[len(r.Phases)-1].ToRunning().Median, r.Phases[0].ToRunning().Median)
}

// stuckWay is one way a cluster gets stuck, and the words of its cause that
// status.message carries once it is Degraded.
type stuckWay struct {
	name   string
	mutate func(*v1.Postgresql)
	cause  string
}

var stuckWays = []stuckWay{
	{name: "affinity", mutate: func(pg *v1.Postgresql) {
		pg.Spec.NodeAffinity = &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: testbed.ImpossibleNodeLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"},
				}}}},
			},
		}
	}, cause: "node affinity/selector"},
	{name: "cpu", mutate: func(pg *v1.Postgresql) {
		cpu := resource.MustParse(testbed.OversizedCPU)
		pg.Spec.Resources.Requests.CPU = &cpu
		pg.Spec.Resources.Limits.CPU = &cpu
	}, cause: "Insufficient cpu"},
	{name: "quota", mutate: func(*v1.Postgresql) {}, cause: "exceeded quota"},
}

// bench is one run in progress.
type bench struct {
	cfg     Config
	out     io.Writer
	began   time.Time
	kube    kubernetes.Interface
	pg      pgclient.Interface
	tracker *benchkit.Tracker
	metrics *benchkit.Scraper
	env     benchkit.Env // the above, to probe healthy clusters

	healthyNS string
	stuckNS   []string // by stuckWay
	stuck     []string // keys of the stuck clusters so far
	stuckWay  []int    // their way, by index

	frozenNS string   // in the frozen mode
	frozen   []string // keys of the current K's frozen clusters

	// cpu says whose the processes are whose CPU each window counts.
	cpu cpuOwners
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.out, "[%6.1fs] %s\n", time.Since(b.began).Seconds(), fmt.Sprintf(format, args...))
}

// FrozenMode reports whether the run measures next to hung primaries
// rather than stuck clusters.
func (c *Config) FrozenMode() bool { return len(c.Frozen) > 0 }

// Ks are the values of K the run measures: Frozen in the frozen mode, else
// Stuck.
func (c *Config) Ks() []int {
	if c.FrozenMode() {
		return c.Frozen
	}
	return c.Stuck
}

// Check reports what makes a configuration unusable.
func (c *Config) Check() error {
	if c.FrozenMode() && len(c.Stuck) > 0 {
		return fmt.Errorf("stuck clusters (%v) and frozen ones (%v) in one run: each mode runs on a plane of its own", c.Stuck, c.Frozen)
	}
	what := "stuck"
	if c.FrozenMode() {
		what = "frozen"
	}
	if ks := c.Ks(); len(ks) == 0 || ks[0] != 0 || !slices.IsSorted(ks) || slices.ContainsFunc(ks, func(k int) bool { return k < 0 }) {
		return fmt.Errorf("the %s counts must start at 0 and increase, got %v", what, ks)
	}
	if c.Healthy < 1 || c.Instances < 1 {
		return errors.New("at least one healthy cluster of at least one instance is needed")
	}
	return nil
}

// Run runs the bench. It stops everything it started before it returns,
// also when ctx is cancelled (Ctrl-C) or a step fails. The Result is
// returned with an error too, filled as far as the run went.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	b := &bench{cfg: cfg, out: cfg.Out, began: time.Now()}
	res = &Result{Config: cfg, Start: b.began, Nproc: runtime.NumCPU(), LoadStart: benchkit.Loadavg(), GoVersion: runtime.Version(),
		Revision: cfg.Revision}
	if res.Revision == "" {
		res.Revision = benchkit.Revision(ctx, cfg.Repo)
	}
	defer func() {
		res.End = time.Now()
		res.LoadEnd = benchkit.Loadavg()
	}()
	b.logf("pgloop %s, %s, %d CPUs, load average %s", res.Revision, res.GoVersion, res.Nproc, res.LoadStart)

	workDir := cfg.WorkDir
	if workDir == "" {
		if workDir, err = os.MkdirTemp("", "pgloop-bench-isolation-"); err != nil {
			return res, err
		}
		defer func() {
			if err == nil {
				_ = os.RemoveAll(workDir)
			} else {
				fmt.Fprintf(b.out, "logs kept in %s\n", workDir)
			}
		}()
	} else if err := os.MkdirAll(workDir, 0o755); err != nil {
		return res, err
	}

	bin, err := pgtest.Build(ctx, cfg.Repo, workDir)
	if err != nil {
		return res, err
	}
	b.logf("built pgloop")

	opts := testbed.Options{Nodes: cfg.Nodes, KeepDir: cfg.WorkDir != "", TempDir: cfg.WorkDir}
	if cfg.FrozenMode() {
		// The frozen clusters run real Patroni and PostgreSQL; the
		// taint keeps the healthy ones on kwok's nodes.
		opts.ProcessNodes, opts.TaintProcessNodes = 1, true
	}
	plane, err := testbed.Start(ctx, opts)
	if err != nil {
		return res, fmt.Errorf("while starting the control plane: %w", err)
	}
	defer func() {
		if herr := plane.Healthy(); herr != nil {
			err = errors.Join(err, fmt.Errorf("a process of the plane died during the run: %w", herr))
		}
		if serr := plane.Stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("while stopping the plane: %w", serr))
		}
		b.logf("plane stopped")
	}()
	b.logf("plane up in %v (%d nodes, %d process nodes)", plane.StartupTime.Round(time.Millisecond), cfg.Nodes, opts.ProcessNodes)
	b.cpu.planeDir = plane.Dir
	if nodes := plane.ProcessNodes(); len(nodes) > 0 {
		b.cpu.root = nodes[0].Root
	}
	if err := b.setup(ctx, plane); err != nil {
		return res, err
	}

	// The bench's own watches, and the labeller for the healthy clusters.
	watchCtx, stopWatches := context.WithCancel(context.Background())
	labellerDone := make(chan error, 1)
	defer func() {
		stopWatches()
		if lerr := <-labellerDone; lerr != nil {
			err = errors.Join(err, fmt.Errorf("labeller: %w", lerr))
		}
	}()
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	go func() { labellerDone <- labeller.Run(watchCtx, b.kube, b.healthyNS, quiet) }()
	b.tracker = benchkit.NewTracker()
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	err = b.tracker.Start(watchCtx, syncCtx, b.kube, b.pg, b.healthyNS)
	cancel()
	if err != nil {
		return res, err
	}

	// The operator.
	namespaces := append([]string{b.healthyNS}, b.stuckNS...)
	if b.frozenNS != "" {
		namespaces = append(namespaces, b.frozenNS)
	}
	res.OperatorFlags = append([]string{"--leader-elect=false", "--health-addr=127.0.0.1:0", "--log-format=json", "--log-level=info",
		"--create-timeout=" + cfg.CreateTimeout.String()}, cfg.OperatorArgs...)
	if cfg.FrozenMode() {
		help, err := exec.CommandContext(ctx, bin, "operator", "--help").CombinedOutput()
		if err != nil {
			return res, fmt.Errorf("pgloop operator --help: %w\n%s", err, help)
		}
		res.HungFlags = benchkit.InEffect(res.OperatorFlags, benchkit.HelpDefaults(string(help), hungFlagNames))
	}
	args := []string{"operator", "--kubeconfig", plane.Kubeconfig, "--namespace", strings.Join(namespaces, ",")}
	args = append(args, res.OperatorFlags...)
	op, err := benchkit.StartOperator(bin, args, filepath.Join(workDir, "operator.log"))
	if err != nil {
		return res, err
	}
	b.cpu.operator = op.PID()
	defer func() {
		if serr := op.StopNamed(); serr != nil {
			err = errors.Join(err, serr)
		}
		b.logf("operator stopped")
	}()
	// The run ends when the operator does.
	ctx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	go func() {
		select {
		case <-op.Exited():
			cancelRun(fmt.Errorf("the operator exited: %v\n%s", op.Err(), op.Tail()))
		case <-ctx.Done():
		}
	}()
	readyCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	addr, err := op.WaitReady(readyCtx)
	cancel()
	if err != nil {
		return res, err
	}
	b.metrics = benchkit.NewScraper(addr)
	b.env = benchkit.Env{Kube: b.kube, PG: b.pg, Tracker: b.tracker, Metrics: b.metrics, Began: b.began}
	b.logf("operator ready, /metrics on %s: %s", addr, strings.Join(res.OperatorFlags, " "))

	defer func() {
		if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
			err = fmt.Errorf("%w (%v)", err, cause)
		}
	}()
	// Frozen clusters left by a failed run are thawed and deleted while
	// the operator still runs to remove their finalizers, so that the
	// process kubelet has no pod left when the plane stops. Without an
	// operator, the plane's Stop stops them anyway.
	defer func() {
		if len(b.frozen) == 0 {
			return
		}
		select {
		case <-op.Exited():
			return
		default:
		}
		cctx, cancel := context.WithTimeout(context.Background(), 2*cfg.FrozenTimeout)
		defer cancel()
		if cerr := b.dropFrozen(cctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("while removing the frozen clusters: %w", cerr))
		}
	}()

	// Warm-up: the operator's first clusters pay for cold connections
	// and caches.
	for i := range cfg.WarmUp {
		h, err := b.healthy(ctx, fmt.Sprintf("warmup-%d", i))
		if err != nil {
			return res, err
		}
		b.logf("warm-up %s: Running in %v", h.Name, h.ToRunning.Round(time.Millisecond))
	}

	for _, k := range cfg.Ks() {
		measure := b.phase
		if cfg.FrozenMode() {
			measure = b.frozenPhase
		}
		phase, err := measure(ctx, k)
		if len(phase.Clusters) > 0 {
			res.Phases = append(res.Phases, phase)
		}
		if err != nil {
			return res, err
		}
		b.logf("K=%d: healthy create → Running median %v, p99 %v; last pod Ready → Running median %v, p99 %v",
			k, benchkit.Ms(phase.ToRunning().Median), benchkit.Ms(phase.ToRunning().P99), benchkit.Ms(phase.ReadyToRunning().Median), benchkit.Ms(phase.ReadyToRunning().P99))
	}
	if cfg.FrozenMode() {
		return res, b.dropFrozen(ctx)
	}
	if k := cfg.Stuck[len(cfg.Stuck)-1]; cfg.RetryRound && k > 0 {
		phase, found, err := b.retryRound(ctx, k)
		if found && len(phase.Clusters) > 0 {
			res.RetryRound = &phase
		}
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// retryRound waits until at least half of the k stuck clusters' retry
// timers fire within two seconds, then measures the healthy clusters at
// once, while the round's plans run. /metrics is read every 100ms. It
// reports false when no round came within RetryRoundTimeout.
func (b *bench) retryRound(ctx context.Context, k int) (Phase, bool, error) {
	p := Phase{K: k}
	retries := func(s benchkit.Samples) float64 { return s.Sum("pgloop_transitions_total", `event="retry"`) }
	threshold := float64((k + 1) / 2)
	b.logf("K=%d: waiting for a retry round of the stuck clusters (at least %.0f retry timers firing within 2s)", k, threshold)
	began := time.Now()
	deadline := time.NewTimer(b.cfg.RetryRoundTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	type scrape struct {
		at time.Time
		s  benchkit.Samples
	}
	var recent []scrape // the last two seconds' scrapes, oldest first
	for {
		s, err := b.metrics.Scrape(ctx)
		if err != nil {
			return p, false, err
		}
		now := time.Now()
		recent = append(recent, scrape{now, s})
		for len(recent) > 1 && now.Sub(recent[0].at) > 2*time.Second {
			recent = recent[1:]
		}
		if n := retries(s) - retries(recent[0].s); n >= threshold {
			p.Retries = int(n)
			p.Settle = time.Since(began)
			b.logf("K=%d: retry round began %v after the last measurement (%d retries fired); measuring", k, benchkit.Ms(p.Settle), p.Retries)
			return p, true, b.measure(ctx, &p, recent[0].s, "retry")
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			b.logf("K=%d: no retry round within %v: not measured", k, b.cfg.RetryRoundTimeout)
			return p, false, nil
		case <-ctx.Done():
			return p, false, context.Cause(ctx)
		}
	}
}

// setup applies the CRDs and creates the namespaces and the quota.
func (b *bench) setup(ctx context.Context, plane *testbed.Plane) error {
	rc, kube, pg, err := benchkit.Clients(plane.Config)
	if err != nil {
		return err
	}
	b.kube, b.pg = kube, pg
	if err := benchkit.ApplyCRDs(ctx, rc, b.cfg.Repo); err != nil {
		return err
	}
	if b.healthyNS, err = testbed.CreateNamespace(ctx, b.kube, "healthy"); err != nil {
		return err
	}
	if b.cfg.FrozenMode() {
		b.frozenNS, err = testbed.CreateNamespace(ctx, b.kube, "frozen")
		return err
	}
	for _, way := range stuckWays {
		ns, err := testbed.CreateNamespace(ctx, b.kube, "stuck-"+way.name)
		if err != nil {
			return err
		}
		b.stuckNS = append(b.stuckNS, ns)
		if way.name == "quota" {
			if _, err := testbed.CreateQuota(ctx, b.kube, testbed.NoPodsQuota(ns, "no-pods")); err != nil {
				return err
			}
		}
	}
	return nil
}

// phase adds stuck clusters up to k, waits until they are all Degraded and
// the operator is quiet, and measures the healthy clusters.
func (b *bench) phase(ctx context.Context, k int) (Phase, error) {
	p := Phase{K: k}
	if add := k - len(b.stuck); add > 0 {
		began := time.Now()
		for i := len(b.stuck); i < k; i++ {
			w := i % len(stuckWays)
			pg := pgtest.Cluster(b.stuckNS[w], fmt.Sprintf("stuck-%03d", i), 1)
			stuckWays[w].mutate(pg)
			if _, err := b.pg.PgloopV1().Postgresqls(pg.Namespace).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
				return p, fmt.Errorf("while creating stuck cluster %s/%s: %w", pg.Namespace, pg.Name, err)
			}
			b.stuck = append(b.stuck, pg.Namespace+"/"+pg.Name)
			b.stuckWay = append(b.stuckWay, w)
		}
		b.logf("K=%d: created %d stuck clusters in %v; waiting until all %d are Degraded with their cause", k, add, time.Since(began).Round(time.Millisecond), k)
		if err := b.waitStuck(ctx); err != nil {
			return p, err
		}
		p.StuckAfter = time.Since(began)
		b.logf("K=%d: all %d stuck clusters Degraded with their cause %v after the first Create (create timeout %v)",
			k, k, p.StuckAfter.Round(time.Millisecond), b.cfg.CreateTimeout)
	}
	settle, quiet, err := benchkit.WaitQuiet(ctx, b.metrics, b.cfg.QuietTimeout)
	if err != nil {
		return p, err
	}
	p.Settle, p.Quiet = settle, quiet
	if quiet {
		b.logf("K=%d: operator quiet after %v (inbox empty, no plan running or waiting, no event dispatched for 1s)", k, settle.Round(time.Millisecond))
	} else {
		b.logf("K=%d: operator NOT quiet after %v; measuring anyway", k, settle.Round(time.Millisecond))
	}

	before, err := b.metrics.Scrape(ctx)
	if err != nil {
		return p, err
	}
	return p, b.measure(ctx, &p, before, fmt.Sprint(k))
}

// measure creates the healthy clusters one after another and records them
// into p; before is a scrape of the operator's metrics taken just before.
func (b *bench) measure(ctx context.Context, p *Phase, before benchkit.Samples, tag string) error {
	p.Load = benchkit.Loadavg()
	p.States = map[string]int{}
	for _, s := range fsm.States {
		if n := int(before.Get(`pgloop_clusters{state="` + s + `"}`)); n > 0 {
			p.States[s] = n
		}
	}
	peaks := b.samplePeaks(ctx)
	cpuBefore := sampleCPU(b.cpu)
	start := time.Now()
	for i := range b.cfg.Healthy {
		h, err := b.healthy(ctx, fmt.Sprintf("healthy-k%s-%02d", tag, i))
		h.Start -= start.Sub(b.began)
		if err != nil {
			peaks()
			return err
		}
		p.Clusters = append(p.Clusters, h)
		b.logf("K=%d: %s Running in %v (segments %s; last pod Ready → Running %v; operator ran %s meanwhile)",
			p.K, h.Name, benchkit.Ms(h.ToRunning), benchkit.SegmentsText(h), benchkit.Ms(h.ReadyToRunning), benchkit.StepCounts(h.Steps))
	}
	p.Window = time.Since(start)
	p.CPU = cpuBetween(cpuBefore, sampleCPU(b.cpu))
	p.PeakRunning, p.PeakWaiting = peaks()
	after, err := b.metrics.Scrape(ctx)
	if err != nil {
		return err
	}
	p.Background = benchkit.Delta(before, after)
	return nil
}

// samplePeaks reads the operator's /metrics every 250ms (the executor's
// gauges have no watch) until the function it returns is called, which
// returns the most plans seen running and waiting for a worker.
func (b *bench) samplePeaks(ctx context.Context) func() (running, waiting int) {
	ctx, cancel := context.WithCancel(ctx)
	var run, wait float64
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			// A failed scrape is no peak; the measurement's own
			// scrapes report a dead operator.
			if s, err := b.metrics.Scrape(ctx); err == nil {
				run = max(run, s.Get("pgloop_loop_plans_running"))
				wait = max(wait, s.Get("pgloop_loop_plans_waiting"))
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() (int, int) {
		cancel()
		<-done
		return int(run), int(wait)
	}
}

// waitStuck waits until every stuck cluster is Degraded with its cause in
// status.message.
func (b *bench) waitStuck(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.CreateTimeout+b.cfg.StuckTimeout)
	defer cancel()
	var notYet []string
	err := b.tracker.Wait(ctx, func(m map[string]*benchkit.Seen) bool {
		notYet = notYet[:0]
		for i, key := range b.stuck {
			s := m[key]
			if s == nil || s.State != fsm.Degraded || !strings.Contains(s.Message, stuckWays[b.stuckWay[i]].cause) {
				state, msg := "(not seen)", ""
				if s != nil {
					state, msg = s.State, s.Message
				}
				notYet = append(notYet, fmt.Sprintf("%s: state %q, message %q", key, state, msg))
			}
		}
		return len(notYet) == 0
	})
	if err != nil {
		if len(notYet) > 5 {
			notYet = append(notYet[:5], fmt.Sprintf("… and %d more", len(notYet)-5))
		}
		return fmt.Errorf("stuck clusters not Degraded with their cause: %w\n%s", err, strings.Join(notYet, "\n"))
	}
	return nil
}

// healthy creates one healthy cluster in the healthy namespace and
// measures it.
func (b *bench) healthy(ctx context.Context, name string) (benchkit.Probe, error) {
	pg := pgtest.Cluster(b.healthyNS, name, int32(b.cfg.Instances))
	return b.env.Probe(ctx, pg, b.cfg.ClusterTimeout)
}
