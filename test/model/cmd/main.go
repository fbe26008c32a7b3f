// Command cmd prints the worker-design model's tables for a workload given
// by flags (the defaults are those of docs/worker-question.md):
//
//	cd test && go run ./model/cmd -clusters 500 -qps 50 -burst 100
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/pgloop/pgloop/test/model"
)

func main() {
	e := model.DefaultExperiment()
	w, p := &e.Workload, &e.Params
	flag.IntVar(&w.Clusters, "clusters", w.Clusters, "clusters at the start")
	flag.Uint64Var(&w.Seed, "seed", w.Seed, "seed of the workload")
	flag.DurationVar(&w.Duration, "duration", w.Duration, "simulated time")
	flag.Float64Var(&w.EditsPerHour, "edits", w.EditsPerHour, "edits per healthy cluster per hour")
	flag.Float64Var(&w.NewClustersPerHour, "new", w.NewClustersPerHour, "new clusters per hour")
	flag.Float64Var(&e.StuckEditsPerHour, "stuck-edits", e.StuckEditsPerHour, "edits per stuck cluster per hour, in the scenarios with edits")
	flag.DurationVar(&w.ResyncPeriod, "resync", w.ResyncPeriod, "legacy informer resync period")
	flag.Float64Var(&p.QPS, "qps", p.QPS, "API queries per second, shared (0: no limit)")
	flag.IntVar(&p.Burst, "burst", p.Burst, "API burst")
	flag.IntVar(&p.Calls, "calls", p.Calls, "API calls per healthy event or plan")
	flag.DurationVar(&p.Timeout, "timeout", p.Timeout, "how long a stuck cluster's legacy event blocks; pgloop's create/update timeout")
	flag.BoolVar(&p.StuckSyncQuick, "stuck-sync-quick", p.StuckSyncQuick, "a stuck cluster's legacy SYNC returns at once")
	flag.IntVar(&p.Executors, "executors", p.Executors, "pgloop executor slots")
	full := flag.Bool("full", false, "print every output, not only the summary")
	flag.Parse()
	if w.Clusters < 1 || w.Duration <= 0 {
		fmt.Fprintln(os.Stderr, "clusters and duration must be positive")
		os.Exit(2)
	}
	rows := e.Run()
	fmt.Print(model.Setup(e), "\n", model.Summary(rows))
	if *full {
		fmt.Print("\n", model.Markdown(rows))
	}
}
