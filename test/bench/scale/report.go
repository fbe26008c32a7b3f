package scale

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgloop/pgloop/test/bench/benchkit"
	"github.com/pgloop/pgloop/test/provisioner"
)

// Result is a whole run.
type Result struct {
	Config     Config
	Start, End time.Time
	// Nproc, the machine's memory, and the load averages (as
	// /proc/loadavg has them) at the start and the end of the run.
	Nproc              int
	MemTotal           string
	LoadStart, LoadEnd string
	// Revision is the tree's git revision ("+dirty" when it has
	// changes), GoVersion the toolchain's.
	Revision, GoVersion string
	// OperatorFlags are the operator's flags, without the kubeconfig;
	// KubeFlags its client's rate limit in effect (--kube-qps,
	// --kube-burst).
	OperatorFlags []string
	KubeFlags     string
	// Objects is the number of objects pgloop makes for one cluster (its
	// namespace's shared ServiceAccount, Role and RoleBinding included),
	// by resource (secrets: 2, …).
	Objects  map[string]int
	Rows     []*Row
	Fairness *Fairness

	// Namespaces is the namespaces phase's (nil: not made).
	Namespaces *Namespaces
}

// Row is what was measured at one N.
type Row struct {
	N int
	// Nodes of the plane of the N clusters.
	Nodes int
	// Plane is the plane baseline: N bare StatefulSets from the first
	// Create to every pod Ready (0: not measured); PlaneCreated how long
	// their Creates took.
	Plane, PlaneCreated time.Duration
	// PlaneIdle are bare StatefulSets of the plane baseline created one
	// after another before its N, each from its Create to its pod Ready;
	// PlaneOneMore one more created right after the N's Creates returned.
	// What the plane alone adds to one more (PlaneOneMore over PlaneIdle's
	// median) is what no operator can take off its own one more.
	PlaneIdle    []time.Duration
	PlaneOneMore time.Duration
	// ObjectsBaseline is the objects baseline, nil when not measured.
	ObjectsBaseline *ObjectsBaseline
	// RTT is one API round trip on the idle plane (a GET, median of 5).
	RTT time.Duration
	// Idle are the probes on the idle operator, before the burst;
	// CreateRequests the operator's requests for each, from its Create
	// until the operator was quiet again.
	Idle           []benchkit.Probe
	CreateRequests []Requests
	Burst          *Burst
	// OneMore is the cluster created right after the burst's N.
	OneMore *benchkit.Probe
	// Memory0 is the operator's memory with no cluster, MemoryN with
	// Clusters (the N, the probes and the one more).
	Memory0, MemoryN Memory
	Clusters         int
	IdleWindow       *Window
	Restart          *Restart
	// Walls are how long each part of the row took, in order.
	Walls []Wall
}

// Burst is the N clusters created at once.
type Burst struct {
	// Created is how long the N Creates took; AllRunning from the first
	// Create to all Running.
	Created, AllRunning time.Duration
	// LagP99 is the p99 of the loop's lag during the burst, in seconds,
	// estimated from the histogram's buckets (NaN: no event).
	LagP99 float64
	// MaxInbox and MaxWaiting are the most events in the inbox, and plans
	// waiting, seen (/metrics read every second).
	MaxInbox, MaxWaiting int
	// Degraded counts the transitions into Degraded from another state
	// during the burst (a create timeout that passed before the cluster's
	// turn, a failed effect of a Running cluster), not the retries in it.
	Degraded int
	// Requests are the operator's during the burst.
	Requests Requests
	// Segments summarize the N clusters' segments (benchkit.SegmentNames);
	// Labeller their last pod Ready → master label.
	Segments [5]benchkit.Summary
	Labeller benchkit.Summary
	// Transitions are the state machines' transitions during the burst;
	// EventsWritten and EventsDropped the Kubernetes Events the recorder
	// (pkg/events) wrote, and dropped by kind (transition, other), until
	// all were Running.
	Transitions, EventsWritten int
	EventsDropped              map[string]int
	// OneMore are the create → Running of the clusters created at once
	// right after the N's Creates returned (Config.OneMore), shortest
	// first; the row's OneMore is their median's probe.
	OneMore []time.Duration
}

// Memory is what the operator's process holds.
type Memory struct {
	// RSS is its resident memory (VmRSS), Heap its Go heap in use
	// (go_memstats_heap_inuse_bytes), in bytes.
	RSS, Heap int64
}

// Window is a period and the operator's requests during it.
type Window struct {
	Took     time.Duration
	Requests Requests
	// Events are the loop's events in the window by kind and name, CPU
	// the operator's CPU time (process_cpu_seconds_total).
	Events LoopEvents
	CPU    time.Duration
}

// Restart is the operator SIGKILLed at N and started again.
type Restart struct {
	// Ready is from the new process's start to its /readyz answering OK;
	// Restored to every machine back: Clusters clusters and Timers timers
	// in the loop (as before the kill), the inbox empty and no plan
	// running or waiting.
	Ready, Restored time.Duration
	Clusters        int
	Timers          int
	// Requests are the new process's over Window after it was ready.
	Window   time.Duration
	Requests Requests
}

