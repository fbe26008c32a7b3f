package patroni

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// observed records what Observe is called with.
type observed struct {
	mu    sync.Mutex
	calls []string
}

func (o *observed) observe(call, outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, call+" "+outcome)
}

func (o *observed) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.calls
	o.calls = nil
	return c
}

func newClient() (*Client, *observed) {
	o := &observed{}
	return &Client{Timeout: 2 * time.Second, Observe: o.observe}, o
}

// wantError checks err is an *Error whose message holds each of parts.
func wantError(t *testing.T, err error, parts ...string) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error = %v (%T), want an *Error", err, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not contain %q", err, p)
		}
	}
	return e
}

func wantObserved(t *testing.T, o *observed, want ...string) {
	t.Helper()
	if got := o.take(); !reflect.DeepEqual(got, want) {
		t.Errorf("Observe calls = %q, want %q", got, want)
	}
}

func TestConfig(t *testing.T) {
	ctx := context.Background()
	f, base := newFakePatroni(t)
	addr := strings.TrimPrefix(base, "http://")
	c, o := newClient()

	t.Run("none in the DCS yet", func(t *testing.T) {
		_, err := c.Config(ctx, base)
		e := wantError(t, err, "patroni "+addr+": GET /config: 502 Bad Gateway: the cluster has no dynamic configuration")
		if e.StatusCode != http.StatusBadGateway || e.Timeout() {
			t.Errorf("StatusCode = %d, Timeout() = %v", e.StatusCode, e.Timeout())
		}
		wantObserved(t, o, "config error")
	})

	f.mu.Lock()
	f.config = decode(t, currentConfig)
	f.mu.Unlock()
	t.Run("ok", func(t *testing.T) {
		got, err := c.Config(ctx, base+"/")
		if err != nil {
			t.Fatal(err)
		}
		if want := decode(t, currentConfig); !reflect.DeepEqual(got, want) {
			t.Errorf("Config() = %v, want %v", got, want)
		}
		wantObserved(t, o, "config ok")
	})

	t.Run("bad base", func(t *testing.T) {
		for _, b := range []string{"", "127.0.0.1:8008", "postgres://127.0.0.1:5432", "http://127.0.0.1:8008/patroni"} {
			if _, err := c.Config(ctx, b); err == nil || !strings.Contains(err.Error(), "is not http(s)://host:port") {
				t.Errorf("Config(%q) error = %v", b, err)
			}
		}
		o.take()
	})

	t.Run("nobody listening", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := l.Addr().String()
		l.Close()
		_, err = c.Config(ctx, "http://"+closed)
		e := wantError(t, err, "patroni "+closed+": GET /config: dial tcp "+closed, "connection refused")
		if e.Timeout() || e.StatusCode != 0 {
			t.Errorf("Timeout() = %v, StatusCode = %d", e.Timeout(), e.StatusCode)
		}
		wantObserved(t, o, "config error")
	})
}

func TestConfigAnswerNotJSON(t *testing.T) {
	for _, tt := range []struct {
		name, body, want string
	}{
		{"html", "<html>hello</html>", `answer is not a JSON object: "<html>hello</html>"`},
		{"list", "[1, 2]", "answer is not a JSON object"},
		{"truncated", `{"ttl": 3`, "unexpected end of JSON input"},
		{"empty", "", `answer is not a JSON object: ""`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := newRawServer(t, func(w http.ResponseWriter, r *http.Request) {
				writeResponse(w, http.StatusOK, tt.body, "Content-Type: application/json")
			})
			c, o := newClient()
			_, err := c.Config(context.Background(), srv)
			wantError(t, err, "GET /config: 200 OK: "+tt.want)
			wantObserved(t, o, "config error")
		})
	}
}

