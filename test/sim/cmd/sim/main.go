// Command sim runs the deterministic simulation of the operator (package
// test/sim) for many seeds, on every core, and prints seeds per second,
// simulated cluster-hours per wall second, the faults injected by kind,
// the invariant checks made and the failures, each with the command that
// replays it and the end of its trace. `make sim` runs it.
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
	jobs := flag.Int("jobs", runtime.GOMAXPROCS(0), "seeds run at once")
	flag.Parse()
	if *seed != 0 {
		os.Exit(replay(*seed))
	}
	os.Exit(swarm(*first, *seeds, *jobs))
}

// replay runs one seed and prints its trace and its violations.
func replay(seed int64) int {
	res := sim.Run(seed, sim.Options{Trace: 1_000_000})
	fmt.Println(strings.Join(res.Trace, "\n"))
	for _, v := range res.Violations {
		fmt.Printf("seed %d: %s\n", seed, v)
	}
	if len(res.Violations) > 0 {
		return 1
	}
	return 0
}

// swarm runs n seeds from first, jobs at a time, and prints the totals.
func swarm(first int64, n, jobs int) int {
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
		maxStuck         int
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
		maxWrites = max(maxWrites, res.MaxWritesPerMinute)
		maxWait, maxStuck = max(maxWait, res.MaxWait), max(maxStuck, res.MaxStuckStarts)
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
	}
	fmt.Printf("seeds %d from %d in %v on %d jobs (%v of CPU): %.1f seeds/s, %.1f per CPU second\n", n, first,
		wall.Round(time.Millisecond), jobs, cpu.Round(time.Millisecond), float64(n)/wall.Seconds(), float64(n)/cpu.Seconds())
	fmt.Printf("simulated %.0f h, %.0f cluster-hours: %.0f cluster-hours per wall second, %.0f per CPU second\n",
		simulated, hours, hours/wall.Seconds(), hours/cpu.Seconds())
	fmt.Printf("faults injected: %s\n", counts(faults))
	fmt.Printf("invariant checks: %s\n", counts(checks))
	fmt.Printf("operator write calls: %d, at most %d by one cluster in a simulated minute\n", writes, maxWrites)
	fmt.Printf("isolation: a plan outside the stuck namespace waited at most %v to start, behind at most %d starts of stuck clusters\n",
		maxWait.Round(time.Millisecond), maxStuck)
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
