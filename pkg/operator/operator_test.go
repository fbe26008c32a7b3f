package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/internal/fixtures"
	"github.com/pgloop/pgloop/pkg/metrics"
	"github.com/pgloop/pgloop/pkg/reqclass"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want []string // substrings of the error; none means valid
	}{
		{name: "defaults", mod: func(*Config) {}},
		{name: "namespaces", mod: func(c *Config) { c.Namespaces = []string{"a", "team-b"} }},
		{name: "no leader election ignores its settings", mod: func(c *Config) {
			c.LeaderElect, c.LeaderElectionNamespace, c.LeaseDuration = false, "", 0
		}},
		{name: "bad namespace", mod: func(c *Config) { c.Namespaces = []string{"Bad_NS"} },
			want: []string{`namespace "Bad_NS" is not a valid namespace name`}},
		{name: "lease namespace", mod: func(c *Config) { c.LeaderElectionNamespace = "" },
			want: []string{`leader-election-namespace "" is not a valid namespace name`}},
		{name: "lease name", mod: func(c *Config) { c.LeaderElectionID = "Pgloop!" },
			want: []string{`leader-election-id "Pgloop!" is not a valid Lease name`}},
		{name: "lease timing", mod: func(c *Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 5*time.Second, 5*time.Second, 5*time.Second
		},
			want: []string{"leader-elect-lease-duration (5s) must be greater than leader-elect-renew-deadline (5s)",
				"leader-elect-renew-deadline (5s) must be greater than 1.2 x leader-elect-retry-period (5s)"}},
		{name: "durations", mod: func(c *Config) {
			c.StepTimeout, c.CreateTimeout, c.UpdateTimeout, c.ResyncPeriod, c.RetryBase, c.RetryMax, c.CacheSyncTimeout =
				0, -time.Second, 0, 0, 0, 0, 0
		}, want: []string{"step-timeout must be a positive duration, got 0s", "create-timeout must be a positive duration, got -1s",
			"update-timeout", "resync-period", "retry-base", "retry-max", "cache-sync-timeout"}},
		{name: "no loss grace", mod: func(c *Config) { c.LossGrace = 0 }},
		{name: "negative loss grace", mod: func(c *Config) { c.LossGrace = -time.Second },
			want: []string{"loss-grace must not be negative, got -1s"}},
		{name: "no rollout budget", mod: func(c *Config) { c.MaxRollingClusters = 0 }},
		{name: "negative rollout budget", mod: func(c *Config) { c.MaxRollingClusters = -1 },
			want: []string{"max-rolling-clusters must not be negative (0 means no bound), got -1"}},
		{name: "volumes deleted with their clusters", mod: func(c *Config) { c.VolumeRetention = "Delete" }},
		{name: "unknown volume retention", mod: func(c *Config) { c.VolumeRetention = "delete" },
			want: []string{`volume-retention must be Retain or Delete, got "delete"`}},
		{name: "retry order", mod: func(c *Config) { c.RetryBase, c.RetryMax = time.Minute, time.Second },
			want: []string{"retry-max (1s) must not be less than retry-base (1m0s)"}},
		{name: "counts", mod: func(c *Config) { c.Workers, c.KubeQPS, c.KubeBurst = 0, -2, 0 },
			want: []string{"workers must be at least 1, got 0", "kube-qps must be positive, 0", "kube-burst must be at least 1"}},
		{name: "request gate", mod: func(c *Config) { c.BackgroundWhileUrgent, c.BackgroundRequests = -2, -1 },
			want: []string{"background-requests-while-urgent must be at least 0, or -1 for no limit, got -2", "background-requests must not be negative, got -1"}},
		{name: "no event workers", mod: func(c *Config) { c.EventWorkers = 0 },
			want: []string{"event-workers must be at least 1, got 0"}},
		{name: "some background while urgent", mod: func(c *Config) { c.BackgroundWhileUrgent = 2 }},
		{name: "a memory limit", mod: func(c *Config) { c.MemoryLimit = MinMemoryLimit }},
		{name: "a memory limit in MB where bytes were meant", mod: func(c *Config) { c.MemoryLimit = 512 },
			want: []string{"memory-limit must be 0 (none) or at least 64Mi, got 512 bytes"}},
		{name: "a negative memory limit", mod: func(c *Config) { c.MemoryLimit = -1 },
			want: []string{"memory-limit must be 0 (none) or at least 64Mi, got -1 bytes"}},
		{name: "no request gate", mod: func(c *Config) { c.BackgroundWhileUrgent, c.BackgroundRequests = -1, 0 }},
		{name: "strings", mod: func(c *Config) { c.HealthAddr, c.SpiloImage = "", " " },
			want: []string{"health-addr must not be empty", "spilo-image must not be empty"}},
		{name: "logs", mod: func(c *Config) { c.LogFormat, c.LogLevel = "xml", "loud" },
			want: []string{`log-format must be "text" or "json", got "xml"`, `log-level must be one of`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.mod(&cfg)
			err := cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestDefaultConfigMatchesPackages(t *testing.T) {
	cfg := DefaultConfig()
	if got, want := cfg.fsmConfig(), fsm.DefaultConfig(); got != want {
		t.Errorf("fsm config %+v, want the state machine's defaults %+v", got, want)
	}
	if cfg.SpiloImage != cluster.DefaultImage {
		t.Errorf("spilo image %q, want %q", cfg.SpiloImage, cluster.DefaultImage)
	}
}

func TestHealthEndpoints(t *testing.T) {
	h := &health{}
	srv := httptest.NewServer(h.handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "metrics here")
	}), false))
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	tests := []struct {
		phase      phase
		readyCode  int
		readyMatch string
	}{
		{phaseStarting, 503, "starting"},
		{phaseStandby, 200, "standby"},
		{phaseSyncing, 503, "waiting"},
		{phaseRunning, 200, "ok"},
		{phaseStopping, 503, "shutting"},
	}
	for _, tc := range tests {
		h.set(tc.phase)
		if code, _ := get("/healthz"); code != 200 {
			t.Errorf("phase %d: /healthz %d, want 200 while the process runs", tc.phase, code)
		}
		code, body := get("/readyz")
		if code != tc.readyCode || !strings.Contains(body, tc.readyMatch) {
			t.Errorf("phase %d: /readyz %d %q, want %d %q", tc.phase, code, body, tc.readyCode, tc.readyMatch)
		}
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "metrics") {
		t.Errorf("/metrics: %d %q", code, body)
	}
	if code, _ := get("/other"); code != 404 {
		t.Errorf("/other: %d, want 404", code)
	}
	if code, _ := get("/debug/pprof/"); code != 404 {
		t.Errorf("/debug/pprof/ without --profiling: %d, want 404", code)
	}
}

