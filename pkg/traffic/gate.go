package traffic

import (
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/reqclass"
)

// The request gate's defaults (docs/scale.md, "Fairness").
const (
	// DefaultBackgroundWhileUrgent is how many background requests may be
	// in flight while urgent ones are: none. With one, a new cluster's
	// create during the first seconds of a fleet rollout still met a
	// loaded API server (docs/scale.md, "Background requests wait").
	DefaultBackgroundWhileUrgent = 0
	// defaultUrgentHold is how long after the last urgent request ended
	// background requests are still held to that: an urgent plan's next
	// request follows its previous one within milliseconds (the loop
	// plans it from the result), and should not find the API server
	// busy again with the background requests held meanwhile.
	defaultUrgentHold = 250 * time.Millisecond
	// defaultMaxHeld is how long a background request is held at most:
	// past it, held requests go even while urgent traffic goes on, one
	// every defaultUrgentHold, so a steady stream of users' actions slows
	// the fleet's retries, resyncs and rollouts but never stops them.
	// (Letting one in flight at a time would hardly slow that work, and
	// so hardly help: a fleet rollout's status writes, one after another,
	// kept a new cluster's writes at three times their idle time.)
	defaultMaxHeld = 2 * time.Second
)

// Gate puts the API requests of urgent plans (a user's action)
// ahead of the background ones (retries, resyncs, rollout steps, Events)
// at the API server itself. The executor already starts urgent plans first
// (eventloop.Options.UrgentWorkers), but their requests then share the API
// server with the background requests in flight: during a fleet's rollout
// a new cluster's writes waited behind a thousand status writes (all of
// pgloop's requests are one flow of the server's Priority and Fairness,
// or none: a client of system:masters is exempt). So while urgent requests
// are in flight, and for hold after the last one, at most limit background
// requests are (none by default): the others wait in the gate, first come
// first served, until urgent traffic stops, or until the first of them has
// waited maxHeld: then they go one every hold. Without urgent requests
// background ones are never held.
//
// A request's priority is its plan's (reqclass.PriorityOf its context);
// Event writes are background (best effort); the rest (informers' lists
// and watches, leader election) is not gated and not counted. A held
// request gives up when its context ends, as it would have in the server.
//
// With pacing on (pace.go), background requests in flight are also bounded
// at any time by a window that follows the API server's latency.
//
// Only requests count, never plans: an urgent plan that waits on Patroni
// or SQL holds nothing here, so a stuck cluster's slow urgent plan does
// not slow the fleet's background work.
type Gate struct {
	// limit is how many background requests may be in flight while
	// urgent traffic goes on; most, at any time (0: no bound).
	limit, most int
	// hold and maxHeld: see defaultUrgentHold and defaultMaxHeld (0: no
	// bound on holding).
	hold, maxHeld time.Duration
	clock         clock.WithDelayedExecution
	// onHeld is told how long each held request waited.
	onHeld func(time.Duration)
	// pace, when set, bounds background requests in flight at any time
	// by the API server's latency (pace.go); onWindow is told its window
	// when it changes.
	pace     *pacer
	onWindow func(float64)

	mu         sync.Mutex
	urgent     int       // urgent requests in flight
	background int       // background requests in flight
	quietAt    time.Time // urgent traffic counts as over from then, if urgent == 0
	overdueAt  time.Time // when the last request held maxHeld went while urgent traffic went on
	waiters    []waiter
	timer      clock.Timer // wakes the waiters at quietAt, or the first when it waited maxHeld
}

// waiter is a held background request: closing ch lets it go.
type waiter struct {
	ch    chan struct{}
	since time.Time
}

// NewGate returns a gate that lets limit background requests be in flight
// while urgent traffic goes on (negative: no limit), and most at any time
// (0: no bound); onHeld, if set, is told how long each held request
// waited. Its hold and its most held are the defaults.
func NewGate(limit, most int, onHeld func(time.Duration)) *Gate {
	return newGate(limit, most, defaultUrgentHold, defaultMaxHeld, nil, onHeld)
}

// newGate is NewGate with its hold, its most held and its clock.
func newGate(limit, most int, hold, maxHeld time.Duration, clk clock.WithDelayedExecution, onHeld func(time.Duration)) *Gate {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if onHeld == nil {
		onHeld = func(time.Duration) {}
	}
	if limit < 0 { // no limit while urgent
		limit = math.MaxInt
	}
	return &Gate{limit: limit, most: max(most, 0), hold: hold, maxHeld: max(maxHeld, 0), clock: clk, onHeld: onHeld}
}

// Pacing turns on the pacer (pace.go); onWindow, if set, is told its
// window each time it changes. It returns g.
func (g *Gate) Pacing(onWindow func(float64)) *Gate {
	g.pace = newPacer()
	g.onWindow = onWindow
	if onWindow != nil {
		onWindow(g.pace.window)
	}
	return g
}

// Wrap is a rest.Config WrapTransport: the requests sent through the
// transport it returns go through g, then rt.
func (g *Gate) Wrap(rt http.RoundTripper) http.RoundTripper {
	return wrapped(rt, g.roundTrip)
}

func (g *Gate) roundTrip(next http.RoundTripper, req *http.Request) (*http.Response, error) {
	p := requestPriority(req)
	switch p {
	case reqclass.Urgent:
		g.urgentStarted()
		defer g.urgentEnded()
	case reqclass.Background:
		if err := g.acquire(req); err != nil {
			return nil, err
		}
		defer g.release()
	default:
		return next.RoundTrip(req)
	}
	if g.pace == nil || req.Method == http.MethodGet || req.Method == http.MethodHead {
		return next.RoundTrip(req)
	}
	sent := g.clock.Now()
	resp, err := next.RoundTrip(req)
	g.observe(sent, p == reqclass.Background)
	return resp, err
}

