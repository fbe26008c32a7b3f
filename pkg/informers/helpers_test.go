package informers

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	pgfake "github.com/pgloop/pgloop/pkg/generated/clientset/versioned/fake"
	"github.com/pgloop/pgloop/pkg/internal/fixtures"
)

// The cluster fixtures and the fake clientset are shared with the tests of
// pkg/facts and pkg/operator (pkg/internal/fixtures).
var (
	newPG         = fixtures.NewPG
	statefulSet   = fixtures.StatefulSet
	pod           = fixtures.Pod
	master        = fixtures.Master
	lock          = fixtures.Lock
	lockEndpoints = fixtures.LockEndpoints
	terminating   = fixtures.Terminating
	claim         = fixtures.Claim
	claimEvent    = fixtures.ClaimEvent
	resourceQuota = fixtures.ResourceQuota
	event         = fixtures.Event
	newPGClient   = fixtures.NewPGClient
)

const ns = fixtures.Namespace

// note is one Notify call.
type note struct{ key, signal string }

// recorder is a Notifier that hands every call to the test, in order.
type recorder struct{ ch chan note }

func newRecorder() *recorder { return &recorder{ch: make(chan note, 1024)} }

func (r *recorder) Notify(key, signal string) { r.ch <- note{key, signal} }

// NotifyUrgent records the signal as urgent(signal).
func (r *recorder) NotifyUrgent(key, signal string) { r.ch <- note{key, urgent(signal)} }

// urgent is how the recorder notes an urgent signal.
func urgent(signal string) string { return signal + " (urgent)" }

// next waits for the next note; the handlers run on the informers'
// goroutines.
func (r *recorder) next(t *testing.T) note {
	t.Helper()
	select {
	case n := <-r.ch:
		return n
	case <-time.After(time.Minute):
		t.Fatal("no notification within a minute")
		return note{}
	}
}

// discard is a Notifier for tests that only read the caches.
type discard struct{}

func (discard) Notify(string, string) {}

func (discard) NotifyUrgent(string, string) {}

// start runs informers over the given objects until the test ends, and
// returns once their caches are synced.
func start(t testing.TB, opts Options, n Notifier, pgs []*v1.Postgresql, objs ...runtime.Object) (*Informers, *fake.Clientset, *pgfake.Clientset) {
	t.Helper()
	kube := fake.NewClientset(objs...)
	pgc := newPGClient(pgs...)
	inf := New(kube, pgc, opts, n)
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
