package patroni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Names of the calls, as Observe receives them.
const (
	CallConfig      = "config"       // GET /config
	CallPatchConfig = "patch_config" // PATCH /config
	CallRestart     = "restart"      // POST /restart
	CallSwitchover  = "switchover"   // POST /switchover
	CallStatus      = "status"       // GET /patroni
)

// Outcomes of a call, as Observe receives them.
const (
	// OutcomeOK is a call Patroni answered as asked, or a Restart it
	// answered with ErrNothingToRestart, which is no failure.
	OutcomeOK = "ok"
	// OutcomeError is any other failure: no connection, an error status,
	// an answer that does not parse, ctx cancelled.
	OutcomeError = "error"
	// OutcomeTimeout is a call that met its deadline before Patroni
	// answered, or while it was sending its answer.
	OutcomeTimeout = "timeout"
)

// DefaultTimeout bounds each call of a Client whose Timeout is zero.
const DefaultTimeout = 5 * time.Second

// DefaultSwitchoverWait is Patroni's own wait for a switchover's result
// with the default loop_wait (10s); see Client.SwitchoverWait.
const DefaultSwitchoverWait = 20 * time.Second

// Limits of what is read of an answer: Patroni's answers are small, and a
// reader that takes whatever comes would let a wrong server fill memory.
const (
	maxBody      = 1 << 20 // a JSON answer (the configuration, a status)
	maxErrorBody = 4 << 10 // the text of an error
)

// ErrNothingToRestart is returned, wrapped in an *Error, by Restart with
// pendingOnly when the member has no pending restart: Patroni then answers
// 503 "restart conditions are not satisfied" and restarts nothing. Check
// it with errors.Is.
var ErrNothingToRestart = errors.New("no restart is pending")

// restartNotNeeded is Patroni's answer when restart_matches refuses
// (ha.py): the only 503 of POST /restart that is not a failure.
const restartNotNeeded = "restart conditions are not satisfied"

// Client calls Patroni's REST API. Its zero value is ready to use, and it
// is safe for concurrent use by the executor's workers. Every call blocks
// until Patroni answers or its bound passes: the earlier of ctx's deadline
// and Timeout after the call starts (plus, for Restart and Switchover,
// the time Patroni itself waits before it answers).
type Client struct {
	// HTTP does the requests; nil means a client of this package with no
	// timeout of its own (the bound of each call is its ctx) and no proxy:
	// Patroni is always reached at the pod's address, whatever
	// HTTP_PROXY says.
	HTTP *http.Client
	// Timeout bounds each call when ctx has a later deadline, or none;
	// zero means DefaultTimeout. A server that accepts the connection and
	// never answers makes the call fail after Timeout.
	Timeout time.Duration
	// SwitchoverWait is added to the bound of Switchover: Patroni answers
	// it only once the new leader holds the lock, polling for up to
	// 2*max(10s, loop_wait). Zero means DefaultSwitchoverWait; a cluster
	// with a longer loop_wait needs twice it.
	SwitchoverWait time.Duration
	// Observe, when set, is called once per call, when it returns, with
	// the call's name (CallConfig, ...) and its outcome (OutcomeOK,
	// OutcomeError, OutcomeTimeout): a hook for metrics.
	Observe func(call, outcome string)
}

// defaultHTTP is the HTTP client of Clients without one: net/http's
// default transport settings, built here rather than cloned so that
// nothing another package does to http.DefaultTransport reaches it, and
// without a proxy.
var defaultHTTP = &http.Client{Transport: &http.Transport{
	DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	MaxIdleConns:          100,
	IdleConnTimeout:       90 * time.Second,
	TLSHandshakeTimeout:   10 * time.Second,
	ExpectContinueTimeout: 1 * time.Second,
}}

// Error is a call to Patroni's REST API that failed: Patroni did not
// answer in time, could not be reached, or answered otherwise than asked.
// Its message names the member's address and the request, and carries
// Patroni's own words when it answered.
type Error struct {
	// Addr is the REST API's host:port.
	Addr string
	// Method and Path are the request's ("PATCH", "/config").
	Method, Path string
	// StatusCode and Status are Patroni's answer ("400 Bad Request"),
	// zero and empty when it gave none.
	StatusCode int
	Status     string
	// Body is the text of Patroni's answer (at most a few KiB), or, for
	// the bare error pages Python writes, what the status means for this
	// request.
	Body string
	// TimedOut is set when the call met its deadline, Patroni having
	// answered nothing or only part; Bound is then the time it had.
	TimedOut bool
	Bound    time.Duration
	// Err is the cause, when there is one beyond the status: the
	// network's error, ctx's, a parse error, or ErrNothingToRestart.
	Err error
}

