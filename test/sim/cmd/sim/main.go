// Command sim runs the deterministic simulation of the operator (package
// test/sim) for many seeds, on every core, and prints seeds per second,
// simulated cluster-hours per wall second, the faults injected by kind,
// the invariant checks made and the failures, each with the command that
// replays it and the end of its trace, then shrunk (sim.Shrink): the
// smallest variant of the seed that still fails so, with its own replay
// command and the lines of its trace about the failure. `make sim` runs
// it.
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pgloop/pgloop/test/sim"
)

func main() {
	seeds := flag.Int("seeds", 1000, "how many seeds to run")
	first := flag.Int64("first", 1, "the first seed")
	seed := flag.Int64("seed", 0, "replay this one seed and print its whole trace")
	variant := flag.String("variant", "", "with -seed: leave out of the run what this says (as a shrunk failure prints it: off=KIND,...;drop=CLUSTER,...;until=DURATION)")
	shrink := flag.Int("shrink", 60, "shrink each failing seed in at most this many runs (0: do not)")
	jobs := flag.Int("jobs", runtime.GOMAXPROCS(0), "seeds run at once")
	flag.Parse()
	if *seed != 0 {
		v, err := sim.ParseVariant(*variant)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(replay(*seed, v, *shrink))
	}
	os.Exit(swarm(*first, *seeds, *jobs, *shrink))
}

// replay runs one seed and prints its trace and its violations, then, if
// it failed, its shrunk variant.
func replay(seed int64, v sim.Variant, shrink int) int {
	res := sim.Run(seed, sim.Options{Trace: 1_000_000, Variant: v})
	fmt.Println(strings.Join(res.Trace, "\n"))
	for _, v := range res.Violations {
		fmt.Printf("seed %d: %s\n", seed, v)
	}
	if len(res.Violations) == 0 {
		return 0
	}
	if v.String() == "" && shrink > 0 {
		printShrunk(seed, shrink)
	}
	return 1
}

// printShrunk shrinks a failing seed and prints the smallest variant that
// still fails as it does: the command that replays it and the lines of
// its trace about the failure.
func printShrunk(seed int64, runs int) {
	sh, failed := sim.Shrink(seed, sim.Options{Trace: 1_000_000}, runs)
	if !failed {
		return
	}
	if sh.Variant.String() == "" {
		fmt.Printf("  shrunk: no smaller run of seed %d fails so (%d runs)\n", seed, sh.Runs)
		return
	}
	fmt.Printf("  shrunk in %d runs: %s\n", sh.Runs, sh.Result.Violations[0])
	fmt.Printf("  replay: cd test && go run ./sim/cmd/sim -seed %d -variant '%s'\n", seed, sh.Variant)
	lines := sim.Relevant(sh.Result.Trace, sh.Result.Violations)
	if len(lines) > 60 {
		fmt.Printf("  | (%d relevant lines before)\n", len(lines)-60)
		lines = lines[len(lines)-60:]
	}
	for _, line := range lines {
		fmt.Println("  | " + line)
	}
}

// swarm runs n seeds from first, jobs at a time, and prints the totals.
func swarm(first int64, n, jobs, shrink int) int {
	start := time.Now()
	results := make(chan sim.Result)
	next := make(chan int64)
	var wg sync.WaitGroup
	for range jobs {
		wg.Go(func() {
			for s := range next {
				results <- sim.Run(s, sim.Options{})
			}
		})
	}
	go func() {
		for s := first; s < first+int64(n); s++ {
			next <- s
		}
		close(next)
		wg.Wait()
		close(results)
	}()
	var (
		faults           = map[string]int{}
		checks           = map[string]int{}
		writes           int
		maxWrites        int
		maxWait          time.Duration
		maxWaitSeed      int64
		maxWaitKey       string
		maxStuck         int
		oldWrites        int
		overlapping      int
		hours, simulated float64
		failed           []sim.Result
	)
	for res := range results {
		for k, v := range res.Faults {
			faults[k] += v
		}
		for k, v := range res.Checks {
			checks[k] += v
		}
		writes += res.Writes
		oldWrites += res.OldWrites
		overlapping += res.Overlapping
		maxWrites = max(maxWrites, res.MaxWritesPerMinute)
		if res.MaxWait > maxWait {
			maxWait, maxWaitSeed, maxWaitKey = res.MaxWait, res.Seed, res.MaxWaitKey
		}
		maxStuck = max(maxStuck, res.MaxStuckStarts)
		hours += res.ClusterHours
		simulated += res.Simulated.Hours()
		if len(res.Violations) > 0 {
			failed = append(failed, res)
		}
	}
	wall := time.Since(start)
	cpu := cpuTime()
	slices.SortFunc(failed, func(a, b sim.Result) int { return int(a.Seed - b.Seed) })
	for _, res := range failed {
		fmt.Printf("FAIL seed %d: %s\n", res.Seed, strings.Join(res.Violations, "; "))
		fmt.Printf("  replay: make sim SEED=%d   (or: cd test && go run ./sim/cmd/sim -seed %d)\n", res.Seed, res.Seed)
		for _, line := range res.Trace[max(0, len(res.Trace)-20):] {
			fmt.Println("  | " + line)
		}
		if shrink > 0 {
			printShrunk(res.Seed, shrink)
		}
	}
	fmt.Printf("seeds %d from %d in %v on %d jobs (%v of CPU): %.1f seeds/s, %.1f per CPU second\n", n, first,
		wall.Round(time.Millisecond), jobs, cpu.Round(time.Millisecond), float64(n)/wall.Seconds(), float64(n)/cpu.Seconds())
	fmt.Printf("simulated %.0f h, %.0f cluster-hours: %.0f cluster-hours per wall second, %.0f per CPU second\n",
		simulated, hours, hours/wall.Seconds(), hours/cpu.Seconds())
	fmt.Printf("faults injected: %s\n", counts(faults))
	fmt.Printf("invariant checks: %s\n", counts(checks))
	fmt.Printf("operator write calls: %d, at most %d by one cluster in a simulated minute\n", writes, maxWrites)
	fmt.Printf("isolation: a plan outside the stuck namespace waited at most %v to start (seed %d, %s), behind at most %d starts of stuck clusters\n",
		maxWait.Round(time.Millisecond), maxWaitSeed, maxWaitKey, maxStuck)
	fmt.Printf("handovers: %d writes of an incarnation that lost its Lease stored during its overlap, %d plans handed while the other incarnation had one of the same cluster in flight\n",
		oldWrites, overlapping)
	fmt.Printf("failures: %d\n", len(failed))
	if len(failed) > 0 {
		return 1
	}
	return 0
}

// counts renders counts by kind, sorted by kind, with their total.
func counts(m map[string]int) string {
	var parts []string
	total := 0
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		total += m[k]
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

// cpuTime is the CPU time the process used so far: on a shared machine the
// wall time says more about the other load than about the simulation.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
