package events

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
)

// slowSink holds every write until the test lets it go: one receive from
// release per write, or all once release is closed. A write whose context
// ends first fails with the context's error.
type slowSink struct {
	release chan struct{}
	started chan string // the Event's name, at each write's start
	fail    func(attempt int) error

	mu          sync.Mutex
	attempts    int
	inFlight    int
	maxInFlight int
	created     []*corev1.Event
	patches     []patchCall
}

type patchCall struct {
	name  string
	count int32
}

func newSlowSink() *slowSink {
	return &slowSink{release: make(chan struct{}), started: make(chan string, 20000)}
}

func (s *slowSink) enter(name string) (int, error) {
	s.mu.Lock()
	s.attempts++
	attempt := s.attempts
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	s.mu.Unlock()
	s.started <- name
	return attempt, nil
}

func (s *slowSink) wait(ctx context.Context, attempt int) error {
	defer func() { s.mu.Lock(); s.inFlight--; s.mu.Unlock() }()
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.fail != nil {
		return s.fail(attempt)
	}
	return nil
}

func (s *slowSink) Create(ctx context.Context, ev *corev1.Event) error {
	attempt, _ := s.enter(ev.Name)
	if err := s.wait(ctx, attempt); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.created = append(s.created, ev)
	return nil
}

func (s *slowSink) Patch(ctx context.Context, _, name string, data []byte) error {
	attempt, _ := s.enter(name)
	if err := s.wait(ctx, attempt); err != nil {
		return err
	}
	var p struct{ Count int32 }
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.patches = append(s.patches, patchCall{name: name, count: p.Count})
	return nil
}

func (s *slowSink) messages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, ev := range s.created {
		out = append(out, ev.Message)
	}
	return out
}

// counts counts what a Recorder reports.
type counts struct {
	mu                         sync.Mutex
	transitions, others, wrote int
}

func (c *counts) dropped(transition bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if transition {
		c.transitions++
	} else {
		c.others++
	}
}

func (c *counts) written() { c.mu.Lock(); c.wrote++; c.mu.Unlock() }

func (c *counts) get() (transitions, others, wrote int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.transitions, c.others, c.wrote
}

func newRecorder(t *testing.T, sink Sink, c *counts, clk *clocktesting.FakeClock, mod func(*Options)) *Recorder {
	t.Helper()
	opts := Options{
		Scheme:     clientgoscheme.Scheme,
		Source:     corev1.EventSource{Component: "pgloop"},
		Transition: func(reason string) bool { return reason == "Running" || reason == "Degraded" },
		Clock:      clk,
		Dropped:    c.dropped,
		Written:    c.written,
	}
	if mod != nil {
		mod(&opts)
	}
	return New(sink, opts)
}

// The Recorder's objects are ConfigMaps here: the scheme knows them, and
// Recorder only needs a reference.
func obj(i int) runtime.Object {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: fmt.Sprintf("c%d", i), UID: "u"}}
}

