package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/controller"
	"github.com/pgloop/pgloop/pkg/effects"
	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/facts"
	"github.com/pgloop/pgloop/pkg/fsm"
	pgfake "github.com/pgloop/pgloop/pkg/generated/clientset/versioned/fake"
	"github.com/pgloop/pgloop/pkg/informers"
)

// Options size a run.
type Options struct {
	// Active is how long the user acts and the faults last; Quiet is how
	// long the run goes on after, without faults, for every cluster to
	// settle. Their defaults: 20 and 30 simulated minutes.
	Active, Quiet time.Duration
	// Trace is how many of the last lines of the trace a Result keeps
	// (0: 60).
	Trace int
	// Variant leaves choices of the seed out (Shrink); the zero Variant
	// runs the seed as drawn.
	Variant Variant
	// serial runs the plans one at a time, first come, first served, a
	// step that waits holding every other (and the loop hands every plan
	// at once): an executor that breaks isolation, for
	// TestIsolationFailsWhenSerial.
	serial bool
	// hung, when not 0, makes that many hung clusters in stuckNS in
	// every seed (newStuck).
	hung int
	// noHungLane runs the executor without its hung lane (SlowAfter < 0)
	// nor its bound on one namespace's workers (NamespaceWorkers < 0): a
	// hung step holds its worker until its deadline, as before issue 35
	// (TestIsolationRegressions).
	noHungLane bool
	// handovers, when set, are the run's handovers instead of the
	// seed's (TestHandover).
	handovers []handover
	// unfenced lets the writes of an incarnation that lost its Lease
	// reach the API during its overlap, as before pkg/operator fenced
	// them (fencedLock): for TestHandoverFence.
	unfenced bool
	// fail, when set, is an invariant of a test's, checked on the
	// result after the run: a violation when it returns a message.
	fail func(Result) string
}

// Result is what one run saw.
type Result struct {
	Seed int64
	// Simulated is the simulated time the run covered; ClusterHours sums
	// the time each cluster existed.
	Simulated    time.Duration
	ClusterHours float64
	// Faults counts the faults injected, by kind (Fault*).
	Faults map[string]int
	// Checks counts the invariant checks made, by invariant.
	Checks map[string]int
	// Writes counts the operator's write calls; MaxWritesPerMinute is the
	// most one cluster made in one simulated minute.
	Writes, MaxWritesPerMinute int
	// MaxWait is the longest a plan of a cluster outside stuckNS waited
	// to start once it could (isolation), MaxWaitKey its cluster.
	MaxWait    time.Duration
	MaxWaitKey string
	// MaxStuckStarts is the most plan starts of stuck clusters during one
	// such wait.
	MaxStuckStarts int
	// Overlapping counts the plans handed while a plan of the same
	// cluster was in flight in the other incarnation, during a
	// handover's overlap; OldWrites the writes of an incarnation that
	// lost its Lease that the API stored during its overlap.
	Overlapping, OldWrites int
	// Violations are the invariants that did not hold, empty when all did.
	Violations []string
	// Trace is the end of the run's trace: what happened, in order.
	Trace []string
}

const (
	// maxWritesPerMinute bounds one cluster's write calls per simulated
	// minute: a create is about fifteen, conflicts retry at most five
	// times each; a busy loop makes thousands.
	maxWritesPerMinute = 150
	// maxRounds bounds the simulator's rounds at one simulated instant:
	// more means the operator acts without end while no time passes.
	maxRounds = 10_000
	// stepTimeout is the executor's step deadline (the operator's default).
	stepTimeout = 30 * time.Second
	// rolloutBudget is --max-rolling-clusters in the simulation: small, so
	// clusters wait for a slot.
	rolloutBudget = 2
)

