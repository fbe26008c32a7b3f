// Package scale measures pgloop with thousands of clusters on the local
// control plane (issue 14, item 1). For each N of Config.Ns, on a fresh
// plane with KWOK nodes enough for N one-instance clusters and one
// `pgloop operator` process, it measures:
//
//  1. the burst: N clusters created at once (as fast as the bench's client
//     goes), the time until all are Running, the operator's loop lag p99
//     and largest inbox meanwhile; and, on a plane of its own, the same
//     burst of N bare StatefulSets of the same pod shape, the plane's own
//     time (phase "plane"); and, on a plane of its own with no operator,
//     the objects baseline: a bare client that writes exactly what pgloop
//     writes for N clusters (phase "objects", objects.go);
//  2. one more cluster created right after the N: its create → Running,
//     split into pgloop's share and the plane's, against the same measured
//     on the idle operator before the burst (median of Config.Probes);
//  3. the operator's RSS and Go heap with N clusters Running, per cluster;
//  4. pgloop's API requests (its pgloop_api_requests_total) to create one
//     cluster on an idle operator, and during Config.Idle with N idle
//     clusters (phase "idle");
//  5. a restart: the operator SIGKILLed with the N Running, started again:
//     the time until every cluster's machine is back (pgloop_loop_clusters,
//     its timers re-armed, the inbox drained) and the writes it made
//     (phase "restart").
//
// Then, on a plane of its own with Config.Busy clusters, the fairness of
// a rollout (phase "fairness"): the operator is restarted with another
// --spilo-image, which changes every pod template, and one more cluster's
// create → Running is measured while the Busy clusters roll.
//
// Then, on a plane of its own, fairness across namespaces (phase
// "namespaces", namespaces.go): rounds of NamespaceBurst clusters created at
// once in one namespace, each followed by one cluster in another namespace
// whose pgloop stages are judged against the idle operator's.
//
// Every wait is a watch (the bench's informers, benchkit.Tracker) or the
// operator's /metrics under a deadline; nothing sleeps for a fixed time
// but the measurement windows themselves (the idle period, the restart's
// window of writes). The command is test/bench/cmd/bench-scale, run by
// `make bench-scale`; it writes docs/scale.md.
package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/test/bench/benchkit"
	"github.com/pgloop/pgloop/test/pgtest"
	"github.com/pgloop/pgloop/test/provisioner"
)

// Phases of a run, as --phases names them.
const (
	PhasePlane    = "plane"
	PhaseObjects  = "objects"
	PhaseBurst    = "burst"
	PhaseIdle     = "idle"
	PhaseRestart  = "restart"
	PhaseFairness = "fairness"
	// PhaseNamespaces is fairness across namespaces (namespaces.go).
	PhaseNamespaces = "namespaces"
)

// AllPhases are the phases in the order a run makes them.
var AllPhases = []string{PhasePlane, PhaseObjects, PhaseBurst, PhaseIdle, PhaseRestart, PhaseFairness, PhaseNamespaces}

// Config is one run of the bench.
type Config struct {
	// Repo is the root of the pgloop tree whose operator is built and
	// whose CRDs are applied; Revision is recorded for it (empty: git's).
	Repo, Revision string
	// Ns are the numbers of clusters measured, each on a fresh plane.
	Ns []int
	// Phases are the phases made, of AllPhases.
	Phases []string
	// Idle is how long the idle period at N lasts.
	Idle time.Duration
	// Busy is the number of clusters rolled out at once in the fairness
	// phase.
	Busy int
	// NamespaceBurst is how many clusters each of NamespaceRounds rounds of
	// the namespaces phase creates at once in one namespace;
	// MaxNamespaceRatio is its goal: another namespace's cluster's pgloop
	// stages at most this times their idle medians.
	NamespaceBurst, NamespaceRounds int
	MaxNamespaceRatio               float64
	// Probes is how many clusters are created one after another on the
	// idle operator, for the idle baseline of one more cluster and the
	// requests of one create.
	Probes int
	// OneMore is how many clusters are created at once right after the
	// burst's Creates returned: the one more is their median. They share
	// the probes' namespace, whose writes go one per turn of the write
	// windows' namespaces: more than one measures a burst of them in one
	// namespace, not one more cluster (so 1 by default).
	OneMore int
	// PerNamespace is how many of the N clusters share a namespace (and
	// its ServiceAccount, Role and RoleBinding, which every cluster of the
	// namespace owns).
	PerNamespace int
	// PodsPerNode is the pod capacity of each KWOK node; the plane has as
	// many nodes as the clusters' pods need.
	PodsPerNode int
	// Workers are the bench's Creates in flight during a burst.
	Workers int
	// LabellerQPS and LabellerBurst are the rate limit of the labeller's
	// client.
	LabellerQPS   float32
	LabellerBurst int
	// VolumeWorkers are the workers of the plane's volume provisioner
	// (test/provisioner, testbed.Options.VolumeWorkers); 0 leaves the
	// volumes to kwok's stages, played one at a time, which bound a burst
	// of thousands of claims (docs/testbed.md).
	VolumeWorkers int
	// PlaneQPS and PlaneBurst are the client rate limits of the plane's
	// kube-controller-manager and kube-scheduler; 0 keeps theirs.
	PlaneQPS   float32
	PlaneBurst int
	// OperatorArgs are more flags for the operator, after the bench's
	// own (a later flag wins).
	OperatorArgs []string
	// RestartWindow is how long after the restarted operator is ready its
	// writes are counted (longer if it takes longer to restore).
	RestartWindow time.Duration
	// MaxObjectsRatio is the goal for a burst: all N Running within this
	// times the objects baseline (phase "objects").
	MaxObjectsRatio float64
	// MaxRestart is the goal for a restart; MaxOneMoreRatio the goal for
	// one more cluster at N over its idle baseline (plus one API round
	// trip); StatusWrites the status writes a create may make besides one
	// write per object.
	MaxRestart      time.Duration
	MaxOneMoreRatio float64
	// MaxOwnRatio is the goal for pgloop's share of a cluster created
	// while the fleet rolls out, against its idle share (issue 34).
	MaxOwnRatio  float64
	StatusWrites int
	// MaxRSS is the goal for the operator's RSS with RSSGoalN clusters
	// Running (issue 34: 10,000 in 500 MB); a row of fewer clusters
	// reports what its per-cluster figure projects to at RSSGoalN.
	MaxRSS   int64
	RSSGoalN int
	// BurstTimeout bounds a burst until all are Running or Ready (and the
	// one more cluster created with it); ProbeTimeout one idle probe;
	// QuietTimeout the wait for the operator to be quiet; RestoreTimeout
	// a restart until every machine is back; RolloutTimeout the fairness
	// phase's rollout.
	BurstTimeout, ProbeTimeout, QuietTimeout, RestoreTimeout, RolloutTimeout time.Duration
	// WorkDir, when set, keeps the operators' logs and the planes'
	// directories there; otherwise they go to a temporary directory,
	// removed at the end of the run, whatever its outcome.
	WorkDir string
	// Out receives the progress.
	Out io.Writer
}

