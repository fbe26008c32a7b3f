package scale

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgloop/pgloop/test/bench/benchkit"
)

func TestRequestsOf(t *testing.T) {
	before := benchkit.Samples{
		`pgloop_api_requests_total{code="200",resource="postgresqls/status",verb="update"}`: 4,
		`pgloop_api_requests_total{code="200",resource="pods",verb="list"}`:                 1,
	}
	after := benchkit.Samples{
		`pgloop_api_requests_total{code="200",resource="postgresqls/status",verb="update"}`: 7,
		`pgloop_api_requests_total{code="409",resource="postgresqls/status",verb="update"}`: 1,
		`pgloop_api_requests_total{code="200",resource="pods",verb="list"}`:                 1,
		`pgloop_api_requests_total{code="201",resource="secrets",verb="create"}`:            2,
		`pgloop_api_requests_total{code="409",resource="roles",verb="create"}`:              1,
		`pgloop_api_requests_total{code="201",resource="events",verb="create"}`:             2,
		`pgloop_api_requests_total{code="200",resource="pods",verb="watch"}`:                3,
		`pgloop_loop_inbox_depth`: 0,
	}
	r := RequestsOf(benchkit.Delta(before, after))
	if got, want := r.String(), "2 create events, 1 create roles (409), 2 create secrets, 3 update postgresqls/status, 1 update postgresqls/status (409), 3 watch pods"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	w := r.Writes()
	if got := w.Total(true); got != 9 {
		t.Errorf("writes with events = %d, want 9", got)
	}
	if got := w.Total(false); got != 7 {
		t.Errorf("writes without events = %d, want 7", got)
	}
	if got := (Requests{}).String(); got != "none" {
		t.Errorf("no request = %q", got)
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(*Config)
		wantErr string
	}{
		{name: "defaults", change: func(*Config) {}},
		{name: "fairness alone", change: func(c *Config) { c.Phases = []string{PhaseFairness}; c.Ns = nil }},
		{name: "unknown phase", change: func(c *Config) { c.Phases = []string{"burst", "bursts"} }, wantErr: `unknown phase "bursts"`},
		{name: "idle without burst", change: func(c *Config) { c.Phases = []string{PhaseIdle} }, wantErr: "need the burst phase"},
		{name: "no N", change: func(c *Config) { c.Ns = nil }, wantErr: "at least 1"},
		{name: "objects without N", change: func(c *Config) { c.Phases = []string{PhaseObjects}; c.Ns = nil }, wantErr: "at least 1"},
		{name: "no busy cluster", change: func(c *Config) { c.Busy = 0 }, wantErr: "at least 1 busy"},
		{name: "no phase", change: func(c *Config) { c.Phases = nil }, wantErr: "no phase"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.change(&cfg)
			err := cfg.Check()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Check() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestNodesFor(t *testing.T) {
	for _, tc := range []struct{ pods, per, want int }{
		{1, 110, 1}, {100, 110, 1}, {101, 110, 2}, {1006, 110, 10}, {5006, 110, 46},
	} {
		if got := nodesFor(tc.pods, tc.per); got != tc.want {
			t.Errorf("nodesFor(%d, %d) = %d, want %d", tc.pods, tc.per, got, tc.want)
		}
	}
}

func TestCreateAll(t *testing.T) {
	var done atomic.Int64
	if err := createAll(context.Background(), 100, 8, func(context.Context, int) error { done.Add(1); return nil }); err != nil || done.Load() != 100 {
		t.Fatalf("createAll = %v after %d creates, want nil after 100", err, done.Load())
	}
	// The first error stops the workers and is returned.
	boom := errors.New("boom")
	done.Store(0)
	err := createAll(context.Background(), 1000, 4, func(_ context.Context, i int) error {
		done.Add(1)
		if i == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || done.Load() >= 1000 {
		t.Errorf("createAll = %v after %d creates, want boom before all 1000", err, done.Load())
	}
}

// probe is a probe of create → Running d, its five segments equal.
func probe(d time.Duration) benchkit.Probe {
	return benchkit.Probe{Name: "p", ToRunning: d, Segments: [5]time.Duration{d / 5, d / 5, d / 5, d / 5, d / 5}}
}

// result is a complete run of two values of N: the first meets every goal,
// the second misses them all.
func result() *Result {
	cfg := DefaultConfig()
	cfg.Ns = []int{1000, 5000}
	// The namespaces phase has tests of its own (namespaces_test.go).
	cfg.Phases = slices.DeleteFunc(cfg.Phases, func(p string) bool { return p == PhaseNamespaces })
	idle := []benchkit.Probe{probe(400 * time.Millisecond), probe(500 * time.Millisecond), probe(600 * time.Millisecond)}
	create := Requests{{"create", "secrets", ""}: 2, {"create", "statefulsets", ""}: 1, {"update", "postgresqls/status", ""}: 3, {"create", "events", ""}: 2}
	good := &Row{N: 1000, Nodes: 10, Plane: 50 * time.Second, PlaneCreated: 5 * time.Second, RTT: 10 * time.Millisecond,
		Idle: idle, CreateRequests: []Requests{create, create, create},
		Burst: &Burst{Created: 10 * time.Second, AllRunning: 75 * time.Second, LagP99: 0.02, MaxInbox: 40,
			Transitions: 3000, EventsWritten: 2500, EventsDropped: map[string]int{"other": 500},
			Requests: Requests{{"create", "secrets", ""}: 2000, {"update", "postgresqls/status", ""}: 3000},
			OneMore:  []time.Duration{500 * time.Millisecond, 540 * time.Millisecond, 9 * time.Second}},
		ObjectsBaseline: &ObjectsBaseline{Created: 8 * time.Second, AllRunning: 65 * time.Second,
			Requests: Requests{{"create", "secrets", ""}: 2000, {"update", "postgresqls/status", ""}: 3000, {"create", "events", ""}: 2000}},
		OneMore: ptr(probe(540 * time.Millisecond)),
		Memory0: Memory{RSS: 80 << 20, Heap: 8 << 20}, MemoryN: Memory{RSS: 180 << 20, Heap: 58 << 20}, Clusters: 1000,
		IdleWindow: &Window{Took: 10 * time.Minute, Requests: Requests{{"watch", "pods", ""}: 2}, Events: LoopEvents{"timerFired resync": 2}, CPU: 600 * time.Millisecond},
		Restart:    &Restart{Ready: 3 * time.Second, Restored: 12 * time.Second, Clusters: 1000, Timers: 1000, Window: time.Minute, Requests: Requests{{"list", "pods", ""}: 1}},
	}
	bad := *good
	bad.N = 5000
	many := Requests{{"create", "secrets", ""}: 10, {"update", "postgresqls/status", ""}: 10}
	bad.CreateRequests = []Requests{create, many}
	bad.OneMore = ptr(probe(72 * time.Second))
	bad.ObjectsBaseline = &ObjectsBaseline{Created: 8 * time.Second, AllRunning: 50 * time.Second}
	// The plane alone makes one more bare StatefulSet wait 1m20s.
	bad.PlaneIdle = []time.Duration{200 * time.Millisecond, 250 * time.Millisecond, 300 * time.Millisecond}
	bad.PlaneOneMore = 80*time.Second + 250*time.Millisecond
	bad.IdleWindow = &Window{Took: 10 * time.Minute, Requests: Requests{{"update", "postgresqls/status", ""}: 3}}
	bad.Restart = &Restart{Ready: 5 * time.Second, Restored: 45 * time.Second, Window: time.Minute,
		Requests: Requests{{"create", "roles", "409"}: 19, {"patch", "roles", ""}: 19}}
	return &Result{Config: cfg, Start: time.Unix(0, 0), End: time.Unix(3600, 0), Nproc: 2, MemTotal: "7.8 GiB", Revision: "abc",
		GoVersion: "go1.26.8", OperatorFlags: append(operatorFlags(), "--kube-qps=50"), KubeFlags: "--kube-qps=50 --kube-burst=100",
		Objects: map[string]int{"serviceaccounts": 1, "roles": 1, "rolebindings": 1, "secrets": 2, "services": 3, "poddisruptionbudgets": 1, "statefulsets": 1},
		Rows:    []*Row{good, &bad},
		Fairness: &Fairness{K: 1000, Idle: idle, RTT: 10 * time.Millisecond, Burst: time.Minute, Image: "img-rollout", Ready: time.Second,
			During: probe(700 * time.Millisecond), Rollout: 0, Left: 3,
			Rolling: []benchkit.Probe{probe(520 * time.Millisecond), probe(540 * time.Millisecond), probe(560 * time.Millisecond)}, RollingLeft: 900}}
}

func TestVerdicts(t *testing.T) {
	r := result()
	var got []string
	for _, v := range r.Verdicts() {
		got = append(got, v.String())
	}
	want := []string{
		"PASS: N=1000: writes to create one cluster (idle operator, the most of 3): 6, Events apart (2 Events); beyond one write of each of its 10 objects and of its own postgresql, and 3 status writes: none; goal none",
		"PASS: N=1000: writes in 10m0s idle: 0 (none); goal 0",
		"INFO: N=1000: operator RSS with 1000 clusters Running: 180.0 MiB; at its per-cluster figure 10000 clusters would take 1132 MB (goal 500 MB, judged at N = 10000)",
		"PASS: N=1000: restart until every machine is back: 12s; goal at most 30s",
		"PASS: N=1000: writes of the restart (its first 1m0s after ready): 0 (none); goal 0",
		"PASS: N=1000: one more cluster after the burst: 540ms, 1.08 × its idle median 500ms; goal at most 1.10 × idle + one API round trip (10ms) = 560ms",
		"INFO: N=1000: pgloop's share of the one more (create → StatefulSet, master label → Running): 216ms, 1.08 × its idle median 200ms; the plane's and the labeller's 324ms",
		"PASS: N=1000: all N Running in 1m15s, 1.15 × the objects baseline (1m5s: a bare client writing what pgloop writes for N clusters, 32 workers, no operator); goal at most 1.20 × that = 1m18s",
		"INFO: N=1000: all N Running in 1m15s, 1.50 × the plane's own time for N bare StatefulSets (50s)",
		"INFO: N=1000: all N Running in 1m15s, 0.75 × what the client's rate limit lets their requests through in: N × 5.0 requests / 50 per second = 1m40s",
		"FAIL: N=5000: writes to create one cluster (idle operator, the most of 2): 20, Events apart (2 Events); beyond one write of each of its 10 objects and of its own postgresql, and 3 status writes: 7 write postgresqls/status, 8 write secrets; goal none",
		"FAIL: N=5000: writes in 10m0s idle: 3 (3 update postgresqls/status); goal 0",
		"INFO: N=5000: operator RSS with 1000 clusters Running: 180.0 MiB; at its per-cluster figure 10000 clusters would take 1132 MB (goal 500 MB, judged at N = 10000)",
		"FAIL: N=5000: restart until every machine is back: 45s; goal at most 30s",
		"FAIL: N=5000: writes of the restart (its first 1m0s after ready): 38 (19 create roles (409), 19 patch roles); goal 0",
		"PASS: N=5000: one more cluster after the burst: 1m12s, 144.00 × its idle median 500ms; goal at most 1.10 × idle + one API round trip (10ms) + what the plane alone adds to one more bare StatefulSet after its N (1m20s: 1m20.3s against 250ms idle) = 1m20.6s",
		"INFO: N=5000: pgloop's share of the one more (create → StatefulSet, master label → Running): 28.8s, 144.00 × its idle median 200ms; the plane's and the labeller's 43.2s",
		"FAIL: N=5000: all N Running in 1m15s, 1.50 × the objects baseline (50s: a bare client writing what pgloop writes for N clusters, 32 workers, no operator); goal at most 1.20 × that = 1m0s",
		"INFO: N=5000: all N Running in 1m15s, 1.50 × the plane's own time for N bare StatefulSets (50s)",
		"INFO: N=5000: all N Running in 1m15s, 0.75 × what the client's rate limit lets their requests through in: N × 1.0 requests / 50 per second = 1m40s",
		"PASS: K=1000: pgloop's share (create → StatefulSet, master label → Running) of one more cluster while 1000 clusters roll out, median of 3 created one after another (900 of the K still rolling after the last): 216ms, 1.08 × its idle median 200ms; goal at most 1.50 × idle = 300ms; the plane's and the labeller's share beside it (not judged): 324ms, idle 300ms",
		"INFO: K=1000: the same, create → Running, median: 540ms, 1.08 × its idle median 500ms, within issue 14's goal of 1.10 × idle + one API round trip (10ms) = 560ms",
		"INFO: K=1000: one more cluster created as soon as the restarted operator was ready, in its first second of work (lists, 1000 machines resumed): 700ms, 1.40 × its idle median 500ms, beyond the rollout's goal's terms (1.10 × idle + one API round trip (10ms) = 560ms); pgloop's share 280ms, 1.40 × its idle median 200ms",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("verdicts:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r.Pass() {
		t.Error("Pass with failed goals")
	}
	r.Rows = r.Rows[:1]
	if !r.Pass() {
		t.Error("no Pass with every goal met")
	}
	fair := r.Fairness
	slow := *fair
	slow.Rolling = []benchkit.Probe{probe(800 * time.Millisecond)}
	r.Fairness = &slow
	if r.Pass() {
		t.Error("Pass with pgloop's share of the one more during the rollout at 1.6 × idle")
	}
	r.Fairness = fair
	if r.Complete() {
		t.Error("Complete with one of two values of N")
	}
	r.Config.Ns = r.Config.Ns[:1]
	if !r.Complete() {
		t.Error("not Complete")
	}
	r.Rows[0].Restart = nil
	if r.Complete() {
		t.Error("Complete without the restart phase's figures")
	}
	r.Rows[0].Restart, r.Rows[0].ObjectsBaseline = &Restart{}, nil
	if r.Complete() {
		t.Error("Complete without the objects baseline")
	}
}

func TestSectionRenders(t *testing.T) {
	r := result()
	if s := r.Section(); strings.Contains(s, "INCOMPLETE") {
		t.Errorf("a complete run's section says INCOMPLETE:\n%s", s)
	}
	// A row whose later phases were not made shows "—" in their cells.
	r.Rows = append(r.Rows, &Row{N: 10000, Plane: time.Minute})
	s := r.Section()
	for _, want := range []string{
		doc.Begin("N = 1000, 5000; operator: defaults"),
		"| 1000 | 102.4 KiB | 51.2 KiB | 6 (+2 Events) | 0 in 10m0s | 12s | 0 | 1m15s | 50s | 1.50 | 1m5s | 1.15 | 540ms (500ms) | 1.08 | 20ms | 40 |",
		"| 10000 | — | — | — | — | — | — | — | 1m0s | — | — | — | — | — | — | — |",
		"- Objects baseline (a plane of its own, the labeller, no operator): 1000 clusters created by 32 workers of a bare client writing what pgloop writes for each (its state machine's statuses, its builders' objects, its recorder's Events), written up to their objects in 8s, all Running written 1m5s after the first Create; its writes: 7000, 7.0 per cluster (2000 create events, 2000 create secrets, 3000 update postgresqls/status).",
		"- **FAIL: N=5000: restart until every machine is back: 45s; goal at most 30s**",
		"A bare StatefulSet's create → pod Ready: 250ms on the idle plane (median of 3, 200ms to 300ms), 1m20.3s for one more created right after the N's Creates returned: the plane alone adds 1m20s.",
		"- One more: 3 clusters created at once right after the N's Creates returned, create → Running median 540ms (500ms to 9s); the median one's segments",
		"The rollout did not end within 10m0s: 3 of the 1000 clusters not Running with the new image",
		"Then 3 more one after another while the 1000 rolled (900 still rolling after the last): 520ms, 540ms, 560ms, median 540ms (pgloop's share 216ms), 1.08 × the idle median",
		"`--kube-qps=50 --kube-burst=100`", "on 2 CPUs and 7.8 GiB of memory",
		"- Kubernetes Events during the burst: 3000 transitions of the state machines; the recorder wrote 2500 Events and dropped 0 of transitions and 500 others.",
		"The loop's events: 2 timerFired resync; the operator's CPU 600ms (0.10 % of a core).",
		"volumes by the plane's provisioner (test/provisioner) with 16 workers.",
		"- **INCOMPLETE**: the run stopped before measuring everything.",
		doc.End(),
	} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
	if got := seconds(math.NaN()); got != "n/a" {
		t.Errorf("seconds(NaN) = %q", got)
	}
}

// TestKeyNamesVolumes: a run whose volumes are not the default's (the
// provisioner, 16 workers) has a section of its own, and says so.
func TestKeyNamesVolumes(t *testing.T) {
	for _, tc := range []struct {
		workers      int
		key, section string
	}{
		{16, "N = 1000, 5000; operator: defaults", "volumes by the plane's provisioner (test/provisioner) with 16 workers."},
		{0, "N = 1000, 5000; operator: defaults; volumes: kwok's stages", "volumes by kwok's volume stages (played one at a time)."},
		{4, "N = 1000, 5000; operator: defaults; volumes: provisioner, 4 workers", "volumes by the plane's provisioner (test/provisioner) with 4 workers."},
	} {
		t.Run(fmt.Sprint(tc.workers), func(t *testing.T) {
			r := result()
			r.Config.VolumeWorkers = tc.workers
			if got := r.Key(); got != tc.key {
				t.Errorf("Key() = %q, want %q", got, tc.key)
			}
			if s := r.Section(); !strings.Contains(s, tc.section) {
				t.Errorf("section lacks %q:\n%s", tc.section, s)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// The fairness phase judges pgloop's share against its idle share; issue
// 14's goal on the whole create → Running, which allows what the plane
// alone adds during the rollout when it was measured, is reported beside.
func TestFairnessPlaneExtra(t *testing.T) {
	r := result()
	r.Rows = nil
	f := r.Fairness
	f.Rolling = []benchkit.Probe{probe(800 * time.Millisecond), probe(900 * time.Millisecond), probe(1000 * time.Millisecond)}
	verdicts := func() []string {
		v := r.Verdicts()
		if len(v) < 2 {
			t.Fatalf("verdicts %v, want at least 2", v)
		}
		return []string{v[0].String(), v[1].String()}
	}
	want := []string{
		"FAIL: K=1000: pgloop's share (create → StatefulSet, master label → Running) of one more cluster while 1000 clusters roll out, median of 3 created one after another (900 of the K still rolling after the last): 360ms, 1.80 × its idle median 200ms; goal at most 1.50 × idle = 300ms; the plane's and the labeller's share beside it (not judged): 540ms, idle 300ms",
		"INFO: K=1000: the same, create → Running, median: 900ms, 1.80 × its idle median 500ms, beyond issue 14's goal of 1.10 × idle + one API round trip (10ms) = 560ms",
	}
	if got := verdicts(); !slices.Equal(got, want) {
		t.Errorf("without the plane's part:\n got %q\nwant %q", got, want)
	}
	f.PlaneIdle = []time.Duration{100 * time.Millisecond, 120 * time.Millisecond, 140 * time.Millisecond}
	f.PlaneRolling = []time.Duration{500 * time.Millisecond, 520 * time.Millisecond, 900 * time.Millisecond}
	want[1] = "INFO: K=1000: the same, create → Running, median: 900ms, 1.80 × its idle median 500ms, within issue 14's goal of 1.10 × idle + one API round trip (10ms) + what the plane alone adds to one more bare StatefulSet during the rollout (median) (400ms: 520ms against 120ms idle) = 960ms"
	if got := verdicts(); !slices.Equal(got, want) {
		t.Errorf("with the plane's part:\n got %q\nwant %q", got, want)
	}
}

// The loop's events are read by kind and name, most first; BusyEvents
// leaves out resyncs and plans' results.
func TestLoopEventsOf(t *testing.T) {
	before := benchkit.Samples{
		`pgloop_loop_events_total{kind="timerFired",name="resync"}`: 10,
		`pgloop_loop_events_total{kind="planDone",name=""}`:         10,
		`pgloop_loop_events_dispatched_total`:                       20,
	}
	after := benchkit.Samples{
		`pgloop_loop_events_total{kind="timerFired",name="resync"}`: 40,
		`pgloop_loop_events_total{kind="planDone",name=""}`:         40,
		`pgloop_loop_events_total{kind="signal",name="pods"}`:       2,
		`pgloop_loop_events_total{kind="timerFired",name="retry"}`:  0,
		`pgloop_loop_events_dispatched_total`:                       82,
	}
	d := benchkit.Delta(before, after)
	if got, want := LoopEventsOf(d).String(), "30 planDone, 30 timerFired resync, 2 signal pods"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if got := benchkit.BusyEvents(d); got != 2 {
		t.Errorf("busy events = %v, want 2 (the pods signals)", got)
	}
	if got := (LoopEvents{}).String(); got != "none" {
		t.Errorf("no event = %q", got)
	}
}

func TestRSSVerdict(t *testing.T) {
	cfg := DefaultConfig()
	for _, c := range []struct {
		name string
		row  Row
		want string
		ok   bool
	}{
		{name: "at the goal's N, within", ok: true,
			row:  Row{N: 10000, Clusters: 10006, Memory0: Memory{RSS: 40_000_000}, MemoryN: Memory{RSS: 450_000_000}},
			want: "PASS: N=10000: operator RSS with 10006 clusters Running: 429.2 MiB (450 MB); goal at most 500 MB with 10000"},
		{name: "at the goal's N, beyond", ok: true,
			row:  Row{N: 10000, Clusters: 10006, Memory0: Memory{RSS: 40_000_000}, MemoryN: Memory{RSS: 600_000_000}},
			want: "FAIL: N=10000: operator RSS with 10006 clusters Running: 572.2 MiB (600 MB); goal at most 500 MB with 10000"},
		{name: "below it, projected", ok: true,
			row:  Row{N: 1000, Clusters: 1000, Memory0: Memory{RSS: 40_000_000}, MemoryN: Memory{RSS: 140_000_000}},
			want: "INFO: N=1000: operator RSS with 1000 clusters Running: 133.5 MiB; at its per-cluster figure 10000 clusters would take 1040 MB (goal 500 MB, judged at N = 10000)"},
		{name: "not measured", row: Row{N: 10000}},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, ok := c.row.rssVerdict(cfg)
			if ok != c.ok || (ok && v.String() != c.want) {
				t.Errorf("rssVerdict = %q, %v\nwant       %q, %v", v.String(), ok, c.want, c.ok)
			}
		})
	}
}

// TestIntoDegraded checks that the burst's count of clusters going Degraded
// leaves out the retries of clusters already Degraded (the N = 10,000 run
// of 2026-12-04 reported 6,928, of which 700 from Running).
func TestIntoDegraded(t *testing.T) {
	d := benchkit.Samples{
		`pgloop_transitions_total{event="effectsFailed",from="Running",to="Degraded"}`:  700,
		`pgloop_transitions_total{event="timeout",from="Creating",to="Degraded"}`:       3,
		`pgloop_transitions_total{event="retry",from="Degraded",to="Degraded"}`:         4905,
		`pgloop_transitions_total{event="effectsFailed",from="Degraded",to="Degraded"}`: 350,
		`pgloop_transitions_total{event="podsReady",from="Degraded",to="Running"}`:      1,
		`pgloop_transitions_total{event="podsReady",from="Creating",to="Running"}`:      10006,
	}
	if got := intoDegraded(d); got != 703 {
		t.Errorf("intoDegraded = %d, want 703", got)
	}
}