// t0 is when every run starts.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Sim is one run.
type Sim struct {
	seed  int64
	opt   Options
	rng   *rand.Rand
	clock *simClock
	api   *apiServer
	kube  *kubefake.Clientset
	pg    *pgfake.Clientset
	world *world
	sw    swarm
	log   *logrus.Logger
	hung  map[string]bool // clusters whose steps hang (plannedCluster.hung)

	plan      []plannedCluster
	ops       []op
	nextOp    int
	crash     int // next of sw.crashes
	kill      int // next of sw.kills
	handovers []handover
	handover  int // next of handovers

	op  *operator
	inc int // the operator's last incarnation, counted from 1
	// live is the incarnation whose calls reach the API, 0 while none
	// runs: a crashed operator's calls fail.
	live int
	// old is the incarnation that lost its Lease, while it goes on
	// (handover.go); nil when none does.
	old *operator

	// signals wait to be handed to the loop, one per round: handed at
	// once, how many the loop takes in one batch (and so merges) would
	// depend on the goroutines' timing.
	signals [][2]string

	// Jobs: plans handed by the loop (Exec), run one at a time.
	active *job
	yield  chan *job
	jobSeq int
	watch  watchState
	checks checkState
	iso    isolation
	rounds int

	// mu guards what the loop goroutine writes too: the pending jobs,
	// the result, the trace and the checks' state.
	mu      sync.Mutex
	pending []*job
	parked  []*job
	res     Result
	trace   []string
}

// job is one plan's work (or the rest of a paused plan), handed by the
// loop.
type job struct {
	id, inc int
	key     string
	work    func()
	started bool
	done    bool
	wake    chan struct{}
	until   time.Time       // parked until then
	ctx     context.Context // of the step being run
}

// operator is one incarnation of the operator process.
type operator struct {
	inc int
	// clock is the incarnation's own: its loop, controller, facts and
	// effects read it, and the simulator sets it to the simulated time
	// and settles the loop before it sets another incarnation's.
	clock  *simClock
	ctrl   *controller.Controller
	loop   *eventloop.Loop
	view   *view
	cancel context.CancelFunc
	done   chan struct{}
	// until is when an incarnation that lost its Lease stops.
	until time.Time
}

// watchState is the delivery of the API's changes to the operator's cache.
type watchState struct {
	seen  int64    // the last change queued
	queue []queued // changes on their way, in order
	// broken are the kinds (resources) whose watch ended with 410 Gone,
	// with when their informer's list comes: nothing of theirs arrives
	// until then; the other kinds' watches go on.
	broken map[string]time.Time
}

type queued struct {
	c   change
	due time.Time
}

// Run plays the run of seed and checks its invariants.
func Run(seed int64, opt Options) Result {
	if opt.Active == 0 {
		opt.Active = 20 * time.Minute
	}
	if opt.Quiet == 0 {
		opt.Quiet = 30 * time.Minute
	}
	if opt.Trace == 0 {
		opt.Trace = 60
	}
	s := newSim(seed, opt)
	s.run()
	return s.res
}

func newSim(seed int64, opt Options) *Sim {
	s := &Sim{seed: seed, opt: opt, rng: rand.New(rand.NewPCG(uint64(seed), 0x5eed)),
		clock: newSimClock(t0), yield: make(chan *job)}
	s.res = Result{Seed: seed, Faults: map[string]int{}, Checks: map[string]int{}}
	s.api = newAPIServer(s.clock.Now, func() caller {
		if s.active == nil {
			return nil
		}
		return &jobCaller{s: s, j: s.active}
	})
	s.kube, s.pg = s.api.clients()
	s.world = newWorld(s.api)
	s.sw = newSwarm(s.rng, opt.Active)
	s.plan, s.ops = newWorkload(s.rng, opt.Active)
	s.handovers = newHandovers(seed, opt.Active)
	if opt.handovers != nil {
		s.handovers = opt.handovers
	}
	stuck, ops := newStuck(seed, opt.Active, opt.hung)
	s.plan = append(s.plan, stuck...)
	s.ops = append(s.ops, ops...)
	slices.SortStableFunc(s.ops, func(a, b op) int { return int(a.at - b.at) })
	s.applyVariant()
	s.hung = map[string]bool{}
	for _, pc := range s.plan {
		s.world.fates[pc.key] = pc.fate
		s.hung[pc.key] = pc.hung
	}
	s.checks = newCheckState()
	s.iso = newIsolation()
	s.api.gone = func(k objKey) { s.checks.gone(s, k) }
	s.log = logrus.New()
	s.log.SetOutput(io.Discard)
	s.log.SetLevel(logrus.WarnLevel)
	return s
}