// DefaultConfig is what `make bench-scale` runs.
func DefaultConfig() Config {
	return Config{
		Ns:              []int{1000, 5000},
		Phases:          slices.Clone(AllPhases),
		Idle:            10 * time.Minute,
		Busy:            1000,
		Probes:          5,
		OneMore:         1,
		PerNamespace:    100,
		PodsPerNode:     110,
		Workers:         32,
		LabellerQPS:     1000,
		LabellerBurst:   2000,
		VolumeWorkers:   provisioner.DefaultWorkers,
		PlaneQPS:        200,
		PlaneBurst:      400,
		RestartWindow:   time.Minute,
		MaxObjectsRatio: 1.2,
		MaxRestart:      30 * time.Second,
		MaxOneMoreRatio: 1.1,
		MaxOwnRatio:     1.5,
		StatusWrites:    3,
		MaxRSS:          500_000_000,
		RSSGoalN:        10_000,
		BurstTimeout:    time.Hour,
		ProbeTimeout:    5 * time.Minute,
		QuietTimeout:    15 * time.Minute,
		RestoreTimeout:  15 * time.Minute,
		RolloutTimeout:  10 * time.Minute,
		Out:             os.Stdout,

		NamespaceBurst:    200,
		NamespaceRounds:   5,
		MaxNamespaceRatio: 1.5,
	}
}

// Has reports whether the run makes phase.
func (c *Config) Has(phase string) bool { return slices.Contains(c.Phases, phase) }

// Check reports what makes a configuration unusable.
func (c *Config) Check() error {
	var errs []error
	for _, p := range c.Phases {
		if !slices.Contains(AllPhases, p) {
			errs = append(errs, fmt.Errorf("unknown phase %q (phases: %s)", p, strings.Join(AllPhases, ",")))
		}
	}
	if len(c.Phases) == 0 {
		errs = append(errs, errors.New("no phase to make"))
	}
	if (c.Has(PhaseIdle) || c.Has(PhaseRestart)) && !c.Has(PhaseBurst) {
		errs = append(errs, errors.New("the idle and restart phases need the burst phase: they are made with its N clusters"))
	}
	if c.Has(PhaseBurst) || c.Has(PhasePlane) || c.Has(PhaseObjects) {
		if len(c.Ns) == 0 || slices.ContainsFunc(c.Ns, func(n int) bool { return n < 1 }) {
			errs = append(errs, fmt.Errorf("the numbers of clusters must be at least 1, got %v", c.Ns))
		}
	}
	if c.Has(PhaseFairness) && c.Busy < 1 {
		errs = append(errs, fmt.Errorf("the fairness phase needs at least 1 busy cluster, got %d", c.Busy))
	}
	if c.Has(PhaseNamespaces) && (c.NamespaceBurst < 1 || c.NamespaceRounds < 1) {
		errs = append(errs, fmt.Errorf("the namespaces phase needs at least 1 round of at least 1 cluster, got %d of %d", c.NamespaceRounds, c.NamespaceBurst))
	}
	if c.VolumeWorkers < 0 {
		errs = append(errs, fmt.Errorf("volume workers must be 0 (kwok's stages) or more, got %d", c.VolumeWorkers))
	}
	if c.Probes < 1 || c.PerNamespace < 1 || c.PodsPerNode < 1 || c.Workers < 1 {
		errs = append(errs, errors.New("probes, clusters per namespace, pods per node and workers must be at least 1"))
	}
	if c.Has(PhaseIdle) && c.Idle <= 0 {
		errs = append(errs, errors.New("the idle period must be positive"))
	}
	return errors.Join(errs...)
}

