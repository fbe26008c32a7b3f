package chaos

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Config shapes a chaos run.
type Config struct {
	// Seed draws every run's workload and faults; run i of a scenario
	// uses Seed+i.
	Seed uint64
	// Scenarios are the names of the scenarios to run, in order.
	Scenarios []string
	// Runs is the number of runs of each scenario, each on a new plane.
	Runs int
	// Workload is the user's side.
	Workload Workload
	// Kills is how many times the kill scenario SIGKILLs the operator.
	Kills int
	// Resets and LatencyWindows are the proxy scenario's connection
	// resets and periods of latency; Blackhole is the length of its one
	// blackhole.
	Resets, LatencyWindows int
	Blackhole              time.Duration
	// Restarts is how many times the apiserver scenario restarts the
	// kube-apiserver (at least 2: one during the creates, one during the
	// rollout).
	Restarts int
	// Handovers is how many times the leader scenario kills the leader.
	Handovers int
	// ConvergeTimeout bounds the wait for convergence after the later of
	// the last fault and the last user action.
	ConvergeTimeout time.Duration

	// BinDir holds the plane's binaries (testbed.Options.BinDir).
	BinDir string
	// Pgloop is the operator's binary; Repo the tree whose CRDs are
	// applied.
	Pgloop, Repo string
	// OperatorArgs are added to every operator's command line.
	OperatorArgs []string
	// WorkDir, when set, keeps every run's logs there; otherwise only a
	// failed run's are kept (in a temporary directory).
	WorkDir string
	// Log receives progress lines.
	Log io.Writer
}

// DefaultConfig is `make chaos`: every scenario once, about 5-10 minutes
// on two cores.
func DefaultConfig() Config {
	return Config{
		Seed:            1,
		Scenarios:       Names(),
		Runs:            1,
		Workload:        Workload{Clusters: 20, Namespaces: 4, Pace: time.Second},
		Kills:           50,
		Resets:          10,
		LatencyWindows:  5,
		Blackhole:       30 * time.Second,
		Restarts:        3,
		Handovers:       3,
		ConvergeTimeout: 5 * time.Minute,
	}
}

// Result is one run of one scenario.
type Result struct {
	Scenario string
	Seed     uint64
	// Workload is the number of user actions; Faults the faults injected,
	// by kind in Detail.
	Workload, Faults int
	Detail           string
	// Operators is the number of operator processes started.
	Operators int
	// PlaneRestarts are the plane's processes that exited and were
	// restarted (not a fault injected: the plane's own reaction to one).
	PlaneRestarts string
	// LastFault is when the last fault ended (the operator restarted, the
	// proxy passing again, the apiserver ready, a new leader leading);
	// LastAction when the user's last action landed.
	LastFault, LastAction time.Time
	// ConvergedAt is when everything was as the user asked; zero if never.
	ConvergedAt time.Time
	Verdict     Verdict
	// Err is a failure of the run itself (the plane, the workload), not
	// of pgloop.
	Err error
	// LogDir holds the operators' logs, when kept.
	LogDir string
	// Losses counts, per cluster (namespace/name), its transitions from
	// Running to Degraded seen by the check's watch during the run.
	Losses map[string]int
}

// Flapping names the clusters that went from Running to Degraded more
// often than faults were injected, with their counts: a fault may cost a
// cluster one such transition (a pod it really lost), not more (issue 34:
// a FailedCreate Event a fault left behind made a brief pod gap Degraded
// again and again).
func (r Result) Flapping() []string {
	var out []string
	for key, n := range r.Losses {
		if n > r.Faults {
			out = append(out, fmt.Sprintf("flapping: %s went Running -> Degraded %d times (%d faults)", key, n, r.Faults))
		}
	}
	slices.Sort(out)
	return out
}

// Failed reports whether the run failed: not converged, something
// duplicated or lost, or a cluster flapping.
func (r Result) Failed() bool {
	return !r.Converged() || len(r.Verdict.Duplicates)+len(r.Verdict.Lost)+len(r.Flapping()) > 0
}

// losses sums Losses, and finds the most of one cluster.
func (r Result) losses() (total, most int) {
	for _, n := range r.Losses {
		total += n
		most = max(most, n)
	}
	return total, most
}

// Converged reports whether the run converged with nothing duplicated or
// lost.
func (r Result) Converged() bool { return r.Err == nil && !r.ConvergedAt.IsZero() }