// since is the simulated time from the start.
func (s *Sim) since() time.Duration { return s.clock.Now().Sub(t0) }

// tracef adds a line to the trace, stamped with the simulated time.
func (s *Sim) tracef(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.traceLocked(format, args...)
}

func (s *Sim) traceLocked(format string, args ...any) {
	line := fmt.Sprintf("%9s ", s.since().Round(time.Millisecond)) + fmt.Sprintf(format, args...)
	s.trace = append(s.trace, line)
	if len(s.trace) > 4*s.opt.Trace {
		s.trace = slices.Delete(s.trace, 0, len(s.trace)-s.opt.Trace)
	}
}

// failf records a violated invariant.
func (s *Sim) failf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	s.res.Violations = append(s.res.Violations, fmt.Sprintf("at %v: %s", s.since().Round(time.Millisecond), msg))
	s.traceLocked("VIOLATION %s", msg)
}

// count counts one injected fault.
func (s *Sim) count(kind string) {
	s.mu.Lock()
	s.res.Faults[kind]++
	s.traceLocked("fault %s", kind)
	s.mu.Unlock()
}

func (s *Sim) run() {
	s.tracef("seed %d: swarm %s", s.seed, s.sw)
	for _, pc := range s.plan {
		s.tracef("cluster %s: pods %s", pc.key, pc.fate.kind)
	}
	s.startOperator()
	end := t0.Add(s.opt.Active + s.opt.Quiet)
	for len(s.res.Violations) == 0 {
		s.settle()
		now := s.clock.Now()
		if s.act(now) {
			if s.rounds++; s.rounds > maxRounds {
				s.failf("busy: %d rounds at one instant without time passing", s.rounds)
				break
			}
			continue
		}
		next, ok := s.next(now)
		if !ok || next.After(end) {
			s.setTime(end)
			break
		}
		s.rounds = 0
		s.setTime(next)
	}
	s.retire()
	s.stopOperator()
	s.finalChecks()
	if s.opt.fail != nil {
		if msg := s.opt.fail(s.res); msg != "" {
			s.failf("%s", msg)
		}
	}
	s.res.Simulated = s.since()
	s.res.MaxWait, s.res.MaxWaitKey, s.res.MaxStuckStarts = s.iso.max, s.iso.maxKey, s.iso.maxStuck
	s.res.Trace = s.trace[max(0, len(s.trace)-s.opt.Trace):]
}

// setTime moves the simulated time to t: the simulator's clock, then
// each incarnation's, settling its loop before the next one's moves, so
// that two loops never run at once.
func (s *Sim) setTime(t time.Time) {
	s.clock.SetTime(t)
	for _, op := range s.running() {
		op.clock.SetTime(t)
		s.settleOne(op)
	}
}

// running returns the incarnations whose loops run: the one that lost its
// Lease, if any, first.
func (s *Sim) running() []*operator {
	if s.old != nil {
		return []*operator{s.old, s.op}
	}
	return []*operator{s.op}
}

// settle waits until the loops have handled everything they were given.
func (s *Sim) settle() {
	for _, op := range s.running() {
		s.settleOne(op)
	}
}

func (s *Sim) settleOne(op *operator) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := op.loop.WaitIdle(ctx); err != nil {
		s.failf("the loop of operator %d did not settle within a wall minute: %v", op.inc, err)
	}
}