func TestProfilingEndpoints(t *testing.T) {
	h := &health{}
	srv := httptest.NewServer(h.handler(http.NotFoundHandler(), true))
	defer srv.Close()
	for path, want := range map[string]string{
		"/debug/pprof/":                  "goroutine",
		"/debug/pprof/goroutine?debug=1": "goroutine profile",
		"/debug/pprof/heap?debug=1":      "heap profile",
		"/debug/pprof/cmdline":           "",
		"/debug/pprof/profile?seconds=1": "",
	} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(body) == 0 || !strings.Contains(string(body), want) {
			t.Errorf("%s: %d, %d bytes, want 200 with %q", path, resp.StatusCode, len(body), want)
		}
	}
}

// TestRunWithoutLeaderElection runs the whole operator on fake clients: it
// becomes ready once the caches synced, resumes the cluster it finds (the
// cluster is created: its StatefulSet appears, its status says Creating),
// exports metrics, and stops cleanly.
func TestRunWithoutLeaderElection(t *testing.T) {
	cfg := testConfig(t)
	cfg.LeaderElect = false
	kube := fake.NewClientset()
	pg := fixtures.NewPGClient(newPG("db", "alpha"))
	in := start(t, cfg, kube, pg)

	eventually(t, 10*time.Second, "/readyz is 200", func() bool { code, _ := in.get("/readyz"); return code == 200 })
	eventually(t, 10*time.Second, "the StatefulSet is created", func() bool {
		_, err := kube.AppsV1().StatefulSets("db").Get(context.Background(), cluster.StatefulSetName("alpha"), metav1.GetOptions{})
		return err == nil
	})
	eventually(t, 10*time.Second, "the status says Creating", func() bool {
		got, err := pg.PgloopV1().Postgresqls("db").Get(context.Background(), "alpha", metav1.GetOptions{})
		return err == nil && got.Status.State == fsm.Creating
	})
	_, body := in.get("/metrics")
	for _, want := range []string{
		"\npgloop_leader 1\n",
		`pgloop_transitions_total{event="create",from="Pending",to="Creating"} 1`,
		`pgloop_clusters{state="Creating"} 1`,
		`pgloop_effect_step_duration_seconds_count{step="ensure"}`,
		"pgloop_loop_events_dispatched_total",
		`pgloop_loop_lag_seconds_count{kind="signal"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if err := in.stop(); err != nil {
		t.Fatalf("run after a clean stop: %v", err)
	}
}

func TestRunFailsWithoutCRD(t *testing.T) {
	cfg := testConfig(t)
	cfg.LeaderElect = false
	pg := fixtures.NewPGClient()
	failLists(pg, apierrors.NewNotFound(schema.GroupResource{Group: "pgloop.dev", Resource: "postgresqls"}, ""))
	in := start(t, cfg, fake.NewClientset(), pg)
	err := in.wait(5 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "CRD postgresqls.pgloop.dev not installed") {
		t.Fatalf("error %v, want the CRD named", err)
	}
}

func TestRunFailsWhenForbidden(t *testing.T) {
	cfg := testConfig(t)
	cfg.LeaderElect = false
	cfg.Namespaces = []string{"db"}
	pg := fixtures.NewPGClient()
	failLists(pg, apierrors.NewForbidden(schema.GroupResource{Group: "pgloop.dev", Resource: "postgresqls"}, "", errors.New("no")))
	in := start(t, cfg, fake.NewClientset(), pg)
	err := in.wait(5 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "not allowed to list postgresqls.pgloop.dev in namespace db: check the operator's RBAC") {
		t.Fatalf("error %v, want RBAC named", err)
	}
}

// TestRunNamesWhatDoesNotSync: when a cache cannot sync because the
// operator may not list a kind it watches, the error names the kind.
func TestRunNamesWhatDoesNotSync(t *testing.T) {
	cfg := testConfig(t)
	cfg.LeaderElect = false
	cfg.CacheSyncTimeout = time.Second
	kube := fake.NewClientset()
	kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no"))
	})
	in := start(t, cfg, kube, fixtures.NewPGClient())
	err := in.wait(10 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "informer caches did not sync within 1s: not allowed to list pods in all namespaces") {
		t.Fatalf("error %v, want pods named", err)
	}
}

// TestRunUnreachable runs the exported Run, with real clients, against API
// servers that refuse connections or never answer: it fails, says why, and
// within its deadline.
func TestRunUnreachable(t *testing.T) {
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()

	// A server that accepts and never answers.
	hang := make(chan struct{})
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer silent.Close()
	defer close(hang)

	tests := []struct {
		name, server, want string
	}{
		{"connection refused", "http://" + closed, "connection refused"},
		{"no answer", silent.URL, "did not answer a list of postgresqls.pgloop.dev in all namespaces within 1s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.LeaderElect = false
			cfg.CacheSyncTimeout = time.Second
			cfg.Kubeconfig = writeKubeconfig(t, tc.server)
			start := time.Now()
			err := Run(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %s, want about the 1s deadline", d)
			}
		})
	}
}

func TestRunBadKubeconfig(t *testing.T) {
	cfg := testConfig(t)
	cfg.Kubeconfig = filepath.Join(t.TempDir(), "missing")
	err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "load kubeconfig") {
		t.Fatalf("error %v, want the kubeconfig named", err)
	}
	cfg.Workers = 0
	if err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "invalid configuration: workers") {
		t.Fatalf("error %v, want the configuration refused first", err)
	}
}

func TestRunHealthAddrInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := testConfig(t)
	cfg.HealthAddr = ln.Addr().String()
	err = run(context.Background(), cfg, newLogger(&cfg), clients{kube: fake.NewClientset(), pg: fixtures.NewPGClient()}, metrics.New())
	if err == nil || !strings.Contains(err.Error(), "listen on health-addr") {
		t.Fatalf("error %v, want the address named", err)
	}
}

func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	data := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: %s
users:
- name: u
  user:
    token: t
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`, server)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLeaderElection runs two replicas on one fake API: one leads and runs
// the loop, the other stands by (and is Ready); stopping the leader
// releases the Lease and the standby takes over at once; a leader whose
// Lease is taken from it exits with ErrLeadershipLost.
func TestLeaderElection(t *testing.T) {
	cfg := testConfig(t)
	cfg.LeaderElectionNamespace = "pgloop-system"
	kube := fake.NewClientset()
	pg := fixtures.NewPGClient(newPG("db", "alpha"))
	// Set before the fake is used: its reactors are not safe to change
	// while it serves. (Not a Conflict: client-go retries a conflicting
	// release without bound on a client that ignores deadlines, as the
	// fake does.)
	var leasesDown atomic.Bool
	kube.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if leasesDown.Load() {
			return true, nil, apierrors.NewServiceUnavailable("etcd is away")
		}
		return false, nil, nil
	})

	holder := func() string {
		l, err := kube.CoordinationV1().Leases("pgloop-system").Get(context.Background(), DefaultLeaderElectionID, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return ptr.Deref(l.Spec.HolderIdentity, "")
	}
	leads := func(in *instance) bool {
		_, body := in.get("/metrics")
		return strings.Contains(body, "\npgloop_leader 1\n")
	}

	a := start(t, cfg, kube, pg)
	eventually(t, 10*time.Second, "a leads", func() bool { return leads(a) })
	eventually(t, 10*time.Second, "a is ready", func() bool { code, _ := a.get("/readyz"); return code == 200 })
	first := holder()
	if first == "" {
		t.Fatal("no Lease holder while a leads")
	}

	b := start(t, cfg, kube, pg)
	// b stands by: Ready, not leading, and it stays so.
	eventually(t, 5*time.Second, "b is ready as a standby", func() bool {
		code, body := b.get("/readyz")
		return code == 200 && strings.Contains(body, "standby")
	})
	time.Sleep(cfg.LeaseDuration)
	if leads(b) || holder() != first {
		t.Fatalf("b took over from a live leader (b leads: %v, holder %q, first %q)", leads(b), holder(), first)
	}

	if err := a.stop(); err != nil {
		t.Fatalf("a after a clean stop: %v", err)
	}
	// Released on stop: the Lease no longer names a (it is empty, or b
	// took it already), so b need not wait for it to expire.
	if h := holder(); h == first {
		t.Errorf("the Lease still names %q after its clean stop: not released", h)
	}
	eventually(t, 10*time.Second, "b leads", func() bool { return leads(b) })
	if h := holder(); h == "" || h == first {
		t.Fatalf("Lease holder %q after the hand-over", h)
	}

	// b can no longer renew: it must stop, and say so.
	leasesDown.Store(true)
	err := b.wait(10 * time.Second)
	if !errors.Is(err, ErrLeadershipLost) {
		t.Fatalf("b returned %v, want ErrLeadershipLost", err)
	}
}

