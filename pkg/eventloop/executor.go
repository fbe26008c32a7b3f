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
)

// PanicError is a panic recovered from a Handler's Handle or from a Step's
// Run. Panicked events carry it, and so does the PlanDone of a plan whose
// step panicked; find it with errors.As.
type PanicError struct {
	// Value is what was passed to panic.
	Value any
	// Stack is the panicking goroutine's stack, for the log.
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic value when it is an error, so that
// errors.Is(err, context.Canceled) still sees through panic(err).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// job is one plan handed to a worker, from its step next on: a plan may
// be paused between two steps (Loop.runJob) and resumed by another worker.
type job struct {
	key    string
	plan   *Plan
	ctx    context.Context
	cancel context.CancelFunc
	urgent bool
	// contended is the flag of the lane the job started in: while it is
	// set, the job pauses between two steps (nil: never).
	contended *atomic.Bool
	// next is the step to run next; err and panicErr are the plan's
	// first error and first panic so far (runPlan).
	next          int
	err, panicErr error
	// suspect is the cluster's slow steps when the job started
	// (clusterState.slow); slow and quick are the steps of this job that failed
	// after SlowAfter or longer, and those of suspect that did not (job.timed):
	// the loop updates clusterState.slow with them when the job reports.
	suspect, slow, quick []string
	// slowAfter is the loop's detach threshold when the job was handed
	// (Loop.detachAfter); onWorker whether it was handed to a worker, and
	// took the durations of its steps that succeeded then, which the
	// loop's threshold follows (hung.go).
	slowAfter time.Duration
	onWorker  bool
	took      []time.Duration
}

// submit makes p the cluster's next plan, superseding the one waiting, and
// starts it if the cluster has none in flight and a worker is free. It never
// blocks. A plan that supersedes an urgent one is urgent: it carries what
// that one did, and so is one that supersedes a plan that continues begun
// work (Plan.Continues). A cluster queued keeps its turn, moves to the
// urgent lane when its plan becomes urgent, or ahead in its flow when its
// plan now continues begun work.
func (l *Loop) submit(rec *clusterState, p *Plan) {
	urgent, continues := p.Urgent, p.Continues
	if rec.waiting != nil {
		l.st.plansSuperseded.Add(1)
		l.nWaiting--
		urgent = urgent || rec.urgent
		continues = continues || rec.continues
	}
	moveAhead := continues && !begun(rec)
	rec.waiting, rec.urgent, rec.continues = p, urgent, continues
	l.nWaiting++
	switch {
	case rec.running:
		// Queued by planFinished.
	case rec.queued == notQueued:
		l.enqueue(rec, urgent)
	case rec.queued == inBackground && urgent:
		l.queueOf(rec).promote(rec)
	case moveAhead:
		l.queueOf(rec).requeue(rec)
	}
	l.schedule()
}

// dropWaiting forgets the cluster's waiting plan: it never runs and no
// PlanDone reports it.
func (l *Loop) dropWaiting(rec *clusterState) {
	if rec.waiting == nil {
		return
	}
	rec.waiting, rec.urgent, rec.continues = nil, false, false
	l.nWaiting--
	l.st.plansCancelled.Add(1)
}

// schedule starts queued plans while places are free, in each run
// queue's order: on the workers, with at most workers-reserved background
// plans in flight (the last l.reserved workers are kept for urgent plans,
// which may take any) and at most flowWorkers plans of one namespace; in
// the hung lane, up to hungWorkers plans. At most Workers plans hold a
// worker (counted until their PlanDone is dispatched, until they pause
// between two steps, or until they are detached: hung.go). A worker may
// stay free while plans wait: those of namespaces at their bound.
func (l *Loop) schedule() {
	defer func() {
		l.contended.Store(l.runq.waiting() > 0)
		l.hungContended.Store(l.hungq.waiting() > 0)
		l.rounds++
	}()
	for l.inflight < l.workers {
		var rec *clusterState
		urgent := true
		if l.background < l.workers-l.reserved {
			rec, urgent = l.runq.pop()
		} else {
			rec = l.runq.popUrgent()
		}
		if rec == nil {
			break
		}
		l.begin(rec, urgent, onWorker)
	}
	for l.hungInflight < l.hungWorkers {
		rec, urgent := l.hungq.pop()
		if rec == nil {
			break
		}
		l.begin(rec, urgent, inHungLane)
	}
}

// begin starts the cluster's plan taken from a run queue, holding s: the
// rest of its paused plan, or its waiting plan.
func (l *Loop) begin(rec *clusterState, urgent bool, s slot) {
	if j := rec.paused; j != nil {
		// The cluster's plan in flight goes on where it paused.
		rec.paused = nil
		l.waited(rec, s)
		l.handed(rec, j.urgent, s)
		l.start(l.rehand(rec, j, s))
		return
	}
	p := rec.waiting
	if p == nil { // dropped while queued
		l.gc(rec)
		return
	}
	rec.waiting, rec.urgent, rec.continues = nil, false, false
	l.nWaiting--
	l.waited(rec, s)
	if urgent {
		l.st.plansUrgent.Add(1)
	} else {
		l.st.plansBackground.Add(1)
	}
	ctx, cancel := context.WithCancel(l.planCtx[planIndex(urgent)])
	rec.running, rec.cancel, rec.planID = true, cancel, p.ID
	l.handed(rec, urgent, s)
	l.start(l.rehand(rec, &job{key: rec.key, plan: p, ctx: ctx, cancel: cancel, urgent: urgent}, s))
}

// rehand readies j to run holding s: the lane whose contention pauses it,
// the cluster's slow steps as they are now.
func (l *Loop) rehand(rec *clusterState, j *job, s slot) job {
	j.contended = &l.contended
	if s == inHungLane {
		j.contended = &l.hungContended
	}
	j.suspect, j.slow, j.quick = rec.slow, nil, nil
	j.slowAfter, j.onWorker, j.took = l.detachAfter, s == onWorker, nil
	return *j
}

// handed counts a plan of rec handed to run holding s, and whether it is
// a background one; freed counts it back when it no longer holds it.
func (l *Loop) handed(rec *clusterState, urgent bool, s slot) {
	rec.slot = s
	l.jobSeq++
	rec.job = l.jobSeq
	if s == inHungLane {
		l.hungInflight++
	} else {
		l.inflight++
		l.runq.hold(rec)
		rec.background = !urgent
		if !urgent {
			l.background++
		}
	}
	l.watchJob(rec)
}

func (l *Loop) freed(rec *clusterState) {
	switch rec.slot {
	case onWorker:
		l.inflight--
		l.runq.release(rec)
		if rec.background {
			rec.background = false
			l.background--
		}
	case inHungLane:
		l.hungInflight--
	case detached:
		l.detached--
		l.detachedFrom[rec.from]--
	}
	rec.slot = noSlot
}

// start runs a job on a goroutine of its own, or hands it to Options.Exec
// when set. The executor's bound is the places counted by handed, not a
// number of goroutines: a detached plan's goroutine goes on beside them.
func (l *Loop) start(j job) {
	if l.exec != nil {
		l.exec(j.key, func() { l.runJob(j) })
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.runJob(j)
	}()
}

// planPaused takes back a plan a worker paused between two steps: the
// worker is free, and the plan, still in flight for its cluster, waits for
// its turn again at the end of its flow, behind the clusters that waited.
func (l *Loop) planPaused(j *job) {
	rec := l.clusters[j.key]
	if rec == nil || !rec.running || rec.planID != j.plan.ID {
		// Cannot happen: a cluster state is kept while its plan runs.
		l.log.WithField("cluster", j.key).Debug("paused plan for a cluster with no plan in flight")
		l.schedule()
		return
	}
	l.freed(rec)
	l.noteSteps(rec, j)
	rec.paused = j
	l.enqueue(rec, j.urgent)
	l.schedule()
}

// planFinished is the loop's bookkeeping for a PlanDone, done before the
// Handler sees it: the cluster's slot and its worker are free. Its waiting
// plan is queued only after the Handler has seen the result
// (planAccounted): a plan the result asks for supersedes it, so a status
// change queued while the plan ran and the change its result brings (a
// timer, a record of what was applied) go in one write, not two.
func (l *Loop) planFinished(key string, j *job) {
	rec := l.clusters[key]
	if rec == nil || !rec.running {
		// Cannot happen: a cluster state is kept while its plan runs.
		l.log.WithField("cluster", key).Debug("plan result for a cluster with no plan in flight")
		return
	}
	rec.running, rec.cancel, rec.planID = false, nil, 0
	l.freed(rec)
	if j != nil {
		l.noteSteps(rec, j)
	}
}

// planAccounted queues the cluster's waiting plan, if any and not queued
// yet, once the Handler has seen the PlanDone, and starts what the free
// worker may run.
func (l *Loop) planAccounted(key string) {
	if rec := l.clusters[key]; rec != nil && !rec.running && rec.waiting != nil && rec.queued == notQueued {
		l.enqueue(rec, rec.urgent)
	}
	l.schedule()
}

// runJob runs a job's steps until it is done or pauses, and reports to the
// loop: the rest of a paused plan, or the plan's result.
func (l *Loop) runJob(j job) {
	if !l.runPlan(&j) {
		l.in.post(Event{Key: j.key, Kind: paused, At: l.clock.Now(), cont: &j, Urgent: j.urgent})
		return
	}
	err, panicErr := j.err, j.panicErr
	j.cancel()
	l.st.plansRun.Add(1)
	if err != nil {
		l.st.plansFailed.Add(1)
	}
	now := l.clock.Now()
	// PlanDone first: the handler learns the plan is over, then that it
	// panicked. Both are queued in order on the cluster's FIFO, at once,
	// so the loop is never idle between them.
	done := Event{Key: j.key, Kind: PlanDone, PlanID: j.plan.ID, Err: err, At: now, Urgent: j.urgent, cont: &j}
	if panicErr != nil {
		l.in.postPair(done, Event{Key: j.key, Kind: Panicked, PlanID: j.plan.ID, Err: panicErr, At: now})
	} else {
		l.in.post(done)
	}
}

// runPlan runs the job's steps in order, from j.next, and reports whether
// the plan is done; false means it paused between two steps (contended).
// After the first error only steps marked Always run; j.err is the first
// error, wrapped with its step's name. A step that panics fails with a
// *PanicError; j.panicErr is the first such error.
func (l *Loop) runPlan(j *job) (done bool) {
	p := j.plan
	ran := false
	for ; j.next < len(p.Steps); j.next++ {
		s := &p.Steps[j.next]
		if j.err != nil && !s.Always {
			continue
		}
		if ran && j.contended != nil && j.contended.Load() {
			return false
		}
		ran = true
		began := l.clock.Now()
		serr := l.runStep(j.ctx, s)
		j.timed(s.Name, l.clock.Since(began), serr)
		if serr == nil {
			continue
		}
		serr = fmt.Errorf("step %s: %w", s.Name, serr)
		log := l.log.WithFields(logrus.Fields{"cluster": j.key, "plan": p.ID, "step": s.Name})
		var pe *PanicError
		if errors.As(serr, &pe) {
			log.WithField("stack", string(pe.Stack)).Errorf("effect panicked: %v", pe.Value)
			if j.panicErr == nil {
				j.panicErr = serr
			}
		} else {
			log.WithError(serr).Info("effect failed")
		}
		if j.err == nil {
			j.err = serr
		}
	}
	return true
}

// runStep runs one step under its deadline, which follows the loop's clock.
// A plan cancelled before the step starts fails it without running it,
// unless the step is Always.
func (l *Loop) runStep(parent context.Context, s *Step) (err error) {
	if perr := parent.Err(); perr != nil && !s.Always {
		return perr
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = l.stepTimeout
	}
	sc := newStepCtx(parent, l.clock, l.afterFunc, timeout)
	defer sc.release()

	defer func() {
		if r := recover(); r != nil {
			l.st.panics.Add(1)
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	err = s.Run(sc)
	if err != nil && sc.expired() && !errors.Is(err, context.DeadlineExceeded) {
		// The step gave up because of its deadline but reported it its
		// own way (often context.Canceled from a derived context).
		err = fmt.Errorf("%w after %v: %w", context.DeadlineExceeded, timeout, err)
	}
	return err
}

// stepCtx is a step's context: cancelled when the step's deadline passes on
// the loop's clock, and then reporting context.DeadlineExceeded like a
// context made by context.WithDeadline. It exists because WithDeadline
// follows the wall clock, which a fake clock cannot move, and because the
// step's own deadline can be paused (PauseDeadline).
type stepCtx struct {
	context.Context
	clock     clock.Clock
	afterFunc func(time.Duration, func()) func()
	expire    func() // cancels the step for its deadline
	cancel    context.CancelCauseFunc

	mu       sync.Mutex
	own      time.Time     // the step's own deadline, while it runs
	paused   int           // PauseDeadline calls not resumed yet
	left     time.Duration // of the own deadline, when paused
	stop     func()        // releases the armed deadline
	released bool          // the step ended
}

type stepKey struct{}

// newStepCtx arms a step's deadline, timeout from now on clk.
func newStepCtx(parent context.Context, clk clock.Clock, afterFunc func(time.Duration, func()) func(), timeout time.Duration) *stepCtx {
	ctx, cancel := context.WithCancelCause(parent)
	sc := &stepCtx{Context: ctx, clock: clk, afterFunc: afterFunc, own: clk.Now().Add(timeout), cancel: cancel}
	sc.expire = func() { cancel(context.DeadlineExceeded) }
	sc.stop = afterFunc(timeout, sc.expire)
	return sc
}

// WithStepDeadline returns a context that ends timeout from now on clk,
// reporting context.DeadlineExceeded, whose deadline PauseDeadline can
// pause, and the function that releases it: what the executor runs each
// step under, for tests of what pauses it.
func WithStepDeadline(parent context.Context, clk clock.WithTicker, timeout time.Duration) (context.Context, func()) {
	sc := newStepCtx(parent, clk, newAfterFunc(clk), timeout)
	return sc, sc.release
}

// Value answers stepKey with the step's context, for PauseDeadline.
func (c *stepCtx) Value(key any) any {
	if key == (stepKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// Deadline is the step's own deadline, or the plan's if earlier. While
// the step's is paused, it is as if it resumed now.
func (c *stepCtx) Deadline() (time.Time, bool) {
	c.mu.Lock()
	d := c.own
	if c.paused > 0 {
		d = c.clock.Now().Add(c.left)
	}
	c.mu.Unlock()
	if p, ok := c.Context.Deadline(); ok && p.Before(d) {
		return p, true
	}
	return d, true
}

func (c *stepCtx) Err() error {
	err := c.Context.Err()
	if err != nil && c.expired() {
		return context.DeadlineExceeded
	}
	return err
}

// expired reports whether the step's own deadline (not the plan's
// cancellation) ended it. The first cancellation sets the cause, so a
// deadline passing after a cancellation does not count.
func (c *stepCtx) expired() bool {
	return c.Context.Err() != nil && errors.Is(context.Cause(c.Context), context.DeadlineExceeded)
}

// release disarms the deadline and cancels the context as the step ends.
func (c *stepCtx) release() {
	c.mu.Lock()
	c.released = true
	c.stop()
	c.stop = func() {}
	c.mu.Unlock()
	c.cancel(nil)
}

// pause stops the clock of the step's own deadline until the returned
// function is called (once; later calls do nothing). Pauses nest: the
// clock runs again when the last is resumed, with what was left of the
// deadline when the first began.
func (c *stepCtx) pause() (resume func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released || c.Context.Err() != nil {
		return func() {}
	}
	if c.paused == 0 {
		c.stop()
		c.left = max(0, c.own.Sub(c.clock.Now()))
	}
	c.paused++
	var once sync.Once
	return func() { once.Do(c.resume) }
}

func (c *stepCtx) resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.paused--
	if c.paused > 0 || c.released {
		return
	}
	c.own = c.clock.Now().Add(c.left)
	c.stop = c.afterFunc(c.left, c.expire)
}

// PauseDeadline stops the clock of the deadline of the step ctx belongs to
// until resume is called: time a step's request waits in pgloop's own
// queue, behind other clusters' (the operator's write windows), is not the
// step's to spend, and a step never fails for it. The plan's cancellation
// still ends the wait. ok is false, and resume does nothing, when ctx
// belongs to no step, or has a deadline of its own earlier than the
// step's (a context.WithTimeout made in the step), which no pause moves.
func PauseDeadline(ctx context.Context) (resume func(), ok bool) {
	c, _ := ctx.Value(stepKey{}).(*stepCtx)
	if c == nil {
		return func() {}, false
	}
	if d, has := ctx.Deadline(); has {
		if sd, _ := c.Deadline(); d.Before(sd) {
			return func() {}, false
		}
	}
	return c.pause(), true
}

// newAfterFunc returns how the executor schedules step deadlines on c: its
// AfterFunc when it has one (the real and the fake clock do), else a timer
// watched by a goroutine. The returned stop function releases the deadline.
func newAfterFunc(c clock.WithTicker) func(d time.Duration, f func()) (stop func()) {
	if dc, ok := c.(clock.WithDelayedExecution); ok {
		return func(d time.Duration, f func()) func() {
			t := dc.AfterFunc(d, f)
			return func() { t.Stop() }
		}
	}
	return func(d time.Duration, f func()) func() {
		t := c.NewTimer(d)
		done := make(chan struct{})
		// Once stop returns, f does not run: a step's deadline paused just
		// before the timer fired must not end it (PauseDeadline).
		var mu sync.Mutex
		stopped := false
		go func() {
			select {
			case <-t.C():
				mu.Lock()
				if !stopped {
					f()
				}
				mu.Unlock()
			case <-done:
				t.Stop()
			}
		}()
		return func() {
			mu.Lock()
			defer mu.Unlock()
			if !stopped {
				stopped = true
				close(done)
			}
		}
	}
}
