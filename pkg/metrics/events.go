package metrics

import "github.com/prometheus/client_golang/prometheus"

// descEventsDropped and descEventsWritten count the Kubernetes Events
// pgloop's recorder (pkg/events) wrote and the ones it dropped: during a
// burst it keeps the transitions' Events and drops the others first.
var (
	descEventsDropped = Desc{"pgloop_events_dropped_total", "counter", []string{"kind"},
		"Kubernetes Events recorded but never written, by kind: transition (a cluster's change of state, kept in preference) or other. " +
			"They are dropped when a queue is at its bound during a burst (16 per object, 10,000 in all), when their write failed after its retries, or when the operator stopped before it could write them."}
	descEventsWritten = Desc{"pgloop_events_written_total", "counter", nil,
		"Kubernetes Events written: created, or a repeat patched onto the same Event's count."}
)

var eventDescs = []Desc{descEventsDropped, descEventsWritten}

// eventCounters are the Event recorder's counters.
type eventCounters struct {
	dropped           *prometheus.CounterVec
	droppedTransition prometheus.Counter
	droppedOther      prometheus.Counter
	written           prometheus.Counter
}

func newEventCounters() eventCounters {
	c := eventCounters{
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts(opts(descEventsDropped)), descEventsDropped.Labels),
		written: prometheus.NewCounter(prometheus.CounterOpts(opts(descEventsWritten))),
	}
	// Both kinds are served from the start, at 0.
	c.droppedTransition = c.dropped.WithLabelValues("transition")
	c.droppedOther = c.dropped.WithLabelValues("other")
	return c
}

// EventDropped counts an Event the recorder dropped (pkg/events'
// Options.Dropped).
func (m *Metrics) EventDropped(transition bool) {
	if transition {
		m.events.droppedTransition.Inc()
	} else {
		m.events.droppedOther.Inc()
	}
}

// EventWritten counts an Event the recorder wrote (pkg/events'
// Options.Written).
func (m *Metrics) EventWritten() { m.events.written.Inc() }