// Fairness is one more cluster created while K clusters roll out.
type Fairness struct {
	K int
	// Idle are the probes on the idle operator, before the K; RTT one
	// API round trip then (a GET, median of 5).
	Idle []benchkit.Probe
	RTT  time.Duration
	// Burst is from the K's first Create to all Running.
	Burst time.Duration
	// Image is the --spilo-image the operator was restarted with; Ready
	// how long it took to be ready.
	Image string
	Ready time.Duration
	// During is the one more cluster, created as soon as the operator was
	// ready, inside the restart's own burst of work (the new process's
	// lists, every machine resumed); Rolling are Config.Probes more,
	// created one after another after it while the K roll (the verdict's),
	// RollingLeft how many of the K had not rolled yet when the last was
	// Running. Rollout is from ready until every one of the K ran Image
	// and was Running (0: not within RolloutTimeout, Left of them had not).
	During      benchkit.Probe
	Rolling     []benchkit.Probe
	RollingLeft int
	Rollout     time.Duration
	Left        int
	// PlaneIdle are bare StatefulSets created one after another on the
	// idle plane (after the idle probes), create → pod Ready; PlaneDuring
	// one more created with During (at the same time), while the K still
	// roll: what the plane alone adds during the rollout is PlaneDuring
	// over PlaneIdle's median (planeExtra), as the burst's one more has it.
	// PlaneRolling are the bare StatefulSets created with each of Rolling.
	PlaneIdle    []time.Duration
	PlaneDuring  time.Duration
	PlaneRolling []time.Duration
	// Held and HeldFor are the background requests the operator's request
	// gate held from its restart until the one more was Running, and how
	// long they waited in all.
	Held    float64
	HeldFor time.Duration
	Walls   []Wall
}

// planeExtra is what the plane alone added to one more StatefulSet during
// the rollout (planeAdds).
func (f *Fairness) planeExtra() (extra time.Duration, ok bool) {
	return planeAdds(f.PlaneDuring, f.PlaneIdle)
}

// Wall is how long a part of the run took.
type Wall struct {
	Name string
	Took time.Duration
}

// idleMedian is the median create → Running of probes.
// ownMedian is the median of pgloop's share of probes (Probe.Own).
func ownMedian(ps []benchkit.Probe) time.Duration {
	ds := make([]time.Duration, len(ps))
	for i, p := range ps {
		ds[i] = p.Own()
	}
	return benchkit.Summarize(ds).Median
}

// clientQPS is the operator's client-side rate limit given with
// --kube-qps, 0 when none is (its default probes the API server and sets
// none with Priority and Fairness; -1 is none).
func (r *Result) clientQPS() float64 {
	qps, err := strconv.ParseFloat(benchkit.FlagValue(r.OperatorFlags, "kube-qps", "0"), 64)
	if err != nil || qps < 0 {
		return 0
	}
	return qps
}

func idleMedian(ps []benchkit.Probe) time.Duration {
	ds := make([]time.Duration, len(ps))
	for i, p := range ps {
		ds[i] = p.ToRunning
	}
	return benchkit.Summarize(ds).Median
}

// Ratio is the fairness ratio: the median of the clusters created while
// the K roll over the idle median.
func (f *Fairness) Ratio() float64 { return benchkit.Ratio(idleMedian(f.Rolling), idleMedian(f.Idle)) }

// RestartRatio is the one more created as the restarted operator was
// ready over the idle median.
func (f *Fairness) RestartRatio() float64 {
	return benchkit.Ratio(f.During.ToRunning, idleMedian(f.Idle))
}

// CreateWrites is the most writes, Events apart, that one create on the
// idle operator made, and the most Events.
func (r *Row) CreateWrites() (writes, events int) {
	for _, reqs := range r.CreateRequests {
		w := reqs.Writes()
		writes = max(writes, w.Total(false))
		events = max(events, w.Total(true)-w.Total(false))
	}
	return writes, events
}

// planeExtra is what the plane alone adds to one more StatefulSet after N
// of them (planeAdds).
func (r *Row) planeExtra() (extra time.Duration, ok bool) {
	return planeAdds(r.PlaneOneMore, r.PlaneIdle)
}

// planeAdds is what the plane alone adds to one more bare StatefulSet
// under load: one, its create → pod Ready, less the median of idle, the
// same on the idle plane, not below 0; ok is false when they were not
// measured.
func planeAdds(one time.Duration, idle []time.Duration) (extra time.Duration, ok bool) {
	if one == 0 || len(idle) == 0 {
		return 0, false
	}
	return max(0, one-benchkit.Summarize(idle).Median), true
}

// oneMoreGoal is the goal of a cluster created under load (after the
// burst, during the rollout): MaxOneMoreRatio × its idle median + one API
// round trip + what the plane alone adds (planeAdds) when measured, and
// the words for that last part, the load named by when.
func oneMoreGoal(cfg Config, idle, rtt, planeOne time.Duration, planeIdle []time.Duration, when string) (time.Duration, string) {
	bound := time.Duration(cfg.MaxOneMoreRatio*float64(idle)) + rtt
	extra, ok := planeAdds(planeOne, planeIdle)
	if !ok {
		return bound, ""
	}
	return bound + extra, fmt.Sprintf(" + what the plane alone adds to one more bare StatefulSet %s (%v: %v against %v idle)",
		when, benchkit.Ms(extra), benchkit.Ms(planeOne), benchkit.Ms(benchkit.Summarize(planeIdle).Median))
}

// OneMoreRatio is the one more cluster at N over the idle median.
func (r *Row) OneMoreRatio() float64 {
	if r.OneMore == nil {
		return math.NaN()
	}
	return benchkit.Ratio(r.OneMore.ToRunning, idleMedian(r.Idle))
}

