package eventloop

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/utils/clock"

	"github.com/pgloop/pgloop/pkg/reqclass"
)

const (
	// DefaultWorkers is the executor pool size when Options.Workers is zero.
	DefaultWorkers = 16
	// DefaultUrgentWorkers is how many of the workers only urgent plans
	// may take when Options.UrgentWorkers is zero (fewer when the pool is
	// small: see Options.UrgentWorkers).
	DefaultUrgentWorkers = 2
	// DefaultStepTimeout bounds a step whose Timeout is zero when
	// Options.StepTimeout is zero.
	DefaultStepTimeout = 30 * time.Second
	// DefaultSlowAfter is how long a plan may hold a worker when
	// Options.SlowAfter is zero: the API answers in tens of milliseconds
	// even when busy, while a call that hangs goes on for seconds (an
	// unreachable PostgreSQL's connect timeout is 5 s by default). A plan
	// detached early loses nothing: it goes on, off the workers.
	DefaultSlowAfter = time.Second

	// batchSize is how many events the loop takes from the inbox under one
	// lock. Small enough that timers and shutdown are looked at often, and
	// that an urgent event arriving meanwhile waits for a few dispatches
	// only: a restart's resume makes each a transition (0.5-1 ms on a busy
	// machine), and at 64 a user's create waited 85 ms behind one batch.
	// The lock costs nothing measurable at 8 (BenchmarkLoopDispatch).
	batchSize = 8
)

// ErrStopped is returned by WaitIdle when Run has returned.
var ErrStopped = errors.New("eventloop: stopped")

// Options configures a Loop. The zero value is ready to use.
type Options struct {
	// Clock drives timers, step deadlines and event times. Tests pass a
	// k8s.io/utils/clock/testing.FakeClock so that nothing sleeps. Default:
	// clock.RealClock{}.
	Clock clock.WithTicker
	// Workers bounds how many plans run at once across all clusters. A
	// hung effect holds its worker until its step deadline, so more workers
	// only delay the point where hung clusters exhaust the pool; the
	// deadline is what frees it. Default: DefaultWorkers.
	Workers int
	// UrgentWorkers is how many of the Workers are kept for urgent plans:
	// at most Workers-UrgentWorkers background plans (resyncs, retries, a
	// rollout's steps) run at once, so a user's action finds a worker at
	// once even while background work would fill the pool. Urgent plans
	// may take every worker (those of one namespace all but the kept
	// ones: flowWorkers), and then the run queue's turns let background
	// ones through (maxUrgentStreak). At most Workers/4 (a pool of fewer
	// than 4 keeps none). Default (0): DefaultUrgentWorkers; negative:
	// none.
	UrgentWorkers int
	// StepTimeout bounds steps whose Timeout is zero. Default:
	// DefaultStepTimeout.
	StepTimeout time.Duration
	// SlowAfter is how long a plan may hold a worker (or a place of the
	// hung lane). A plan still in flight that long after it took it stops
	// counting against Workers (its goroutine goes on until its step
	// ends), and the next waiting plan starts. A step that ran that long is slow: the
	// cluster's plans with a step of that name start in the hung lane
	// (HungWorkers), never on a worker, until a step of that name ends
	// sooner. So hung clusters hold workers for SlowAfter at most, once
	// per kind of step that hangs, whatever their number. Default (0):
	// DefaultSlowAfter; negative: never (a hung step holds its worker
	// until its deadline, as before the hung lane).
	SlowAfter time.Duration
	// HungWorkers bounds the plans of the hung lane running at once
	// (each for SlowAfter at most). Default: Workers.
	HungWorkers int
	// NamespaceWorkers bounds the workers the plans of one namespace hold
	// at once. Default (0): all but the workers kept for urgent plans, and
	// at least one kept (flowWorkers); more than Workers: Workers;
	// negative: no bound, as before the bound (test/sim's run of the
	// executor without its defences).
	NamespaceWorkers int
	// Log receives the loop's entries, with the field cluster=<key>.
	// Default: logrus.StandardLogger().
	Log logrus.FieldLogger
	// Observe, when set, is called on the loop goroutine for every event
	// handed to the Handler, with its kind, its name (the signal's or the
	// timer's, "" for the others) and how long it waited in the inbox (for
	// a coalesced Signal, since the first of its kind). It is on the hot
	// path: it must be cheap and never block (a histogram's Observe is).
	Observe func(kind Kind, name string, lag time.Duration)
	// Exec, when set, runs the plans in place of the executor's workers:
	// the loop calls it on its goroutine with the work of one plan (or of
	// the rest of a paused one), and Exec decides when, and on which
	// goroutine, work runs; it must not block. Workers still bounds the
	// plans handed out at once. A deterministic simulation (test/sim) sets
	// it to run one plan at a time in an order it chooses, since the
	// scheduler's order of the workers' goroutines differs run to run.
	// WaitIdle then waits only for what the loop itself holds (its inbox,
	// its due timers), not for plans handed to Exec. Default: nil, the
	// workers run the plans.
	Exec func(key string, work func())
}

