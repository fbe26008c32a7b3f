package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgloop/pgloop/test/bench/benchkit"
	"github.com/pgloop/pgloop/test/pgtest"
	"github.com/pgloop/pgloop/test/testbed"
)

// Namespaces is the namespaces phase (issue 34): whether a team's burst of
// creates in one namespace delays another namespace's single create. Each
// of its rounds creates B clusters at once in a fresh namespace, then one
// cluster in the probes' namespace (the other namespace) and one in the
// burst's own, and judges pgloop's two stages of the other one, create →
// StatefulSet and master label → Running, against the same stages of the
// idle probes.
//
// The other namespace is the probes' own, not a fresh one per round: its
// cluster then makes the same writes as the idle probes after the first
// (the namespace's shared ServiceAccount, Role and RoleBinding exist), so
// only the burst sets the two apart, and its flow in the executor's run
// queue is as idle as it was for the probes.
type Namespaces struct {
	// B is the clusters of each round's burst.
	B int
	// Idle are the probes on the idle operator, before the first round.
	Idle []benchkit.Probe
	// Rounds are in the order they were made.
	Rounds []NamespaceRound
	Walls  []Wall
}

// NamespaceRound is one round of the namespaces phase: B clusters created at
// once in a fresh namespace, then, as soon as their Creates returned, Other
// in the probes' namespace and Own in the burst's, at the same time.
type NamespaceRound struct {
	// Created is how long the B Creates took; AllRunning from the first
	// Create until the B and Own were Running.
	Created, AllRunning time.Duration
	Other, Own          benchkit.Probe
	// MaxWaiting is the most plans waiting in the executor during the round
	// (/metrics read every second).
	MaxWaiting int
}

// pgloopStages are the segments of a probe that are pgloop's alone
// (benchkit.SegmentNames), with the words of a verdict for each.
var pgloopStages = []struct {
	segment int
	name    string
}{
	{0, "create → StatefulSet"},
	{4, "master label → Running"},
}

// namespaces makes the namespaces phase on a plane of its own: the idle
// probes, then Config.NamespaceRounds rounds. The B of a round stay, Running
// and idle (an idle cluster costs the operator no work, 0 writes in the idle
// phase), so the plane has nodes for every round's clusters: deleting them
// would be work for pgloop that the next round would have to wait out.
func (b *bench) namespaces(ctx context.Context, ns *Namespaces) (err error) {
	began := time.Now()
	rounds := b.cfg.NamespaceRounds
	// Pods: each round's B, other and own, the probes.
	s, err := b.startStage(ctx, fmt.Sprintf("namespaces-b%d", ns.B), (ns.B+2)*rounds+b.cfg.Probes, 0, true)
	defer func() { err = errors.Join(s.err(err), s.stop()) }()
	if err != nil {
		return err
	}
	if err := s.operatorUp(); err != nil {
		return err
	}
	b.wall(&ns.Walls, "plane and operator up", began)
	began = time.Now()
	for i := range b.cfg.Probes {
		p, _, err := s.probeIdle(fmt.Sprintf("idle-%d", i))
		if err != nil {
			return err
		}
		ns.Idle = append(ns.Idle, p)
		b.logf("B=%d: idle probe %s Running in %v (segments %s)", ns.B, p.Name, benchkit.Ms(p.ToRunning), benchkit.SegmentsText(p))
	}
	b.wall(&ns.Walls, "idle probes", began)
	for i := range rounds {
		began = time.Now()
		r, err := s.namespaceRound(i, ns.B)
		if err != nil {
			return fmt.Errorf("round %d: %w", i+1, err)
		}
		ns.Rounds = append(ns.Rounds, r)
		b.wall(&ns.Walls, fmt.Sprintf("round %d", i+1), began)
	}
	return nil
}

