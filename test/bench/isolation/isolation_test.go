package isolation

import (
	"math"
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
	if got := stepCounts(d); got != "2 ensure (mean 500ms)" {
		t.Errorf("stepCounts = %q", got)
	}
	if _, err := ParseMetrics(strings.NewReader("novalue\n")); err == nil {
		t.Error("a line without a value parsed")
	}
}

func TestReplaceSection(t *testing.T) {
	sec := func(key, body string) string {
		return sectionBegin + `"` + key + `" -->` + "\n" + body + "\n" + sectionEnd + "\n"
	}
	doc := "# Title\n\nintro\n\n" + newRunsMark + "\n\nanalysis\n"
	doc = replaceSection(doc, "defaults", sec("defaults", "one"))
	doc = replaceSection(doc, "--kube-qps=200", sec("--kube-qps=200", "two"))
	doc = replaceSection(doc, "defaults", sec("defaults", "three"))
	want := "# Title\n\nintro\n\n" + sec("defaults", "three") + "\n" + sec("--kube-qps=200", "two") + "\n" + newRunsMark + "\n\nanalysis\n"
	if doc != want {
		t.Errorf("got\n%s\nwant\n%s", doc, want)
	}
	// Without the mark, a new section goes at the end.
	if got := replaceSection("text", "k", sec("k", "x")); got != "text\n\n"+sec("k", "x") {
		t.Errorf("got %q", got)
	}
}

func TestSectionRenders(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Stuck = []int{0, 100}
	r := &Result{Config: cfg, Start: time.Unix(0, 0), End: time.Unix(300, 0), Nproc: 2, Revision: "abc",
		OperatorFlags: []string{"--create-timeout=15s"}}
	for _, k := range cfg.Stuck {
		p := Phase{K: k, Quiet: true}
		for i := range 10 {
			d := time.Duration(1000+i+k) * time.Millisecond
			p.Clusters = append(p.Clusters, Healthy{Name: "h", ToRunning: d, ReadyToRunning: d / 10, LabelledToRunning: d / 20})
		}
		r.Phases = append(r.Phases, p)
	}
	s := r.Section()
	for _, want := range []string{`begin "defaults"`, "| 100 | 1.105s | 1.109s | 1.10 |", "PASS: ", sectionEnd} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
	r.Phases[1].Clusters[4].ToRunning = 2 * time.Second
	r.Phases[1].Clusters[5].ToRunning = 2 * time.Second
	if r.Pass() || !strings.HasPrefix(r.Verdict(), "FAIL: ") {
		t.Errorf("a ratio of %.2f passed: %s", r.Ratio(), r.Verdict())
	}
}