// act does one thing due at now, in this order: a crash, a signal for the
// loop, a pod killed, a user's action, the world's reaction, a change
// reaching the cache, a plan's turn. It reports whether it did anything.
func (s *Sim) act(now time.Time) bool {
	since := now.Sub(t0)
	if s.crash < len(s.sw.crashes) && s.sw.crashes[s.crash] <= since {
		s.crash++
		s.count(FaultCrash)
		s.retire()
		s.stopOperator()
		s.startOperator()
		return true
	}
	if s.old != nil && !now.Before(s.old.until) {
		s.tracef("operator %d stops: its overlap ended", s.old.inc)
		s.retire()
		return true
	}
	if s.handover < len(s.handovers) && s.handovers[s.handover].at <= since {
		s.handOver(s.handovers[s.handover])
		s.handover++
		return true
	}
	if len(s.signals) > 0 {
		sig := s.signals[0]
		s.signals = s.signals[1:]
		s.op.loop.Notify(sig[0], sig[1])
		return true
	}
	if s.kill < len(s.sw.kills) && s.sw.kills[s.kill] <= since {
		s.kill++
		if pod := s.world.kill(s.rng); pod != "" {
			s.count(FaultPodKilled)
			s.tracef("world: pod %s killed", pod)
		}
		return true
	}
	if s.nextOp < len(s.ops) && s.ops[s.nextOp].at <= since {
		s.user(s.ops[s.nextOp])
		s.nextOp++
		return true
	}
	if s.world.step(now) {
		return true
	}
	if s.deliver(now) {
		return true
	}
	s.checkTimers(now)
	return s.runJob(now)
}

// next returns when something happens next after now.
func (s *Sim) next(now time.Time) (time.Time, bool) {
	var times []time.Time
	add := func(t time.Time, ok bool) {
		if ok && t.After(now) {
			times = append(times, t)
		}
	}
	for _, op := range s.running() {
		add(op.clock.next())
	}
	add(s.world.next(now))
	if s.old != nil {
		add(s.old.until, true)
	}
	if s.handover < len(s.handovers) {
		add(t0.Add(s.handovers[s.handover].at), true)
	}
	if s.crash < len(s.sw.crashes) {
		add(t0.Add(s.sw.crashes[s.crash]), true)
	}
	if s.kill < len(s.sw.kills) {
		add(t0.Add(s.sw.kills[s.kill]), true)
	}
	if s.nextOp < len(s.ops) {
		add(t0.Add(s.ops[s.nextOp].at), true)
	}
	if len(s.watch.queue) > 0 {
		add(s.watch.queue[0].due, true)
	}
	for _, at := range s.watch.broken {
		add(at, true)
	}
	s.mu.Lock()
	for _, j := range s.parked {
		add(j.until, true)
	}
	s.mu.Unlock()
	add(s.checks.nextTimerCheck())
	if len(times) == 0 {
		return time.Time{}, false
	}
	return slices.MinFunc(times, func(a, b time.Time) int { return a.Compare(b) }), true
}

// user carries out a user's action on the API.
func (s *Sim) user(o op) {
	ns, name, _ := strings.Cut(o.key, "/")
	key := objKey{"postgresqls", ns, name}
	s.tracef("user %s %s %s", o.kind, o.key, o.desc)
	switch o.kind {
	case opCreate:
		pg := newPostgresql(ns, name)
		o.edit(pg)
		s.api.write(key, pg)
		s.checks.created(o.key, s.clock.Now())
	case opEdit:
		obj, ok := s.api.get(key)
		if !ok {
			return
		}
		pg := obj.(*v1.Postgresql)
		o.edit(pg)
		s.api.write(key, pg)
	case opDelete:
		if _, ok := s.api.get(key); ok {
			s.checks.askDelete(o.key)
			s.api.write(key, nil)
		}
	}
}

