package isolation

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/pgloop/pgloop/test/bench/benchkit"
	"github.com/pgloop/pgloop/test/kubelet"
)

// Key names a run's section in docs/isolation.md: its extra operator
// flags, or "defaults", after "frozen: " in the frozen mode.
func (r *Result) Key() string {
	key := "defaults"
	if len(r.Config.OperatorArgs) > 0 {
		key = strings.Join(r.Config.OperatorArgs, " ")
	}
	if r.Config.FrozenMode() {
		key = "frozen: " + key
	}
	return key
}

// what is what the run's K counts: "stuck" or "frozen" clusters.
func (r *Result) what() string {
	if r.Config.FrozenMode() {
		return "frozen"
	}
	return "stuck"
}

// Pass reports whether the ratio is within Config.MaxRatio.
func (r *Result) Pass() bool {
	ratio := r.Ratio()
	return !math.IsNaN(ratio) && ratio <= r.Config.MaxRatio
}

// Verdict says whether the run passed, and why not.
func (r *Result) Verdict() string {
	if len(r.Phases) < len(r.Config.Ks()) {
		return fmt.Sprintf("INCOMPLETE: the run stopped after %d of %d values of K", len(r.Phases), len(r.Config.Ks()))
	}
	last, first := r.Phases[len(r.Phases)-1], r.Phases[0]
	ratio := r.Ratio()
	what := fmt.Sprintf("ratio of the healthy median with K = %d %s (%v) to K = 0 (%v) is %.2f",
		last.K, r.what(), benchkit.Ms(last.ToRunning().Median), benchkit.Ms(first.ToRunning().Median), ratio)
	// The frozen mode's control, for the reader: what the hang adds to
	// the data plane's own cost.
	also := ""
	if u := last.Unfrozen; u != nil {
		also = fmt.Sprintf(" (to the same %d clusters Running, none frozen (%v): %.2f)",
			last.K, benchkit.Ms(u.ToRunning().Median), benchkit.Ratio(last.ToRunning().Median, u.ToRunning().Median))
	}
	if r.Pass() {
		return fmt.Sprintf("PASS: %s, at most %.2f%s", what, r.Config.MaxRatio, also)
	}
	return fmt.Sprintf("FAIL: %s, above %.2f%s", what, r.Config.MaxRatio, also)
}

// row is one measurement as the tables show it, in the order they show
// them.
type row struct {
	label string
	p     *Phase
	// retry marks the stuck mode's retry round; unfrozen the frozen
	// mode's measurement next to its K clusters before they were frozen,
	// of the frozen phase parent.
	retry, unfrozen bool
	parent          *Phase
}

// rows lists the run's measurements: per K, in the frozen mode, the one
// next to the K clusters Running, then the one with them hung; the retry
// round last.
func (r *Result) rows() []row {
	var out []row
	for i := range r.Phases {
		p := &r.Phases[i]
		if p.Unfrozen != nil {
			out = append(out, row{label: fmt.Sprintf("%d Running, none frozen", p.K), p: p.Unfrozen, unfrozen: true, parent: p})
		}
		out = append(out, row{label: fmt.Sprint(p.K), p: p})
	}
	if r.RetryRound != nil {
		out = append(out, row{label: fmt.Sprintf("%d, during a retry round", r.RetryRound.K), p: r.RetryRound, retry: true})
	}
	return out
}

// WriteTable writes the Markdown table of the run.
func (r *Result) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "| K %s | healthy create → Running, median | p99 (= max) | ratio to K = 0 | last pod Ready → Running, median | p99 (= max) | labelled → Running, median | p99 (= max) |\n", r.what())
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|")
	if len(r.Phases) == 0 {
		return
	}
	base := r.Phases[0].ToRunning().Median
	for _, row := range r.rows() {
		run, ready, lab := row.p.ToRunning(), row.p.ReadyToRunning(), row.p.LabelledToRunning()
		fmt.Fprintf(w, "| %s | %v | %v | %.2f | %v | %v | %v | %v |\n", row.label,
			benchkit.Ms(run.Median), benchkit.Ms(run.P99), benchkit.Ratio(run.Median, base), benchkit.Ms(ready.Median), benchkit.Ms(ready.P99), benchkit.Ms(lab.Median), benchkit.Ms(lab.P99))
	}
}

