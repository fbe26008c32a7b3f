package scale

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pgloop/pgloop/test/bench/benchkit"
)

// apiMetric counts pgloop's requests to the Kubernetes API.
const apiMetric = "pgloop_api_requests_total"

// writeVerbs are the verbs of apiMetric that change something.
var writeVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}

// eventsResource is where pgloop records Kubernetes Events, which the
// verdicts count apart: a note for the user, not the cluster's state.
const eventsResource = "events"

// Call is one kind of request: a verb on a resource, and its answer's
// HTTP status code when it was not a success (2xx), e.g. a create
// refused with 409 because the object exists.
type Call struct{ Verb, Resource, Code string }

// Requests count pgloop's requests by verb, resource and failure.
type Requests map[Call]float64

// RequestsOf reads the requests of a scrape (or of a Delta of two).
func RequestsOf(s benchkit.Samples) Requests {
	return countSeries(s, apiMetric, func(l map[string]string) Call {
		code := l["code"]
		if strings.HasPrefix(code, "2") {
			code = ""
		}
		return Call{l["verb"], l["resource"], code}
	})
}

// countSeries adds the values of metric's series by key of their labels,
// leaving out those at 0.
func countSeries[K comparable](s benchkit.Samples, metric string, key func(labels map[string]string) K) map[K]float64 {
	out := map[K]float64{}
	for _, series := range s.Series(metric) {
		if series.Value != 0 {
			out[key(series.Labels)] += series.Value
		}
	}
	return out
}

// Writes are the requests that change something.
func (r Requests) Writes() Requests {
	out := Requests{}
	for c, n := range r {
		if slices.Contains(writeVerbs, c.Verb) {
			out[c] = n
		}
	}
	return out
}

// Excess are the writes of one create beyond one write of each object
// (objects, by resource; the cluster's own postgresql counts as one, the
// finalizer's write) and statusWrites writes of its status; Events apart.
// A refused write (a 409) is a write too.
func (r Requests) Excess(objects map[string]int, statusWrites int) Requests {
	byResource := map[string]float64{}
	for c, n := range r.Writes() {
		byResource[c.Resource] += n
	}
	out := Requests{}
	for res, n := range byResource {
		allowed := float64(objects[res])
		switch res {
		case eventsResource:
			continue
		case clusterResource:
			allowed = 1
		case clusterResource + "/status":
			allowed = float64(statusWrites)
		}
		if n > allowed {
			out[Call{Verb: "write", Resource: res}] = n - allowed
		}
	}
	return out
}

// clusterResource is the resource of pgloop's clusters.
const clusterResource = "postgresqls"

// total adds up counts by resource.
func total(byResource map[string]int) int {
	n := 0
	for _, k := range byResource {
		n += k
	}
	return n
}

// Total adds the requests up; without events, leaving out those on
// eventsResource.
func (r Requests) Total(withEvents bool) int {
	total := 0.0
	for c, n := range r {
		if withEvents || c.Resource != eventsResource {
			total += n
		}
	}
	return int(total)
}

// String renders the requests sorted by verb, resource and code, e.g. "2
// create secrets, 1 create roles (409), 3 update postgresqls/status", or
// "none".
func (r Requests) String() string {
	calls := make([]Call, 0, len(r))
	for c := range r {
		calls = append(calls, c)
	}
	slices.SortFunc(calls, func(a, b Call) int {
		if c := strings.Compare(a.Verb, b.Verb); c != 0 {
			return c
		}
		if c := strings.Compare(a.Resource, b.Resource); c != 0 {
			return c
		}
		return strings.Compare(a.Code, b.Code)
	})
	parts := make([]string, 0, len(calls))
	for _, c := range calls {
		part := fmt.Sprintf("%.0f %s %s", r[c], c.Verb, c.Resource)
		if c.Code != "" {
			part += " (" + c.Code + ")"
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// loopEventsMetric counts the events the loop handed to the state
// machines, by kind and name.
const loopEventsMetric = "pgloop_loop_events_total"

// LoopEvents count the loop's events by kind and name, e.g.
// "timerFired resync" or "signal pods".
type LoopEvents map[string]float64

// LoopEventsOf reads the loop's events of a scrape (or of a Delta of two).
func LoopEventsOf(s benchkit.Samples) LoopEvents {
	return countSeries(s, loopEventsMetric, func(l map[string]string) string {
		return strings.TrimSpace(l["kind"] + " " + l["name"])
	})
}

// String renders the events most first, e.g. "1006 timerFired resync,
// 1006 planDone", or "none".
func (e LoopEvents) String() string {
	keys := make([]string, 0, len(e))
	for k := range e {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if e[a] != e[b] {
			return int(e[b] - e[a])
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%.0f %s", e[k], k))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