// Loop runs every cluster's state machine on one goroutine: it takes events
// from a never-blocking inbox, hands them one at a time to the Handler, and
// applies the Outcome (timers on a heap it owns, plans to a bounded pool of
// executor workers whose results come back as events). Nothing the Handler
// asks for ever makes the loop wait, so a cluster whose effects hang delays
// no other cluster's transitions.
type Loop struct {
	h           Handler
	clock       clock.WithTicker
	afterFunc   func(time.Duration, func()) func()
	workers     int
	reserved    int // of the workers, for urgent plans only
	hungWorkers int // places of the hung lane
	stepTimeout time.Duration
	slowAfter   time.Duration // 0: never
	// detachAfter is the detach threshold, slowAfter or more (hung.go);
	// stepTimes the durations of the last steps that succeeded, a ring.
	detachAfter                 time.Duration
	stepTimes                   [stepTimesKept]time.Duration
	stepTimesNext, stepTimesLen int
	log                         logrus.FieldLogger
	observe                     func(Kind, string, time.Duration)
	exec                        func(string, func())

	in      *inbox
	st      counters
	started atomic.Bool
	stopped chan struct{} // closed when Run returns

	// Everything below is owned by the loop goroutine (set up by Run
	// before the workers start).
	clusters map[string]*clusterState
	timers   timerHeap
	timerSeq uint64
	wake     clock.Timer
	wakeAt   time.Time // deadline wake is armed for; zero when not armed
	runq     runQueue
	inflight int // plans holding a worker: handed, not paused, not detached, whose PlanDone is not dispatched
	// background counts those of inflight started from the background
	// lane: at most workers-reserved.
	background int
	// hungq is the hung lane's run queue (hung.go), hungInflight the
	// plans holding one of its places (hungWorkers), those detached from
	// a worker included.
	hungq        runQueue
	hungInflight int
	hungClusters int // cluster states with slow steps
	detached     int // plans in flight that hold neither (hung.go)
	// detachedFrom counts those of detached that left a worker (0) and
	// a place of the hung lane (1): at most detachFactor times the places
	// of each (hung.go).
	detachedFrom [2]int
	rounds       uint64 // calls of schedule that ended (Loop.waited)
	// watch holds the plans holding a worker (0) or a place of the hung
	// lane (1) in the order they took it, to detach those older than the
	// threshold (hung.go).
	watch  [2]ring[watched]
	jobSeq uint64
	// contended: clusters wait for a worker, hungContended for a place
	// of the hung lane (schedule sets them, on the loop goroutine); the
	// plans in flight read theirs between steps.
	contended, hungContended atomic.Bool
	nWaiting                 int
	batch                    []Event
	idle                     []chan struct{}
	runCtx                   context.Context
	planCtx                  [2]context.Context // runCtx marked Background, Urgent
	wg                       sync.WaitGroup
}

// planIndex is the index in Loop.planCtx of a plan started as urgent or
// not.
func planIndex(urgent bool) int {
	if urgent {
		return 1
	}
	return 0
}

