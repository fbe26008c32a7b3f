// Command bench-isolation measures, on a fresh local control plane, how long
// healthy clusters take to become Running next to 0, 10 and 100 stuck ones,
// and pgloop's own latency from the last pod Ready to status Running (issue
// 6, item 3; package isolation). It prints the table, writes it into
// docs/isolation.md, and exits with status 1 when the ratio of the healthy
// median with the most stuck clusters to the one with none exceeds
// --max-ratio.
//
// With --frozen it measures next to hung primaries instead (issue 13): K
// clusters running real Patroni and PostgreSQL on a process node, their
// PostgreSQL frozen while a sync of their users is under way.
//
//	make bench-isolation
//	make bench-isolation-frozen   # --frozen=0,4,8
//	cd test && go run ./bench/cmd/bench-isolation [flags]
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
	"strconv"
	"strings"
	"time"

	"github.com/pgloop/pgloop/test/bench/benchkit"
	"github.com/pgloop/pgloop/test/bench/isolation"
)

func main() {
	cfg := isolation.DefaultConfig()
	stuck := flag.String("stuck", "0,10,100,1000", "numbers of stuck clusters to measure next to, increasing from 0 (none when --frozen is given)")
	frozen := flag.String("frozen", "", "numbers of hung primaries to measure next to instead, increasing from 0, e.g. "+
		counts(isolation.DefaultFrozen)+" (make bench-isolation-frozen): clusters of real Patroni and PostgreSQL on a process node "+
		"(make data-plane-deps), frozen mid-sync")
	flag.DurationVar(&cfg.FrozenTimeout, "frozen-timeout", cfg.FrozenTimeout, "bound of each wait of a batch of frozen clusters (Running and synced, frozen, hung, gone)")
	flag.IntVar(&cfg.Healthy, "healthy", cfg.Healthy, "healthy clusters measured per number of stuck clusters, created one after another")
	flag.IntVar(&cfg.WarmUp, "warmup", cfg.WarmUp, "healthy clusters created, not measured, before the first measurement")
	flag.IntVar(&cfg.Instances, "instances", cfg.Instances, "instances of each healthy cluster")
	flag.DurationVar(&cfg.CreateTimeout, "create-timeout", cfg.CreateTimeout, "the operator's --create-timeout: how soon stuck clusters become Degraded")
	var opArgs benchkit.ListFlag
	flag.Var(&opArgs, "operator-arg", "a further flag for the operator, e.g. --operator-arg=--kube-qps=200 (repeatable; a later flag wins)")
	flag.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "fake nodes of the plane")
	flag.Float64Var(&cfg.MaxRatio, "max-ratio", cfg.MaxRatio, "fail when the healthy median with the most stuck clusters exceeds this times the one with none")
	flag.BoolVar(&cfg.RetryRound, "retry-round", cfg.RetryRound, "also measure, after the last K, during a retry round of the stuck clusters (not in the verdict)")
	flag.DurationVar(&cfg.StuckTimeout, "stuck-timeout", cfg.StuckTimeout, "bound of the wait until every stuck cluster of a batch is Degraded with its cause")
	flag.DurationVar(&cfg.QuietTimeout, "quiet-timeout", cfg.QuietTimeout, "longest wait for the operator to be quiet before measuring")
	doc := flag.String("doc", "docs/isolation.md", "document to write the table into, relative to the repository (empty: none)")
	flag.StringVar(&cfg.WorkDir, "work-dir", "", "keep the operator's log and the plane's directory here (default: a temporary directory, removed after a successful run)")
	timeout := flag.Duration("timeout", 45*time.Minute, "bound of the whole run")
	src := flag.String("source", "", "pgloop tree to build the operator from and read the CRDs of, e.g. an export of another revision (default: this repository)")
	flag.StringVar(&cfg.Revision, "revision", "", "revision to record for the operator (default: git's, of --source)")
	flag.Parse()
	cfg.OperatorArgs = opArgs
	stuckSet := false
	flag.Visit(func(f *flag.Flag) { stuckSet = stuckSet || f.Name == "stuck" })

	var err error
	if cfg.Stuck, cfg.Frozen, err = modes(*stuck, *frozen, stuckSet); err == nil {
		err = run(cfg, *doc, *src, *timeout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-isolation:", err)
		os.Exit(1)
	}
}

// modes reads --stuck and --frozen: the frozen mode measures no stuck
// clusters unless --stuck is given too (set is whether it was), which
// isolation.Config.Check then refuses.
func modes(stuck, frozen string, set bool) (stuckKs, frozenKs []int, err error) {
	if frozenKs, err = benchkit.ParseCounts(frozen); err != nil {
		return nil, nil, fmt.Errorf("--frozen: %w", err)
	}
	if len(frozenKs) > 0 && !set {
		return nil, frozenKs, nil
	}
	if stuckKs, err = benchkit.ParseCounts(stuck); err != nil {
		return nil, nil, fmt.Errorf("--stuck: %w", err)
	}
	return stuckKs, frozenKs, nil
}

// counts renders a list of counts as ParseCounts reads it.
func counts(ks []int) string {
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = strconv.Itoa(k)
	}
	return strings.Join(parts, ",")
}

func run(cfg isolation.Config, doc, src string, timeout time.Duration) error {
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
	res, runErr := isolation.Run(ctx, cfg)
	if res == nil {
		return runErr
	}

	fmt.Println()
	fmt.Printf("Operator flags: %s\n\n", strings.Join(res.OperatorFlags, " "))
	res.WriteTable(os.Stdout)
	fmt.Println()
	res.WriteSegments(os.Stdout)
	fmt.Println()
	res.WriteDetails(os.Stdout)
	fmt.Println()
	if runErr != nil {
		return runErr
	}
	fmt.Println(res.Verdict())
	if doc != "" {
		path := filepath.Join(repo, doc)
		if err := res.UpdateDoc(path); err != nil {
			return fmt.Errorf("while writing %s: %w", path, err)
		}
		fmt.Printf("table written into %s (section %q)\n", path, res.Key())
	}
	if !res.Pass() {
		return errors.New(res.Verdict())
	}
	return nil
}
