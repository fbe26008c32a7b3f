package metrics

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRequestVerb(t *testing.T) {
	for _, tc := range []struct {
		method, path, watch string
		verb, resource      string
	}{
		{"GET", "/apis/pgloop.dev/v1/namespaces/ns/postgresqls", "", "list", "postgresqls"},
		{"GET", "/apis/pgloop.dev/v1/postgresqls", "true", "watch", "postgresqls"},
		{"GET", "/apis/pgloop.dev/v1/namespaces/ns/postgresqls/a", "", "get", "postgresqls"},
		{"PUT", "/apis/pgloop.dev/v1/namespaces/ns/postgresqls/a/status", "", "update", "postgresqls/status"},
		{"PUT", "/apis/pgloop.dev/v1/namespaces/ns/postgresqls/a", "", "update", "postgresqls"},
		{"PATCH", "/api/v1/namespaces/ns/serviceaccounts/postgres-pod", "", "patch", "serviceaccounts"},
		{"POST", "/apis/apps/v1/namespaces/ns/statefulsets", "", "create", "statefulsets"},
		{"POST", "/api/v1/namespaces/ns/pods/a-0/eviction", "", "create", "pods/eviction"},
		{"DELETE", "/api/v1/namespaces/ns/pods/a-0", "", "delete", "pods"},
		{"DELETE", "/api/v1/namespaces/ns/pods", "", "deletecollection", "pods"},
		{"GET", "/api/v1/pods", "1", "watch", "pods"},
		{"GET", "/api/v1/watch/namespaces/ns/pods", "", "watch", "pods"},
		// A namespace itself, and its own subresources.
		{"GET", "/api/v1/namespaces/ns", "", "get", "namespaces"},
		{"GET", "/api/v1/namespaces", "", "list", "namespaces"},
		{"PUT", "/api/v1/namespaces/ns/finalize", "", "update", "namespaces/finalize"},
		{"PATCH", "/api/v1/namespaces/ns/status", "", "patch", "namespaces/status"},
		// Discovery and other paths name no resource.
		{"GET", "/api", "", "get", NonResource},
		{"GET", "/apis/pgloop.dev/v1", "", "get", NonResource},
		{"GET", "/version", "", "get", NonResource},
		{"GET", "/api/v1/", "", "get", NonResource},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			verb, resource := RequestVerb(tc.method, tc.path, tc.watch)
			if verb != tc.verb || resource != tc.resource {
				t.Errorf("RequestVerb(%s, %s, watch=%q) = %s %s, want %s %s", tc.method, tc.path, tc.watch, verb, resource, tc.verb, tc.resource)
			}
		})
	}
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestInstrumentTransport(t *testing.T) {
	m := New()
	down := false
	rt := m.InstrumentTransport(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if down {
			return nil, errors.New("connection refused")
		}
		rec := httptest.NewRecorder()
		if r.Method == http.MethodPut {
			rec.WriteHeader(http.StatusConflict)
		}
		return rec.Result(), nil
	}))
	send := func(method, url string) {
		t.Helper()
		req := httptest.NewRequest(method, url, nil)
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		if (err != nil) != down {
			t.Fatalf("%s %s: error %v", method, url, err)
		}
	}
	send("GET", "https://api/apis/pgloop.dev/v1/postgresqls?watch=true&resourceVersion=1")
	send("GET", "https://api/apis/pgloop.dev/v1/postgresqls?watch=true&resourceVersion=2")
	send("PUT", "https://api/apis/pgloop.dev/v1/namespaces/ns/postgresqls/a/status")
	down = true
	send("POST", "https://api/api/v1/namespaces/ns/secrets")

	for _, tc := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"watch", "postgresqls", "200"}, 2},
		{[]string{"update", "postgresqls/status", "409"}, 1},
		{[]string{"create", "secrets", "error"}, 1},
	} {
		if got := testutil.ToFloat64(m.apiRequests.WithLabelValues(tc.labels...)); got != tc.want {
			t.Errorf("pgloop_api_requests_total%v = %v, want %v", tc.labels, got, tc.want)
		}
	}
}
