// Command chaos runs pgloop's chaos scenarios on local control planes
// (package chaos, issue 15 item 4): the operator SIGKILLed at random
// points, its connection to the apiserver reset, slowed and blackholed, the
// kube-apiserver restarted, the leader killed during rollouts. It prints
// one line per run and one per scenario, and exits with status 1 when a
// run did not converge, found a duplicate object or a lost user action, or
// failed.
//
//	make chaos
//	make chaos CHAOS_ARGS="--scenarios kill --kills 10 --seed 7"
//	cd test && go run ./chaos/cmd/chaos [flags]
//
// The plane's binaries come from $PGLOOP_BIN, else bin/ of the repository
// (`make testbed`); the operator is built from the repository (or
// --source). Ctrl-C stops the run and everything it started.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/pgloop/pgloop/test/bench/benchkit"
	"github.com/pgloop/pgloop/test/chaos"
	"github.com/pgloop/pgloop/test/pgtest"
)

func main() {
	cfg := chaos.DefaultConfig()
	flag.Uint64Var(&cfg.Seed, "seed", uint64(time.Now().UnixNano()%1_000_000), "seed of the workloads and fault schedules (run i of a scenario uses seed+i); printed, to replay a run")
	scenarios := flag.String("scenarios", strings.Join(cfg.Scenarios, ","), "scenarios to run, of "+strings.Join(chaos.Names(), ","))
	flag.IntVar(&cfg.Runs, "runs", cfg.Runs, "runs of each scenario, each on a new plane")
	flag.IntVar(&cfg.Workload.Clusters, "clusters", cfg.Workload.Clusters, "clusters created first (a quarter more are created later)")
	flag.IntVar(&cfg.Workload.Namespaces, "namespaces", cfg.Workload.Namespaces, "namespaces the clusters are spread over")
	flag.DurationVar(&cfg.Workload.Pace, "pace", cfg.Workload.Pace, "mean delay between two user actions (the kill scenario stretches it to last as long as its kills)")
	flag.IntVar(&cfg.Kills, "kills", cfg.Kills, "kill: SIGKILLs of the operator")
	flag.IntVar(&cfg.Resets, "resets", cfg.Resets, "proxy: resets of every connection")
	flag.IntVar(&cfg.LatencyWindows, "latency-windows", cfg.LatencyWindows, "proxy: periods of 50-800 ms latency")
	flag.DurationVar(&cfg.Blackhole, "blackhole", cfg.Blackhole, "proxy: length of the one blackhole (0: none)")
	flag.IntVar(&cfg.Restarts, "restarts", cfg.Restarts, "apiserver: restarts of the kube-apiserver")
	flag.IntVar(&cfg.Handovers, "handovers", cfg.Handovers, "leader: kills of the leader")
	flag.DurationVar(&cfg.ConvergeTimeout, "converge-timeout", cfg.ConvergeTimeout, "bound of the wait for convergence after the last fault or user action")
	var opArgs benchkit.ListFlag
	flag.Var(&opArgs, "operator-arg", "a further flag for the operators, e.g. --operator-arg=--workers=4 (repeatable)")
	flag.StringVar(&cfg.WorkDir, "work-dir", "", "keep every run's operator logs here (default: only a failed run's, in a temporary directory)")
	flag.StringVar(&cfg.Pgloop, "pgloop", "", "operator binary to run (default: built from --source; building takes minutes on busy cores)")
	src := flag.String("source", "", "pgloop tree to build the operator from and read the CRDs of (default: this repository)")
	timeout := flag.Duration("timeout", time.Hour, "bound of the whole run")
	flag.Parse()
	cfg.Scenarios = strings.Split(*scenarios, ",")
	cfg.OperatorArgs = opArgs
	cfg.Log = os.Stdout
	// client-go's reflectors log every watch an apiserver restart or the
	// proxy breaks; the runs say what happened in their own lines.
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	klog.SetLogger(logr.Discard())
	if err := run(cfg, *src, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

func run(cfg chaos.Config, source string, timeout time.Duration) error {
	paths, err := benchkit.ResolvePaths(source, cfg.WorkDir)
	if err != nil {
		return err
	}
	cfg.Repo, cfg.WorkDir = paths.Source, paths.WorkDir
	ctx, cancel := benchkit.CommandContext(timeout)
	defer cancel()
	buildDir, err := os.MkdirTemp("", "pgloop-chaos-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(buildDir)
	began := time.Now()
	operator := "given: " + cfg.Pgloop
	if cfg.Pgloop == "" {
		if cfg.Pgloop, err = pgtest.Build(ctx, paths.Source, buildDir); err != nil {
			return err
		}
		operator = fmt.Sprintf("%s built in %v", benchkit.Revision(ctx, paths.Source), time.Since(began).Round(time.Second))
	}
	fmt.Printf("chaos: seed %d (replay: make chaos CHAOS_ARGS=\"--seed %d --scenarios %s\"), pgloop %s, load average %s\n",
		cfg.Seed, cfg.Seed, strings.Join(cfg.Scenarios, ","), operator, benchkit.Loadavg())
	results, err := chaos.Run(ctx, cfg)
	fmt.Printf("\nchaos: seed %d, %v, load average %s\n", cfg.Seed, time.Since(began).Round(time.Second), benchkit.Loadavg())
	bad := 0
	for _, name := range cfg.Scenarios {
		fmt.Println(chaos.Summary(name, results))
	}
	for _, r := range results {
		if r.Failed() {
			bad++
		}
	}
	if err != nil {
		return err
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d runs failed", bad, len(results))
	}
	return nil
}