func TestPatchConfig(t *testing.T) {
	ctx := context.Background()
	f, base := newFakePatroni(t)
	c, o := newClient()

	t.Run("no configuration in the DCS", func(t *testing.T) {
		_, err := c.PatchConfig(ctx, base, map[string]any{"ttl": 45})
		wantError(t, err, "PATCH /config: 503 Service Unavailable: the cluster has no dynamic configuration")
		wantObserved(t, o, "patch_config error")
	})

	f.mu.Lock()
	f.config = decode(t, currentConfig)
	f.mu.Unlock()

	t.Run("merged, null removes", func(t *testing.T) {
		patch := map[string]any{"ttl": 45, "postgresql": map[string]any{"parameters": map[string]any{
			"work_mem": "8MB", "archive_mode": nil,
		}}}
		got, err := c.PatchConfig(ctx, base, patch)
		if err != nil {
			t.Fatal(err)
		}
		want := decode(t, currentConfig)
		want["ttl"] = float64(45)
		params := want["postgresql"].(map[string]any)["parameters"].(map[string]any)
		params["work_mem"] = "8MB"
		delete(params, "archive_mode")
		if !reflect.DeepEqual(got, want) {
			t.Errorf("PatchConfig() = %v\nwant %v", got, want)
		}
		req := f.seen()[len(f.seen())-1]
		sent := req.body["postgresql"].(map[string]any)["parameters"].(map[string]any)
		if v, ok := sent["archive_mode"]; !ok || v != nil {
			t.Errorf("sent archive_mode = %v, %v; want null", v, ok)
		}
		if req.contentType != "application/json" {
			t.Errorf("Content-Type = %q", req.contentType)
		}
		wantObserved(t, o, "patch_config ok")
	})

	t.Run("conflict", func(t *testing.T) {
		f.mu.Lock()
		f.conflict = true
		f.mu.Unlock()
		_, err := c.PatchConfig(ctx, base, map[string]any{"ttl": 30})
		e := wantError(t, err, "PATCH /config: 409 Conflict: the configuration changed in the DCS during the update")
		if e.StatusCode != http.StatusConflict {
			t.Errorf("StatusCode = %d", e.StatusCode)
		}
		wantObserved(t, o, "patch_config error")
	})

	t.Run("empty patch is refused before sending", func(t *testing.T) {
		n := len(f.seen())
		_, err := c.PatchConfig(ctx, base, map[string]any{})
		wantError(t, err, "PATCH /config: empty patch")
		if len(f.seen()) != n {
			t.Error("an empty patch was sent")
		}
		wantObserved(t, o, "patch_config error")
	})

	t.Run("400 from Python's error page", func(t *testing.T) {
		// What Patroni answers to a body that is not a JSON object,
		// which this client never sends: the page itself.
		srv := newRawServer(t, func(w http.ResponseWriter, r *http.Request) { sendError(w, http.StatusBadRequest) })
		_, err := c.PatchConfig(ctx, srv, map[string]any{"ttl": 30})
		e := wantError(t, err, "patroni "+strings.TrimPrefix(srv, "http://")+": PATCH /config: 400 Bad Request: Patroni could not read the request as a JSON object")
		if strings.Contains(e.Error(), "<") {
			t.Errorf("error %q carries HTML", e)
		}
		wantObserved(t, o, "patch_config error")
	})
}