// clusterState is what the loop keeps for one cluster. It exists only while there
// is something to keep: a non-zero epoch, a timer, a plan, or slow steps.
type clusterState struct {
	key     string
	epoch   int64
	timers  map[string]*timer
	running bool   // a plan is in flight
	planID  uint64 // its ID
	paused  *job   // the rest of it, when paused between steps
	// slot is what the plan in flight holds while it runs (not paused);
	// job is the sequence number of its job (Loop.watch).
	slot slot
	job  uint64
	// from: the lane the plan in flight, detached, left (laneOf; counted
	// by Loop.detachedFrom).
	from int
	// background: the plan in flight, handed to a worker, is a background
	// one (Loop.background counts it).
	background bool
	// slow names the cluster's steps that last failed after SlowAfter:
	// its plans with one of them start in the hung lane (hung.go). Never
	// changed in place: a job is handed it as it is.
	slow    []string
	cancel  context.CancelFunc // of the plan in flight
	waiting *Plan              // next plan, run when the one in flight is done
	// urgent: the waiting plan starts at urgent priority. It stays set
	// when a background plan supersedes an urgent one, which carries what
	// the urgent one did; it is cleared when the plan starts or is dropped.
	urgent bool
	// continues: the waiting plan continues begun work (Plan.Continues,
	// kept as urgent is); it is queued ahead in its flow (runq.go, begun).
	continues bool
	queued    queue  // the lane of the run queue holding the cluster state
	seq       uint64 // of its live entry there (runQueue)
	forget    bool   // drop the cluster state once no plan is in flight
	// inHung: the cluster state is queued in the hung lane (Loop.hungq), since
	// queuedAt, before the schedule round queuedRound (Loop.waited).
	inHung      bool
	queuedAt    time.Time
	queuedRound uint64
}

// New returns a Loop that hands events to h once Run is called. Notify may
// be called before Run: the events wait.
func New(h Handler, opts Options) *Loop {
	l := &Loop{
		h:           h,
		clock:       opts.Clock,
		workers:     opts.Workers,
		stepTimeout: opts.StepTimeout,
		log:         opts.Log,
		observe:     opts.Observe,
		exec:        opts.Exec,
		in:          newInbox(),
		stopped:     make(chan struct{}),
		clusters:    make(map[string]*clusterState),
		batch:       make([]Event, 0, batchSize),
	}
	if l.clock == nil {
		l.clock = clock.RealClock{}
	}
	if l.workers <= 0 {
		l.workers = DefaultWorkers
	}
	l.reserved = reservedWorkers(opts.UrgentWorkers, l.workers)
	switch n := opts.NamespaceWorkers; {
	case n < 0:
		l.runq.holds.bound = 0 // none
	case n > 0:
		l.runq.holds.bound = min(n, l.workers)
	default:
		l.runq.holds.bound = flowWorkers(l.workers, l.reserved)
	}
	if l.stepTimeout <= 0 {
		l.stepTimeout = DefaultStepTimeout
	}
	l.hungWorkers = opts.HungWorkers
	if l.hungWorkers <= 0 {
		l.hungWorkers = l.workers
	}
	switch l.slowAfter = opts.SlowAfter; {
	case l.slowAfter == 0:
		l.slowAfter = DefaultSlowAfter
	case l.slowAfter < 0:
		l.slowAfter = 0
	}
	l.detachAfter = l.slowAfter
	l.st.detachAfter.Store(int64(l.detachAfter))
	if l.log == nil {
		l.log = logrus.StandardLogger()
	}
	l.afterFunc = newAfterFunc(l.clock)
	return l
}

// reservedWorkers is how many of workers are kept for urgent plans, asked
// for urgent (Options.UrgentWorkers): at most a quarter of them, so that
// background work always has most of the pool.
func reservedWorkers(urgent, workers int) int {
	switch {
	case urgent < 0:
		return 0
	case urgent == 0:
		urgent = DefaultUrgentWorkers
	}
	return min(urgent, workers/4)
}

// Notify tells the loop that something about cluster key changed; signal
// names what (a constant of the caller's, e.g. specChanged). It never
// blocks, whatever the loop and the executor are doing: informer handlers
// call it directly. While a signal of the same name waits for the cluster,
// this one is merged into it.
func (l *Loop) Notify(key, signal string) {
	l.in.post(Event{Key: key, Kind: Signal, Name: signal, At: l.clock.Now()})
}

