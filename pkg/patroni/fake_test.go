package patroni

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakePatroni answers as Patroni 3.0.2's REST API (patroni/api.py) does,
// down to the wire: Python's http.server speaks HTTP/1.0, its
// _write_response sends no Content-Length and ends the body by closing the
// connection, and send_error writes Python's HTML error page.
type fakePatroni struct {
	t *testing.T

	mu sync.Mutex
	// config is the dynamic configuration in the DCS; nil: none yet.
	config map[string]any
	// conflict makes the next PATCH /config lose the race for the DCS.
	conflict bool
	// pendingRestart is the member's pending_restart flag.
	pendingRestart bool
	// restartAnswer, when set, is the answer of a restart that runs.
	restartAnswer *answer
	// switchoverAnswer is the answer of POST /switchover once the
	// request is valid.
	switchoverAnswer answer
	// status is the body of GET /patroni.
	status string
	// requests records what came in, in order.
	requests []seen
}

type answer struct {
	code int
	body string
}

type seen struct {
	method, path, contentType string
	body                      map[string]any
}

func newFakePatroni(t *testing.T) (*fakePatroni, string) {
	f := &fakePatroni{t: t}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *fakePatroni) seen() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.requests...)
}

func (f *fakePatroni) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	raw, _ := io.ReadAll(r.Body)
	s := seen{method: r.Method, path: r.URL.Path, contentType: r.Header.Get("Content-Type")}
	// _read_json_content: a body must be a JSON object, and not empty
	// unless optional (restart).
	var body map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &body); err != nil || body == nil {
			f.requests = append(f.requests, s)
			sendError(w, http.StatusBadRequest)
			return
		}
	}
	s.body = body
	f.requests = append(f.requests, s)

	switch r.Method + " " + r.URL.Path {
	case "GET /config":
		if f.config == nil {
			sendError(w, http.StatusBadGateway)
			return
		}
		writeJSON(w, http.StatusOK, f.config)
	case "PATCH /config":
		switch {
		case len(body) == 0:
			sendError(w, http.StatusBadRequest)
		case f.config == nil:
			sendError(w, http.StatusServiceUnavailable)
		case f.conflict:
			f.conflict = false
			sendError(w, http.StatusConflict)
		default:
			patchConfig(f.config, body)
			writeJSON(w, http.StatusOK, f.config)
		}
	case "POST /restart":
		for k, v := range body {
			switch k {
			case "restart_pending":
			case "timeout":
				if n, ok := v.(float64); !ok || n <= 0 {
					writeResponse(w, http.StatusBadRequest, "Timeout should be a positive number of seconds")
					return
				}
			default:
				writeResponse(w, http.StatusBadRequest, "Unknown filter for the scheduled restart: "+k)
				return
			}
		}
		// restart_matches looks at the key's presence only.
		if _, ok := body["restart_pending"]; ok && !f.pendingRestart {
			writeResponse(w, http.StatusServiceUnavailable, "restart conditions are not satisfied")
			return
		}
		a := answer{http.StatusOK, "restarted successfully"}
		if f.restartAnswer != nil {
			a = *f.restartAnswer
		}
		f.pendingRestart = false
		writeResponse(w, a.code, a.body)
	case "POST /switchover":
		if body["leader"] == nil || body["leader"] == "" {
			writeResponse(w, http.StatusBadRequest, "Switchover could be performed only from a specific leader")
			return
		}
		writeResponse(w, f.switchoverAnswer.code, f.switchoverAnswer.body)
	case "GET /patroni":
		writeResponse(w, http.StatusOK, f.status, "Content-Type: application/json")
	default:
		sendError(w, http.StatusNotImplemented)
	}
}

// writeJSON is _write_json_response.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v)
	writeResponse(w, code, string(b), "Content-Type: application/json")
}

// writeResponse is _write_response: an HTTP/1.0 answer with no
// Content-Length, text/html unless told, ended by closing the connection.
func writeResponse(w http.ResponseWriter, code int, body string, headers ...string) {
	if len(headers) == 0 {
		headers = []string{"Content-Type: text/html"}
	}
	writeRaw(w, code, headers, body)
}

// sendError is BaseHTTPRequestHandler.send_error with Python 3.11's page.
func sendError(w http.ResponseWriter, code int) {
	explain := map[int]string{
		400: "Bad request syntax or unsupported method",
		409: "Request conflict",
		501: "Server does not support this operation",
		502: "Invalid responses from another server/proxy",
		503: "The server cannot process the request due to a high load",
	}[code]
	body := fmt.Sprintf(`<!DOCTYPE HTML>
<html lang="en">
    <head>
        <meta charset="utf-8">
        <title>Error response</title>
    </head>
    <body>
        <h1>Error response</h1>
        <p>Error code: %d</p>
        <p>Message: %s.</p>
        <p>Error code explanation: %d - %s.</p>
    </body>
</html>
`, code, http.StatusText(code), code, explain)
	writeRaw(w, code, []string{
		"Connection: close",
		"Content-Type: text/html;charset=utf-8",
		fmt.Sprintf("Content-Length: %d", len(body)),
	}, body)
}

func writeRaw(w http.ResponseWriter, code int, headers []string, body string) {
	conn, buf, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.0 %d %s\r\nServer: BaseHTTP/0.6 Python/3.11.7\r\nDate: %s\r\n",
		code, http.StatusText(code), time.Now().UTC().Format(http.TimeFormat))
	buf.WriteString(strings.Join(headers, "\r\n") + "\r\n\r\n" + body)
	buf.Flush()
}
