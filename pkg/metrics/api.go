package metrics

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// descAPIRequests counts what pgloop asks of the Kubernetes API: the
// requests an idle cluster, a new one or a restart costs (docs/scale.md).
var descAPIRequests = Desc{"pgloop_api_requests_total", "counter", []string{"verb", "resource", "code"},
	"Requests pgloop's Kubernetes client sent, by verb (get, list, watch, create, update, patch, delete, deletecollection), resource " +
		"(with its subresource: postgresqls/status; nonresource for discovery) and HTTP status code (error when no response came). " +
		"create, update, patch, delete and deletecollection are the writes."}

// descHeld and descHeldSeconds count the requests of background work
// that waited for urgent ones (the operator's request gate,
// --background-requests-while-urgent).
var (
	descHeld = Desc{"pgloop_api_requests_held_total", "counter", nil,
		"Requests of background work (retries, resyncs, rollouts, Events) that waited in the operator while requests of a user's action were in flight (--background-requests-while-urgent)."}
	descHeldSeconds = Desc{"pgloop_api_requests_held_seconds_total", "counter", nil,
		"Time the requests of pgloop_api_requests_held_total waited, summed."}
)

// descWindow is the request gate's pacer's window (--pace-background).
var descWindow = Desc{"pgloop_api_background_window", "gauge", nil,
	"Requests of background work the operator lets be in flight at once (--pace-background): halved when the median of 8 writes is more than twice the least latency seen lately, grown by one per window answered in time, at least 1, at most 64."}

// descWriteWindow is the windows of the operator's writes by kind
// (--fair-writes).
var descWriteWindow = Desc{"pgloop_api_write_window", "gauge", []string{"verb", "resource", "class"},
	"Writes of one kind (verb and resource, as in pgloop_api_requests_total, and class: headless for a Service without a ClusterIP, else empty) the operator lets be in flight at once (--fair-writes), the others waiting by namespace in turns. While writes wait, the window that got the most answered a second lately (a larger one must get 10 % more, a smaller one within 10 % takes over; every other round tries a quarter more or less); else halved when the median of 8 is more than twice the least latency seen lately, grown by one per window answered in time; at least 1, at most 64; a kind appears once written."}

// descWindowedWrites and descWriteWait tell how long the writes of each
// kind waited in the operator for a place in their window (--fair-writes):
// the mean wait is their quotient.
var (
	descWindowedWrites = Desc{"pgloop_api_windowed_writes_total", "counter", []string{"verb", "resource", "class", "priority"},
		"Writes that went through the operator's write windows (--fair-writes), by kind (as in pgloop_api_write_window) and priority (urgent: a user's action; background: retries, resyncs, rollouts, Events)."}
	descWriteWait = Desc{"pgloop_api_write_wait_seconds_total", "counter", []string{"verb", "resource", "class", "priority"},
		"Time the writes of pgloop_api_windowed_writes_total waited for a place in their window, summed (0 for a write that found one free): divided by that count, the mean wait of a kind's write in the operator."}
)

// ObserveWriteWait counts one write of a kind through its window, which
// waited d for its place.
func (m *Metrics) ObserveWriteWait(verb, resource, class string, urgent bool, d time.Duration) {
	priority := "background"
	if urgent {
		priority = "urgent"
	}
	m.windowedWrites.WithLabelValues(verb, resource, class, priority).Inc()
	m.writeWait.WithLabelValues(verb, resource, class, priority).Add(d.Seconds())
}

// WriteWindow sets the window of the writes of one kind.
func (m *Metrics) WriteWindow(verb, resource, class string, w float64) {
	m.writeWindow.WithLabelValues(verb, resource, class).Set(w)
}

// BackgroundWindow sets the pacer's window.
func (m *Metrics) BackgroundWindow(w float64) { m.window.Set(w) }

// ObserveHeld counts one request of background work that waited d for
// urgent ones.
func (m *Metrics) ObserveHeld(d time.Duration) {
	m.held.Inc()
	m.heldSeconds.Add(d.Seconds())
}

// NonResource is the resource label of requests that name no resource,
// such as discovery.
const NonResource = "nonresource"

// InstrumentTransport wraps rt so that every request it sends counts in
// pgloop_api_requests_total. It is a rest.Config's Wrap: each try of a
// request counts once, after client-go's rate limiter let it go; a watch
// counts when the server accepts it.
func (m *Metrics) InstrumentTransport(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{next: rt, m: m}
}

type roundTripper struct {
	next http.RoundTripper
	m    *Metrics
}

func (t roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	verb, resource := RequestVerb(req.Method, req.URL.Path, req.URL.Query().Get("watch"))
	t.m.apiRequests.WithLabelValues(verb, resource, code).Inc()
	return resp, err
}

// namespaceSubresources are the subresources of a namespace itself, as the
// API server tells them from a resource in the namespace
// (k8s.io/apiserver's RequestInfoFactory).
var namespaceSubresources = map[string]bool{"status": true, "finalize": true}

// RequestVerb returns the Kubernetes verb and resource of a request, as the
// API server's authorization sees them, from its method, URL path and
// watch query parameter:
//
//  1. the path is /api/v1/… or /apis/<group>/<version>/…, optionally with
//     the legacy watch/ segment, then namespaces/<ns>/ for a namespaced
//     resource, then <resource>[/<name>[/<subresource>]]; anything else
//     (discovery, /version) is NonResource with the method as its verb;
//  2. GET is watch with watch=true (or the watch/ segment), get with a
//     name, list without; DELETE is delete with a name, deletecollection
//     without; POST is create, PUT update, PATCH patch.
//
// The resource is the plural name, with "/<subresource>" when there is one.
func RequestVerb(method, path, watchParam string) (verb, resource string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return strings.ToLower(method), NonResource
	}
	watch := watchParam == "true" || watchParam == "1"
	if parts[0] == "watch" {
		watch, parts = true, parts[1:]
	}
	if len(parts) > 2 && parts[0] == "namespaces" && !namespaceSubresources[parts[2]] {
		parts = parts[2:]
	}
	if len(parts) == 0 || parts[0] == "" {
		return strings.ToLower(method), NonResource
	}
	resource = parts[0]
	named := len(parts) > 1
	if len(parts) > 2 {
		resource += "/" + parts[2]
	}
	switch method {
	case http.MethodGet:
		switch {
		case watch:
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if !named {
			verb = "deletecollection"
		}
	default:
		verb = strings.ToLower(method)
	}
	return verb, resource
}