// NotifyUrgent is Notify for a user's action (a new cluster, a spec
// change, a delete): the signal goes ahead of the other clusters' events
// waiting in the inbox, such as a restart's resume of every cluster.
func (l *Loop) NotifyUrgent(key, signal string) {
	l.in.post(Event{Key: key, Kind: Signal, Name: signal, At: l.clock.Now(), Urgent: true})
}

// Run runs the loop until ctx is done, then cancels the plans in flight and
// waits for the executor's workers to return (steps must honour their
// context). Events still waiting, and results of cancelled plans, are not
// dispatched. Run returns nil after a shutdown, and an error if called
// twice.
func (l *Loop) Run(ctx context.Context) error {
	if !l.started.CompareAndSwap(false, true) {
		return errors.New("eventloop: Run called twice")
	}
	runCtx, cancel := context.WithCancel(ctx)
	l.runCtx = runCtx
	// Marked once: a plan's context derives from its priority's, with no
	// allocation for the mark on the loop goroutine.
	l.planCtx = [2]context.Context{reqclass.WithPriority(runCtx, reqclass.Background), reqclass.WithPriority(runCtx, reqclass.Urgent)}
	defer func() {
		cancel()
		l.wg.Wait()
		l.stopWake()
		l.publish()
		close(l.stopped)
	}()
	l.run(runCtx)
	return nil
}

