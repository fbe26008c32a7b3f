package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Both kinds of dropped Events are served from the start; each drop and
// write counts once.
func TestEvents(t *testing.T) {
	m := New()
	want := func(dropped string, written float64) {
		t.Helper()
		if err := testutil.CollectAndCompare(m.events.dropped, strings.NewReader(
			"# HELP pgloop_events_dropped_total "+descEventsDropped.Help+"\n# TYPE pgloop_events_dropped_total counter\n"+dropped)); err != nil {
			t.Error(err)
		}
		if got := testutil.ToFloat64(m.events.written); got != written {
			t.Errorf("written %v, want %v", got, written)
		}
	}
	want("pgloop_events_dropped_total{kind=\"other\"} 0\npgloop_events_dropped_total{kind=\"transition\"} 0\n", 0)
	m.EventDropped(true)
	m.EventDropped(false)
	m.EventDropped(false)
	m.EventWritten()
	want("pgloop_events_dropped_total{kind=\"other\"} 2\npgloop_events_dropped_total{kind=\"transition\"} 1\n", 1)
}