// WriteSegments writes where the healthy clusters' time went: the median
// of each segment between what the bench's watches saw, per K.
func (r *Result) WriteSegments(w io.Writer) {
	fmt.Fprintf(w, "| K %s |", r.what())
	for _, n := range benchkit.SegmentNames {
		fmt.Fprintf(w, " %s |", n)
	}
	fmt.Fprintln(w, " pgloop's share (first + last) |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|")
	for _, row := range r.rows() {
		fmt.Fprintf(w, "| %s |", row.label)
		for i := range benchkit.SegmentNames {
			fmt.Fprintf(w, " %v |", benchkit.Ms(row.p.Segment(i).Median))
		}
		share := benchkit.Summarize(collect(row.p.Clusters, func(h benchkit.Probe) time.Duration { return h.Segments[0] + h.Segments[4] }))
		fmt.Fprintf(w, " %v |\n", benchkit.Ms(share.Median))
	}
}

// WriteDetails writes, per K, how the stuck clusters were stuck or the
// frozen ones hung, the settle time, and what the operator and the CPUs
// did during the measurements.
func (r *Result) WriteDetails(w io.Writer) {
	frozen := r.Config.FrozenMode()
	for _, row := range r.rows() {
		p := row.p
		label := row.label
		if row.retry {
			label = fmt.Sprint(p.K) // the text says the rest
		}
		fmt.Fprintf(w, "- K = %s: ", label)
		switch {
		case row.retry:
			fmt.Fprintf(w, "during a retry round (not in the verdict): %d retry timers of stuck clusters fired within 2s, %v after the previous measurement; ", p.Retries, benchkit.Ms(p.Settle))
		case row.unfrozen:
			fmt.Fprintf(w, "the %d clusters on the process node Running with roles synced and configuration applied %v after the first Create; measured at once (their Patroni's writes never let the operator be quiet), not in the verdict; ",
				p.K, benchkit.Ms(row.parent.ReadyAfter))
		case frozen && p.K > 0:
			fmt.Fprintf(w, "then all hung mid-sync %v after the first freeze (RolesSynced: %q); measured at once (their retries never let the operator be quiet); ",
				benchkit.Ms(p.HungAfter), p.HungMessage)
		case p.K > 0:
			fmt.Fprintf(w, "stuck clusters all Degraded with their cause %v after the batch's first Create; ", benchkit.Ms(p.StuckAfter))
		}
		switch {
		case row.retry || row.unfrozen || frozen && p.K > 0:
		case p.Quiet:
			fmt.Fprintf(w, "operator quiet after %v; ", benchkit.Ms(p.Settle))
		default:
			fmt.Fprintf(w, "operator not quiet within %v (measured anyway); ", benchkit.Ms(p.Settle))
		}
		fmt.Fprintf(w, "load average %s, clusters by state %s at the start; %d healthy clusters measured in %v, during which the operator ran %s, mean loop lag %s; at most %d plans running (on the workers, in the hung lane, or past --slow-after) and %d waiting (for their cluster's running plan, a free worker or a place of the hung lane)",
			p.Load, states(p.States), len(p.Clusters), benchkit.Ms(p.Window), benchkit.StepCounts(p.Background), meanLag(p.Background), p.PeakRunning, p.PeakWaiting)
		fmt.Fprintf(w, "; %s", executorWaits(p.Background))
		if frozen && p.K > 0 && !row.unfrozen {
			fmt.Fprintf(w, "; %d of the %d frozen clusters still hung at the end", p.HungAtEnd, p.K)
		}
		if n := countVia(p.Clusters); n > 0 {
			fmt.Fprintf(w, "; %d healthy clusters passed through Degraded (their create timeout passed)", n)
		}
		fmt.Fprintf(w, "; CPU: %s.\n", p.CPU.describe(r.Nproc, frozen))
	}
}

// hungFlagNames are the operator's flags that bound what a hung primary
// costs.
var hungFlagNames = []string{"workers", "hung-workers", "slow-after", "sql-connect-timeout", "sql-statement-timeout", "in-database-timeout", "retry-base", "retry-max"}

// describe renders what the CPUs did, for the details: the process node's
// groups only with one.
func (c CPU) describe(nproc int, processNode bool) string {
	s := func(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }
	out := fmt.Sprintf("%.2f of %d cores busy on average (%s of CPU time): the operator %s, the control plane %s",
		c.Busy, nproc, s(c.Used), s(c.Operator), s(c.ControlPlane))
	if processNode {
		out += fmt.Sprintf(", the process kubelet %s, Patroni and PostgreSQL %s", s(c.Kubelet), s(c.DataPlane))
	}
	return out + fmt.Sprintf(", the bench %s, others %s", s(c.Bench), s(c.Others))
}

func countVia(hs []benchkit.Probe) int {
	n := 0
	for _, h := range hs {
		if strings.Contains(h.Via, "Degraded") {
			n++
		}
	}
	return n
}

func states(m map[string]int) string {
	var parts []string
	for _, s := range []string{"Pending", "Invalid", "Creating", "Running", "Updating", "Degraded", "Deleting"} {
		if m[s] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, m[s]))
		}
	}
	if len(parts) == 0 {
		return "(none)"
	}
	return strings.Join(parts, ", ")
}

