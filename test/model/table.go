package model

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Experiment is the set of runs behind docs/worker-question.md's tables.
type Experiment struct {
	// Workload is the base workload; each scenario sets StuckFraction and
	// StuckEditsPerHour.
	Workload WorkloadConfig
	Params   Params
	// StuckFractions are the scenarios' shares of stuck clusters; 0 is a
	// baseline, run without edits only.
	StuckFractions []float64
	// StuckEditsPerHour is the edit rate of each stuck cluster in the
	// scenarios "with edits" (the others have none).
	StuckEditsPerHour float64
	// Workers are the legacy operator's worker counts; 0 stands for twice
	// the number of clusters at the start.
	Workers []int
	// StuckHang is how long a stuck cluster's plans hang in the extra
	// pgloop variant (they fail at pgloop's step deadline); 0: no variant.
	StuckHang time.Duration
}

// DefaultExperiment is the experiment of docs/worker-question.md.
func DefaultExperiment() Experiment {
	p := DefaultParams()
	return Experiment{
		Workload: WorkloadConfig{
			Clusters:           200,
			Duration:           2 * time.Hour,
			Seed:               1,
			EditsPerHour:       1,
			NewClustersPerHour: 10,
			ResyncPeriod:       30 * time.Minute,
		},
		Params:            p,
		StuckFractions:    []float64{0, 0.01, 0.05, 0.10},
		StuckEditsPerHour: 1,
		Workers:           []int{8, 16, 100, 0},
		StuckHang:         p.StepTimeout,
	}
}

// SensitivityExperiment is DefaultExperiment with the legacy operator's
// most consequential assumption turned off: a stuck cluster's SYNC
// (startup, resync) returns at once, so only its creation and its edits
// block a worker.
func SensitivityExperiment() Experiment {
	e := DefaultExperiment()
	e.Params.StuckSyncQuick = true
	e.StuckFractions = []float64{0.05, 0.10}
	e.StuckHang = 0
	return e
}

// Scenario is one workload of the experiment.
type Scenario struct {
	StuckFraction float64
	Stuck         int // stuck clusters at the start
	Edits         bool
}

// Row is one design in one scenario.
type Row struct {
	Scenario
	Design  Design
	Workers int  // legacy only
	Hang    bool // pgloop with hanging effects of stuck clusters
	Result  Result
}

// Label names the row's design.
func (r Row) Label() string {
	switch {
	case r.Design == Legacy:
		return fmt.Sprintf("legacy, %d workers", r.Workers)
	case r.Hang:
		return "pgloop, stuck effects hang to the deadline"
	}
	return r.Design.String()
}

// Run runs every design in every scenario.
func (e Experiment) Run() []Row {
	var rows []Row
	for _, frac := range e.StuckFractions {
		for _, edits := range []bool{false, true} {
			if edits && (frac == 0 || e.StuckEditsPerHour <= 0) {
				continue
			}
			wc := e.Workload
			wc.StuckFraction = frac
			wc.StuckEditsPerHour = 0
			if edits {
				wc.StuckEditsPerHour = e.StuckEditsPerHour
			}
			wl := Generate(wc)
			sc := Scenario{StuckFraction: frac, Edits: edits}
			for c := range wc.Clusters {
				if wl.Stuck[c] {
					sc.Stuck++
				}
			}
			var done []int
			for _, w := range e.Workers {
				if w == 0 {
					w = 2 * wc.Clusters
				}
				if slices.Contains(done, w) {
					continue
				}
				done = append(done, w)
				p := e.Params
				p.Workers = w
				rows = append(rows, Row{Scenario: sc, Design: Legacy, Workers: w, Result: Run(Legacy, p, wl)})
			}
			rows = append(rows,
				Row{Scenario: sc, Design: GoroutinePerCluster, Result: Run(GoroutinePerCluster, e.Params, wl)},
				Row{Scenario: sc, Design: Pgloop, Result: Run(Pgloop, e.Params, wl)})
			if e.StuckHang > 0 && frac > 0 {
				p := e.Params
				p.StuckHang = e.StuckHang
				rows = append(rows, Row{Scenario: sc, Design: Pgloop, Hang: true, Result: Run(Pgloop, p, wl)})
			}
		}
	}
	return rows
}