func TestRestart(t *testing.T) {
	ctx := context.Background()
	f, base := newFakePatroni(t)
	c, o := newClient()

	t.Run("pending only, nothing pending", func(t *testing.T) {
		err := c.Restart(ctx, base, true, 0)
		if !errors.Is(err, ErrNothingToRestart) {
			t.Fatalf("Restart() = %v, want ErrNothingToRestart", err)
		}
		wantError(t, err, "POST /restart: 503 Service Unavailable: restart conditions are not satisfied")
		if got := f.seen()[len(f.seen())-1].body; !reflect.DeepEqual(got, map[string]any{"restart_pending": true}) {
			t.Errorf("sent %v", got)
		}
		wantObserved(t, o, "restart ok")
	})

	t.Run("pending only, pending, with a timeout", func(t *testing.T) {
		f.mu.Lock()
		f.pendingRestart = true
		f.mu.Unlock()
		if err := c.Restart(ctx, base, true, 1500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"restart_pending": true, "timeout": float64(2)}
		if got := f.seen()[len(f.seen())-1].body; !reflect.DeepEqual(got, want) {
			t.Errorf("sent %v, want %v", got, want)
		}
		wantObserved(t, o, "restart ok")
	})

	t.Run("unconditional sends no restart_pending", func(t *testing.T) {
		if err := c.Restart(ctx, base, false, 0); err != nil {
			t.Fatal(err)
		}
		if got := f.seen()[len(f.seen())-1].body; len(got) != 0 {
			t.Errorf("sent %v, want {}", got)
		}
		wantObserved(t, o, "restart ok")
	})

	for _, a := range []answer{
		{http.StatusServiceUnavailable, "restart already in progress"},
		{http.StatusServiceUnavailable, "postgres is still starting"},
		{http.StatusServiceUnavailable, "restart failed"},
		{http.StatusInternalServerError, "Can't schedule restart in the paused state"},
	} {
		t.Run(a.body, func(t *testing.T) {
			f.mu.Lock()
			f.restartAnswer = &a
			f.mu.Unlock()
			err := c.Restart(ctx, base, false, time.Second)
			e := wantError(t, err, "POST /restart: "+strconv.Itoa(a.code)+" "+http.StatusText(a.code)+": "+a.body)
			if errors.Is(err, ErrNothingToRestart) || e.StatusCode != a.code || e.Body != a.body {
				t.Errorf("error %#v", e)
			}
			wantObserved(t, o, "restart error")
		})
	}
}

func TestSwitchover(t *testing.T) {
	ctx := context.Background()
	f, base := newFakePatroni(t)
	c, o := newClient()

	t.Run("done", func(t *testing.T) {
		f.mu.Lock()
		f.switchoverAnswer = answer{http.StatusOK, `Successfully switched over to "pg-1"`}
		f.mu.Unlock()
		if err := c.Switchover(ctx, base, "pg-0", "pg-1"); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"leader": "pg-0", "candidate": "pg-1"}
		if got := f.seen()[len(f.seen())-1].body; !reflect.DeepEqual(got, want) {
			t.Errorf("sent %v, want %v", got, want)
		}
		wantObserved(t, o, "switchover ok")
	})

	t.Run("no candidate: Patroni chooses", func(t *testing.T) {
		if err := c.Switchover(ctx, base, "pg-0", ""); err != nil {
			t.Fatal(err)
		}
		if got := f.seen()[len(f.seen())-1].body; !reflect.DeepEqual(got, map[string]any{"leader": "pg-0"}) {
			t.Errorf("sent %v", got)
		}
		wantObserved(t, o, "switchover ok")
	})

	for _, a := range []answer{
		{http.StatusPreconditionFailed, "candidate does not exists"},
		{http.StatusPreconditionFailed, "leader name does not match"},
		{http.StatusPreconditionFailed, "switchover is not possible: no good candidates have been found"},
		{http.StatusServiceUnavailable, "Switchover failed"},
		{http.StatusServiceUnavailable, "Switchover status unknown"},
		{http.StatusInternalServerError, "Internal Server Error"},
	} {
		t.Run(a.body, func(t *testing.T) {
			f.mu.Lock()
			f.switchoverAnswer = a
			f.mu.Unlock()
			err := c.Switchover(ctx, base, "pg-0", "pg-9")
			e := wantError(t, err, "patroni "+strings.TrimPrefix(base, "http://")+": POST /switchover: "+
				strconv.Itoa(a.code)+" "+http.StatusText(a.code)+": "+a.body)
			if e.StatusCode != a.code || e.Body != a.body {
				t.Errorf("StatusCode, Body = %d, %q", e.StatusCode, e.Body)
			}
			wantObserved(t, o, "switchover error")
		})
	}

	t.Run("no leader", func(t *testing.T) {
		err := c.Switchover(ctx, base, "", "pg-1")
		wantError(t, err, "400 Bad Request: Switchover could be performed only from a specific leader")
		wantObserved(t, o, "switchover error")
	})
}