// bench is one run in progress.
type bench struct {
	cfg   Config
	out   io.Writer
	began time.Time
	// bin is the operator's binary, workDir where the planes and logs go.
	bin, workDir string
	// image is the image the operator gives clusters (its --spilo-image).
	image string
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.out, "[%7.1fs] %s\n", time.Since(b.began).Seconds(), fmt.Sprintf(format, args...))
}

// Run runs the bench. It stops everything it started and removes its
// temporary directory before it returns, also when ctx is cancelled
// (Ctrl-C) or a step fails. The Result is returned with an error too,
// filled as far as the run went.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	b := &bench{cfg: cfg, out: cfg.Out, began: time.Now()}
	res = &Result{Config: cfg, Start: b.began, Nproc: runtime.NumCPU(), MemTotal: memTotal(), LoadStart: benchkit.Loadavg(),
		GoVersion: runtime.Version(), Revision: cfg.Revision}
	if res.Revision == "" {
		res.Revision = benchkit.Revision(ctx, cfg.Repo)
	}
	defer func() {
		res.End = time.Now()
		res.LoadEnd = benchkit.Loadavg()
	}()
	b.logf("pgloop %s, %s, %d CPUs, load average %s", res.Revision, res.GoVersion, res.Nproc, res.LoadStart)

	b.workDir = cfg.WorkDir
	if b.workDir == "" {
		if b.workDir, err = os.MkdirTemp("", "pgloop-bench-scale-"); err != nil {
			return res, err
		}
		defer os.RemoveAll(b.workDir)
	} else if err := os.MkdirAll(b.workDir, 0o755); err != nil {
		return res, err
	}
	if b.bin, err = pgtest.Build(ctx, cfg.Repo, b.workDir); err != nil {
		return res, err
	}
	b.logf("built pgloop")
	res.OperatorFlags = append(operatorFlags(), cfg.OperatorArgs...)
	help, err := exec.CommandContext(ctx, b.bin, "operator", "--help").CombinedOutput()
	if err != nil {
		return res, fmt.Errorf("pgloop operator --help: %w\n%s", err, help)
	}
	res.KubeFlags = benchkit.InEffect(res.OperatorFlags, benchkit.HelpDefaults(string(help), []string{"kube-qps", "kube-burst"}))
	b.image = benchkit.FlagValue(res.OperatorFlags, "spilo-image", cluster.DefaultImage)
	objs, err := cluster.Build(pgtest.Cluster("ns", "one", 1), cluster.Options{Image: b.image}, nil)
	if err != nil {
		return res, err
	}
	res.Objects = map[string]int{}
	for _, o := range objs.All() {
		res.Objects[strings.ToLower(o.GetObjectKind().GroupVersionKind().Kind)+"s"]++
	}

	for _, n := range cfg.Ns {
		row := &Row{N: n}
		res.Rows = append(res.Rows, row)
		if cfg.Has(PhasePlane) {
			if err := b.planeBaseline(ctx, row); err != nil {
				return res, fmt.Errorf("at N = %d, plane baseline: %w", n, err)
			}
		}
		if cfg.Has(PhaseObjects) {
			if err := b.objectsBaseline(ctx, row); err != nil {
				return res, fmt.Errorf("at N = %d, objects baseline: %w", n, err)
			}
		}
		if cfg.Has(PhaseBurst) {
			if err := b.atN(ctx, row); err != nil {
				return res, fmt.Errorf("at N = %d: %w", n, err)
			}
		}
	}
	if cfg.Has(PhaseFairness) {
		res.Fairness = &Fairness{K: cfg.Busy}
		if err := b.fairness(ctx, res.Fairness); err != nil {
			return res, fmt.Errorf("fairness, K = %d: %w", cfg.Busy, err)
		}
	}
	if cfg.Has(PhaseNamespaces) {
		res.Namespaces = &Namespaces{B: cfg.NamespaceBurst}
		if err := b.namespaces(ctx, res.Namespaces); err != nil {
			return res, fmt.Errorf("namespaces, B = %d: %w", cfg.NamespaceBurst, err)
		}
	}
	return res, nil
}

// operatorFlags are the bench's own flags of the operator, without the
// kubeconfig.
func operatorFlags() []string {
	return []string{"--leader-elect=false", "--health-addr=127.0.0.1:0", "--log-format=json", "--log-level=info"}
}

// memTotal returns the machine's memory, from /proc/meminfo ("unknown"
// when it cannot be read).
func memTotal() string {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kib int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kib); err == nil {
				return fmt.Sprintf("%.1f GiB", float64(kib)/(1<<20))
			}
		}
	}
	return "unknown"
}