// AfterFault is the time to converge after the last fault.
func (r Result) AfterFault() time.Duration { return r.ConvergedAt.Sub(r.LastFault) }

// AfterAction is the time to converge after the last user action.
func (r Result) AfterAction() time.Duration { return r.ConvergedAt.Sub(r.LastAction) }

// Line renders the result on one line.
func (r Result) Line() string {
	v := r.Verdict
	s := fmt.Sprintf("chaos %-9s seed %d: faults %d (%s), clusters converged %d/%d, deleted gone %d/%d, duplicates %d, lost actions %d",
		r.Scenario, r.Seed, r.Faults, r.Detail, v.Converged, v.Live, v.Gone, v.Deleted, len(v.Duplicates), len(v.Lost))
	total, most := r.losses()
	s += fmt.Sprintf(", Running -> Degraded %d (most of one cluster %d)", total, most)
	if r.PlaneRestarts != "" {
		s += fmt.Sprintf(", plane processes restarted after exiting: %s", r.PlaneRestarts)
	}
	switch {
	case r.Err != nil:
		s += fmt.Sprintf(", run failed: %v", r.Err)
	case r.Converged():
		s += fmt.Sprintf(", converged %v after the last fault (%v after the last user action)",
			r.AfterFault().Round(100*time.Millisecond), r.AfterAction().Round(100*time.Millisecond))
	default:
		s += ", NOT converged"
	}
	return s
}

// Summary is one scenario's runs, as the issue asks: runs, faults,
// clusters converged, duplicates, lost actions, time to converge after the
// last fault (the longest of the runs).
func Summary(scenario string, results []Result) string {
	var runs, faults, converged, live, gone, deleted, dups, lost, failed, losses, flapping int
	var longest time.Duration
	for _, r := range results {
		if r.Scenario != scenario {
			continue
		}
		runs++
		faults += r.Faults
		converged += r.Verdict.Converged
		live += r.Verdict.Live
		gone += r.Verdict.Gone
		deleted += r.Verdict.Deleted
		dups += len(r.Verdict.Duplicates)
		lost += len(r.Verdict.Lost)
		total, _ := r.losses()
		losses += total
		flapping += len(r.Flapping())
		if !r.Converged() {
			failed++
		} else {
			longest = max(longest, r.AfterFault())
		}
	}
	conv := fmt.Sprintf("longest %v", longest.Round(100*time.Millisecond))
	switch {
	case runs == 0:
		conv = "not run"
	case failed > 0:
		conv = fmt.Sprintf("%d runs NOT converged", failed)
	}
	return fmt.Sprintf("%-9s runs %d, faults injected %d, clusters converged %d/%d, deleted gone %d/%d, duplicates %d, lost actions %d, Running -> Degraded %d (clusters flapping: %d), converge after last fault: %s",
		scenario, runs, faults, converged, live, gone, deleted, dups, lost, losses, flapping, conv)
}

// Run runs each scenario of cfg cfg.Runs times and returns the results in
// order; it prints each run's line and what went wrong to cfg.Log.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	var scenarios []Scenario
	for _, name := range cfg.Scenarios {
		s, ok := scenarioByName(name)
		if !ok {
			return nil, fmt.Errorf("no scenario %q (have %s)", name, strings.Join(Names(), ", "))
		}
		scenarios = append(scenarios, s)
	}
	var out []Result
	for _, s := range scenarios {
		for i := range cfg.Runs {
			if err := ctx.Err(); err != nil {
				return out, err
			}
			res := execute(ctx, cfg, s, cfg.Seed+uint64(i))
			fmt.Fprintln(cfg.Log, res.Line())
			if res.Failed() {
				for _, list := range [][]string{res.Verdict.Pending, res.Verdict.Duplicates, res.Verdict.Lost, res.Flapping()} {
					for _, line := range list {
						fmt.Fprintln(cfg.Log, "  ", line)
					}
				}
			}
			if res.LogDir != "" {
				fmt.Fprintf(cfg.Log, "   logs: %s\n", res.LogDir)
			}
			out = append(out, res)
		}
	}
	return out, nil
}

// Names lists the scenarios.
func Names() []string {
	var out []string
	for _, s := range scenarios() {
		out = append(out, s.Name)
	}
	return out
}

func scenarioByName(name string) (Scenario, bool) {
	i := slices.IndexFunc(scenarios(), func(s Scenario) bool { return s.Name == name })
	if i < 0 {
		return Scenario{}, false
	}
	return scenarios()[i], true
}
