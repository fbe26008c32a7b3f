package benchkit

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		in          []time.Duration
		median, p99 time.Duration
	}{
		{nil, 0, 0},
		{ms(5), 5 * time.Millisecond, 5 * time.Millisecond},
		{ms(3, 1, 2), 2 * time.Millisecond, 3 * time.Millisecond},
		// Even count: the mean of the middle two; p99 of ten is the max.
		{ms(10, 1, 2, 3, 4, 5, 6, 7, 8, 9), 5500 * time.Microsecond, 10 * time.Millisecond},
	} {
		got := Summarize(tc.in)
		if got.Median != tc.median || got.P99 != tc.p99 {
			t.Errorf("Summarize(%v) = median %v p99 %v, want %v %v", tc.in, got.Median, got.P99, tc.median, tc.p99)
		}
	}
	// With 200 values 1..200 ms, the nearest-rank p99 is the 198th.
	var many []time.Duration
	for i := 200; i >= 1; i-- {
		many = append(many, time.Duration(i)*time.Millisecond)
	}
	if got := Summarize(many).P99; got != 198*time.Millisecond {
		t.Errorf("p99 of 1..200ms = %v, want 198ms", got)
	}
	if !math.IsNaN(Ratio(time.Second, 0)) || Ratio(3*time.Second, 2*time.Second) != 1.5 {
		t.Error("Ratio")
	}
}

func TestParseMetrics(t *testing.T) {
	const text = `# HELP pgloop_loop_inbox_depth Events waiting in the loop's inbox.
# TYPE pgloop_loop_inbox_depth gauge
pgloop_loop_inbox_depth 0
pgloop_effect_step_duration_seconds_sum{step="ensure"} 1.5
pgloop_effect_step_duration_seconds_count{step="ensure"} 3
pgloop_effect_step_duration_seconds_count{step="status"} 4
pgloop_clusters{state="Running"} 2
go_gc_duration_seconds{quantile="0.5"} 1.2e-05
`
	s, err := ParseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Sum("pgloop_effect_step_duration_seconds_count"); got != 7 {
		t.Errorf("sum of counts = %v, want 7", got)
	}
	if got := s.Sum("pgloop_effect_step_duration_seconds_count", `step="ensure"`); got != 3 {
		t.Errorf("ensure count = %v, want 3", got)
	}
	if got := s.Get(`pgloop_clusters{state="Running"}`); got != 2 {
		t.Errorf("Running = %v, want 2", got)
	}
	if got := s.LabelValues("pgloop_effect_step_duration_seconds_count", "step"); strings.Join(got, ",") != "ensure,status" {
		t.Errorf("steps = %v", got)
	}
	later := Samples{`pgloop_effect_step_duration_seconds_count{step="ensure"}`: 5, `pgloop_effect_step_duration_seconds_sum{step="ensure"}`: 2.5}
	d := Delta(s, later)
	if got := StepCounts(d); got != "2 ensure (mean 500ms)" {
		t.Errorf("stepCounts = %q", got)
	}
	if _, err := ParseMetrics(strings.NewReader("novalue\n")); err == nil {
		t.Error("a line without a value parsed")
	}
}

func TestDocReplace(t *testing.T) {
	d := Doc{Name: "bench-x"}
	sec := func(key, body string) string { return d.Begin(key) + body + "\n" + d.End() + "\n" }
	doc := "# Title\n\nintro\n\n" + d.NewRunsMark() + "\n\nanalysis\n"
	doc = d.Replace(doc, "defaults", sec("defaults", "one"))
	doc = d.Replace(doc, "--kube-qps=200", sec("--kube-qps=200", "two"))
	doc = d.Replace(doc, "defaults", sec("defaults", "three"))
	want := "# Title\n\nintro\n\n" + sec("defaults", "three") + "\n" + sec("--kube-qps=200", "two") + "\n" + d.NewRunsMark() + "\n\nanalysis\n"
	if doc != want {
		t.Errorf("got\n%s\nwant\n%s", doc, want)
	}
	// Without the mark, a new section goes at the end.
	if got := d.Replace("text", "k", sec("k", "x")); got != "text\n\n"+sec("k", "x") {
		t.Errorf("got %q", got)
	}
	if d.Begin("k") != "<!-- bench-x: begin \"k\" -->\n" || d.End() != "<!-- bench-x: end -->" {
		t.Errorf("marks %q %q", d.Begin("k"), d.End())
	}
}

