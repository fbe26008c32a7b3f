package scale

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/pgloop/pgloop/test/bench/benchkit"
)

// nsProbe is a probe whose pgloop stages took statefulSet (create →
// StatefulSet) and running (master label → Running), the plane 300ms.
func nsProbe(statefulSet, running time.Duration) benchkit.Probe {
	ms := time.Millisecond
	return benchkit.Probe{ToRunning: statefulSet + 300*ms + running, Segments: [5]time.Duration{statefulSet, 100 * ms, 150 * ms, 50 * ms, running}}
}

// namespacesResult is a namespaces phase of three rounds whose other
// namespace's create → StatefulSet meets its goal and whose master label →
// Running misses it.
func namespacesResult() *Result {
	ms := time.Millisecond
	cfg := DefaultConfig()
	cfg.Phases = []string{PhaseNamespaces}
	cfg.NamespaceRounds = 3
	round := func(other, own benchkit.Probe) NamespaceRound {
		return NamespaceRound{Created: 2 * time.Second, AllRunning: time.Minute, Other: other, Own: own, MaxWaiting: 190}
	}
	return &Result{Config: cfg, Namespaces: &Namespaces{B: 200,
		Idle: []benchkit.Probe{nsProbe(60*ms, 30*ms), nsProbe(66*ms, 40*ms), nsProbe(70*ms, 50*ms)},
		Rounds: []NamespaceRound{
			round(nsProbe(100*ms, 50*ms), nsProbe(40*time.Second, 30*ms)),
			round(nsProbe(80*ms, 80*ms), nsProbe(50*time.Second, 40*ms)),
			round(nsProbe(90*ms, 70*ms), nsProbe(45*time.Second, 50*ms)),
		},
		Walls: []Wall{{"idle probes", 5 * time.Second}}}}
}

func TestNamespacesVerdicts(t *testing.T) {
	r := namespacesResult()
	var got []string
	for _, v := range r.Verdicts() {
		got = append(got, v.String())
	}
	want := []string{
		"PASS: B=200: a cluster of another namespace created right after a burst of 200 in one, create → StatefulSet (pgloop), median of 3 rounds: 90ms, 1.36 × its idle median 66ms; goal at most 1.50 × idle = 99ms",
		"FAIL: B=200: a cluster of another namespace created right after a burst of 200 in one, master label → Running (pgloop), median of 3 rounds: 70ms, 1.75 × its idle median 40ms; goal at most 1.50 × idle = 60ms",
		"INFO: B=200: a cluster of the burst's own namespace created with it, median of 3 rounds: create → StatefulSet 45s (681.82 × idle), master label → Running 40ms (1.00 × idle); create → Running 45.4s (the other namespace's 460ms, idle 406ms)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("verdicts:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r.Pass() {
		t.Error("Pass with the master label → Running stage beyond its goal")
	}
	// Each stage is judged on the median of the rounds: one slow round
	// does not fail it.
	r.Namespaces.Rounds[1].Other.Segments[4] = time.Second
	r.Namespaces.Rounds[2].Other.Segments[4] = 55 * time.Millisecond
	if !r.Pass() {
		t.Errorf("no Pass with both stages' medians within their goals: %v", r.Verdicts())
	}
}

func TestNamespacesComplete(t *testing.T) {
	r := namespacesResult()
	if !r.Complete() {
		t.Error("not Complete with its 3 rounds")
	}
	r.Namespaces.Rounds = r.Namespaces.Rounds[:2]
	if r.Complete() {
		t.Error("Complete with 2 of 3 rounds")
	}
	r.Namespaces = nil
	if r.Complete() {
		t.Error("Complete without the phase's figures")
	}
	if v := r.Verdicts(); len(v) != 0 {
		t.Errorf("verdicts of a phase not made: %v", v)
	}
	cfg := DefaultConfig()
	cfg.NamespaceRounds = 0
	if err := cfg.Check(); err == nil || !strings.Contains(err.Error(), "namespaces phase") {
		t.Errorf("Check() with no round = %v", err)
	}
	cfg.Phases = []string{PhaseFairness}
	if err := cfg.Check(); err != nil {
		t.Errorf("Check() without the namespaces phase = %v", err)
	}
}

func TestNamespacesDetails(t *testing.T) {
	var b bytes.Buffer
	namespacesResult().WriteDetails(&b)
	for _, want := range []string{
		"#### Namespaces, B = 200",
		"3 idle probes in the probes' namespace (create → Running median 406ms; create → StatefulSet median 66ms, master label → Running median 40ms)",
		"| 2 | 2s | 80ms | 80ms | 460ms | 50s | 40ms | 50.3s | 1m0s | 190 |",
		"| median | | 90ms | 70ms | 460ms | 45s | 40ms | 45.4s | | |",
		"| × idle | | 1.36 | 1.75 | 1.13 | 681.82 | 1.00 | 111.70 | | |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("details lack %q:\n%s", want, b.String())
		}
	}
}

func TestWorkerWaits(t *testing.T) {
	d := benchkit.Samples{
		`pgloop_loop_worker_waits_total{lane="workers"}`:        4,
		`pgloop_loop_worker_wait_seconds_total{lane="workers"}`: 1,
		`pgloop_loop_worker_waits_total{lane="hung"}`:           9,
		`pgloop_loop_worker_wait_seconds_total{lane="hung"}`:    90,
	}
	if got, want := workerWaits(d), "4 plans waited for a worker, 250ms on average"; got != want {
		t.Errorf("workerWaits = %q, want %q", got, want)
	}
	if got, want := workerWaits(benchkit.Samples{}), "no plan waited for a worker"; got != want {
		t.Errorf("workerWaits with none = %q, want %q", got, want)
	}
}
