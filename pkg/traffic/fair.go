package traffic

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/metrics"
	"github.com/pgloop/pgloop/pkg/reqclass"
)

// writeDetachAfter is how long a write may hold its kind's window at
// least: past it (or past writeDetachFactor times its kind's slow latency,
// if longer), it goes on without holding a place, so a write that hangs
// (an admission webhook that holds one namespace's creates, a request the
// API server never answers) never stops other clusters' writes of its
// kind for longer.
const (
	writeDetachAfter  = time.Second
	writeDetachFactor = 20
)

// WriteWindows bounds the writes of each kind (verb and resource, as
// pgloop_api_requests_total counts them: create services, update
// postgresqls/status) that pgloop has in flight, by a window that follows
// their latency as the pacer does (pace.go): halved when the median of a
// round of writes is more than twice their least latency seen lately,
// grown by one per window answered in time, never below one. The writes
// waiting for a place are let go by namespace in turns, a user's action's
// (urgent plans) before background work's, so a namespace's burst does
// not delay another namespace's write by more than one write of the kind.
//
// Why: the API server serves some kinds one at a time, or nearly. Service
// creates allocate a ClusterIP each (an IPAddress object written through
// the server's own client): on this machine's plane, 146 a second from one
// client, 216 from two, and no more from 64, each of those then waiting
// 230 ms. Without a bound, a burst of 200 creates in one namespace put a
// hundred Service creates in flight, each answered 3 s later, and another
// namespace's cluster waited as long for its Services, so for Running
// (docs/scale.md, "Fair writes"). Nothing is tuned to a machine: the
// window of each kind finds how many of its writes the server answers at
// about their least latency, and keeps about that many in flight; more
// would only wait in the server, where pgloop can no longer order them.
//
// A write never fails for its wait in pgloop's queue: its step's deadline
// stands still while it waits (eventloop.PauseDeadline), so only the API
// server's time counts; a write with no step's deadline to pause goes on
// without a place once it has waited half of what its deadline left. At
// N = 10,000 (100 namespaces in turns, the ClusterIP Services' window at
// 1, each create 250 ms) a Service create waited for its turn longer than
// its step's deadline, and 898 failed; leaving the queue at half the
// deadline only moved the failures into the server's queue (docs/scale.md,
// "Write classes and a probe").
//
// Only writes of a plan (reqclass.PriorityOf: urgent or background) and
// Event writes are bounded; reads, watches, leader election are not.
// Its methods lock mu; the pacers' are called with it held.
type WriteWindows struct {
	clock clock.WithDelayedExecution
	// onWindow, if set, is told a kind's window when it changes.
	onWindow func(verb, resource, class string, window float64)
	// onWait, if set, is told of every write that went through a window:
	// its kind, whether it was urgent, and how long it waited for its
	// place (0 when one was free). Called without w.mu.
	onWait func(verb, resource, class string, urgent bool, waited time.Duration)

	mu    sync.Mutex
	kinds map[string]*kindWindow
}

// kindWindow is the window of one kind of write and the writes waiting
// for it, by priority. A kind is a verb and resource, and the class its
// writes were marked with (reqclass.WithWriteClass), if any: a headless
// Service's create allocates no ClusterIP, and in the window of the
// others its latency, a tenth of theirs, would be taken as the API
// server's idle one, and every other create as slow.
type kindWindow struct {
	verb     string
	resource string
	class    string
	pace     *pacer
	rate     rateWindow // the window while writes wait (ratewindow.go)
	inFlight int        // writes holding a place
	urgent   nsQueue
	rest     nsQueue
}

// nsQueue holds waiting writes by namespace; the namespaces take turns,
// one write each, in the order they came.
type nsQueue struct {
	turns []string
	byNS  map[string][]*writeWaiter
}

// writeWaiter is a write waiting for a place: closing ch lets it go.
type writeWaiter struct {
	ch chan struct{}
	ns string
}

// writeSlot is a place a write holds until done or detached, or, if it
// went without one (it waited half its deadline), the write's.
type writeSlot struct {
	k     *kindWindow
	sent  time.Time
	held  bool // holds its place (false once detached or done)
	timer clock.Timer
}

// NewWriteWindows returns the write windows. onWindow, if set, is told a
// kind's window when it changes; onWait, if set, is told how long each
// windowed write waited for its place.
func NewWriteWindows(onWindow func(verb, resource, class string, window float64),
	onWait func(verb, resource, class string, urgent bool, waited time.Duration)) *WriteWindows {
	w := newWriteWindows(nil, onWindow)
	w.onWait = onWait
	return w
}

// newWriteWindows is NewWriteWindows with its clock, and no onWait.
func newWriteWindows(clk clock.WithDelayedExecution, onWindow func(verb, resource, class string, window float64)) *WriteWindows {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &WriteWindows{clock: clk, onWindow: onWindow, kinds: make(map[string]*kindWindow)}
}