func TestStatus(t *testing.T) {
	ctx := context.Background()
	f, base := newFakePatroni(t)
	c, o := newClient()

	// As api.py's do_GET_patroni writes them (json.dumps, default
	// separators).
	primary := `{"state": "running", "postmaster_start_time": "2024-05-01 10:00:00.123456+00:00", "role": "master", ` +
		`"server_version": 150002, "xlog": {"location": 50331968}, "timeline": 2, "replication": [{"usename": "standby", ` +
		`"application_name": "pg-1", "client_addr": "127.64.1.3", "state": "streaming", "sync_state": "async", ` +
		`"sync_priority": 0}], "dcs_last_seen": 1714557600, "database_system_identifier": "7364044444444444444", ` +
		`"patroni": {"version": "3.0.2", "scope": "acid-minimal"}}`
	replica := `{"state": "running", "postmaster_start_time": "2024-05-01 10:00:05.5+00:00", "role": "replica", ` +
		`"server_version": 150002, "xlog": {"received_location": 50331968, "replayed_location": 50331648, ` +
		`"replayed_timestamp": null, "paused": false}, "timeline": 2, "dcs_last_seen": 1714557601, ` +
		`"tags": {"nofailover": true}, "database_system_identifier": "7364044444444444444", "pending_restart": true, ` +
		`"patroni": {"version": "3.0.2", "scope": "acid-minimal"}}`
	// PostgreSQL down: get_postgresql_status's fallback.
	stopped := `{"state": "stopped", "role": "replica", "cluster_unlocked": true, "dcs_last_seen": 1714557602, ` +
		`"patroni": {"version": "3.0.2", "scope": "acid-minimal"}}`

	wantPrimary := NodeStatus{State: "running", Role: "master", Timeline: 2, ServerVersion: 150002,
		PostmasterStartTime: "2024-05-01 10:00:00.123456+00:00", XLog: XLog{Location: 50331968},
		DCSLastSeen: 1714557600, DatabaseSystemIdentifier: "7364044444444444444",
		Replication: []Replication{{Username: "standby", ApplicationName: "pg-1", ClientAddr: "127.64.1.3",
			State: "streaming", SyncState: "async"}}}
	wantReplica := NodeStatus{State: "running", Role: "replica", Timeline: 2, ServerVersion: 150002, PendingRestart: true,
		PostmasterStartTime: "2024-05-01 10:00:05.5+00:00", XLog: XLog{ReceivedLocation: 50331968, ReplayedLocation: 50331648},
		DCSLastSeen: 1714557601, DatabaseSystemIdentifier: "7364044444444444444", Tags: map[string]any{"nofailover": true}}
	wantStopped := NodeStatus{State: "stopped", Role: "replica", ClusterUnlocked: true, DCSLastSeen: 1714557602}
	for _, w := range []*NodeStatus{&wantPrimary, &wantReplica, &wantStopped} {
		w.Patroni.Version, w.Patroni.Scope = "3.0.2", "acid-minimal"
	}

	for _, tt := range []struct {
		name, body string
		want       NodeStatus
	}{
		{"primary", primary, wantPrimary},
		{"replica", replica, wantReplica},
		{"stopped", stopped, wantStopped},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.mu.Lock()
			f.status = tt.body
			f.mu.Unlock()
			got, err := c.Status(ctx, base)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Status() = %+v\nwant %+v", got, tt.want)
			}
			wantObserved(t, o, "status ok")
		})
	}
}

// TestErrorBodyLimits checks an error answer is read only up to
// maxErrorBody and shown on one line.
func TestErrorBodyLimits(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	srv := newRawServer(t, func(w http.ResponseWriter, r *http.Request) {
		writeResponse(w, http.StatusServiceUnavailable, "first line\r\nsecond "+huge)
	})
	c, _ := newClient()
	err := c.Switchover(context.Background(), srv, "pg-0", "pg-1")
	e := wantError(t, err, "503 Service Unavailable: first line second xxx")
	if len(e.Body) > 1024+3 || !strings.HasSuffix(e.Body, "...") {
		t.Errorf("Body is %d bytes, ends %q", len(e.Body), e.Body[len(e.Body)-5:])
	}
}

// newRawServer serves h, which answers with writeResponse or sendError.
func newRawServer(t *testing.T, h http.HandlerFunc) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
