package patroni

import (
	"reflect"
	"strings"
	"testing"
)

// Annotations as Patroni 3.0.2's touch_member writes them (json.dumps with
// separators (',', ':'), keys in its order).
const (
	leaderAnnotation = `{"conn_url":"postgres://127.64.1.2:5432/postgres","api_url":"http://127.64.1.2:8008/patroni",` +
		`"state":"running","role":"master","version":"3.0.2","xlog_location":50331968,"timeline":2}`
	pendingReplicaAnnotation = `{"conn_url":"postgres://127.64.1.3:5432/postgres","api_url":"http://127.64.1.3:8008/patroni",` +
		`"state":"running","role":"replica","version":"3.0.2","tags":{"nofailover":true},"pending_restart":true,` +
		`"xlog_location":50331648,"timeline":2}`
	// A replica whose PostgreSQL is down: no xlog_location, no timeline.
	stoppedAnnotation = `{"conn_url":"postgres://127.64.1.4:5432/postgres","api_url":"http://127.64.1.4:8008/patroni",` +
		`"state":"stopped","role":"replica","version":"3.0.2","pause":true}`
)

func TestParseMember(t *testing.T) {
	tests := []struct {
		name       string
		annotation string
		want       Member
		ok         bool
		err        string
	}{
		{
			name:       "leader with xlog_location",
			annotation: leaderAnnotation,
			want: Member{
				ConnURL: "postgres://127.64.1.2:5432/postgres", APIURL: "http://127.64.1.2:8008/patroni",
				State: "running", Role: "master", Version: "3.0.2", XLogLocation: 50331968, Timeline: 2,
			},
			ok: true,
		},
		{
			name:       "replica with pending_restart and nofailover",
			annotation: pendingReplicaAnnotation,
			want: Member{
				ConnURL: "postgres://127.64.1.3:5432/postgres", APIURL: "http://127.64.1.3:8008/patroni",
				State: "running", Role: "replica", Version: "3.0.2", PendingRestart: true,
				XLogLocation: 50331648, Timeline: 2, Tags: map[string]any{"nofailover": true},
			},
			ok: true,
		},
		{
			name:       "stopped and paused",
			annotation: stoppedAnnotation,
			want: Member{
				ConnURL: "postgres://127.64.1.4:5432/postgres", APIURL: "http://127.64.1.4:8008/patroni",
				State: "stopped", Role: "replica", Version: "3.0.2", Pause: true,
			},
			ok: true,
		},
		{
			name:       "unknown fields are ignored",
			annotation: `{"state":"running","role":"master","checkpoint_after_promote":false,"scheduled_restart":{"schedule":"2030-01-01T00:00:00+00:00"}}`,
			want:       Member{State: "running", Role: "master"},
			ok:         true,
		},
		{name: "empty", annotation: ""},
		{name: "garbage", annotation: "not json", err: "not a JSON object"},
		{name: "truncated", annotation: `{"state":"running","role":`, err: "unexpected end of JSON input"},
		{name: "null", annotation: "null", err: "not a JSON object"},
		{name: "array", annotation: "[]", err: "not a JSON object"},
		{name: "wrong type", annotation: `{"xlog_location":"0/3000060"}`, err: "xlog_location"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := ParseMember(tt.annotation)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseMember(%q) error = %v, want one containing %q", tt.annotation, err, tt.err)
				}
				if ok {
					t.Errorf("ParseMember(%q) ok = true with an error", tt.annotation)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseMember(%q): %v", tt.annotation, err)
			}
			if ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseMember(%q) = %+v, %v; want %+v, %v", tt.annotation, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestMemberAddresses(t *testing.T) {
	tests := []struct {
		name    string
		member  Member
		host    string
		port    int
		base    string
		hostErr string
		baseErr string
	}{
		{
			name:   "pod IP",
			member: Member{ConnURL: "postgres://127.64.1.2:5432/postgres", APIURL: "http://127.64.1.2:8008/patroni"},
			host:   "127.64.1.2", port: 5432, base: "http://127.64.1.2:8008",
		},
		{
			name:   "other ports, https",
			member: Member{ConnURL: "postgresql://10.0.0.7:6432/postgres", APIURL: "https://10.0.0.7:8443/patroni"},
			host:   "10.0.0.7", port: 6432, base: "https://10.0.0.7:8443",
		},
		{
			name:   "IPv6, as Patroni's uri() brackets it",
			member: Member{ConnURL: "postgres://[fd00::2]:5432/postgres", APIURL: "http://[fd00::2]:8008/patroni"},
			host:   "fd00::2", port: 5432, base: "http://[fd00::2]:8008",
		},
		{
			name:   "no port in conn_url means 5432",
			member: Member{ConnURL: "postgres://db.example/postgres", APIURL: "http://db.example/patroni"},
			host:   "db.example", port: 5432, base: "http://db.example",
		},
		{
			name:    "missing",
			member:  Member{},
			hostErr: "patroni member has no conn_url", baseErr: "patroni member has no api_url",
		},
		{
			name:    "wrong schemes",
			member:  Member{ConnURL: "http://127.64.1.2:5432/postgres", APIURL: "postgres://127.64.1.2:8008/patroni"},
			hostErr: "scheme is not postgres or postgresql", baseErr: "scheme is not http or https",
		},
		{
			name:    "no host",
			member:  Member{ConnURL: "postgres:///postgres", APIURL: "http:///patroni"},
			hostErr: "no host", baseErr: "no host",
		},
		{
			name:    "bad port",
			member:  Member{ConnURL: "postgres://127.64.1.2:99999/postgres", APIURL: "http://127.64.1.2:port/patroni"},
			hostErr: `bad port "99999"`, baseErr: "invalid port",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host, port, err := tt.member.PostgresHostPort()
			if tt.hostErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.hostErr) {
					t.Errorf("PostgresHostPort() error = %v, want one containing %q", err, tt.hostErr)
				}
			} else if err != nil || host != tt.host || port != tt.port {
				t.Errorf("PostgresHostPort() = %q, %d, %v; want %q, %d", host, port, err, tt.host, tt.port)
			}
			base, err := tt.member.APIBase()
			if tt.baseErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.baseErr) {
					t.Errorf("APIBase() error = %v, want one containing %q", err, tt.baseErr)
				}
			} else if err != nil || base != tt.base {
				t.Errorf("APIBase() = %q, %v; want %q", base, err, tt.base)
			}
		})
	}
}