// PerCluster is what one cluster adds to the operator's memory: the
// difference between N clusters and none, over the clusters.
func (r *Row) PerCluster() Memory {
	if r.Clusters == 0 {
		return Memory{}
	}
	n := int64(r.Clusters)
	return Memory{RSS: (r.MemoryN.RSS - r.Memory0.RSS) / n, Heap: (r.MemoryN.Heap - r.Memory0.Heap) / n}
}

// Verdict is one goal of issue 14 and how the run did. Pass is nil for a
// figure reported without a goal.
type Verdict struct {
	Pass *bool
	Text string
}

func (v Verdict) String() string {
	switch {
	case v.Pass == nil:
		return "INFO: " + v.Text
	case *v.Pass:
		return "PASS: " + v.Text
	}
	return "FAIL: " + v.Text
}

func judged(pass bool, format string, args ...any) Verdict {
	return Verdict{Pass: &pass, Text: fmt.Sprintf(format, args...)}
}

func info(format string, args ...any) Verdict { return Verdict{Text: fmt.Sprintf(format, args...)} }

// Verdicts are the run's goals and how each did, per N, then the
// fairness phase's.
func (r *Result) Verdicts() []Verdict {
	cfg := r.Config
	var out []Verdict
	for _, row := range r.Rows {
		n := row.N
		if len(row.CreateRequests) > 0 {
			writes, events := row.CreateWrites()
			excess := Requests{}
			for _, reqs := range row.CreateRequests {
				for c, k := range reqs.Excess(r.Objects, cfg.StatusWrites) {
					excess[c] = max(excess[c], k)
				}
			}
			out = append(out, judged(len(excess) == 0, "N=%d: writes to create one cluster (idle operator, the most of %d): %d, Events apart (%d Events); beyond one write of each of its %d objects and of its own postgresql, and %d status writes: %s; goal none",
				n, len(row.CreateRequests), writes, events, total(r.Objects), cfg.StatusWrites, excess))
		}
		if w := row.IdleWindow; w != nil {
			writes := w.Requests.Writes()
			out = append(out, judged(writes.Total(true) == 0, "N=%d: writes in %v idle: %d (%s); goal 0", n, benchkit.Ms(w.Took), writes.Total(true), writes))
		}
		if v, ok := row.rssVerdict(cfg); ok {
			out = append(out, v)
		}
		if rs := row.Restart; rs != nil {
			out = append(out, judged(rs.Restored <= cfg.MaxRestart, "N=%d: restart until every machine is back: %v; goal at most %v", n, benchkit.Ms(rs.Restored), cfg.MaxRestart))
			writes := rs.Requests.Writes()
			out = append(out, judged(writes.Total(true) == 0, "N=%d: writes of the restart (its first %v after ready): %d (%s); goal 0",
				n, benchkit.Ms(rs.Window), writes.Total(true), writes))
		}
		if row.OneMore != nil && len(row.Idle) > 0 {
			idle := idleMedian(row.Idle)
			bound, plane := oneMoreGoal(cfg, idle, row.RTT, row.PlaneOneMore, row.PlaneIdle, "after its N")
			out = append(out, judged(row.OneMore.ToRunning <= bound, "N=%d: one more cluster after the burst: %v, %.2f × its idle median %v; goal at most %.2f × idle + one API round trip (%v)%s = %v",
				n, benchkit.Ms(row.OneMore.ToRunning), row.OneMoreRatio(), benchkit.Ms(idle), cfg.MaxOneMoreRatio, benchkit.Ms(row.RTT), plane, benchkit.Ms(bound)))
			own, idleOwn := row.OneMore.Own(), ownMedian(row.Idle)
			out = append(out, info("N=%d: pgloop's share of the one more (create → StatefulSet, master label → Running): %v, %.2f × its idle median %v; the plane's and the labeller's %v",
				n, benchkit.Ms(own), benchkit.Ratio(own, idleOwn), benchkit.Ms(idleOwn), benchkit.Ms(row.OneMore.ToRunning-own)))
		}
		if o := row.ObjectsBaseline; row.Burst != nil && o != nil {
			bound := time.Duration(cfg.MaxObjectsRatio * float64(o.AllRunning))
			out = append(out, judged(row.Burst.AllRunning <= bound, "N=%d: all N Running in %v, %.2f × the objects baseline (%v: a bare client writing what pgloop writes for N clusters, %d workers, no operator); goal at most %.2f × that = %v",
				n, benchkit.Ms(row.Burst.AllRunning), benchkit.Ratio(row.Burst.AllRunning, o.AllRunning), benchkit.Ms(o.AllRunning), cfg.Workers, cfg.MaxObjectsRatio, benchkit.Ms(bound)))
		}
		if row.Burst != nil && row.Plane > 0 {
			out = append(out, info("N=%d: all N Running in %v, %.2f × the plane's own time for N bare StatefulSets (%v)",
				n, benchkit.Ms(row.Burst.AllRunning), benchkit.Ratio(row.Burst.AllRunning, row.Plane), benchkit.Ms(row.Plane)))
		}
		if qps := r.clientQPS(); row.Burst != nil && qps > 0 {
			perCluster := float64(row.Burst.Requests.Total(true)) / float64(n)
			bound := time.Duration(float64(n) * perCluster / qps * float64(time.Second))
			out = append(out, info("N=%d: all N Running in %v, %.2f × what the client's rate limit lets their requests through in: N × %.1f requests / %g per second = %v",
				n, benchkit.Ms(row.Burst.AllRunning), benchkit.Ratio(row.Burst.AllRunning, bound), perCluster, qps, benchkit.Ms(bound)))
		}
	}
	if f := r.Fairness; f != nil && len(f.Idle) > 0 && len(f.Rolling) > 0 {
		idle, rolling := idleMedian(f.Idle), idleMedian(f.Rolling)
		own, idleOwn := ownMedian(f.Rolling), ownMedian(f.Idle)
		ownBound := time.Duration(cfg.MaxOwnRatio * float64(idleOwn))
		out = append(out, judged(own <= ownBound, "K=%d: pgloop's share (create → StatefulSet, master label → Running) of one more cluster while %d clusters roll out, median of %d created one after another (%d of the K still rolling after the last): %v, %.2f × its idle median %v; goal at most %.2f × idle = %v; the plane's and the labeller's share beside it (not judged): %v, idle %v",
			f.K, f.K, len(f.Rolling), f.RollingLeft, benchkit.Ms(own), benchkit.Ratio(own, idleOwn), benchkit.Ms(idleOwn), cfg.MaxOwnRatio, benchkit.Ms(ownBound),
			benchkit.Ms(rolling-own), benchkit.Ms(idle-idleOwn)))
		bound, plane := oneMoreGoal(cfg, idle, f.RTT, benchkit.Summarize(f.PlaneRolling).Median, f.PlaneIdle, "during the rollout (median)")
		met := "within"
		if rolling > bound {
			met = "beyond"
		}
		out = append(out, info("K=%d: the same, create → Running, median: %v, %.2f × its idle median %v, %s issue 14's goal of %.2f × idle + one API round trip (%v)%s = %v",
			f.K, benchkit.Ms(rolling), f.Ratio(), benchkit.Ms(idle), met, cfg.MaxOneMoreRatio, benchkit.Ms(f.RTT), plane, benchkit.Ms(bound)))
	}
	if f := r.Fairness; f != nil && len(f.Idle) > 0 && f.During.ToRunning > 0 {
		idle := idleMedian(f.Idle)
		bound, plane := oneMoreGoal(cfg, idle, f.RTT, f.PlaneDuring, f.PlaneIdle, "at the restart")
		met := "within"
		if f.During.ToRunning > bound {
			met = "beyond"
		}
		own, idleOwn := f.During.Own(), ownMedian(f.Idle)
		out = append(out, info("K=%d: one more cluster created as soon as the restarted operator was ready, in its first second of work (lists, %d machines resumed): %v, %.2f × its idle median %v, %s the rollout's goal's terms (%.2f × idle + one API round trip (%v)%s = %v); pgloop's share %v, %.2f × its idle median %v",
			f.K, f.K, benchkit.Ms(f.During.ToRunning), f.RestartRatio(), benchkit.Ms(idle), met, cfg.MaxOneMoreRatio, benchkit.Ms(f.RTT), plane, benchkit.Ms(bound),
			benchkit.Ms(own), benchkit.Ratio(own, idleOwn), benchkit.Ms(idleOwn)))
	}
	return append(out, r.Namespaces.verdicts(cfg.MaxNamespaceRatio)...)
}

