package patroni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// StatusAnnotation is the pod annotation where Patroni's Kubernetes store
// keeps a member's data (patroni/dcs/kubernetes.py touch_member): a JSON
// object, rewritten by every HA loop in which it changed.
const StatusAnnotation = "status"

// Roles a member publishes. Patroni 3.0.2 still writes RoleMaster for the
// primary; RolePrimary is what later versions write instead.
const (
	RoleMaster        = "master"
	RolePrimary       = "primary"
	RoleStandbyLeader = "standby_leader"
	RoleReplica       = "replica"
)

// StateRunning is the state of a member whose PostgreSQL is up and
// answering. Others are "starting", "stopped", "restarting", "stopping",
// "creating replica", "running custom bootstrap script", and failures such
// as "start failed" or "restart failed (...)".
const StateRunning = "running"

// Member is what Patroni publishes about one member: with the Kubernetes
// store, the JSON in the pod annotation StatusAnnotation, written by
// touch_member each HA loop. Fields Patroni leaves out when they do not
// apply (pending_restart, xlog_location, timeline, tags, pause) are zero.
type Member struct {
	// ConnURL is where PostgreSQL listens:
	// postgres://127.64.1.2:5432/postgres.
	ConnURL string `json:"conn_url"`
	// APIURL is Patroni's REST API: http://127.64.1.2:8008/patroni.
	APIURL string `json:"api_url"`
	// State is PostgreSQL's state as Patroni sees it; see StateRunning.
	State string `json:"state"`
	// Role is RoleMaster, RolePrimary, RoleStandbyLeader or RoleReplica,
	// or a passing one: "uninitialized", "demoted", "promoted".
	Role string `json:"role"`
	// Version is Patroni's version ("3.0.2").
	Version string `json:"version"`
	// PendingRestart is set when a changed parameter only takes effect
	// after a restart of PostgreSQL.
	PendingRestart bool `json:"pending_restart"`
	// XLogLocation is the WAL position in bytes from 0/0: written on a
	// primary, replayed on a replica. Patroni publishes it only while
	// PostgreSQL is running, starting or restarting.
	XLogLocation int64 `json:"xlog_location"`
	// Timeline is PostgreSQL's timeline, when Patroni knows it.
	Timeline int64 `json:"timeline"`
	// Tags are the member's effective tags (nofailover, noloadbalance,
	// clonefrom, nosync, replicatefrom and any of the user's).
	Tags map[string]any `json:"tags"`
	// Pause is set while the cluster is in maintenance mode: Patroni then
	// neither fails over nor restarts PostgreSQL on its own.
	Pause bool `json:"pause"`
	// ProxyURL is the connection pooler's address, when Patroni has one.
	ProxyURL string `json:"proxy_url"`
}

// ParseMember parses the value of StatusAnnotation. An empty value (a pod
// whose Patroni has not yet written it) gives ok false and no error; a
// value that is not a JSON object gives an error.
func ParseMember(annotation string) (m Member, ok bool, err error) {
	if annotation == "" {
		return Member{}, false, nil
	}
	b := bytes.TrimSpace([]byte(annotation))
	// Unmarshal would take "null" into a zero Member without a word;
	// Patroni only ever writes an object.
	if len(b) == 0 || b[0] != '{' {
		return Member{}, false, fmt.Errorf("parse patroni member status %.40q: not a JSON object", annotation)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return Member{}, false, fmt.Errorf("parse patroni member status %.40q: %w", annotation, err)
	}
	return m, true, nil
}

// MemberOf returns the member data of a pod with annotations: false when
// its Patroni has published none, or what it published does not parse
// (the pod is treated as one without member data).
func MemberOf(annotations map[string]string) (Member, bool) {
	m, ok, err := ParseMember(annotations[StatusAnnotation])
	return m, ok && err == nil
}

// PostgresHostPort returns the host and port of PostgreSQL from ConnURL,
// the port being 5432 when the URL has none. An IPv6 host comes without
// its brackets.
func (m Member) PostgresHostPort() (host string, port int, err error) {
	u, err := parseURL("conn_url", m.ConnURL, "postgres", "postgresql")
	if err != nil {
		return "", 0, err
	}
	port = 5432
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil || port <= 0 || port > 65535 {
			return "", 0, fmt.Errorf("patroni conn_url %q: bad port %q", m.ConnURL, p)
		}
	}
	return u.Hostname(), port, nil
}

// APIBase returns the base URL of Patroni's REST API (scheme://host:port,
// no path) from APIURL, the form the Client's calls take.
func (m Member) APIBase() (string, error) {
	u, err := parseURL("api_url", m.APIURL, "http", "https")
	if err != nil {
		return "", err
	}
	return u.Scheme + "://" + u.Host, nil
}

// IsLeaderRole tells whether the member holds, or believes it holds, the
// leader lock: the primary, or a standby cluster's leader. Patroni's role
// lags the lock by up to one HA loop; the leader record (a ConfigMap, or
// the Endpoints of a cluster on Endpoints) is the truth.
func (m Member) IsLeaderRole() bool {
	switch m.Role {
	case RoleMaster, RolePrimary, RoleStandbyLeader:
		return true
	}
	return false
}

// NoFailover tells whether the member's nofailover tag keeps Patroni from
// ever promoting it, so it is no switchover candidate. Patroni 3.0.2 reads
// the tag by Python truth (dcs.Member.nofailover), and so does this: true,
// a non-zero number or any non-empty string, "false" included.
func (m Member) NoFailover() bool {
	return truthy(m.Tags["nofailover"])
}

// truthy is Python's truth of a JSON value.
func truthy(v any) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case float64:
		return v != 0
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case map[string]any:
		return len(v) > 0
	}
	return true
}

// parseURL parses raw, the member's field name, and checks its scheme is
// one of schemes and it has a host.
func parseURL(field, raw string, schemes ...string) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("patroni member has no %s", field)
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("patroni %s %q: %w", field, raw, err)
	}
	known := false
	for _, s := range schemes {
		known = known || u.Scheme == s
	}
	if !known {
		return nil, fmt.Errorf("patroni %s %q: scheme is not %s", field, raw, strings.Join(schemes, " or "))
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("patroni %s %q: no host", field, raw)
	}
	return u, nil
}