func TestMemberRoleAndTags(t *testing.T) {
	for _, tt := range []struct {
		role string
		want bool
	}{
		{RoleMaster, true}, {RolePrimary, true}, {RoleStandbyLeader, true},
		{RoleReplica, false}, {"demoted", false}, {"uninitialized", false}, {"", false},
	} {
		if got := (Member{Role: tt.role}).IsLeaderRole(); got != tt.want {
			t.Errorf("Member{Role: %q}.IsLeaderRole() = %v, want %v", tt.role, got, tt.want)
		}
	}
	for _, tt := range []struct {
		tags map[string]any
		want bool
	}{
		{nil, false},
		{map[string]any{"noloadbalance": true}, false},
		{map[string]any{"nofailover": true}, true},
		{map[string]any{"nofailover": false}, false},
		{map[string]any{"nofailover": float64(1)}, true},
		{map[string]any{"nofailover": float64(0)}, false},
		{map[string]any{"nofailover": ""}, false},
		// Patroni 3.0.2 reads the tag by Python truth: the string
		// "false" is true.
		{map[string]any{"nofailover": "false"}, true},
	} {
		if got := (Member{Tags: tt.tags}).NoFailover(); got != tt.want {
			t.Errorf("Member{Tags: %v}.NoFailover() = %v, want %v", tt.tags, got, tt.want)
		}
	}
}

func TestMemberOf(t *testing.T) {
	if _, ok := MemberOf(nil); ok {
		t.Error("no annotations: a member")
	}
	if _, ok := MemberOf(map[string]string{StatusAnnotation: "garbage"}); ok {
		t.Error("garbage: a member")
	}
	m, ok := MemberOf(map[string]string{StatusAnnotation: `{"role":"replica","state":"running"}`})
	if !ok || m.Role != "replica" || m.State != StateRunning {
		t.Errorf("MemberOf = %+v, %v", m, ok)
	}
}