// rssVerdict judges the operator's RSS with the row's clusters Running
// against cfg.MaxRSS once the row has at least cfg.RSSGoalN clusters;
// a smaller row reports what it projects to at RSSGoalN (its RSS with no
// cluster plus RSSGoalN times its per-cluster RSS), not judged.
func (r *Row) rssVerdict(cfg Config) (Verdict, bool) {
	if r.Clusters == 0 || r.MemoryN.RSS == 0 || cfg.MaxRSS <= 0 || cfg.RSSGoalN <= 0 {
		return Verdict{}, false
	}
	if r.N >= cfg.RSSGoalN {
		return judged(r.MemoryN.RSS <= cfg.MaxRSS, "N=%d: operator RSS with %d clusters Running: %s (%d MB); goal at most %d MB with %d",
			r.N, r.Clusters, mib(r.MemoryN.RSS), r.MemoryN.RSS/1_000_000, cfg.MaxRSS/1_000_000, cfg.RSSGoalN), true
	}
	projected := r.Memory0.RSS + r.PerCluster().RSS*int64(cfg.RSSGoalN)
	return info("N=%d: operator RSS with %d clusters Running: %s; at its per-cluster figure %d clusters would take %d MB (goal %d MB, judged at N = %d)",
		r.N, r.Clusters, mib(r.MemoryN.RSS), cfg.RSSGoalN, projected/1_000_000, cfg.MaxRSS/1_000_000, cfg.RSSGoalN), true
}

// Pass reports whether every judged goal was met.
func (r *Result) Pass() bool {
	return !slices.ContainsFunc(r.Verdicts(), func(v Verdict) bool { return v.Pass != nil && !*v.Pass })
}

// Complete reports whether the run measured everything it was asked to.
func (r *Result) Complete() bool {
	cfg := r.Config
	if (cfg.Has(PhaseBurst) || cfg.Has(PhasePlane) || cfg.Has(PhaseObjects)) && len(r.Rows) < len(cfg.Ns) {
		return false
	}
	for _, row := range r.Rows {
		if cfg.Has(PhasePlane) && row.Plane == 0 || cfg.Has(PhaseObjects) && row.ObjectsBaseline == nil || cfg.Has(PhaseBurst) && row.Burst == nil ||
			cfg.Has(PhaseIdle) && row.IdleWindow == nil || cfg.Has(PhaseRestart) && row.Restart == nil {
			return false
		}
	}
	if cfg.Has(PhaseNamespaces) && !r.Namespaces.complete(cfg.NamespaceRounds) {
		return false
	}
	return !cfg.Has(PhaseFairness) || r.Fairness != nil && r.Fairness.During.ToRunning > 0 && len(r.Fairness.Rolling) > 0
}

