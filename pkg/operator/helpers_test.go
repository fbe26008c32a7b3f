package operator

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	pgfake "github.com/pgloop/pgloop/pkg/generated/clientset/versioned/fake"
	"github.com/pgloop/pgloop/pkg/informers"
	"github.com/pgloop/pgloop/pkg/internal/fixtures"
	"github.com/pgloop/pgloop/pkg/metrics"
)

func TestMain(m *testing.M) {
	// client-go logs leader election and watch errors through klog.
	klog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// startInformers runs the informers over the given objects until the test
// ends, notifying nothing, and returns once their caches are synced, with
// the fake clientsets they read.
func startInformers(t testing.TB, pgs []*v1.Postgresql, objs ...runtime.Object) (*informers.Informers, *fake.Clientset, *pgfake.Clientset) {
	t.Helper()
	kube := fake.NewClientset(objs...)
	pgc := fixtures.NewPGClient(pgs...)
	inf := informers.New(kube, pgc, informers.Options{}, nopNotifier{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	inf.Start(ctx)
	syncCtx, cancelSync := context.WithTimeout(ctx, time.Minute)
	defer cancelSync()
	if err := inf.WaitForCacheSync(syncCtx); err != nil {
		t.Fatal(err)
	}
	return inf, kube, pgc
}

// failLists makes every List and Watch of pg's resources fail with err (a
// missing CRD, RBAC). Call it before pg is used: the fake's reactors are
// not safe to change while it serves.
func failLists(pg *pgfake.Clientset, err error) {
	pg.PrependReactor("list", v1.PostgresqlResource, func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, err
	})
	pg.PrependWatchReactor(v1.PostgresqlResource, func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, nil, err
	})
}

// newPG returns a new, valid cluster.
func newPG(ns, name string) *v1.Postgresql {
	return &v1.Postgresql{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(name + "-uid"), Generation: 1},
		Spec: v1.PostgresqlSpec{
			TeamID:            "acid",
			NumberOfInstances: 2,
			PostgreSQL:        v1.PostgresqlParam{Version: "17"},
			Volume:            v1.Volume{Size: resource.MustParse("1Gi")},
		},
	}
}

// testConfig is a valid configuration for tests: a free port, short
// leases, quiet logs.
func testConfig(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.HealthAddr = "127.0.0.1:0"
	cfg.LeaseDuration = 2 * time.Second
	cfg.RenewDeadline = time.Second
	cfg.RetryPeriod = 200 * time.Millisecond
	cfg.CacheSyncTimeout = 10 * time.Second
	cfg.LogOutput = io.Discard
	if testing.Verbose() {
		cfg.LogOutput = testWriter{t}
	}
	return cfg
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// instance is one run of the operator in a test.
type instance struct {
	t      *testing.T
	cancel context.CancelFunc
	done   chan error
	addr   chan string
	url    string
}

// start runs the operator on fake clients until the test ends or stop.
func start(t *testing.T, cfg Config, kube *fake.Clientset, pg *pgfake.Clientset) *instance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{t: t, cancel: cancel, done: make(chan error, 1), addr: make(chan string, 1)}
	cfg.OnListen = func(addr string) { in.addr <- addr }
	log := newLogger(&cfg)
	go func() { in.done <- run(ctx, cfg, log, clients{kube: kube, pg: pg, election: kube}, metrics.New()) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-in.done:
		case <-time.After(time.Minute):
			t.Error("run did not return within a minute of its context's end")
		}
	})
	select {
	case addr := <-in.addr:
		in.url = "http://" + addr
	case err := <-in.done:
		in.done <- err
		t.Fatalf("run returned before listening: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("not listening within a minute")
	}
	return in
}

// stop ends the run and returns its error.
func (in *instance) stop() error {
	in.t.Helper()
	in.cancel()
	select {
	case err := <-in.done:
		in.done <- err // for the cleanup
		return err
	case <-time.After(time.Minute):
		in.t.Fatal("run did not return within a minute of its context's end")
		return nil
	}
}

// wait returns the run's error once it returns by itself.
func (in *instance) wait(d time.Duration) error {
	in.t.Helper()
	select {
	case err := <-in.done:
		in.done <- err
		return err
	case <-time.After(d):
		in.t.Fatalf("run did not return within %s", d)
		return nil
	}
}

// get returns the status and body of path.
func (in *instance) get(path string) (int, string) {
	in.t.Helper()
	resp, err := http.Get(in.url + path)
	if err != nil {
		in.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// eventually polls cond every 50ms for up to d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