func meanLag(d benchkit.Samples) string {
	n := d.Sum("pgloop_loop_lag_seconds_count")
	if n == 0 {
		return "n/a"
	}
	return fmt.Sprint(time.Duration(d.Sum("pgloop_loop_lag_seconds_sum") / n * float64(time.Second)).Round(time.Microsecond))
}

// WriteClusters writes every healthy cluster's figures, for the record.
func (r *Result) WriteClusters(w io.Writer) {
	fmt.Fprintln(w, "| K | cluster | created at | create → Running | segments | last pod Ready → Running | path | effect steps meanwhile |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---|---|")
	for _, row := range r.rows() {
		for _, h := range row.p.Clusters {
			fmt.Fprintf(w, "| %d | %s | +%v | %v | %s | %v | %s | %s |\n", row.p.K, h.Name, benchkit.Ms(h.Start), benchkit.Ms(h.ToRunning),
				benchkit.SegmentsText(h), benchkit.Ms(h.ReadyToRunning), h.Via, benchkit.StepCounts(h.Steps))
		}
	}
}

// Section renders the run as the section of docs/isolation.md for its key.
func (r *Result) Section() string {
	var b bytes.Buffer
	cfg := r.Config
	b.WriteString(doc.Begin(r.Key()))
	if cfg.FrozenMode() {
		flags, _ := strings.CutPrefix(r.Key(), "frozen: ")
		fmt.Fprintf(&b, "### Hung primaries (frozen mode), operator flags: %s\n\n", flags)
	} else {
		fmt.Fprintf(&b, "### Operator flags: %s\n\n", r.Key())
	}
	fmt.Fprintf(&b, "Measured %s (took %v) at revision %s, %s, on %d CPUs; load average %s at the start, %s at the end.\n\n",
		r.Start.UTC().Format("2006-01-02 15:04 MST"), r.End.Sub(r.Start).Round(time.Second), r.Revision, r.GoVersion, r.Nproc, r.LoadStart, r.LoadEnd)
	if cfg.FrozenMode() {
		fmt.Fprintf(&b, "Operator: `pgloop operator --kubeconfig … --namespace <the 2 namespaces> %s`; in effect for a hung primary: `%s`. "+
			"Plane: %d kwok nodes and a process node (test/kubelet: real Patroni and PostgreSQL 15). "+
			"Per K, %d healthy clusters of %d instance(s) on kwok's nodes, created one after another (after %d warm-up clusters at the start of the run); "+
			"before them, K clusters of 1 instance on the process node (user app, database appdb), made anew for each K, each Running with RolesSynced and ConfigApplied True, "+
			"then its PostgreSQL frozen (`%s: %s`: its pod stays Ready, SQL connections hang after the TCP handshake) and a user `late` added to its spec; "+
			"measured as soon as every one shows RolesSynced False, %q.\n\n",
			strings.Join(r.OperatorFlags, " "), r.HungFlags, cfg.Nodes, cfg.Healthy, cfg.Instances, cfg.WarmUp,
			kubelet.FreezeAnnotation, kubelet.FreezePostgres, hungWords)
	} else {
		fmt.Fprintf(&b, "Operator: `pgloop operator --kubeconfig … --namespace <the 4 namespaces> %s`. "+
			"Plane: %d kwok nodes. Per K, %d healthy clusters of %d instance(s), created one after another (after %d warm-up clusters at the start of the run); "+
			"stuck clusters of 1 instance, a third each unschedulable by node affinity, by CPU, and refused by a quota of 0 pods.\n\n",
			strings.Join(r.OperatorFlags, " "), cfg.Nodes, cfg.Healthy, cfg.Instances, cfg.WarmUp)
	}
	r.WriteTable(&b)
	fmt.Fprintf(&b, "\n**%s**\n\nWhere the time went (medians of each segment, between the local times at which the bench's watches saw each thing first):\n\n", r.Verdict())
	r.WriteSegments(&b)
	b.WriteString("\n")
	r.WriteDetails(&b)
	b.WriteString("\n<details><summary>Every healthy cluster (segments as in the table above, in ms; the start is from the beginning of its K's measurements)</summary>\n\n")
	r.WriteClusters(&b)
	b.WriteString("\n</details>\n")
	b.WriteString(doc.End() + "\n")
	return b.String()
}

// doc is docs/isolation.md: a section per configuration.
var doc = benchkit.Doc{Name: "bench-isolation", Header: docHeader, Footer: docFooter}