// Wrap is a rest.Config WrapTransport: the writes sent through the
// transport it returns go through w, then rt.
func (w *WriteWindows) Wrap(rt http.RoundTripper) http.RoundTripper {
	return wrapped(rt, w.roundTrip)
}

func (w *WriteWindows) roundTrip(next http.RoundTripper, req *http.Request) (*http.Response, error) {
	p := requestPriority(req)
	if p == reqclass.Unmarked || req.Method == http.MethodGet || req.Method == http.MethodHead {
		return next.RoundTrip(req)
	}
	verb, resource := metrics.RequestVerb(req.Method, req.URL.Path, "")
	ctx := req.Context()
	s, err := w.acquire(ctx, verb, resource, reqclass.WriteClassOf(ctx), requestNamespace(req.URL.Path), p == reqclass.Urgent)
	if err != nil {
		return nil, err
	}
	resp, err := next.RoundTrip(req)
	w.done(s)
	return resp, err
}

// requestNamespace is the namespace a request's path names, "" for none.
func requestNamespace(path string) string {
	_, rest, ok := strings.Cut(path, "/namespaces/")
	if !ok {
		return ""
	}
	ns, _, _ := strings.Cut(rest, "/")
	return ns
}

// acquire takes a place in the window of its kind (verb, resource and
// class) for a write of namespace ns, waiting its turn when the window is
// full or others wait; it gives up when ctx ends.
func (w *WriteWindows) acquire(ctx context.Context, verb, resource, class, ns string, urgent bool) (*writeSlot, error) {
	if s := w.takeIfFree(verb, resource, class); s != nil {
		w.waited(s.k, urgent, 0)
		return s, nil
	}
	queued := w.clock.Now()
	// pgloop's own queue never fails a step: the step's deadline stands
	// still while its write waits here, paused before it queues (and
	// never under w.mu: the clock's callbacks take it). A write whose
	// deadline cannot be paused (no step's, or an earlier one of its
	// own) goes on without a place once it has waited half of what its
	// deadline left. That deadline is the wall clock's (time.Until), the
	// wait w.clock's.
	resume, paused := eventloop.PauseDeadline(ctx)
	defer resume()
	w.mu.Lock()
	k := w.kind(verb, resource, class)
	if k.free() { // a place was freed meanwhile
		s := w.take(k)
		w.mu.Unlock()
		w.waited(k, urgent, s.sent.Sub(queued))
		return s, nil
	}
	wt := &writeWaiter{ch: make(chan struct{}), ns: ns}
	q := &k.rest
	if urgent {
		q = &k.urgent
	}
	q.push(wt)
	w.mu.Unlock()

	var leave <-chan time.Time
	if dl, ok := ctx.Deadline(); ok && !paused {
		t := w.clock.NewTimer(time.Until(dl) / 2)
		defer t.Stop()
		leave = t.C()
	}
	select {
	case <-wt.ch:
		return w.grantedAfter(k, urgent, queued), nil
	case <-leave:
		w.mu.Lock()
		select {
		case <-wt.ch: // granted meanwhile
			w.mu.Unlock()
			return w.grantedAfter(k, urgent, queued), nil
		default:
			q.remove(wt)
		}
		w.mu.Unlock()
		s := &writeSlot{k: k, sent: w.clock.Now()}
		w.waited(k, urgent, s.sent.Sub(queued))
		return s, nil
	case <-ctx.Done():
		w.mu.Lock()
		defer w.mu.Unlock()
		select {
		case <-wt.ch: // granted meanwhile: hand the place on
			k.inFlight--
			w.dispatch(k)
		default:
			q.remove(wt)
		}
		return nil, ctx.Err()
	}
}

// takeIfFree takes a place in the window of its kind if one is free and
// no write waits, nil otherwise.
func (w *WriteWindows) takeIfFree(verb, resource, class string) *writeSlot {
	w.mu.Lock()
	defer w.mu.Unlock()
	if k := w.kind(verb, resource, class); k.free() {
		return w.take(k)
	}
	return nil
}

// free reports whether a write of k may go now: a place is free and no
// write waits for one. w.mu is held.
func (k *kindWindow) free() bool {
	return k.urgent.empty() && k.rest.empty() && k.allows(k.inFlight)
}

// window is how many writes of k may be in flight: the rate window's
// while writes wait, else the pacer's. w.mu is held.
func (k *kindWindow) window() int { return k.rate.size(k.pace.window) }

// allows reports whether one more write of k may go with inFlight in
// flight. w.mu is held.
func (k *kindWindow) allows(inFlight int) bool { return inFlight < k.window() }

