package eventloop

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
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
// be paused between two steps (Loop.worker) and resumed by another worker.
type job struct {
	key    string
	plan   *Plan
	ctx    context.Context
	cancel context.CancelFunc
	urgent bool
	// next is the step to run next; err and panicErr are the plan's
	// first error and first panic so far (runPlan).
	next          int
	err, panicErr error
}

// submit makes p the cluster's next plan, superseding the one waiting, and
// starts it if the cluster has none in flight and a worker is free. It never
// blocks. A plan that supersedes an urgent one is urgent: it carries what
// that one did. A cluster queued keeps its turn, or moves to the urgent lane
// when its plan becomes urgent.
func (l *Loop) submit(rec *record, p *Plan) {
	urgent := p.Urgent
	if rec.waiting != nil {
		l.st.plansSuperseded.Add(1)
		l.nWaiting--
		urgent = urgent || rec.urgent
	}
	rec.waiting, rec.urgent = p, urgent
	l.nWaiting++
	switch {
	case rec.running:
		// Queued by planFinished.
	case rec.queued == notQueued:
		l.runq.push(rec, urgent)
	case rec.queued == inBackground && urgent:
		l.runq.promote(rec)
	}
	l.schedule()
}

// dropWaiting forgets the cluster's waiting plan: it never runs and no
// PlanDone reports it.
func (l *Loop) dropWaiting(rec *record) {
	if rec.waiting == nil {
		return
	}
	rec.waiting, rec.urgent = nil, false
	l.nWaiting--
	l.st.plansCancelled.Add(1)
}

// schedule starts queued plans while workers are free, in the run queue's
// order, with at most workers-reserved background plans in flight: the
// last l.reserved workers are kept for urgent plans, which may take any.
// The work channel has one slot per worker and at most Workers plans are
// in flight (counted until their PlanDone is dispatched), so the send
// never blocks.
func (l *Loop) schedule() {
	defer func() { l.contended.Store(l.runq.waiting() > 0) }()
	for l.inflight < l.workers {
		var rec *record
		urgent := true
		if l.background < l.workers-l.reserved {
			rec, urgent = l.runq.pop()
		} else {
			rec = l.runq.popUrgent()
		}
		if rec == nil {
			return
		}
		if j := rec.paused; j != nil {
			// The cluster's plan in flight goes on where it paused.
			rec.paused = nil
			l.handed(rec, j.urgent)
			l.start(*j)
			continue
		}
		p := rec.waiting
		if p == nil { // dropped while queued
			l.gc(rec)
			continue
		}
		rec.waiting, rec.urgent = nil, false
		l.nWaiting--
		if urgent {
			l.st.plansUrgent.Add(1)
		} else {
			l.st.plansBackground.Add(1)
		}
		ctx, cancel := context.WithCancel(l.planCtx[planIndex(urgent)])
		rec.running, rec.cancel, rec.planID = true, cancel, p.ID
		l.handed(rec, urgent)
		l.start(job{key: rec.key, plan: p, ctx: ctx, cancel: cancel, urgent: urgent})
	}
}

// handed counts a plan of rec handed to a worker, and whether it is a
// background one; freed counts it back when its worker is free.
func (l *Loop) handed(rec *record, urgent bool) {
	l.inflight++
	rec.background = !urgent
	if !urgent {
		l.background++
	}
}

func (l *Loop) freed(rec *record) {
	l.inflight--
	if rec.background {
		rec.background = false
		l.background--
	}
}

// start hands a job to a worker, or to Options.Exec when set.
func (l *Loop) start(j job) {
	if l.exec != nil {
		l.exec(j.key, func() { l.runJob(j) })
		return
	}
	l.work <- j
}

// planPaused takes back a plan a worker paused between two steps: the
// worker is free, and the plan, still in flight for its cluster, waits for
// its turn again at the end of its flow, behind the clusters that waited.
func (l *Loop) planPaused(j *job) {
	rec := l.clusters[j.key]
	if rec == nil || !rec.running || rec.planID != j.plan.ID {
		// Cannot happen: a record is kept while its plan runs.
		l.log.WithField("cluster", j.key).Debug("paused plan for a cluster with no plan in flight")
		l.inflight--
		l.schedule()
		return
	}
	l.freed(rec)
	rec.paused = j
	l.runq.push(rec, j.urgent)
	l.schedule()
}

// planFinished is the loop's bookkeeping for a PlanDone, done before the
// Handler sees it: the cluster's slot and its worker are free. Its waiting
// plan is queued only after the Handler has seen the result
// (planAccounted): a plan the result asks for supersedes it, so a status
// change queued while the plan ran and the change its result brings (a
// timer, a record of what was applied) go in one write, not two.
func (l *Loop) planFinished(key string) {
	rec := l.clusters[key]
	if rec == nil || !rec.running {
		// Cannot happen: a record is kept while its plan runs.
		l.log.WithField("cluster", key).Debug("plan result for a cluster with no plan in flight")
		return
	}
	rec.running, rec.cancel, rec.planID = false, nil, 0
	l.freed(rec)
}

// planAccounted queues the cluster's waiting plan, if any and not queued
// yet, once the Handler has seen the PlanDone, and starts what the free
// worker may run.
func (l *Loop) planAccounted(key string) {
	if rec := l.clusters[key]; rec != nil && !rec.running && rec.waiting != nil && rec.queued == notQueued {
		l.runq.push(rec, rec.urgent)
	}
	l.schedule()
}

// worker runs plans until Run closes the work channel. Between two steps
// of a plan, while other clusters wait for a worker (contended), it pauses
// the plan and hands it back to the loop: a cluster whose plan has many
// steps takes one step per turn, so it delays another cluster's next step
// by one step at most, not by its whole plan.
func (l *Loop) worker() {
	defer l.wg.Done()
	for j := range l.work {
		l.runJob(j)
	}
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
	done := Event{Key: j.key, Kind: PlanDone, PlanID: j.plan.ID, Err: err, At: now, Urgent: j.urgent}
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
		if ran && l.contended.Load() {
			return false
		}
		ran = true
		serr := l.runStep(j.ctx, s)
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
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	sc := &stepCtx{Context: ctx, deadline: l.clock.Now().Add(timeout)}
	if d, ok := parent.Deadline(); ok && d.Before(sc.deadline) {
		sc.deadline = d
	}
	stop := l.afterFunc(timeout, func() { cancel(context.DeadlineExceeded) })
	defer stop()

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
// follows the wall clock, which a fake clock cannot move.
type stepCtx struct {
	context.Context
	deadline time.Time
}

func (c *stepCtx) Deadline() (time.Time, bool) { return c.deadline, true }

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
		go func() {
			select {
			case <-t.C():
				f()
			case <-done:
				t.Stop()
			}
		}()
		return func() { close(done) }
	}
}