// waitFor fails the test unless cond holds within a minute; it polls, so the
// test waits only as long as the Recorder needs.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A burst of 10,000 Events on 5,000 clusters while the API server holds
// every write: the queue's bound (6,000) drops 4,000 Events, none of them
// a transition's, every cluster's transition is written once the server
// answers, and no more than 4 writes are in flight at once.
func TestBurstKeepsTransitions(t *testing.T) {
	const clusters = 5000
	sink := newSlowSink()
	c := &counts{}
	clk := clocktesting.NewFakeClock(time.Now())
	r := newRecorder(t, sink, c, clk, func(o *Options) { o.Workers = 4; o.MaxQueued = 6000 })
	defer r.Shutdown(0)

	for i := range clusters {
		r.Event(obj(i), corev1.EventTypeNormal, "BackupStarted", fmt.Sprintf("c%d backup", i))
		r.Event(obj(i), corev1.EventTypeWarning, "Degraded", fmt.Sprintf("c%d Running -> Degraded", i))
	}
	// Four writes start, none ends: four in flight at once.
	for range 4 {
		<-sink.started
	}
	if tr, ot, _ := c.get(); tr != 0 || ot != 4000 {
		t.Errorf("dropped %d transition and %d other Events, want 0 and 4000", tr, ot)
	}
	if q := r.Queued(); q != 6000 {
		t.Errorf("%d Events queued, want 6000", q)
	}
	close(sink.release)
	waitFor(t, "the queue to drain", func() bool { return r.Queued() == 0 })

	got := sink.messages()
	if len(got) != 6000 {
		t.Errorf("%d Events written, want 6000", len(got))
	}
	for i := range clusters {
		if want := fmt.Sprintf("c%d Running -> Degraded", i); !slices.Contains(got, want) {
			t.Fatalf("cluster c%d's transition Event was not written", i)
		}
	}
	if _, _, w := c.get(); w != 6000 {
		t.Errorf("%d writes counted, want 6000", w)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.maxInFlight != 4 {
		t.Errorf("%d writes in flight at most, want 4 (the workers)", sink.maxInFlight)
	}
}

// One object's queue at its bound keeps transitions first: the non-
// transition Events go, then the oldest transitions, and the Event in
// flight is never dropped. The written ones keep their order.
func TestPerObjectBound(t *testing.T) {
	sink := newSlowSink()
	c := &counts{}
	r := newRecorder(t, sink, c, clocktesting.NewFakeClock(time.Now()), func(o *Options) { o.Workers = 1; o.PerObject = 4 })
	defer r.Shutdown(0)

	r.Event(obj(0), corev1.EventTypeNormal, "BackupStarted", "o0")
	<-sink.started // o0 in flight
	r.Event(obj(0), corev1.EventTypeNormal, "BackupStarted", "o1")
	for i := range 6 {
		r.Event(obj(0), corev1.EventTypeNormal, "Running", fmt.Sprintf("t%d", i))
	}
	r.Event(obj(0), corev1.EventTypeNormal, "BackupSucceeded", "o2") // full of transitions: dropped
	if tr, ot, _ := c.get(); tr != 3 || ot != 2 {
		t.Errorf("dropped %d transition and %d other Events, want 3 (t0, t1, t2) and 2 (o1, o2)", tr, ot)
	}
	close(sink.release)
	waitFor(t, "the queue to drain", func() bool { return r.Queued() == 0 })
	if got, want := sink.messages(), []string{"o0", "t3", "t4", "t5"}; !slices.Equal(got, want) {
		t.Errorf("written %v, want %v", got, want)
	}
}

// The same Event again is counted on the queued one, then written as a
// patch of the Event written within the window; after the window it is a
// new Event.
func TestAggregation(t *testing.T) {
	sink := newSlowSink()
	c := &counts{}
	clk := clocktesting.NewFakeClock(time.Now())
	r := newRecorder(t, sink, c, clk, func(o *Options) { o.Workers = 1; o.Window = time.Minute })
	defer r.Shutdown(0)

	same := func() { r.Event(obj(0), corev1.EventTypeWarning, "ArchiveFailing", "WAL archiving fails") }
	same()
	<-sink.started // the first in flight
	same()         // queued
	same()         // counted on the queued one
	if q := r.Queued(); q != 2 {
		t.Errorf("%d queued, want 2 (one in flight, one with count 2)", q)
	}
	sink.release <- struct{}{}
	<-sink.started
	sink.release <- struct{}{}
	waitFor(t, "the queue to drain", func() bool { return r.Queued() == 0 })
	sink.mu.Lock()
	if len(sink.created) != 1 || len(sink.patches) != 1 || sink.patches[0] != (patchCall{sink.created[0].Name, 3}) {
		t.Errorf("created %d, patches %v; want one Event, then its count patched to 3", len(sink.created), sink.patches)
	}
	sink.mu.Unlock()

	clk.Step(2 * time.Minute)
	same()
	<-sink.started
	sink.release <- struct{}{}
	waitFor(t, "the queue to drain", func() bool { return r.Queued() == 0 })
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.created) != 2 || len(sink.patches) != 1 {
		t.Errorf("created %d, patched %d; want a second Event after the window", len(sink.created), len(sink.patches))
	}
	if _, _, w := c.get(); w != 3 {
		t.Errorf("%d writes counted, want 3", w)
	}
}