func (s Scenario) String() string {
	edits := "no edits"
	if s.Edits {
		edits = "stuck ones edited"
	}
	return fmt.Sprintf("%g %% stuck (%d), %s", s.StuckFraction*100, s.Stuck, edits)
}

// Summary renders the headline table: one line per scenario, one column
// per design, each cell the p99 and the max of how long healthy clusters'
// events waited until done.
func Summary(rows []Row) string {
	var b strings.Builder
	var scenarios []Scenario
	var labels []string
	cells := map[Scenario]map[string]string{}
	for _, r := range rows {
		if cells[r.Scenario] == nil {
			cells[r.Scenario] = map[string]string{}
			scenarios = append(scenarios, r.Scenario)
		}
		if !slices.Contains(labels, r.Label()) {
			labels = append(labels, r.Label())
		}
		cells[r.Scenario][r.Label()] = FormatDuration(r.Result.Done.P99) + " / " + FormatDuration(r.Result.Done.Max)
	}
	b.WriteString("| scenario |")
	for _, l := range labels {
		b.WriteString(" " + l + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(labels)) + "\n")
	for _, sc := range scenarios {
		b.WriteString("| " + sc.String() + " |")
		for _, l := range labels {
			c := cells[sc][l]
			if c == "" {
				c = "-"
			}
			b.WriteString(" " + c + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Markdown renders every row with every output of the model.
func Markdown(rows []Row) string {
	var b strings.Builder
	b.WriteString("| scenario | design | wait to start p50 / p99 / max | wait to done p50 / p99 / max | user actions to done p50 / p99 / max | intake blocked | API calls/min |\n")
	b.WriteString("|---|---|---|---|---|---:|---:|\n")
	for _, r := range rows {
		res := r.Result
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %.0f |\n",
			r.Scenario, r.Label(),
			stats(res.Start), stats(res.Done), stats(res.UserDone),
			FormatDuration(res.IntakeBlocked), res.CallsPerMinute)
	}
	return b.String()
}

func stats(s Stats) string {
	return FormatDuration(s.P50) + " / " + FormatDuration(s.P99) + " / " + FormatDuration(s.Max)
}

// FormatDuration writes a duration short, with the precision a reader
// needs: 7µs, 340ms, 4.2s, 9m58s, 1h05m.
func FormatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d/time.Microsecond)
	case d < time.Second:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", d/time.Minute, d%time.Minute/time.Second)
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", d/time.Hour, d%time.Hour/time.Minute)
}

// Setup describes the experiment's workload and parameters, for the page
// that shows its tables.
func Setup(e Experiment) string {
	w, p := e.Workload, e.Params
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, "- "+format+"\n", args...) }
	line("%d clusters at the start, seed %d, %s simulated; the operator starts at time 0 and lists them all.",
		w.Clusters, w.Seed, FormatDuration(w.Duration))
	line("Edits: %g an hour per healthy cluster; new clusters: %g an hour (stuck with the scenario's share); "+
		"\"stuck ones edited\": %g an hour per stuck cluster (someone trying to fix it). All Poisson.",
		w.EditsPerHour, w.NewClustersPerHour, e.StuckEditsPerHour)
	line("API: %g QPS, burst %d, shared by everything the operator does, for every design (the legacy default); "+
		"a healthy cluster's event or plan is %s of work plus %d calls of %s each.",
		p.QPS, p.Burst, FormatDuration(p.Service), p.Calls, FormatDuration(p.CallLatency))
	syncs := "every event of a stuck cluster (create, edit, sync)"
	if p.StuckSyncQuick {
		syncs = "a stuck cluster's create and edits (its syncs return at once)"
	}
	line("Legacy and goroutine per cluster: %s blocks its worker %s, polling the API every %s; informer resync every %s.",
		syncs, FormatDuration(p.Timeout), FormatDuration(p.PollInterval), FormatDuration(w.ResyncPeriod))
	line("pgloop: %s per event on the loop, %d executor slots, step deadline %s, create/update timeout %s, "+
		"retries from %s doubling to %s, resync timer %s per cluster.",
		FormatDuration(p.LoopCost), p.Executors, FormatDuration(p.StepTimeout), FormatDuration(p.Timeout),
		FormatDuration(p.RetryBase), FormatDuration(p.RetryMax), FormatDuration(p.Resync))
	return b.String()
}