// cell renders a value, or "—" when it was not measured.
func cell(measured bool, format string, args ...any) string {
	if !measured {
		return "—"
	}
	return fmt.Sprintf(format, args...)
}

// WriteTable writes the Markdown table of the run, a row per N.
func (r *Result) WriteTable(w io.Writer) {
	fmt.Fprintln(w, "| N | RSS / cluster | Go heap / cluster | writes per create | idle writes | restart | restart writes | burst: all Running | plane baseline | ratio | objects baseline | ratio | one more (idle median) | ratio | loop lag p99 | max inbox |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, row := range r.Rows {
		mem := row.PerCluster()
		writes, events := row.CreateWrites()
		b := row.Burst
		o := row.ObjectsBaseline
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", row.N,
			cell(row.Clusters > 0, "%.1f KiB", float64(mem.RSS)/1024),
			cell(row.Clusters > 0, "%.1f KiB", float64(mem.Heap)/1024),
			cell(len(row.CreateRequests) > 0, "%d (+%d Events)", writes, events),
			cell(row.IdleWindow != nil, "%d in %v", row.IdleWindow.total(), benchkit.Ms(row.IdleWindow.took())),
			cell(row.Restart != nil, "%v", benchkit.Ms(row.Restart.restored())),
			cell(row.Restart != nil, "%d", row.Restart.writes()),
			cell(b != nil, "%v", benchkit.Ms(b.allRunning())),
			cell(row.Plane > 0, "%v", benchkit.Ms(row.Plane)),
			cell(b != nil && row.Plane > 0, "%.2f", benchkit.Ratio(b.allRunning(), row.Plane)),
			cell(o != nil, "%v", benchkit.Ms(o.allRunning())),
			cell(b != nil && o != nil, "%.2f", benchkit.Ratio(b.allRunning(), o.allRunning())),
			cell(row.OneMore != nil, "%v (%v)", benchkit.Ms(onePtr(row.OneMore)), benchkit.Ms(idleMedian(row.Idle))),
			cell(row.OneMore != nil, "%.2f", row.OneMoreRatio()),
			cell(b != nil, "%s", seconds(b.lagP99())),
			cell(b != nil, "%d", b.maxInbox()))
	}
}

// Accessors that a table cell may call on what was not measured.
func (w *Window) total() int {
	if w == nil {
		return 0
	}
	return w.Requests.Writes().Total(true)
}

func (w *Window) took() time.Duration {
	if w == nil {
		return 0
	}
	return w.Took
}

func (r *Restart) restored() time.Duration {
	if r == nil {
		return 0
	}
	return r.Restored
}

func (r *Restart) writes() int {
	if r == nil {
		return 0
	}
	return r.Requests.Writes().Total(true)
}

func (o *ObjectsBaseline) allRunning() time.Duration {
	if o == nil {
		return 0
	}
	return o.AllRunning
}

func (b *Burst) allRunning() time.Duration {
	if b == nil {
		return 0
	}
	return b.AllRunning
}

func (b *Burst) lagP99() float64 {
	if b == nil {
		return math.NaN()
	}
	return b.LagP99
}

func (b *Burst) maxInbox() int {
	if b == nil {
		return 0
	}
	return b.MaxInbox
}

func onePtr(p *benchkit.Probe) time.Duration {
	if p == nil {
		return 0
	}
	return p.ToRunning
}