// A failed write is retried after a backoff that doubles, at most Retries
// times; then the Event is dropped and counted.
func TestRetries(t *testing.T) {
	sink := newSlowSink()
	close(sink.release)
	sink.fail = func(attempt int) error {
		if attempt <= 2 || attempt >= 4 {
			return apierrors.NewServiceUnavailable("slow")
		}
		return nil
	}
	c := &counts{}
	clk := clocktesting.NewFakeClock(time.Now())
	r := newRecorder(t, sink, c, clk, func(o *Options) { o.Workers = 1; o.Retries = 2; o.Backoff = time.Second })
	defer r.Shutdown(0)

	r.Event(obj(0), corev1.EventTypeWarning, "Degraded", "kept")
	for _, wait := range []time.Duration{time.Second, 2 * time.Second} {
		<-sink.started
		waitFor(t, "the backoff", clk.HasWaiters)
		clk.Step(wait - time.Millisecond)
		if clk.Waiters() != 1 {
			t.Fatalf("the backoff ended before %s", wait)
		}
		clk.Step(time.Millisecond)
	}
	<-sink.started // the third attempt succeeds
	waitFor(t, "the write", func() bool { _, _, w := c.get(); return w == 1 })

	r.Event(obj(1), corev1.EventTypeWarning, "Degraded", "lost") // attempts 4, 5, 6 fail
	for _, wait := range []time.Duration{time.Second, 2 * time.Second} {
		<-sink.started
		waitFor(t, "the backoff", clk.HasWaiters)
		clk.Step(wait)
	}
	<-sink.started
	waitFor(t, "the drop", func() bool { tr, _, _ := c.get(); return tr == 1 })
	if got := sink.messages(); !slices.Equal(got, []string{"kept"}) {
		t.Errorf("written %v, want [kept]", got)
	}
}

// Shutdown writes what is queued, within its bound: a flush that ends in
// time returns without the clock moving; one that does not is cut at the
// bound, the writes in flight cancelled and what is left counted as
// dropped, as are the Events recorded after it.
func TestShutdown(t *testing.T) {
	t.Run("flushed", func(t *testing.T) {
		sink := newSlowSink()
		c := &counts{}
		clk := clocktesting.NewFakeClock(time.Now())
		r := newRecorder(t, sink, c, clk, func(o *Options) { o.Workers = 2 })
		for i := range 10 {
			r.Event(obj(i), corev1.EventTypeNormal, "Running", "t")
		}
		done := make(chan struct{})
		go func() { r.Shutdown(5 * time.Second); close(done) }()
		close(sink.release)
		<-done
		if tr, ot, w := c.get(); tr != 0 || ot != 0 || w != 10 {
			t.Errorf("dropped %d and %d, wrote %d; want 0, 0, 10", tr, ot, w)
		}
	})
	t.Run("cut at the bound", func(t *testing.T) {
		sink := newSlowSink()
		c := &counts{}
		clk := clocktesting.NewFakeClock(time.Now())
		r := newRecorder(t, sink, c, clk, func(o *Options) { o.Workers = 2 })
		for i := range 10 {
			r.Event(obj(i), corev1.EventTypeNormal, "Running", "t")
		}
		<-sink.started
		<-sink.started
		done := make(chan struct{})
		go func() { r.Shutdown(5 * time.Second); close(done) }()
		waitFor(t, "the flush's bound", clk.HasWaiters)
		r.Event(obj(11), corev1.EventTypeNormal, "BackupStarted", "late")
		clk.Step(5 * time.Second)
		<-done
		if tr, ot, w := c.get(); tr != 10 || ot != 1 || w != 0 {
			t.Errorf("dropped %d transition and %d other Events, wrote %d; want 10, 1, 0", tr, ot, w)
		}
		if r.Queued() != 0 {
			t.Errorf("%d still queued", r.Queued())
		}
	})
}

// With client-go's Events client (KubeSink), the Events of pgloop's
// resources and of the leader election's Lease are created, and a repeat
// is a patch of the first one's count.
func TestKubeSink(t *testing.T) {
	kube := fake.NewClientset()
	c := &counts{}
	r := newRecorder(t, KubeSink(kube.CoreV1()), c, clocktesting.NewFakeClock(time.Now()), nil)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "pgloop", Name: "pgloop-leader"}}
	r.Eventf(lease, corev1.EventTypeNormal, "LeaderElection", "%s became leader", "p1")
	waitFor(t, "the first write", func() bool { _, _, w := c.get(); return w == 1 })
	r.Eventf(lease, corev1.EventTypeNormal, "LeaderElection", "%s became leader", "p1")
	r.Shutdown(time.Minute)
	list, err := kube.CoreV1().Events("pgloop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d Events, want 1", len(list.Items))
	}
	ev := list.Items[0]
	gvk := schema.FromAPIVersionAndKind(ev.InvolvedObject.APIVersion, ev.InvolvedObject.Kind)
	if gvk.Kind != "Lease" || ev.InvolvedObject.Name != "pgloop-leader" || ev.Count != 2 || ev.Source.Component != "pgloop" {
		t.Errorf("Event %s on %v count %d source %v; want on the Lease, count 2, from pgloop", ev.Name, gvk, ev.Count, ev.Source)
	}
}