// observe tells the pacer of a write sent at sent and answered now, before
// its slot is released: a window grown lets the next waiter go at once.
func (g *Gate) observe(sent time.Time, background bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock.Now()
	before := g.pace.window
	g.pace.observe(sent, now, now.Sub(sent), background)
	if g.pace.window != before && g.onWindow != nil {
		g.onWindow(g.pace.window)
	}
}

// requestPriority is the gate's class of req.
func requestPriority(req *http.Request) reqclass.Priority {
	if req.Method == http.MethodGet && req.URL.Query().Get("watch") != "" {
		return reqclass.Unmarked
	}
	p := reqclass.PriorityOf(req.Context())
	if p == reqclass.Unmarked && req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/events") {
		return reqclass.Background
	}
	return p
}

// open reports whether urgent traffic is over: no urgent request in
// flight, and hold passed since the last one. g.mu is held.
func (g *Gate) open(now time.Time) bool {
	return g.urgent == 0 && !now.Before(g.quietAt)
}

// admits reports whether one more background request, held since since,
// may go now, and whether it goes as overdue: held maxHeld while urgent
// traffic goes on, which one request may every hold. g.mu is held.
func (g *Gate) admits(now, since time.Time) (ok, overdue bool) {
	if g.most > 0 && g.background >= g.most || g.pace != nil && !g.pace.allows(g.background) {
		return false, false
	}
	if g.open(now) || g.background < g.limit {
		return true, false
	}
	if g.maxHeld > 0 && !now.Before(since.Add(g.maxHeld)) && !now.Before(g.overdueAt.Add(g.hold)) {
		return true, true
	}
	return false, false
}

// acquire takes a slot for a background request, waiting for one while
// urgent traffic goes on, in the order the requests came.
func (g *Gate) acquire(req *http.Request) error {
	if g.admitNow() {
		return nil
	}
	// A held request's step does not spend its deadline in the gate
	// (eventloop.PauseDeadline; paused before it queues, never under
	// g.mu: the clock's callbacks take it). Under a burst of creates the
	// gate lets background requests go one every hold: a retry's status
	// write waited past its step's deadline there, 445 of them at N =
	// 10,000.
	resume, _ := eventloop.PauseDeadline(req.Context())
	defer resume()
	g.mu.Lock()
	now := g.clock.Now()
	if g.admitLocked(now) { // a slot was freed meanwhile
		g.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	g.waiters = append(g.waiters, waiter{ch: ch, since: now})
	if len(g.waiters) == 1 {
		g.dispatch() // arms the timer of its maxHeld
	}
	g.mu.Unlock()

	select {
	case <-ch:
		g.onHeld(g.clock.Since(now))
		return nil
	case <-req.Context().Done():
		g.mu.Lock()
		defer g.mu.Unlock()
		select {
		case <-ch: // granted meanwhile: hand the slot on
			g.background--
			g.dispatch()
		default:
			for i, w := range g.waiters {
				if w.ch == ch {
					g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
					break
				}
			}
		}
		return req.Context().Err()
	}
}

// admitNow counts a background request in flight if the gate admits it
// now with none waiting before it.
func (g *Gate) admitNow() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.admitLocked(g.clock.Now())
}

// admitLocked is admitNow with g.mu held.
func (g *Gate) admitLocked(now time.Time) bool {
	if ok, _ := g.admits(now, now); ok && len(g.waiters) == 0 {
		g.background++
		return true
	}
	return false
}

// release frees a background request's slot.
func (g *Gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.background--
	g.dispatch()
}

func (g *Gate) urgentStarted() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.urgent++
}

func (g *Gate) urgentEnded() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.urgent--
	g.quietAt = g.clock.Now().Add(g.hold)
	g.dispatch()
}

// dispatch lets waiting requests go while the gate allows, first come
// first served, and arms the timer that lets the first of the rest go
// once urgent traffic is over or once it is overdue. g.mu is held.
func (g *Gate) dispatch() {
	now := g.clock.Now()
	for len(g.waiters) > 0 {
		ok, overdue := g.admits(now, g.waiters[0].since)
		if !ok {
			break
		}
		if overdue {
			g.overdueAt = now
		}
		g.background++
		close(g.waiters[0].ch)
		g.waiters[0] = waiter{}
		g.waiters = g.waiters[1:]
	}
	if len(g.waiters) == 0 {
		return
	}
	// What waits waits for a request to end (it calls dispatch), for
	// the hold to pass, or for the first to be overdue: held maxHeld, a
	// hold after the last overdue one.
	var wake time.Time
	if g.urgent == 0 && now.Before(g.quietAt) {
		wake = g.quietAt
	}
	if g.maxHeld > 0 {
		due := g.waiters[0].since.Add(g.maxHeld)
		if next := g.overdueAt.Add(g.hold); next.After(due) {
			due = next
		}
		if now.Before(due) && (wake.IsZero() || due.Before(wake)) {
			wake = due
		}
	}
	if wake.IsZero() {
		return
	}
	if g.timer != nil {
		g.timer.Stop()
	}
	g.timer = g.clock.AfterFunc(wake.Sub(now), func() {
		// On a goroutine of its own: a fake clock calls this with its
		// lock held, and dispatch reads the clock.
		go func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.dispatch()
		}()
	})
}