// WriteDetails writes, per N, the figures behind the table, then the
// fairness phase's.
func (r *Result) WriteDetails(w io.Writer) {
	for _, row := range r.Rows {
		fmt.Fprintf(w, "#### N = %d\n\n", row.N)
		fmt.Fprintf(w, "- Plane: %s of %d pods.", plural(row.Nodes, "KWOK node"), r.Config.PodsPerNode)
		if row.Plane > 0 {
			fmt.Fprintf(w, " Plane baseline (a plane of its own): %d bare StatefulSets created in %v, all pods Ready %v after the first Create.",
				row.N, benchkit.Ms(row.PlaneCreated), benchkit.Ms(row.Plane))
		}
		if extra, ok := row.planeExtra(); ok {
			sum := benchkit.Summarize(row.PlaneIdle)
			fmt.Fprintf(w, " A bare StatefulSet's create → pod Ready: %v on the idle plane (median of %d, %v to %v), %v for one more created right after the N's Creates returned: the plane alone adds %v.",
				benchkit.Ms(sum.Median), len(row.PlaneIdle), benchkit.Ms(sum.Min), benchkit.Ms(sum.Max), benchkit.Ms(row.PlaneOneMore), benchkit.Ms(extra))
		}
		fmt.Fprintln(w)
		if len(row.Idle) > 0 {
			ds := make([]time.Duration, len(row.Idle))
			var writes []string
			for i, p := range row.Idle {
				ds[i] = p.ToRunning
			}
			for _, reqs := range row.CreateRequests {
				writes = append(writes, fmt.Sprint(reqs.Writes().Total(true)))
			}
			sum := benchkit.Summarize(ds)
			last := row.Idle[len(row.Idle)-1]
			fmt.Fprintf(w, "- Idle operator: %d clusters created one after another, create → Running median %v (%v to %v); the last one's segments %s, pgloop's share %v; API round trip %v.\n",
				len(row.Idle), benchkit.Ms(sum.Median), benchkit.Ms(sum.Min), benchkit.Ms(sum.Max), benchkit.SegmentsText(last), benchkit.Ms(last.Own()), benchkit.Ms(row.RTT))
			if len(row.CreateRequests) > 0 {
				fmt.Fprintf(w, "- Requests of one create, until the operator was quiet (the last probe): %s; its effect steps until Running: %s. Writes of each probe, Events included: %s (pgloop makes %d objects per cluster, its namespace's shared ServiceAccount, Role and RoleBinding included, those three only once per namespace).\n",
					row.CreateRequests[len(row.CreateRequests)-1], benchkit.StepCounts(last.Steps), strings.Join(writes, ", "), total(r.Objects))
			}
		}
		if o := row.ObjectsBaseline; o != nil {
			writes := o.Requests.Writes()
			fmt.Fprintf(w, "- Objects baseline (a plane of its own, the labeller, no operator): %d clusters created by %d workers of a bare client writing what pgloop writes for each (its state machine's statuses, its builders' objects, its recorder's Events), written up to their objects in %v, all Running written %v after the first Create; its writes: %d, %.1f per cluster (%s).\n",
				row.N, r.Config.Workers, benchkit.Ms(o.Created), benchkit.Ms(o.AllRunning), writes.Total(true), float64(writes.Total(true))/float64(row.N), writes)
		}
		if b := row.Burst; b != nil {
			fmt.Fprintf(w, "- Burst: %d clusters created in %v (%.0f/s), all Running %v after the first Create; %d transitions into Degraded from another state (the operator's log says why); loop lag p99 %s; at most %d events in the inbox and %d plans waiting.\n",
				row.N, benchkit.Ms(b.Created), float64(row.N)/b.Created.Seconds(), benchkit.Ms(b.AllRunning), b.Degraded, seconds(b.LagP99), b.MaxInbox, b.MaxWaiting)
			if len(b.OneMore) > 1 {
				fmt.Fprintf(w, "- One more: %d clusters created at once right after the N's Creates returned, create → Running median %v (%v to %v); the median one's segments %s.\n",
					len(b.OneMore), benchkit.Ms(b.OneMore[len(b.OneMore)/2]), benchkit.Ms(b.OneMore[0]), benchkit.Ms(b.OneMore[len(b.OneMore)-1]), benchkit.SegmentsText(*row.OneMore))
			}
			fmt.Fprintf(w, "- The burst's %d clusters, segments median / p99:", row.N)
			for i, name := range benchkit.SegmentNames {
				fmt.Fprintf(w, " %s %v / %v;", name, benchkit.Ms(b.Segments[i].Median), benchkit.Ms(b.Segments[i].P99))
			}
			fmt.Fprintf(w, " the labeller (last pod Ready → master label) median %v, p99 %v, max %v.\n",
				benchkit.Ms(b.Labeller.Median), benchkit.Ms(b.Labeller.P99), benchkit.Ms(b.Labeller.Max))
			writes := b.Requests.Writes()
			fmt.Fprintf(w, "- The operator's writes during the burst: %d, %.1f per cluster (%s).\n",
				writes.Total(true), float64(writes.Total(true))/float64(row.N+1), writes)
			if b.Transitions > 0 {
				fmt.Fprintf(w, "- Kubernetes Events during the burst: %d transitions of the state machines; the recorder wrote %d Events and dropped %d of transitions and %d others.\n",
					b.Transitions, b.EventsWritten, b.EventsDropped["transition"], b.EventsDropped["other"])
			}
		}
		if p := row.OneMore; p != nil && len(row.Idle) > 0 {
			fmt.Fprintf(w, "- One more cluster, created right after the N: %v (segments %s; pgloop's share %v, the idle last probe's %v; the plane's and the labeller's %v).\n",
				benchkit.Ms(p.ToRunning), benchkit.SegmentsText(*p), benchkit.Ms(p.Own()), benchkit.Ms(row.Idle[len(row.Idle)-1].Own()), benchkit.Ms(p.ToRunning-p.Own()))
		}
		if row.Clusters > 0 {
			fmt.Fprintf(w, "- Memory: RSS %s with no cluster, %s with %d (median of 5 readings a second apart); Go heap in use %s, %s.\n",
				mib(row.Memory0.RSS), mib(row.MemoryN.RSS), row.Clusters, mib(row.Memory0.Heap), mib(row.MemoryN.Heap))
		}
		if iw := row.IdleWindow; iw != nil {
			fmt.Fprintf(w, "- Idle for %v with %d clusters: every request %s. The loop's events: %s; the operator's CPU %v (%.2f %% of a core).\n",
				benchkit.Ms(iw.Took), row.Clusters, iw.Requests, iw.Events, benchkit.Ms(iw.CPU), 100*iw.CPU.Seconds()/iw.Took.Seconds())
		}
		if rs := row.Restart; rs != nil {
			fmt.Fprintf(w, "- Restart: SIGKILL with %d clusters and %d timers in the loop; the new process ready %v after its start, every machine back %v after; its requests over %v after ready: %s.\n",
				rs.Clusters, rs.Timers, benchkit.Ms(rs.Ready), benchkit.Ms(rs.Restored), benchkit.Ms(rs.Window), rs.Requests)
		}
		fmt.Fprintf(w, "- Wall time: %s.\n\n", walls(row.Walls))
	}
	if f := r.Fairness; f != nil {
		fmt.Fprintf(w, "#### Fairness, K = %d\n\n", f.K)
		rollout := fmt.Sprintf("the %d clusters all rolled out and Running %v after the operator was ready", f.K, benchkit.Ms(f.Rollout))
		if f.Rollout == 0 {
			rollout = fmt.Sprintf("the rollout did not end within %v: %d of the %d clusters not Running with the new image", r.Config.RolloutTimeout, f.Left, f.K)
		}
		plane := ""
		if extra, ok := f.planeExtra(); ok {
			plane = fmt.Sprintf(" A bare StatefulSet's create → pod Ready: %v on the idle plane (median of %d), %v for one created with the one more, during the rollout: the plane alone adds %v.",
				benchkit.Ms(benchkit.Summarize(f.PlaneIdle).Median), len(f.PlaneIdle), benchkit.Ms(f.PlaneDuring), benchkit.Ms(extra))
		}
		held := fmt.Sprintf(" Until the one more was Running, the operator's request gate held %.0f requests of background work while urgent ones were in flight (%v in all).", f.Held, benchkit.Ms(f.HeldFor))
		rolling := ""
		if len(f.Rolling) > 0 {
			times := make([]string, len(f.Rolling))
			for i, p := range f.Rolling {
				times[i] = benchkit.Ms(p.ToRunning).String()
			}
			rolling = fmt.Sprintf(" Then %d more one after another while the %d rolled (%d still rolling after the last): %s, median %v (pgloop's share %v), %.2f × the idle median, with a bare StatefulSet each: median %v.",
				len(f.Rolling), f.K, f.RollingLeft, strings.Join(times, ", "), benchkit.Ms(idleMedian(f.Rolling)), benchkit.Ms(ownMedian(f.Rolling)), f.Ratio(),
				benchkit.Ms(benchkit.Summarize(f.PlaneRolling).Median))
		}
		fmt.Fprintf(w, "A plane of its own: %d idle probes (median %v; API round trip %v), then %d clusters created at once, all Running in %v; the operator stopped and started with `--spilo-image=%s` (every pod template changes), ready in %v; one more cluster created at once: %v (segments %s; pgloop's share %v), %.2f × the idle median.%s%s %s.%s Wall time: %s.\n\n",
			len(f.Idle), benchkit.Ms(idleMedian(f.Idle)), benchkit.Ms(f.RTT), f.K, benchkit.Ms(f.Burst), f.Image, benchkit.Ms(f.Ready), benchkit.Ms(f.During.ToRunning),
			benchkit.SegmentsText(f.During), benchkit.Ms(f.During.Own()), f.RestartRatio(), plane, rolling, upper(rollout), held, walls(f.Walls))
	}
	r.Namespaces.writeDetails(w)
}