// The operator's kube client asks for the built-in kinds as protobuf
// (client-go's default for its typed clients while no content type is
// set): at N = 5,000, JSON made the restart 28 % slower and the burst 9 %
// (docs/scale.md). The Postgresql client asks for JSON: a custom resource
// has no protobuf.
func TestClientsAskForProtobuf(t *testing.T) {
	accepts := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accepts <- r.URL.Path + " " + r.Header.Get("Accept")
		http.NotFound(w, r)
	}))
	defer srv.Close()
	cfg := DefaultConfig()
	cl, err := newClients(&rest.Config{Host: srv.URL}, &cfg, gateObservers{})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = cl.kube.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{})
	_, _ = cl.pg.PgloopV1().Postgresqls("ns").Get(context.Background(), "c", metav1.GetOptions{})
	for _, want := range []string{
		"/api/v1/namespaces/ns/pods/p application/vnd.kubernetes.protobuf,application/json",
		"/apis/pgloop.dev/v1/namespaces/ns/postgresqls/c application/json, */*",
	} {
		if got := <-accepts; got != want {
			t.Errorf("request %q, want %q", got, want)
		}
	}
}

// The operator's clients go through the gate with each request's priority
// taken from its context, as the executor marks it.
func TestClientsGated(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.URL.Path
		<-release
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s"}}`)
	}))
	defer srv.Close()
	defer close(release)
	cfg := DefaultConfig()
	held := make(chan time.Duration, 10)
	cl, err := newClients(&rest.Config{Host: srv.URL}, &cfg, gateObservers{held: func(d time.Duration) { held <- d }})
	if err != nil {
		t.Fatal(err)
	}
	get := func(p reqclass.Priority, name string) {
		go func() {
			ctx := reqclass.WithPriority(context.Background(), p)
			_, _ = cl.kube.CoreV1().Secrets("ns").Get(ctx, name, metav1.GetOptions{})
		}()
	}
	get(reqclass.Urgent, "urgent")
	<-arrived
	get(reqclass.Background, "bg1")
	<-arrived
	get(reqclass.Background, "bg2") // one background in flight already: held
	select {
	case p := <-arrived:
		t.Fatalf("%s reached the server while an urgent request and a background one were in flight", p)
	case <-time.After(100 * time.Millisecond):
	}
}
