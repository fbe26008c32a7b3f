// Command bench-scale measures pgloop with thousands of clusters on fresh
// local control planes (issue 14, item 1; package scale): for each N, the
// time until N clusters created at once are Running against the plane's
// own time for N bare StatefulSets, one more cluster's create → Running
// right after them against the idle operator's, the operator's memory per
// cluster, its API requests to create a cluster and when idle, a restart,
// one more cluster while K clusters roll out, and one cluster of another
// namespace right after a burst in one. It prints the table and
// the verdicts, writes them into docs/scale.md, and exits with status 1
// when a goal is missed or the run is incomplete.
//
//	make bench-scale
//	make bench-scale BENCH_SCALE_ARGS="--n 20,50 --idle 30s --busy 20"
//	cd test && go run ./bench/cmd/bench-scale [flags]
//
// The plane's binaries come from $PGLOOP_BIN, else bin/ of the repository
// (`make testbed`). Ctrl-C stops the run and everything it started.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pgloop/pgloop/test/bench/benchkit"
	"github.com/pgloop/pgloop/test/bench/scale"
)

func main() {
	cfg := scale.DefaultConfig()
	ns := flag.String("n", "1000,5000", "numbers of clusters to measure, each on a fresh plane")
	phases := flag.String("phases", strings.Join(scale.AllPhases, ","), "phases to make, of "+strings.Join(scale.AllPhases, ",")+
		" (idle and restart need burst)")
	flag.DurationVar(&cfg.Idle, "idle", cfg.Idle, "idle period at N whose API requests are counted")
	flag.IntVar(&cfg.Busy, "busy", cfg.Busy, "clusters rolled out at once in the fairness phase")
	flag.IntVar(&cfg.NamespaceBurst, "namespace-burst", cfg.NamespaceBurst, "clusters created at once in one namespace in each round of the namespaces phase")
	flag.IntVar(&cfg.NamespaceRounds, "namespace-rounds", cfg.NamespaceRounds, "rounds of the namespaces phase")
	flag.Float64Var(&cfg.MaxNamespaceRatio, "max-namespace-ratio", cfg.MaxNamespaceRatio, "goal: another namespace's cluster's pgloop stages after a burst at most this times their idle medians (median of the rounds)")
	flag.IntVar(&cfg.Probes, "probes", cfg.Probes, "clusters created one after another on the idle operator: the one-more baseline and the requests of one create")
	flag.IntVar(&cfg.OneMore, "one-more", cfg.OneMore, "clusters created at once right after the burst's Creates returned, in the probes' namespace: the one more is their median (more than one is a burst of them in one namespace, whose writes take turns with the burst's namespaces)")
	flag.IntVar(&cfg.PerNamespace, "per-namespace", cfg.PerNamespace, "clusters per namespace")
	flag.IntVar(&cfg.PodsPerNode, "pods-per-node", cfg.PodsPerNode, "pod capacity of each KWOK node (the plane has as many nodes as needed)")
	flag.IntVar(&cfg.Workers, "workers", cfg.Workers, "the bench's Creates in flight during a burst")
	labellerQPS := flag.Float64("labeller-qps", float64(cfg.LabellerQPS), "requests per second of the labeller's client")
	flag.IntVar(&cfg.LabellerBurst, "labeller-burst", cfg.LabellerBurst, "burst of the labeller's client")
	flag.IntVar(&cfg.VolumeWorkers, "volume-workers", cfg.VolumeWorkers, "workers of the plane's volume provisioner (test/provisioner); 0: kwok's volume stages, played one at a time")
	planeQPS := flag.Float64("plane-qps", float64(cfg.PlaneQPS), "client rate of the plane's kube-controller-manager and kube-scheduler (0: theirs, 20 and 50)")
	flag.IntVar(&cfg.PlaneBurst, "plane-burst", cfg.PlaneBurst, "client burst of the plane's kube-controller-manager and kube-scheduler (0: theirs, 30 and 100)")
	var opArgs benchkit.ListFlag
	flag.Var(&opArgs, "operator-arg", "a further flag for the operator, e.g. --operator-arg=--kube-qps=200 (repeatable; a later flag wins; write --flag=value)")
	flag.DurationVar(&cfg.RestartWindow, "restart-window", cfg.RestartWindow, "how long after ready the restarted operator's writes are counted")
	flag.DurationVar(&cfg.MaxRestart, "max-restart", cfg.MaxRestart, "goal: the longest restart until every machine is back")
	flag.Float64Var(&cfg.MaxOwnRatio, "max-own-ratio", cfg.MaxOwnRatio, "goal: pgloop's share of a cluster created while the fleet rolls out (fairness phase, median) at most this times its idle share")
	flag.Int64Var(&cfg.MaxRSS, "max-rss", cfg.MaxRSS, "goal: the operator's RSS in bytes with --rss-goal-n clusters Running (judged at N >= --rss-goal-n; a smaller N reports its projection)")
	flag.IntVar(&cfg.RSSGoalN, "rss-goal-n", cfg.RSSGoalN, "clusters of the RSS goal")
	flag.Float64Var(&cfg.MaxOneMoreRatio, "max-one-more-ratio", cfg.MaxOneMoreRatio, "goal: one more cluster at N at most this times its idle median, plus one API round trip")
	flag.DurationVar(&cfg.BurstTimeout, "burst-timeout", cfg.BurstTimeout, "bound of a burst until all are Running (or Ready, for the plane baseline)")
	flag.DurationVar(&cfg.ProbeTimeout, "probe-timeout", cfg.ProbeTimeout, "bound of one cluster on the idle operator")
	flag.DurationVar(&cfg.QuietTimeout, "quiet-timeout", cfg.QuietTimeout, "longest wait for the operator to be quiet")
	flag.DurationVar(&cfg.RestoreTimeout, "restore-timeout", cfg.RestoreTimeout, "bound of an operator's start, and of a restart until every machine is back")
	flag.DurationVar(&cfg.RolloutTimeout, "rollout-timeout", cfg.RolloutTimeout, "bound of the fairness phase's rollout")
	doc := flag.String("doc", "docs/scale.md", "document to write the table into, relative to the repository (empty: none)")
	flag.StringVar(&cfg.WorkDir, "work-dir", "", "keep the operators' logs and the planes' directories here (default: a temporary directory, removed at the end)")
	timeout := flag.Duration("timeout", 6*time.Hour, "bound of the whole run")
	src := flag.String("source", "", "pgloop tree to build the operator from and read the CRDs of (default: this repository)")
	flag.StringVar(&cfg.Revision, "revision", "", "revision to record for the operator (default: git's, of --source)")
	flag.Parse()
	cfg.OperatorArgs = opArgs
	cfg.LabellerQPS, cfg.PlaneQPS = float32(*labellerQPS), float32(*planeQPS)

	var err error
	if cfg.Ns, err = benchkit.ParseCounts(*ns); err != nil {
		err = fmt.Errorf("--n: %w", err)
	} else {
		cfg.Phases = splitList(*phases)
		err = run(cfg, *doc, *src, *timeout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale:", err)
		os.Exit(1)
	}
}

// splitList reads a comma-separated list, blanks left out.
func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func run(cfg scale.Config, doc, src string, timeout time.Duration) error {
	if err := cfg.Check(); err != nil {
		return err
	}
	paths, err := benchkit.ResolvePaths(src, cfg.WorkDir)
	if err != nil {
		return err
	}
	repo := paths.Repo
	cfg.Repo, cfg.WorkDir = paths.Source, paths.WorkDir
	ctx, cancel := benchkit.CommandContext(timeout)
	defer cancel()
	res, runErr := scale.Run(ctx, cfg)
	if res == nil {
		return runErr
	}

	fmt.Println()
	fmt.Printf("Operator flags: %s (in effect: %s)\n\n", strings.Join(res.OperatorFlags, " "), res.KubeFlags)
	res.WriteTable(os.Stdout)
	fmt.Println()
	for _, v := range res.Verdicts() {
		fmt.Println(v)
	}
	fmt.Println()
	res.WriteDetails(os.Stdout)
	if runErr != nil {
		return runErr
	}
	if doc != "" {
		path := filepath.Join(repo, doc)
		if err := res.UpdateDoc(path); err != nil {
			return fmt.Errorf("while writing %s: %w", path, err)
		}
		fmt.Printf("table written into %s (section %q)\n", path, res.Key())
	}
	switch {
	case !res.Complete():
		return errors.New("incomplete: the run stopped before measuring everything")
	case !res.Pass():
		return errors.New("a goal was missed (see the verdicts)")
	}
	return nil
}