// WaitIdle blocks until the loop has nothing left to do: the inbox is empty,
// no timer is due by the loop's clock, and no plan is running or waiting.
// Timers not yet due do not count. It is meant for tests: step a fake clock,
// then WaitIdle, and every timer due at the new time has been fired and
// handled, and every plan it started has reported (with Options.Exec, only
// handed to Exec). It returns ctx.Err() if ctx ends first and ErrStopped if
// Run has returned.
func (l *Loop) WaitIdle(ctx context.Context) error {
	ch := make(chan struct{})
	l.in.addIdle(ch)
	select {
	case <-ch:
		return nil
	case <-l.stopped:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is the loop goroutine.
func (l *Loop) run(ctx context.Context) {
	for {
		if ctx.Err() != nil {
			return
		}
		now := l.clock.Now()
		l.fireDue(now)
		l.detachSlow(now)
		if l.in.take(&l.batch, batchSize) > 0 {
			l.dispatchBatch()
			continue
		}
		l.publish()
		// The wake-up is armed before WaitIdle callers are told: one
		// that steps a fake clock to the next thing due (test/sim) must
		// find the next timer armed on it.
		wake, due := l.armWake(now)
		if due {
			continue
		}
		if l.exec != nil || l.quiet() {
			if !l.in.takeIdle(&l.idle) {
				continue // an event arrived since take
			}
			if len(l.idle) > 0 {
				// A WaitIdle caller may have stepped the clock after
				// now was read: look again before saying idle.
				if next, ok := l.nextDue(); ok && !next.After(l.clock.Now()) {
					continue
				}
				for _, ch := range l.idle {
					close(ch)
				}
				clear(l.idle)
				l.idle = l.idle[:0]
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-l.in.wake:
		case <-wake:
			l.wakeAt = time.Time{} // consumed: Reset needs no drain
		}
	}
}

// dispatchBatch hands the events taken from the inbox to the Handler.
func (l *Loop) dispatchBatch() {
	now := l.clock.Now()
	var lag, maxLag time.Duration
	var handled uint64
	for i := range l.batch {
		ev := &l.batch[i]
		lag = max(now.Sub(ev.At), 0)
		maxLag = max(maxLag, lag)
		if l.dispatch(ev) {
			handled++
			if l.observe != nil {
				l.observe(ev.Kind, ev.Name, lag)
			}
		}
	}
	l.st.dispatched.Add(handled)
	l.st.lagLast.Store(int64(lag))
	if int64(maxLag) > l.st.lagMax.Load() {
		l.st.lagMax.Store(int64(maxLag))
	}
	clear(l.batch)
	l.batch = l.batch[:0]
	l.publish()
}

// dispatch runs one event through the Handler and applies its Outcome. It
// reports whether the Handler was called.
func (l *Loop) dispatch(ev *Event) bool {
	switch ev.Kind {
	case TimerFired:
		rec := l.clusters[ev.Key]
		if !l.liveTimer(rec, ev) {
			l.st.staleTimers.Add(1)
			l.log.WithFields(logrus.Fields{"cluster": ev.Key, "timer": ev.Name, "epoch": ev.Epoch}).
				Debug("stale timer dropped")
			if rec != nil {
				l.gc(rec)
			}
			return false
		}
	case PlanDone:
		l.planFinished(ev.Key, ev.cont)
		ev.cont = nil
	case paused:
		l.planPaused(ev.cont)
		return false
	}
	if rec := l.clusters[ev.Key]; rec != nil && rec.running {
		ev.InFlight = rec.planID
	}
	out, ok := l.handle(ev)
	if ok {
		l.apply(ev.Key, &out)
	} else if rec := l.clusters[ev.Key]; rec != nil {
		l.gc(rec) // e.g. a consumed timer
	}
	if ev.Kind == PlanDone {
		l.planAccounted(ev.Key)
	}
	return true
}

// handle calls the Handler, containing a panic: it is logged with the
// cluster's key, counted, and reported to the Handler as a Panicked event,
// unless it was the Panicked event that panicked (no endless loop).
func (l *Loop) handle(ev *Event) (out Outcome, ok bool) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		pe := &PanicError{Value: r, Stack: debug.Stack()}
		l.st.panics.Add(1)
		l.log.WithFields(logrus.Fields{"cluster": ev.Key, "event": ev.Kind.String(), "name": ev.Name}).
			WithField("stack", string(pe.Stack)).Errorf("handler panicked: %v", r)
		if ev.Kind != Panicked {
			l.in.post(Event{
				Key:  ev.Key,
				Kind: Panicked,
				Err:  fmt.Errorf("handle %s %q: %w", ev.Kind, ev.Name, pe),
				At:   l.clock.Now(),
			})
		}
		out, ok = Outcome{}, false
	}()
	return l.h.Handle(*ev), true
}

// apply carries out an Outcome for the cluster key, in this order: epoch
// (dropping the timers of the old one), CancelInFlight, Forget or Timers,
// Plan.
func (l *Loop) apply(key string, out *Outcome) {
	rec := l.clusters[key]
	if rec == nil {
		if out.Epoch == 0 && len(out.Timers) == 0 && out.Plan == nil {
			return // nothing to keep, nothing to cancel
		}
		rec = &clusterState{key: key}
		l.clusters[key] = rec
	}
	if out.Epoch != rec.epoch {
		l.dropTimers(rec)
		rec.epoch = out.Epoch
	}
	if out.CancelInFlight {
		if rec.running {
			rec.cancel()
			l.st.plansCancelled.Add(1)
		}
		l.dropWaiting(rec)
	}
	if out.Forget {
		// The cluster is gone: its timers go now, the cluster state once no
		// plan is in flight. Timers set alongside Forget are ignored.
		rec.forget = true
		l.dropTimers(rec)
		if out.Plan == nil {
			l.dropWaiting(rec)
		}
		if len(out.Timers) > 0 {
			l.log.WithField("cluster", key).Debug("timers set with Forget ignored")
		}
	} else {
		if len(out.Timers) > 0 || out.Plan != nil {
			rec.forget = false // the cluster lives on (e.g. re-created)
		}
		for _, op := range out.Timers {
			l.setTimer(rec, op)
		}
	}
	if out.Plan != nil {
		l.submit(rec, out.Plan)
	}
	l.gc(rec)
}

// gc drops the cluster's state when nothing is left in it (an epoch,
// timers, slow steps), or when it is forgotten and no plan is in flight or
// waiting.
func (l *Loop) gc(rec *clusterState) {
	if rec.running || rec.waiting != nil || rec.queued != notQueued || l.clusters[rec.key] != rec {
		return
	}
	switch {
	case rec.forget:
		l.dropTimers(rec)
	case rec.epoch != 0 || len(rec.timers) > 0 || len(rec.slow) > 0:
		return
	}
	if len(rec.slow) > 0 {
		l.hungClusters--
	}
	delete(l.clusters, rec.key)
}