// deliver moves the API's changes towards the operator's cache: each is
// queued when committed, with its lag, and applied once due, in order;
// the watch of a kind that ends with 410 Gone drops that kind's changes
// until its informer lists it again.
func (s *Sim) deliver(now time.Time) bool {
	w := &s.watch
	for _, c := range s.api.since(w.seen) {
		w.seen = c.rv
		due := c.at
		if s.sw.watchLag > 0 {
			lag := time.Duration(s.rng.Int64N(int64(s.sw.watchLag)))
			due = due.Add(lag)
			if lag > time.Second {
				s.count(FaultWatchLate)
			}
		}
		if n := len(w.queue); n > 0 && due.Before(w.queue[n-1].due) {
			due = w.queue[n-1].due // a watch delivers in order
		}
		w.queue = append(w.queue, queued{c: c, due: due})
	}
	for _, res := range slices.Sorted(maps.Keys(w.broken)) {
		if now.Before(w.broken[res]) {
			continue
		}
		// Every change committed is queued: the list holds those of
		// res still queued.
		objs, rv := s.api.snapshot()
		delete(w.broken, res)
		w.queue = slices.DeleteFunc(w.queue, func(q queued) bool { return q.c.key.res == res })
		s.tracef("relist %s at rv %d", res, rv)
		s.notify(s.op.view.relist(res, objs))
		return true
	}
	if len(w.queue) == 0 || now.Before(w.queue[0].due) {
		return false
	}
	q := w.queue[0]
	w.queue = w.queue[1:]
	if _, broken := w.broken[q.c.key.res]; broken {
		return true
	}
	if r := s.sw.rates[FaultWatchDrop]; r > 0 && s.rng.Float64() < r/10 {
		s.count(FaultWatchDrop)
		if w.broken == nil {
			w.broken = map[string]time.Time{}
		}
		w.broken[q.c.key.res] = now.Add(time.Duration(1+s.rng.IntN(60)) * time.Second)
		s.tracef("watch of %s: 410 Gone", q.c.key.res)
		return true
	}
	var obj runtime.Object
	if q.c.obj != nil {
		obj = q.c.obj.DeepCopyObject()
	}
	s.notify(s.op.view.apply(q.c.key, obj))
	return true
}

// notify queues the cache's signals for the loop.
func (s *Sim) notify(sigs [][2]string) { s.signals = append(s.signals, sigs...) }

// startOperator starts an incarnation of the operator from what the API
// holds: a cache from a list, a controller and a loop, every cluster
// resumed from its status, as pkg/operator's runLeader does.
func (s *Sim) startOperator() {
	s.inc++
	clk := newSimClock(s.clock.Now())
	objs, rv := s.api.snapshot()
	v := newView()
	for _, k := range slices.SortedFunc(maps.Keys(objs), func(x, y objKey) int { return strings.Compare(x.String(), y.String()) }) {
		v.apply(k, objs[k])
	}
	s.watch, s.signals = watchState{seen: rv}, nil
	build := cluster.Options{Image: images[0]}
	entry := logrus.NewEntry(s.log)
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], uint64(s.seed))
	binary.LittleEndian.PutUint64(seed[8:], uint64(s.inc))
	// As the operator wires them: the effects read what the facts know.
	deriver := facts.NewDeriver(build, true)
	eff := effects.New(s.kube, s.pg, &record.FakeRecorder{}, effects.Options{Build: build, Log: entry, Cache: v,
		Desired: deriver, Random: rand.NewChaCha8(seed), Now: clk.Now, Serial: true})
	steps := controller.NewStepBuilder(&actor{s: s, real: eff}, &actor{s: s, real: eff}, controller.Timeouts{})
	ctrl := controller.New(fsm.DefaultConfig(), facts.NewObserver(v, deriver, clk.Now),
		steps, clk, entry)
	inc := s.inc
	workers := s.sw.workers
	if s.opt.serial {
		workers = 1000
	}
	var slowAfter time.Duration // the operator's default
	namespaceWorkers := 0       // the default bound
	if s.opt.noHungLane {
		// The executor as it was before its defences: its stuck
		// clusters, all of one namespace, would also be held off the
		// last workers by the bound on one namespace's workers.
		slowAfter, namespaceWorkers = -1, -1
	}
	loop := eventloop.New(&probe{s: s, ctrl: ctrl, inc: inc}, eventloop.Options{Clock: clk, Workers: workers,
		StepTimeout: stepTimeout, SlowAfter: slowAfter, NamespaceWorkers: namespaceWorkers, Log: entry, Exec: func(key string, work func()) { s.exec(inc, key, work) }})
	ctrl.SetRolloutBudget(rolloutBudget, loop.Notify)
	keys := v.keys("postgresqls")
	ctrl.Resuming(keys)
	for _, key := range keys {
		loop.Notify(key, informers.SignalSpec)
	}
	s.checks.restarted(s, objs)
	s.mu.Lock()
	s.iso.reset()
	s.mu.Unlock()
	s.tracef("operator %d started with %d clusters", inc, len(keys))
	ctx, cancel := context.WithCancel(context.Background())
	op := &operator{inc: inc, clock: clk, ctrl: ctrl, loop: loop, view: v, cancel: cancel, done: make(chan struct{})}
	s.op, s.live = op, inc
	go func() {
		defer close(op.done)
		_ = loop.Run(ctx)
	}()
}