// kind returns the window of a kind, made at its first write. w.mu is
// held.
func (w *WriteWindows) kind(verb, resource, class string) *kindWindow {
	key := kindKey(verb, resource, class)
	k := w.kinds[key]
	if k == nil {
		k = &kindWindow{verb: verb, resource: resource, class: class, pace: newPacer()}
		w.kinds[key] = k
	}
	return k
}

// kindKey names a kind: "create services", "create services headless".
func kindKey(verb, resource, class string) string {
	if class == "" {
		return verb + " " + resource
	}
	return verb + " " + resource + " " + class
}

// take counts a place of k taken now and arms its detach. w.mu is held.
func (w *WriteWindows) take(k *kindWindow) *writeSlot {
	k.inFlight++
	s := &writeSlot{k: k, sent: w.clock.Now(), held: true}
	after := max(writeDetachAfter, writeDetachFactor*k.pace.slow())
	s.timer = w.clock.AfterFunc(after, func() { w.detach(s) })
	return s
}

// granted is take for a waiter that dispatch let go: dispatch counted
// its place already.
func (w *WriteWindows) granted(k *kindWindow) *writeSlot {
	w.mu.Lock()
	defer w.mu.Unlock()
	k.inFlight--
	return w.take(k)
}

// grantedAfter is granted for a write that queued at queued, told to
// onWait.
func (w *WriteWindows) grantedAfter(k *kindWindow, urgent bool, queued time.Time) *writeSlot {
	s := w.granted(k)
	w.waited(k, urgent, s.sent.Sub(queued))
	return s
}

// waited tells onWait that a write of k waited d for its place. w.mu is
// not held.
func (w *WriteWindows) waited(k *kindWindow, urgent bool, d time.Duration) {
	if w.onWait != nil {
		w.onWait(k.verb, k.resource, k.class, urgent, d)
	}
}

// detach lets s go on without its place, which the next waiter takes.
func (w *WriteWindows) detach(s *writeSlot) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !s.held {
		return
	}
	s.held = false
	s.k.inFlight--
	w.dispatch(s.k)
}

// done tells the window of s that its write was answered: the pacer
// learns its latency, and its place, if it still held one, goes to the
// next waiter.
func (w *WriteWindows) done(s *writeSlot) {
	if s.timer != nil {
		s.timer.Stop()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock.Now()
	k := s.k
	before := k.window()
	k.pace.observe(s.sent, now, now.Sub(s.sent), true)
	k.rate.observe(now, before, !k.urgent.empty() || !k.rest.empty())
	if after := k.window(); after != before && w.onWindow != nil {
		w.onWindow(k.verb, k.resource, k.class, float64(after))
	}
	if s.held {
		s.held = false
		k.inFlight--
	}
	w.dispatch(k)
}

// dispatch lets waiting writes of k go while its window allows: urgent
// ones first, each queue's namespaces in turns. w.mu is held.
func (w *WriteWindows) dispatch(k *kindWindow) {
	for k.allows(k.inFlight) {
		wt := k.urgent.pop()
		if wt == nil {
			wt = k.rest.pop()
		}
		if wt == nil {
			return
		}
		k.inFlight++ // counted again by granted, which takes it
		close(wt.ch)
	}
}

func (q *nsQueue) empty() bool { return len(q.turns) == 0 }

// push queues wt at the end of its namespace's writes, and the namespace
// at the end of the turns if it had none waiting.
func (q *nsQueue) push(wt *writeWaiter) {
	if q.byNS == nil {
		q.byNS = make(map[string][]*writeWaiter)
	}
	if len(q.byNS[wt.ns]) == 0 {
		q.turns = append(q.turns, wt.ns)
	}
	q.byNS[wt.ns] = append(q.byNS[wt.ns], wt)
}

// pop takes the first write of the namespace whose turn it is, nil when
// none waits; the namespace goes to the back of the turns if it has more.
func (q *nsQueue) pop() *writeWaiter {
	if len(q.turns) == 0 {
		return nil
	}
	ns := q.turns[0]
	q.turns = q.turns[1:]
	ws := q.byNS[ns]
	wt := ws[0]
	if len(ws) == 1 {
		delete(q.byNS, ns)
	} else {
		q.byNS[ns] = ws[1:]
		q.turns = append(q.turns, ns)
	}
	return wt
}

// remove drops wt, which gave up waiting.
func (q *nsQueue) remove(wt *writeWaiter) {
	ws := q.byNS[wt.ns]
	for i, x := range ws {
		if x == wt {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) > 0 {
		q.byNS[wt.ns] = ws
		return
	}
	delete(q.byNS, wt.ns)
	for i, ns := range q.turns {
		if ns == wt.ns {
			q.turns = append(q.turns[:i], q.turns[i+1:]...)
			break
		}
	}
}