func TestQuantile(t *testing.T) {
	const text = `lag_bucket{kind="signal",le="0.001"} 50
lag_bucket{kind="signal",le="0.01"} 90
lag_bucket{kind="signal",le="0.1"} 100
lag_bucket{kind="signal",le="+Inf"} 100
lag_bucket{kind="timerFired",le="0.001"} 0
lag_bucket{kind="timerFired",le="0.01"} 0
lag_bucket{kind="timerFired",le="0.1"} 0
lag_bucket{kind="timerFired",le="+Inf"} 100
lag_count{kind="signal"} 100
`
	s, err := ParseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for _, tc := range []struct {
		q      float64
		labels []string
		want   float64
	}{
		// Rank 50 of the signals is the whole first bucket: its bound.
		{0.5, []string{`kind="signal"`}, 0.001},
		// Rank 25: halfway through the first bucket, from 0.
		{0.25, []string{`kind="signal"`}, 0.0005},
		// Rank 99: 9 of the last bucket's 10, between 0.01 and 0.1.
		{0.99, []string{`kind="signal"`}, 0.01 + 0.09*0.9},
		// All in +Inf: the highest finite bound.
		{0.99, []string{`kind="timerFired"`}, 0.1},
		// Both kinds: rank 198 of 200 falls in +Inf.
		{0.99, nil, 0.1},
		// Rank 100 of 200 is the last signal, at the end of (0.01, 0.1].
		{0.5, nil, 0.1},
	} {
		if got := s.Quantile("lag", tc.q, tc.labels...); !near(got, tc.want) {
			t.Errorf("Quantile(%v, %v) = %v, want %v", tc.q, tc.labels, got, tc.want)
		}
	}
	if got := s.Quantile("none", 0.99); !math.IsNaN(got) {
		t.Errorf("Quantile of no observation = %v, want NaN", got)
	}
	// A window: the delta of two scrapes keeps the buckets that did not
	// change, at 0.
	later := Samples{}
	for k, v := range s {
		later[k] = v
	}
	later[`lag_bucket{kind="signal",le="0.1"}`] += 10
	later[`lag_bucket{kind="signal",le="+Inf"}`] += 10
	if got := Delta(s, later).Quantile("lag", 0.5, `kind="signal"`); !near(got, 0.055) {
		t.Errorf("quantile of the window = %v, want 0.055", got)
	}
}

func TestSeries(t *testing.T) {
	s := Samples{
		`api_total{code="200",resource="pods",verb="list"}`:                 3,
		`api_total{code="409",resource="postgresqls/status",verb="update"}`: 1,
		`other{a="b"}`:          7,
		`api_total{x="a\"b,c"}`: 2,
		`api_total`:             5,
	}
	got := map[string]float64{}
	for _, series := range s.Series("api_total") {
		l := series.Labels
		got[l["verb"]+" "+l["resource"]+" "+l["code"]+" "+l["x"]] = series.Value
	}
	want := map[string]float64{"list pods 200 ": 3, "update postgresqls/status 409 ": 1, `   a"b,c`: 2, "   ": 5}
	if len(got) != len(want) {
		t.Fatalf("Series = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Series[%q] = %v, want %v", k, got[k], v)
		}
	}
}

func TestHelpDefaults(t *testing.T) {
	const help = `Run the operator.

Flags:
      --in-database-timeout duration           deadline of one step of work inside a cluster (the roles and databases sync, or the configuration's apply and check), every call included (default 30s)
      --retry-base duration                    first delay before failed effects are retried; it doubles on each retry (default 2s)
      --spilo-image string                     Spilo image of clusters that set no spec.dockerImage (default "ghcr.io/zalando/spilo-17:4.0-p2")
      --sql-connect-timeout duration           deadline of a connection to PostgreSQL (dial, authentication) (default 5s)
      --workers int                            effect executor size: plans of effects running at once across all clusters (default 16)
      --workers-extra                          no default
`
	got := HelpDefaults(help, []string{"workers", "sql-connect-timeout", "in-database-timeout", "spilo-image", "kube-qps"})
	want := [][2]string{{"workers", "16"}, {"sql-connect-timeout", "5s"}, {"in-database-timeout", "30s"}, {"spilo-image", "ghcr.io/zalando/spilo-17:4.0-p2"}}
	if !slices.Equal(got, want) {
		t.Errorf("HelpDefaults = %v, want %v", got, want)
	}
	flags := []string{"--create-timeout=15s", "--workers=4", "--sql-connect-timeout=2s", "--workers=8"}
	if got, want := InEffect(flags, want[:3]), "--workers=8 --sql-connect-timeout=2s --in-database-timeout=30s"; got != want {
		t.Errorf("InEffect = %q, want %q", got, want)
	}
}

func TestParseCounts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{in: "", want: nil},
		{in: "  ", want: nil},
		{in: "0,10,100", want: []int{0, 10, 100}},
		{in: "0, 4 ,8", want: []int{0, 4, 8}},
		{in: "0,,4", bad: true},
		{in: "0,four", bad: true},
	} {
		got, err := ParseCounts(tc.in)
		if (err != nil) != tc.bad || !slices.Equal(got, tc.want) {
			t.Errorf("ParseCounts(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}