// stopOperator stops the running incarnation as a crash would.
func (s *Sim) stopOperator() {
	s.live = 0
	s.stop(s.op)
}

// stop stops an incarnation, no longer alive, as a crash would: the loop
// stops, its plans not started are lost, and its plans in flight end with
// every call failing (the process is gone).
func (s *Sim) stop(op *operator) {
	op.cancel()
	<-op.done
	s.tracef("operator %d stopped", op.inc)
	s.mu.Lock()
	var parked []*job
	for _, j := range s.parked {
		if j.inc == op.inc {
			parked = append(parked, j)
		}
	}
	mine := func(j *job) bool { return j.inc == op.inc }
	s.pending = slices.DeleteFunc(s.pending, mine)
	s.parked = slices.DeleteFunc(s.parked, mine)
	s.mu.Unlock()
	for _, j := range parked {
		for !j.done {
			s.resume(j)
		}
	}
}

// exec is the loop's Options.Exec: it takes a plan's work, to run when
// the simulator decides. At most one plan of a cluster may be in flight.
func (s *Sim) exec(inc int, key string, work func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res.Checks["onePlanInFlight"]++
	for _, j := range slices.Concat(s.pending, s.parked) {
		switch {
		case j.key != key:
		case j.inc == inc:
			s.res.Violations = append(s.res.Violations, fmt.Sprintf("at %v: two plans of %s in flight", s.since(), key))
		default:
			// One of each incarnation during a handover's overlap:
			// allowed, and counted.
			s.res.Overlapping++
		}
	}
	if inc == s.inc {
		s.iso.handed(key)
	}
	s.jobSeq++
	s.pending = append(s.pending, &job{id: s.jobSeq, inc: inc, key: key, work: work, wake: make(chan struct{})})
}

// runJob runs one plan that can go on at now, chosen by the seed among
// those: new ones, and parked ones whose wait is over (or whose step was
// cancelled). It reports whether there was one.
func (s *Sim) runJob(now time.Time) bool {
	s.mu.Lock()
	var ready []*job
	for _, j := range s.parked {
		if !now.Before(j.until) || j.ctx.Err() != nil {
			ready = append(ready, j)
		}
	}
	switch {
	case !s.opt.serial:
		ready = append(ready, s.pending...)
	case len(s.parked) == 0:
		ready = s.pending
	case len(ready) < len(s.parked):
		ready = nil // a parked plan holds the one worker
	}
	if len(ready) == 0 {
		s.mu.Unlock()
		return false
	}
	j := ready[s.rng.IntN(len(ready))]
	if s.opt.serial {
		j = ready[0]
	}
	s.pending = slices.DeleteFunc(s.pending, func(x *job) bool { return x == j })
	s.parked = slices.DeleteFunc(s.parked, func(x *job) bool { return x == j })
	if !j.started && j.inc == s.live {
		if d, stuck, other, ok := s.iso.started(j.key, now); ok {
			s.res.Checks["isolation"]++
			if !fair(stuck, other, s.sw.workers) {
				s.violation("a plan of %s waited %v to start, behind %d starts of stuck clusters and %d of others (at most %d per other start, and %d handed before): stuck clusters delay it",
					j.key, d.Round(time.Millisecond), stuck, other, maxStuckShare, s.sw.workers)
			}
		}
	}
	s.mu.Unlock()
	s.resume(j)
	if !j.done {
		s.mu.Lock()
		s.parked = append(s.parked, j)
		s.mu.Unlock()
	}
	return true
}