// plural renders n things.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func walls(ws []Wall) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = fmt.Sprintf("%s %v", w.Name, w.Took.Round(time.Second))
	}
	return strings.Join(parts, ", ")
}

// Key names a run's section in docs/scale.md: its values of N, its extra
// operator flags or "defaults", and who makes the volumes when it is not
// the default (the provisioner with provisioner.DefaultWorkers).
func (r *Result) Key() string {
	flags := "defaults"
	if len(r.Config.OperatorArgs) > 0 {
		flags = strings.Join(r.Config.OperatorArgs, " ")
	}
	ns := make([]string, len(r.Config.Ns))
	for i, n := range r.Config.Ns {
		ns[i] = fmt.Sprint(n)
	}
	key := fmt.Sprintf("N = %s; operator: %s", strings.Join(ns, ", "), flags)
	if r.Config.VolumeWorkers != provisioner.DefaultWorkers {
		key += "; volumes: " + volumeMaker(r.Config)
	}
	return key
}

// volumeMaker says who makes the plane's volumes.
func volumeMaker(cfg Config) string {
	if cfg.VolumeWorkers <= 0 {
		return "kwok's stages"
	}
	return fmt.Sprintf("provisioner, %d workers", cfg.VolumeWorkers)
}

// Section renders the run as the section of docs/scale.md for its key.
func (r *Result) Section() string {
	var b bytes.Buffer
	cfg := r.Config
	b.WriteString(doc.Begin(r.Key()))
	fmt.Fprintf(&b, "### %s\n\n", r.Key())
	fmt.Fprintf(&b, "Measured %s (took %v) at revision %s, %s, on %d CPUs and %s of memory; load average %s at the start, %s at the end.\n\n",
		r.Start.UTC().Format("2006-01-02 15:04 MST"), r.End.Sub(r.Start).Round(time.Second), r.Revision, r.GoVersion, r.Nproc, r.MemTotal, r.LoadStart, r.LoadEnd)
	fmt.Fprintf(&b, "Operator: `pgloop operator --kubeconfig … %s`; its client's rate limit in effect: `%s`. "+
		"Labeller client: %g requests/s, burst %d. Plane: KWOK nodes of %d pods, kube-controller-manager and kube-scheduler at %s, volumes by %s. "+
		"Clusters of one instance (pgtest.Cluster), %d per namespace, created by %d workers of the bench's client (1000 requests/s); phases %s; idle period %v.\n\n",
		strings.Join(r.OperatorFlags, " "), r.KubeFlags, cfg.LabellerQPS, cfg.LabellerBurst, cfg.PodsPerNode, planeRate(cfg), volumesText(cfg),
		cfg.PerNamespace, cfg.Workers, strings.Join(cfg.Phases, ","), cfg.Idle)
	r.WriteTable(&b)
	b.WriteString("\n")
	for _, v := range r.Verdicts() {
		fmt.Fprintf(&b, "- **%s**\n", v)
	}
	if !r.Complete() {
		b.WriteString("- **INCOMPLETE**: the run stopped before measuring everything.\n")
	}
	b.WriteString("\n")
	r.WriteDetails(&b)
	b.WriteString(doc.End() + "\n")
	return b.String()
}