// namespaceRound creates n clusters at once in a fresh namespace, then the
// other namespace's cluster and the burst namespace's own one at once, and
// waits until all are Running and the operator is quiet, so that the next
// round starts from an idle operator.
func (s *stage) namespaceRound(i, n int) (NamespaceRound, error) {
	cfg := s.b.cfg
	ns, err := testbed.CreateNamespace(s.ctx, s.env.Kube, fmt.Sprintf("team-%d", i))
	if err != nil {
		return NamespaceRound{}, err
	}
	var r NamespaceRound
	for j := range n {
		s.env.Tracker.Expect(ns+"/"+s.burstName(j), 1)
	}
	ctx, cancel := context.WithTimeout(s.ctx, cfg.BurstTimeout)
	defer cancel()
	smp := s.sample(func() string {
		return fmt.Sprintf("round %d: %d of %d Running in %s", i+1, s.env.Tracker.Count(ns).Running, n+1, ns)
	})
	defer smp.stop()
	began := time.Now()
	err = createAll(ctx, n, cfg.Workers, func(ctx context.Context, j int) error {
		pg := pgtest.Cluster(ns, s.burstName(j), 1)
		if _, err := s.env.PG.PgloopV1().Postgresqls(ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("while creating cluster %s/%s: %w", ns, pg.Name, err)
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	r.Created = time.Since(began)
	s.b.logf("%s: round %d: %d clusters created in %s in %v; one in %s and one in %s at once", s.name, i+1, n, ns,
		benchkit.Ms(r.Created), s.probeNS, ns)
	type probed struct {
		p   benchkit.Probe
		err error
	}
	own := make(chan probed, 1)
	go func() {
		p, err := s.env.Probe(ctx, pgtest.Cluster(ns, "own", 1), cfg.BurstTimeout)
		own <- probed{p, err}
	}()
	r.Other, err = s.env.Probe(ctx, pgtest.Cluster(s.probeNS, fmt.Sprintf("other-%d", i), 1), cfg.BurstTimeout)
	o := <-own
	if err = errors.Join(err, o.err); err != nil {
		return r, err
	}
	r.Own = o.p
	// The Creates' times, to find the clusters in the operator's log.
	at := func(p benchkit.Probe) string { return s.b.began.Add(p.Start).UTC().Format("15:04:05.000") }
	s.b.logf("%s: round %d: the other namespace's cluster %s/%s (created %s UTC) Running in %v (segments %s), the burst namespace's own (created %s UTC) in %v (segments %s)",
		s.name, i+1, s.probeNS, r.Other.Name, at(r.Other), benchkit.Ms(r.Other.ToRunning), benchkit.SegmentsText(r.Other),
		at(r.Own), benchkit.Ms(r.Own.ToRunning), benchkit.SegmentsText(r.Own))
	s.b.logf("%s: round %d: from the other's Create to its Running, the operator's effect steps: %s; %s", s.name, i+1,
		benchkit.StepCounts(r.Other.Steps), workerWaits(r.Other.Steps))
	if err := s.env.Tracker.WaitCounts(ctx, []string{ns}, func(c Counts) bool { return c.Running >= n+1 }); err != nil {
		return r, fmt.Errorf("not all %d clusters of %s Running within %v: %d are: %w", n+1, ns, cfg.BurstTimeout, s.env.Tracker.Count(ns).Running, err)
	}
	r.AllRunning = time.Since(began)
	_, r.MaxWaiting = smp.stop()
	s.b.logf("%s: round %d: all %d of %s Running %v after the first Create; %d plans waiting at most", s.name, i+1, n+1, ns,
		benchkit.Ms(r.AllRunning), r.MaxWaiting)
	return r, s.quiet(fmt.Sprintf("after round %d", i+1))
}

// workerWaits renders the plans that waited for a worker, and for how long
// on average, in d, a delta of the operator's metrics.
func workerWaits(d benchkit.Samples) string {
	n := d.Sum("pgloop_loop_worker_waits_total", `lane="workers"`)
	if n == 0 {
		return "no plan waited for a worker"
	}
	mean := time.Duration(d.Sum("pgloop_loop_worker_wait_seconds_total", `lane="workers"`) / n * float64(time.Second))
	return fmt.Sprintf("%.0f plans waited for a worker, %v on average", n, benchkit.Ms(mean))
}

// segmentMedian is the median of segment i of probes.
func segmentMedian(ps []benchkit.Probe, i int) time.Duration {
	ds := make([]time.Duration, len(ps))
	for j, p := range ps {
		ds[j] = p.Segments[i]
	}
	return benchkit.Summarize(ds).Median
}

// others and owns are the rounds' clusters of the other namespace and of
// the burst's.
func (ns *Namespaces) others() []benchkit.Probe {
	return ns.probes(func(r NamespaceRound) benchkit.Probe { return r.Other })
}
func (ns *Namespaces) owns() []benchkit.Probe {
	return ns.probes(func(r NamespaceRound) benchkit.Probe { return r.Own })
}

func (ns *Namespaces) probes(of func(NamespaceRound) benchkit.Probe) []benchkit.Probe {
	ps := make([]benchkit.Probe, len(ns.Rounds))
	for i, r := range ns.Rounds {
		ps[i] = of(r)
	}
	return ps
}

// verdicts judges the median over rounds of each of pgloop's stages of the
// other namespace's cluster against maxRatio × that stage's idle median,
// and reports the burst namespace's own cluster beside them. A phase not
// made, or made without a round, has none.
func (ns *Namespaces) verdicts(maxRatio float64) []Verdict {
	if ns == nil || len(ns.Idle) == 0 || len(ns.Rounds) == 0 {
		return nil
	}
	var out []Verdict
	others, owns := ns.others(), ns.owns()
	for _, st := range pgloopStages {
		idle, other := segmentMedian(ns.Idle, st.segment), segmentMedian(others, st.segment)
		bound := time.Duration(maxRatio * float64(idle))
		out = append(out, judged(other <= bound, "B=%d: a cluster of another namespace created right after a burst of %d in one, %s (pgloop), median of %d rounds: %v, %.2f × its idle median %v; goal at most %.2f × idle = %v",
			ns.B, ns.B, st.name, len(others), benchkit.Ms(other), benchkit.Ratio(other, idle), benchkit.Ms(idle), maxRatio, benchkit.Ms(bound)))
	}
	parts := make([]string, len(pgloopStages))
	for i, st := range pgloopStages {
		own, idle := segmentMedian(owns, st.segment), segmentMedian(ns.Idle, st.segment)
		parts[i] = fmt.Sprintf("%s %v (%.2f × idle)", st.name, benchkit.Ms(own), benchkit.Ratio(own, idle))
	}
	out = append(out, info("B=%d: a cluster of the burst's own namespace created with it, median of %d rounds: %s; create → Running %v (the other namespace's %v, idle %v)",
		ns.B, len(owns), strings.Join(parts, ", "), benchkit.Ms(idleMedian(owns)), benchkit.Ms(idleMedian(others)), benchkit.Ms(idleMedian(ns.Idle))))
	return out
}

// complete reports whether the phase made its rounds.
func (ns *Namespaces) complete(rounds int) bool {
	return ns != nil && len(ns.Idle) > 0 && len(ns.Rounds) == rounds
}

// writeDetails writes the phase's figures: the idle medians, then each
// round's values, their medians and ratios to the idle medians.
func (ns *Namespaces) writeDetails(w io.Writer) {
	if ns == nil {
		return
	}
	fmt.Fprintf(w, "#### Namespaces, B = %d\n\n", ns.B)
	idle := make([]string, len(pgloopStages))
	for i, st := range pgloopStages {
		idle[i] = fmt.Sprintf("%s median %v", st.name, benchkit.Ms(segmentMedian(ns.Idle, st.segment)))
	}
	fmt.Fprintf(w, "A plane of its own: %d idle probes in the probes' namespace (create → Running median %v; %s), then %d rounds: %d clusters created at once in a fresh namespace, and as soon as their Creates returned one cluster in the probes' namespace (other) and one in the burst's (own) at once; the next round once all were Running and the operator quiet. Wall time: %s.\n\n",
		len(ns.Idle), benchkit.Ms(idleMedian(ns.Idle)), strings.Join(idle, ", "), len(ns.Rounds), ns.B, walls(ns.Walls))
	fmt.Fprintln(w, "| round | burst created in | other: create → StatefulSet | other: master label → Running | other: create → Running | own: create → StatefulSet | own: master label → Running | own: create → Running | all Running | plans waiting at most |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for i, r := range ns.Rounds {
		fmt.Fprintf(w, "| %d | %v | %v | %v | %v | %v | %v | %v | %v | %d |\n", i+1, benchkit.Ms(r.Created),
			benchkit.Ms(r.Other.Segments[0]), benchkit.Ms(r.Other.Segments[4]), benchkit.Ms(r.Other.ToRunning),
			benchkit.Ms(r.Own.Segments[0]), benchkit.Ms(r.Own.Segments[4]), benchkit.Ms(r.Own.ToRunning), benchkit.Ms(r.AllRunning), r.MaxWaiting)
	}
	if len(ns.Rounds) == 0 {
		fmt.Fprintln(w)
		return
	}
	others, owns := ns.others(), ns.owns()
	cells := func(ps []benchkit.Probe) []string {
		var out []string
		for _, st := range pgloopStages {
			out = append(out, benchkit.Ms(segmentMedian(ps, st.segment)).String())
		}
		return append(out, benchkit.Ms(idleMedian(ps)).String())
	}
	ratios := func(ps []benchkit.Probe) []string {
		var out []string
		for _, st := range pgloopStages {
			out = append(out, fmt.Sprintf("%.2f", benchkit.Ratio(segmentMedian(ps, st.segment), segmentMedian(ns.Idle, st.segment))))
		}
		return append(out, fmt.Sprintf("%.2f", benchkit.Ratio(idleMedian(ps), idleMedian(ns.Idle))))
	}
	fmt.Fprintf(w, "| median | | %s | %s | | |\n", strings.Join(cells(others), " | "), strings.Join(cells(owns), " | "))
	fmt.Fprintf(w, "| × idle | | %s | %s | | |\n\n", strings.Join(ratios(others), " | "), strings.Join(ratios(owns), " | "))
}