// resume runs j until it ends or parks.
func (s *Sim) resume(j *job) {
	s.active = j
	if !j.started {
		j.started = true
		go func() {
			j.work()
			j.done = true
			s.yield <- j
		}()
	} else {
		j.wake <- struct{}{}
	}
	<-s.yield
	if j.done && j.inc == s.live {
		s.mu.Lock()
		s.iso.ended(j.key, s.clock.Now())
		s.mu.Unlock()
	}
	s.active = nil
	s.kube.ClearActions()
	s.pg.ClearActions()
}

// park makes the running job wait until the simulated time until: the
// simulator goes on with other things meanwhile. Called on the job's
// goroutine.
func (s *Sim) park(until time.Time) {
	j := s.active
	j.until = until
	s.yield <- j
	<-j.wake
}

// probe is the loop's Handler: the real controller, with the checks and
// the trace around it.
type probe struct {
	s    *Sim
	ctrl *controller.Controller
	inc  int
}

func (p *probe) Handle(ev eventloop.Event) eventloop.Outcome {
	p.s.checks.event(p.s, p.inc, ev)
	out := p.ctrl.Handle(ev)
	p.s.checks.outcome(p.s, p.inc, ev, out)
	if out.Plan != nil && p.inc == p.s.live {
		p.s.mu.Lock()
		p.s.iso.planned(ev.Key, p.s.clock.Now())
		p.s.mu.Unlock()
	}
	line := fmt.Sprintf("%s %s %s", ev.Key, ev.Kind, ev.Name)
	if p.inc != p.s.live {
		line = fmt.Sprintf("[operator %d] %s", p.inc, line)
	}
	if m := p.ctrl.Machine(ev.Key); m != nil {
		st := m.Status()
		line += fmt.Sprintf(" -> %s epoch %d gen %d %s", st.State, st.Epoch, st.ObservedGeneration, st.Reason)
	}
	if out.Plan != nil {
		names := make([]string, len(out.Plan.Steps))
		for i, st := range out.Plan.Steps {
			names[i] = st.Name
		}
		line += fmt.Sprintf(" plan %d %v", out.Plan.ID, names)
	}
	if ev.Err != nil {
		line += " err " + ev.Err.Error()
	}
	p.s.tracef("%s", line)
	return out
}

// actor is the effects as the plans call them: the real pkg/effects for
// the API, Patroni and SQL faked (they succeed; a switchover moves the
// primary in the world). Each call first meets the step's faults.
type actor struct {
	s    *Sim
	real *effects.Effects
}

var _ controller.Actor = (*actor)(nil)

// enter starts a step of the running job: it records the step's context
// for the API's checks, and makes the step slow or hang as the seed says.
func (a *actor) enter(ctx context.Context) error {
	s := a.s
	j := s.active
	j.ctx = ctx
	if !s.alive(j.inc) {
		return errCrashed
	}
	if d, ok := ctx.Deadline(); ok && s.hung[j.key] && s.since() < s.opt.Active {
		s.count(FaultHungCluster)
		s.park(d)
		if !s.alive(j.inc) {
			return errCrashed
		}
		return fmt.Errorf("simulated call of a hung cluster: %w", context.DeadlineExceeded)
	}
	wait, hang := s.stepFault(ctx)
	if wait > 0 {
		s.park(s.clock.Now().Add(wait))
	}
	switch {
	case !s.alive(j.inc):
		return errCrashed
	case hang:
		return fmt.Errorf("simulated call hung: %w", context.DeadlineExceeded)
	}
	return ctx.Err()
}

func (a *actor) WriteStatus(ctx context.Context, key string, st *v1.PostgresqlStatus) error {
	if err := a.enter(ctx); err != nil {
		return err
	}
	return a.real.WriteStatus(ctx, key, st)
}