// planeRate renders the plane controllers' client rate limit.
func planeRate(cfg Config) string {
	if cfg.PlaneQPS <= 0 {
		return "their default rate limits"
	}
	return fmt.Sprintf("%g requests/s, burst %d", cfg.PlaneQPS, cfg.PlaneBurst)
}

// volumesText says who made the plane's volumes, for a section.
func volumesText(cfg Config) string {
	if cfg.VolumeWorkers <= 0 {
		return "kwok's volume stages (played one at a time)"
	}
	return fmt.Sprintf("the plane's provisioner (test/provisioner) with %d workers", cfg.VolumeWorkers)
}

// doc is docs/scale.md: a section per configuration.
var doc = benchkit.Doc{Name: "bench-scale", Header: docHeader}

// UpdateDoc writes the run's section into the document at path, keeping
// the rest of it; a missing file is created.
func (r *Result) UpdateDoc(path string) error { return doc.Update(path, r.Key(), r.Section()) }

const docHeader = `# Scale: thousands of clusters on one operator (measured)

` + "`make bench-scale`" + ` measures pgloop with N one-instance clusters on the local control plane
(docs/testbed.md), the operator built from this tree (issue 14, item 1). Each N has a fresh plane
of its own, with KWOK nodes enough for its pods; the labeller (test/labeller) plays Patroni's role
labels, and the plane's provisioner (test/provisioner, ` + "`--volume-workers`" + `, 16 workers) makes
the claims' volumes in place of kwok's one-at-a-time volume stages (` + "`--volume-workers=0`" + `).

## What is measured

- **burst: all Running**: N clusters created at once (as fast as the bench's client goes), from
  the first Create to the bench's watch seeing every one Running. **plane baseline**: the same on a
  plane of its own for N bare StatefulSets of one replica, built as pgloop builds a cluster's
  (same pod template, same volume claim template), until every pod is Ready: what the plane
  itself needs. **loop lag p99** (from pgloop_loop_lag_seconds' buckets, interpolated as
  histogram_quantile does) and **max inbox** (pgloop_loop_inbox_depth, read every second) are
  during the burst.
- **objects baseline** (phase objects): the bound of pgloop's own work for the burst: on a plane
  of its own with the labeller and no operator, N clusters created by the bench's workers, each
  by a bare client that writes exactly what pgloop writes to create it, in pgloop's order, with
  pgloop's own state machine (the statuses), builders (the objects) and recorder (the two
  Events), the Running status once the labeller labelled its pod master; from the first Create
  until every Running write returned. The goal: all N Running within 1.2 × it.
- **one more**: a cluster created right after the N's Creates returned (flag --one-more: the
  median of that many created at once in the probes' namespace, which then take turns among
  themselves), its create → Running, against the median of the same created one after another on
  the idle operator before the burst; the details split it into pgloop's share (create →
  StatefulSet, and master label → Running) and the rest (the plane, the labeller).
- **RSS / cluster, Go heap / cluster**: (value with every cluster Running − value with none) /
  clusters, each value the median of five readings a second apart of VmRSS and
  go_memstats_heap_inuse_bytes.
- **writes per create**: pgloop's own count (pgloop_api_requests_total, its client's requests by
  verb and resource) from one Create on the idle operator until the operator is quiet again, the
  most of the probes, Events apart; **idle writes**: during the idle period with the N Running.
- **restart**: the operator SIGKILLed with the N Running and idle, started again: from the new
  process's start until pgloop_loop_clusters and pgloop_loop_timers are back to what they were
  and nothing is in the inbox or running; **restart writes**: the new process's writes over its
  first minute after ready.
- **fairness**: on a plane of its own, K clusters Running; the operator restarted with another
  ` + "`--spilo-image`" + ` (every pod template changes, so all K roll out at once); one more cluster
  created as soon as it is ready: its create → Running over its idle median; with it, at the
  same time, one bare StatefulSet, whose create → pod Ready over the same on the idle plane is
  what the plane alone adds during the rollout (the goal allows it, as the burst's one more does).

## Reproduce

` + "```sh" + `
make bench-scale                                          # N = 1000, 5000; idle 10 minutes; K = 1000
make bench-scale BENCH_SCALE_ARGS="--n 20,50 --idle 30s --busy 20"
make bench-scale BENCH_SCALE_ARGS="--operator-arg=--kube-qps=500 --operator-arg=--kube-burst=1000"
` + "```" + `

` + "`bin/bench-scale --help`" + ` lists the knobs (` + "`--phases`" + ` to make only some of plane, objects, burst,
idle, restart, fairness; ` + "`--work-dir`" + ` to keep the operators' logs). Each configuration (values of N and
operator flags) has its own section below, replaced by the next run of the same; the rest of this
file is kept.

## Results

`

// upper starts s with a capital letter.
func upper(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