func (e *Error) Error() string {
	req := e.Method + " " + e.Path
	switch {
	case e.TimedOut:
		return fmt.Sprintf("patroni %s did not answer %s within %s", e.Addr, req, roundBound(e.Bound))
	case e.StatusCode == 0:
		return fmt.Sprintf("patroni %s: %s: %v", e.Addr, req, e.Err)
	case e.Err != nil && !errors.Is(e.Err, ErrNothingToRestart):
		return fmt.Sprintf("patroni %s: %s: %s: %v", e.Addr, req, e.Status, e.Err)
	case e.Body == "":
		return fmt.Sprintf("patroni %s: %s: %s", e.Addr, req, e.Status)
	}
	return fmt.Sprintf("patroni %s: %s: %s: %s", e.Addr, req, e.Status, e.Body)
}

// Unwrap returns the cause: errors.Is(err, ErrNothingToRestart),
// errors.Is(err, context.DeadlineExceeded) and the like see through.
func (e *Error) Unwrap() error { return e.Err }

// Timeout tells whether the call met its deadline (as net.Error's does).
func (e *Error) Timeout() bool { return e.TimedOut }

// roundBound prints d as a person would say it: "5s", "2.5s", "300ms".
func roundBound(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// Config returns the cluster's dynamic configuration, which Patroni keeps
// in the DCS (GET /config). Numbers come as float64, as encoding/json
// decodes them.
func (c *Client) Config(ctx context.Context, base string) (cfg map[string]any, err error) {
	defer c.observe(CallConfig, &err)
	err = c.do(ctx, base, request{method: http.MethodGet, path: "/config"}, &cfg)
	return cfg, err
}

// PatchConfig merges patch into the dynamic configuration (PATCH /config)
// and returns the configuration Patroni stored. Patroni merges objects key
// by key; a null value removes a key. ConfigPatch computes the patch. An
// empty patch is refused here, as Patroni would (400).
func (c *Client) PatchConfig(ctx context.Context, base string, patch map[string]any) (cfg map[string]any, err error) {
	defer c.observe(CallPatchConfig, &err)
	r := request{method: http.MethodPatch, path: "/config", body: patch}
	if len(patch) == 0 {
		addr, err := apiAddr(base)
		if err != nil {
			return nil, err
		}
		return nil, r.fail(addr, errors.New("empty patch: nothing to change"))
	}
	err = c.do(ctx, base, r, &cfg)
	return cfg, err
}

// Restart restarts PostgreSQL on the member (POST /restart) and returns
// once it is running again: Patroni answers only then. With pendingOnly it
// restarts only if the member has a pending restart, and otherwise returns
// an error wrapping ErrNothingToRestart. timeout, when positive, is how
// long Patroni waits for PostgreSQL to start before it answers "postgres
// is still starting" (503); it is rounded up to whole seconds and added
// to the call's bound. With timeout zero Patroni waits up to its
// primary_start_timeout (300s by default) but the call is bounded by
// Timeout alone: a longer restart goes on after the call times out.
func (c *Client) Restart(ctx context.Context, base string, pendingOnly bool, timeout time.Duration) (err error) {
	defer c.observe(CallRestart, &err)
	// Patroni filters on the presence of "restart_pending", not on its
	// value: false must be left out, not sent.
	body := map[string]any{}
	if pendingOnly {
		body["restart_pending"] = true
	}
	var wait time.Duration
	if timeout > 0 {
		secs := int64(math.Ceil(timeout.Seconds()))
		body["timeout"] = secs
		wait = time.Duration(secs) * time.Second
	}
	err = c.do(ctx, base, request{method: http.MethodPost, path: "/restart", body: body, wait: wait}, nil)
	var e *Error
	if errors.As(err, &e) && e.StatusCode == http.StatusServiceUnavailable && e.Body == restartNotNeeded {
		e.Err = ErrNothingToRestart
	}
	return err
}

// Switchover moves the leader lock from leader to candidate (POST
// /switchover) and returns once it is done: Patroni answers 200 when a
// new leader holds the lock, which may be another member than candidate
// if candidate could not take it (Patroni then says so in its answer,
// still 200; the members' roles tell who leads). An empty candidate lets
// Patroni choose. Patroni's refusals come back as an *Error with its
// status and words: 412 "candidate does not exists", 412 "switchover is
// not possible: ...", 503 "Switchover failed", 400 and so on.
func (c *Client) Switchover(ctx context.Context, base, leader, candidate string) (err error) {
	defer c.observe(CallSwitchover, &err)
	body := map[string]any{"leader": leader}
	if candidate != "" {
		body["candidate"] = candidate
	}
	wait := c.SwitchoverWait
	if wait == 0 {
		wait = DefaultSwitchoverWait
	}
	return c.do(ctx, base, request{method: http.MethodPost, path: "/switchover", body: body, wait: wait}, nil)
}

// NodeStatus is a member's own view of itself (GET /patroni), fresher
// than its Member, which Patroni writes once per HA loop. Fields Patroni
// leaves out when they do not apply are zero.
type NodeStatus struct {
	// State and Role are as in Member.
	State string `json:"state"`
	Role  string `json:"role"`
	// PendingRestart is set when a changed parameter waits for a restart.
	PendingRestart bool `json:"pending_restart"`
	// Timeline is PostgreSQL's timeline.
	Timeline int64 `json:"timeline"`
	// XLog holds the WAL positions, when PostgreSQL answers.
	XLog XLog `json:"xlog"`
	// ServerVersion is PostgreSQL's, as a number (150002).
	ServerVersion int `json:"server_version"`
	// PostmasterStartTime is when PostgreSQL started, as Python prints a
	// time ("2024-05-01 10:00:00.123456+00:00").
	PostmasterStartTime string `json:"postmaster_start_time"`
	// SyncStandby is set on a replica that is a synchronous standby.
	SyncStandby bool `json:"sync_standby"`
	// ClusterUnlocked is set when no member holds the leader lock.
	ClusterUnlocked bool `json:"cluster_unlocked"`
	// Pause is set while the cluster is in maintenance mode.
	Pause bool `json:"pause"`
	// Tags are the member's effective tags.
	Tags map[string]any `json:"tags"`
	// DatabaseSystemIdentifier is PostgreSQL's system identifier.
	DatabaseSystemIdentifier string `json:"database_system_identifier"`
	// DCSLastSeen is when Patroni last reached the DCS (Unix seconds).
	DCSLastSeen int64 `json:"dcs_last_seen"`
	// Patroni is Patroni's version and the cluster's scope.
	Patroni struct {
		Version string `json:"version"`
		Scope   string `json:"scope"`
	} `json:"patroni"`
	// Replication lists the WAL senders of a primary.
	Replication []Replication `json:"replication"`
}

// XLog is the WAL positions of a member, in bytes from 0/0. A primary has
// Location (the current write position); a replica has the others.
type XLog struct {
	Location          int64  `json:"location"`
	ReceivedLocation  int64  `json:"received_location"`
	ReplayedLocation  int64  `json:"replayed_location"`
	ReplayedTimestamp string `json:"replayed_timestamp"`
	Paused            bool   `json:"paused"`
}

// Replication is one WAL sender of a primary: a replica streaming from
// it.
type Replication struct {
	Username        string `json:"usename"`
	ApplicationName string `json:"application_name"`
	ClientAddr      string `json:"client_addr"`
	State           string `json:"state"`
	SyncState       string `json:"sync_state"`
	SyncPriority    int    `json:"sync_priority"`
}

// Status returns the member's own status (GET /patroni).
func (c *Client) Status(ctx context.Context, base string) (st NodeStatus, err error) {
	defer c.observe(CallStatus, &err)
	err = c.do(ctx, base, request{method: http.MethodGet, path: "/patroni"}, &st)
	return st, err
}

// request is one call to the REST API.
type request struct {
	method, path string
	// body is sent as JSON when not nil.
	body any
	// wait is how long Patroni itself may take before it answers, added
	// to the Client's Timeout.
	wait time.Duration
}

func (r request) fail(addr string, err error) *Error {
	return &Error{Addr: addr, Method: r.method, Path: r.path, Err: err}
}

// do sends r to the REST API at base and decodes a 200 answer into out
// (a JSON object; out nil ignores the body). Any other outcome is an
// *Error. The body is always closed, and read only up to a limit.
func (c *Client) do(ctx context.Context, base string, r request, out any) error {
	addr, err := apiAddr(base)
	if err != nil {
		return err
	}
	var body io.Reader
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return r.fail(addr, fmt.Errorf("encode request: %w", err))
		}
		body = bytes.NewReader(b)
	}

	bound := c.Timeout
	if bound <= 0 {
		bound = DefaultTimeout
	}
	bound += r.wait
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	if hc.Timeout > 0 && hc.Timeout < bound {
		bound = hc.Timeout
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < bound {
		bound = max(time.Until(dl), 0)
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	// failed is the call failing before Patroni's answer was read whole.
	failed := func(err error) *Error {
		e := r.fail(addr, err)
		e.TimedOut, e.Bound = isTimeout(ctx, err), bound
		return e
	}

	req, err := http.NewRequestWithContext(ctx, r.method, strings.TrimSuffix(base, "/")+r.path, body)
	if err != nil {
		return r.fail(addr, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		// *url.Error repeats the method and the URL the message already
		// names.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return failed(err)
	}
	defer resp.Body.Close()

	limit := int64(maxBody)
	if resp.StatusCode != http.StatusOK {
		limit = maxErrorBody
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		e := failed(fmt.Errorf("read answer: %w", err))
		if !e.TimedOut {
			e.StatusCode, e.Status = resp.StatusCode, resp.Status
		}
		return e
	}
	if resp.StatusCode != http.StatusOK {
		e := r.fail(addr, nil)
		e.StatusCode, e.Status = resp.StatusCode, resp.Status
		e.Body = answerText(r, resp.StatusCode, b)
		return e
	}
	if out == nil {
		return nil
	}
	if int64(len(b)) > limit {
		e := r.fail(addr, fmt.Errorf("answer larger than %d bytes", limit))
		e.StatusCode, e.Status = resp.StatusCode, resp.Status
		return e
	}
	if bt := bytes.TrimSpace(b); len(bt) == 0 || bt[0] != '{' {
		err = fmt.Errorf("answer is not a JSON object: %q", truncate(string(bt), 80))
	} else {
		err = json.Unmarshal(bt, out)
	}
	if err != nil {
		e := r.fail(addr, err)
		e.StatusCode, e.Status = resp.StatusCode, resp.Status
		return e
	}
	return nil
}

// apiAddr checks base is a REST API base URL (scheme://host:port) and
// returns its host:port.
func apiAddr(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
		return "", fmt.Errorf("patroni API base %q is not http(s)://host:port", base)
	}
	return u.Host, nil
}

// isTimeout tells whether err, from a call under ctx, is the call running
// out of time: ctx's deadline, or a timeout of the network or of the HTTP
// client. A cancelled ctx is not one.
func isTimeout(ctx context.Context, err error) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// pythonErrorPage is in the page Python's http.server writes for
// send_error, which Patroni uses for the refusals that have no words of
// their own.
const pythonErrorPage = "<title>Error response</title>"

// sendErrorMeaning says, in Patroni's terms, what its bare send_error
// statuses mean (api.py), keyed by "METHOD /path status" or by status for
// every request.
var sendErrorMeaning = map[string]string{
	"GET /config 502":   "the cluster has no dynamic configuration in the DCS (not initialized yet?)",
	"PATCH /config 503": "the cluster has no dynamic configuration in the DCS (not initialized yet?)",
	"PATCH /config 409": "the configuration changed in the DCS during the update; read it again and retry",
	"400":               "Patroni could not read the request as a JSON object",
	"411":               "Patroni needs a Content-Length",
}

// answerText is what an error answer says, on one line: Patroni's words,
// or for Python's bare error page what its status means here.
func answerText(r request, status int, b []byte) string {
	s := string(b)
	if strings.Contains(s, pythonErrorPage) {
		code := strconv.Itoa(status)
		if m, ok := sendErrorMeaning[r.method+" "+r.path+" "+code]; ok {
			return m
		}
		if m, ok := sendErrorMeaning[code]; ok {
			return m
		}
		// "<p>Error code explanation: 502 - Invalid responses from
		// another server/proxy.</p>"
		const prefix = "Error code explanation: "
		if i := strings.Index(s, prefix); i >= 0 {
			s = s[i+len(prefix):]
			s, _, _ = strings.Cut(s, "</p>")
			s = strings.TrimSuffix(strings.TrimPrefix(s, code+" - "), ".")
		}
	}
	return truncate(strings.Join(strings.Fields(s), " "), 1024)
}

// truncate cuts s to at most n bytes, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

// observe reports a finished call to Observe; err points at the call's
// result, as a deferred call sees it.
func (c *Client) observe(call string, err *error) {
	if c.Observe == nil {
		return
	}
	outcome := OutcomeOK
	var e *Error
	switch {
	case *err == nil, errors.Is(*err, ErrNothingToRestart):
	case errors.As(*err, &e) && e.TimedOut:
		outcome = OutcomeTimeout
	default:
		outcome = OutcomeError
	}
	c.Observe(call, outcome)
}