func (a *actor) Ensure(ctx context.Context, key string, opts effects.EnsureOptions) error {
	if err := a.enter(ctx); err != nil {
		return err
	}
	return a.real.Ensure(ctx, key, opts)
}

func (a *actor) ReplacePods(ctx context.Context, key string, pods []act.Pod) error {
	if err := a.enter(ctx); err != nil {
		return err
	}
	return a.real.ReplacePods(ctx, key, pods)
}

func (a *actor) Nudge(ctx context.Context, key, version string) error {
	if err := a.enter(ctx); err != nil {
		return err
	}
	return a.real.Nudge(ctx, key, version)
}

func (a *actor) SyncRoles(ctx context.Context, _ string) error { return a.enter(ctx) }

func (a *actor) Configure(ctx context.Context, _ string, _ []string) error { return a.enter(ctx) }

// Switchover is Patroni's: it refuses a candidate that is not Ready, and
// may accept one and keep the primary (FaultUndone).
func (a *actor) Switchover(ctx context.Context, key, _, to string) error {
	if err := a.enter(ctx); err != nil {
		return err
	}
	s := a.s
	obj, ok := s.api.get(objKey{"pods", keyNS(key), to})
	if !ok || !podReady(obj.(*corev1.Pod)) {
		return fmt.Errorf("patroni switchover to %s: 412 candidate not healthy", to)
	}
	if s.since() < s.opt.Active && s.sw.rates[FaultUndone] > 0 && s.rng.Float64() < s.sw.rates[FaultUndone] {
		s.count(FaultUndone)
		return nil
	}
	s.world.switchover(key, to)
	return nil
}

func (a *actor) RestartMembers(ctx context.Context, _ string, _ []string) error { return a.enter(ctx) }

// ResumePoolers has nothing to resume: the simulated world runs no
// PgBouncer.
func (a *actor) ResumePoolers(ctx context.Context, _ string) error { return a.enter(ctx) }

// StartBackup has no backup to start: the simulated clusters have no
// repository.
func (a *actor) StartBackup(ctx context.Context, _ string, _ act.BackupStart) error {
	return a.enter(ctx)
}

func (a *actor) Cleanup(ctx context.Context, key string) error {
	if err := a.enter(ctx); err != nil {
		return err
	}
	return a.real.Cleanup(ctx, key)
}

func (a *actor) RecordEvents(ctx context.Context, key string, events []act.Record) error {
	if err := a.enter(ctx); err != nil {
		return err
	}
	return a.real.RecordEvents(ctx, key, events)
}

// jobCaller is the API's caller while a job runs.
type jobCaller struct {
	s *Sim
	j *job
}

func (c *jobCaller) intercept(verb string, key objKey) (error, bool) {
	s, j := c.s, c.j
	if !s.alive(j.inc) {
		return errCrashed, false
	}
	if d, ok := j.ctx.Deadline(); ok && !s.clock.Now().Before(d) {
		return context.DeadlineExceeded, false
	}
	if j.inc != s.live {
		if isWrite(verb) && !s.opt.unfenced {
			s.tracef("[operator %d] %s call %s %s refused: the Lease is lost (fence)", j.inc, j.key, verb, key)
			return errFenced, false
		}
		s.tracef("[operator %d] %s call %s %s", j.inc, j.key, verb, key)
	} else {
		s.tracef("%s call %s %s", j.key, verb, key)
	}
	if isWrite(verb) {
		s.checks.write(s, j.key)
	}
	if s.since() >= s.opt.Active {
		return nil, false
	}
	return s.callFault(verb, key, s.since())
}

func (c *jobCaller) committed(verb string, key objKey, before, after runtime.Object) {
	c.s.checks.committed(c.s, c.j.key, verb, key, before, after)
	if c.j.inc != c.s.live {
		c.s.checks.oldWrite(c.s, c.j.inc, c.j.key, verb, key)
	}
}

// keys returns the keys of the cached objects of res, sorted.
func (v *view) keys(res string) []string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []string
	for k := range v.objs {
		if k.res == res {
			out = append(out, k.ns+"/"+k.name)
		}
	}
	slices.Sort(out)
	return out
}