// UpdateDoc writes the run's section into the document at path: in place of
// the section of the same key, else above the new-runs mark, else at the
// end. Everything else in the file is kept; a missing file is created with
// docHeader.
func (r *Result) UpdateDoc(path string) error { return doc.Update(path, r.Key(), r.Section()) }

const docHeader = `# Isolation: do stuck clusters slow healthy ones down? (measured)

` + "`make bench-isolation`" + ` answers it on the local control plane (docs/testbed.md), with the
operator built from this tree (issue 6, item 3). The model and the answer to the worker question are
in docs/worker-question.md; the design in docs/design.md.

## What is measured

One run, one fresh plane (3 kwok nodes), one ` + "`pgloop operator`" + ` process (no leader
election, ` + "`--create-timeout 15s`" + ` so that stuck clusters become Degraded within the run), the
labeller (test/labeller) standing in for Patroni's role label. For K = 0, 10 and 100 stuck clusters
(added cumulatively; a third each with a node affinity no node has, with more CPU than any node, and
in a namespace whose ResourceQuota allows no pod, each way in its own namespace):

1. the K stuck clusters are created, and the bench waits (a watch) until every one is Degraded with
   its cause in status.message;
2. it waits until the operator is quiet: /metrics shows an empty inbox, no plan running or waiting,
   and no event dispatched nor effect step run for one second (the burst of the stuck clusters'
   creation is over; their retry timers still fire later, as they would in production);
3. it creates healthy clusters of one instance, one after another, and measures for each:
   - **create → Running**: from the Create call returning to the bench's watch seeing
     status.state Running;
   - **last pod Ready → Running**: from the bench's pod watch seeing the last pod Ready to its
     cluster watch seeing Running, both local times of watch events (not the pods' Ready
     lastTransitionTime, which has a one-second precision): pgloop's overhead without scheduling
     and kwok. It still includes the labeller: a cluster is Running only once a pod carries the
     master role label;
   - **labelled → Running**: from the pod watch seeing the master label as well: pgloop alone
     (observe the pod event, run the state machine, write the status);
   - **segments**: create → Running split at what the bench's watches (clusters, and the healthy
     namespace's StatefulSets and pods) saw first, so each part has an owner: pgloop until the
     StatefulSet exists, then kube-controller-manager, the scheduler and kwok, the labeller, and
     pgloop again from the label to Running.

After the last K, the same is measured once more **during a retry round**: the bench waits until at
least half of the stuck clusters' retry timers fire within two seconds (created in one burst, they
stay in step: 2 s, 8 s, 16 s, … after Degraded, up to ` + "`--retry-max`" + `) and creates the
healthy clusters at once. That row is the worst case for sharing the operator's API client and
workers; it is not part of the verdict.

With fewer than 100 clusters per K (20 by default), the p99 (nearest rank) is the maximum. The
ratio is the median with K stuck clusters over the median with none; the run fails (exit status 1)
when it is above 1.1 for the largest K. Healthy clusters of earlier values of K stay Running (idle
until their resync, 10 minutes) during the later ones.

## Reproduce

` + "```sh" + `
make bench-isolation                   # builds the plane's binaries first if missing (make testbed)
make bench-isolation BENCH_ISOLATION_ARGS="--operator-arg=--kube-qps=200 --operator-arg=--kube-burst=400"
make bench-isolation-frozen            # next to K = 0, 4, 8 hung primaries (real PostgreSQL frozen mid-sync)
` + "```" + `

Each configuration of operator flags has its own section below, replaced by the next run with the
same flags; the rest of this file is kept. ` + "`bin/bench-isolation --help`" + ` lists the knobs (values
of K, clusters per K, instances, timeouts, ` + "`--source`" + ` to measure another tree, ` + "`--work-dir`" + `
to keep the operator's log and the plane's directory). A run takes 3 to 5 minutes on 2 cores.

## Results

`

const docFooter = ``

// executorWaits says, from a window's metrics, how many plans waited for a
// worker and for a place of the hung lane, and how many went on off them
// after --slow-after (pkg/eventloop/hung.go).
func executorWaits(d benchkit.Samples) string {
	lane := func(l string) (float64, float64) {
		return d.Get(`pgloop_loop_worker_waits_total{lane="` + l + `"}`), d.Get(`pgloop_loop_worker_wait_seconds_total{lane="` + l + `"}`)
	}
	wn, ws := lane("workers")
	hn, hs := lane("hung")
	return fmt.Sprintf("%.0f plans waited for a worker (%s in all), %.0f for a place of the hung lane (%s), %.0f went on off them after --slow-after",
		wn, benchkit.Ms(time.Duration(ws*float64(time.Second))), hn, benchkit.Ms(time.Duration(hs*float64(time.Second))), d.Get("pgloop_loop_plans_detached_total"))
}
