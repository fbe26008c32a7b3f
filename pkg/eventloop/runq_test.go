package eventloop

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// The run queue against a model of it: for each lane, its flows in turn
// order, each a list of its queued records, and the streak, with the stale
// entries of promoted records left out; the workers each flow's records
// hold, at most flowBound. Random pushes, promotions, pops (each record
// popped takes a worker) and releases of workers, of records of three
// namespaces (and keys without one, flows of their own), must take the
// records in the model's order, skipping the flows at their bound, and
// the invariants of runQueue must hold after every operation.
func TestRunQueue(t *testing.T) {
	const flowBound = 2
	rng := rand.New(rand.NewPCG(14, 0))
	recs := make([]*clusterState, 16)
	for i := range recs {
		switch i % 4 {
		case 3:
			recs[i] = &clusterState{key: fmt.Sprint(i)}
		default:
			recs[i] = &clusterState{key: fmt.Sprintf("ns%d/%d", i%4, i)}
		}
	}
	var (
		q                  = runQueue{holds: flowHolds{bound: flowBound}}
		urgent, background modelLane
		streak             int
		holding            []*clusterState // records holding a worker
		held               = map[string]int{}
	)
	full := func(flow string) bool { return held[flow] >= flowBound }
	for n := range 50000 {
		rec := recs[rng.IntN(len(recs))]
		var op string
		switch r := rng.IntN(12); {
		case r < 4 && rec.queued == notQueued && !slices.Contains(holding, rec):
			u := rng.IntN(3) == 0
			rec.continues = rng.IntN(4) == 0
			op = fmt.Sprintf("push %s urgent=%v continues=%v", rec.key, u, rec.continues)
			q.push(rec, u)
			if u {
				urgent.push(rec)
			} else {
				background.push(rec)
			}
		case r < 6 && rec.queued == inBackground:
			op = "promote " + rec.key
			q.promote(rec)
			background.remove(rec)
			urgent.push(rec)
		case r < 8 && len(holding) > 0:
			rec = holding[rng.IntN(len(holding))]
			op = "release " + rec.key
			q.release(rec)
			holding = slices.DeleteFunc(holding, func(r *clusterState) bool { return r == rec })
			held[flowOf(rec.key)]--
		case r < 9 && rec.queued != notQueued && !begun(rec):
			op = "requeue " + rec.key
			rec.continues = true
			q.requeue(rec)
			m := &background
			if rec.queued == inUrgent {
				m = &urgent
			}
			m.remove(rec)
			m.push(rec)
		case r < 10:
			op = "popUrgent"
			want := urgent.pop(full)
			if got := q.popUrgent(); got != want {
				t.Fatalf("op %d: popUrgent = %s, want %s", n, name(got), name(want))
			}
			holding, held = take(&q, want, holding, held)
		default:
			op = "pop"
			var want *clusterState
			wantUrgent := false
			backgroundFirst := streak >= maxUrgentStreak || urgent.len() == 0
			if backgroundFirst {
				want = background.pop(full)
			}
			if want == nil {
				if want = urgent.pop(full); want != nil {
					wantUrgent = true
				}
			}
			if want == nil && !backgroundFirst {
				want = background.pop(full)
			}
			switch {
			case wantUrgent && background.len() > 0:
				streak = min(streak+1, maxUrgentStreak)
			case want != nil:
				streak = 0
			}
			got, gotUrgent := q.pop()
			if got != want || gotUrgent != wantUrgent {
				t.Fatalf("op %d: pop = %s urgent=%v, want %s urgent=%v", n, name(got), gotUrgent, name(want), wantUrgent)
			}
			holding, held = take(&q, want, holding, held)
		}
		if err := checkRunQueue(&q, recs); err != nil {
			t.Fatalf("op %d (%s): %v", n, op, err)
		}
		if err := checkHolds(&q.holds, held); err != nil {
			t.Fatalf("op %d (%s): %v", n, op, err)
		}
	}
	for _, rec := range holding {
		q.release(rec)
	}
	popped := 0
	for rec, _ := q.pop(); rec != nil; rec, _ = q.pop() {
		popped++
	}
	if want := urgent.len() + background.len(); popped != want || q.waiting() != 0 || q.urgent.turns.len()+q.background.turns.len() != 0 {
		t.Errorf("popped %d records, want %d; %d waiting and %d flows after, want none", popped, want, q.waiting(),
			q.urgent.turns.len()+q.background.turns.len())
	}
}

// take makes rec, popped from q (nil: none), hold a worker, in q and in
// the model.
func take(q *runQueue, rec *clusterState, holding []*clusterState, held map[string]int) ([]*clusterState, map[string]int) {
	if rec != nil {
		q.hold(rec)
		held[flowOf(rec.key)]++
		holding = append(holding, rec)
	}
	return holding, held
}

// checkHolds checks invariant 5 of runQueue: h counts what the model
// holds, no count is zero or above the bound.
func checkHolds(h *flowHolds, held map[string]int) error {
	for flow, n := range held {
		if h.n[flow] != n {
			return fmt.Errorf("flow %q holds %d workers, want %d", flow, h.n[flow], n)
		}
	}
	for flow, n := range h.n {
		if n <= 0 || n > h.bound {
			return fmt.Errorf("flow %q counts %d workers, want 1 to %d", flow, n, h.bound)
		}
	}
	return nil
}

// The bound on the workers of one flow, and begun work ahead in its flow,
// as scripts run on a run queue with that bound: "push K" queues cluster K
// in the background lane, "push! K" in the urgent one, "push+ K" and
// "push!+ K" the same for a cluster whose work has begun (begun);
// "continue K" says K's work has begun while it is queued
// (runQueue.requeue); "pop K" takes the next cluster state, which must be
// K from the background lane ("pop! K": from the urgent one; "pop -":
// none), and it holds a worker; "release K" gives K's worker back. After
// every line, the invariants of runQueue hold.
func TestRunQueueFlowBound(t *testing.T) {
	tests := []struct {
		name   string
		bound  int
		script []string
	}{{
		name:  "a flow at its bound is skipped; when all are, nothing is taken",
		bound: 2,
		script: []string{
			"push a/1", "push a/2", "push a/3", "push b/1", "push b/2",
			"pop a/1", "pop b/1", "pop a/2",
			"pop b/2", // a holds 2 workers, its bound
			"pop -",   // only a's cluster waits
			"release a/1",
			"pop a/3",
		},
	}, {
		name:  "a flow skipped keeps its place in the turns",
		bound: 1,
		script: []string{
			"push a/1", "push a/2", "push b/1", "push b/2", "push c/1", "push c/2",
			"pop a/1",                // turns: b c a
			"pop b/1", "release b/1", // c a b
			"pop c/1", "release c/1", // a b c
			"pop b/2", // a, at its bound, keeps the head: a c
			"release b/2", "release a/1",
			"pop a/2", // ahead of c, as before b's turn
			"pop c/2",
		},
	}, {
		name:  "urgent flows at their bound let background ones start",
		bound: 1,
		script: []string{
			"push! a/1", "push! a/2", "push b/1", "push! c/1",
			"pop! a/1",
			"pop! c/1", // a at its bound in the urgent lane
			"pop b/1",  // every urgent flow with work is at its bound
			"pop -",
			"release a/1",
			"pop! a/2",
		},
	}, {
		name:  "the streak waits for a background flow under its bound",
		bound: 1,
		script: []string{
			"push b/1", "push b/2",
			"pop b/1", // b at its bound
			"push! u1", "push! u2", "push! u3", "push! u4", "push! u5", "push! u6",
			"pop! u1", "pop! u2", "pop! u3", "pop! u4",
			"pop! u5", // after maxUrgentStreak, but b cannot start
			"release b/1",
			"pop b/2", // the streak stayed at its maximum
			"pop! u6",
		},
	}, {
		name:  "begun work goes ahead in its flow, in the order it came, not in other flows",
		bound: 10,
		script: []string{
			"push! a/1", "push! a/2", "push! b/1", "push!+ a/3", "push!+ a/4", "push!+ b/2",
			"pop! a/3", // a's begun work first
			"pop! b/2", // b's turn: its begun work first too
			"pop! a/4",
			"pop! b/1",
			"pop! a/1",
			"pop! a/2",
			"pop -",
		},
	}, {
		name:  "work that begins while queued moves ahead of its flow",
		bound: 10,
		script: []string{
			"push a/1", "push a/2", "push a/3",
			"continue a/3",
			"pop a/3",
			"pop a/1",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := runQueue{holds: flowHolds{bound: tt.bound}}
			recs := map[string]*clusterState{}
			var all []*clusterState
			recOf := func(key string) *clusterState {
				if recs[key] == nil {
					recs[key] = &clusterState{key: key}
					all = append(all, recs[key])
				}
				return recs[key]
			}
			for i, line := range tt.script {
				op, key, _ := strings.Cut(line, " ")
				switch op {
				case "push", "push!", "push+", "push!+":
					rec := recOf(key)
					rec.continues = strings.HasSuffix(op, "+")
					q.push(rec, strings.HasPrefix(op, "push!"))
				case "continue":
					recs[key].continues = true
					q.requeue(recs[key])
				case "pop", "pop!":
					got, urgent := q.pop()
					if got != nil {
						q.hold(got)
					}
					if want := recs[key]; got != want || (got != nil && urgent != (op == "pop!")) {
						t.Fatalf("line %d (%s): popped %s urgent=%v", i, line, name(got), urgent)
					}
				case "release":
					q.release(recs[key])
				default:
					t.Fatalf("line %d: unknown op %q", i, line)
				}
				if err := checkRunQueue(&q, all); err != nil {
					t.Fatalf("line %d (%s): %v", i, line, err)
				}
			}
		})
	}
}

// modelLane is a lane of the run queue as TestRunQueue models it: the
// names of the flows with a queued record, in turn order, and their records.
type modelLane struct {
	order []string
	flows map[string][]*clusterState // each flow's records, begun ones first
}

func (m *modelLane) len() int {
	n := 0
	for _, recs := range m.flows {
		n += len(recs)
	}
	return n
}

// push adds rec at the end of its flow, or, when its work has begun, at
// the end of the flow's begun records.
func (m *modelLane) push(rec *clusterState) {
	if m.flows == nil {
		m.flows = map[string][]*clusterState{}
	}
	f := flowOf(rec.key)
	if len(m.flows[f]) == 0 {
		m.order = append(m.order, f)
	}
	recs := m.flows[f]
	i := len(recs)
	if begun(rec) {
		i = slices.IndexFunc(recs, func(r *clusterState) bool { return !begun(r) })
		if i < 0 {
			i = len(recs)
		}
	}
	m.flows[f] = slices.Insert(recs, i, rec)
}

func (m *modelLane) remove(rec *clusterState) {
	f := flowOf(rec.key)
	m.flows[f] = slices.DeleteFunc(m.flows[f], func(r *clusterState) bool { return r == rec })
	if len(m.flows[f]) == 0 {
		m.order = slices.DeleteFunc(m.order, func(o string) bool { return o == f })
	}
}

// pop takes the first record of the first flow in turn order that is not
// full, nil if none; the others keep their place.
func (m *modelLane) pop(full func(flow string) bool) *clusterState {
	i := slices.IndexFunc(m.order, func(f string) bool { return !full(f) })
	if i < 0 {
		return nil
	}
	f := m.order[i]
	rec := m.flows[f][0]
	m.flows[f] = m.flows[f][1:]
	m.order = slices.Delete(m.order, i, i+1)
	if len(m.flows[f]) > 0 {
		m.order = append(m.order, f)
	}
	return rec
}

func name(rec *clusterState) string {
	if rec == nil {
		return "<nil>"
	}
	return rec.key
}

// checkRunQueue checks the invariants of runQueue for records recs.
func checkRunQueue(q *runQueue, recs []*clusterState) error {
	var errs []string
	errs = checkLane(&q.urgent, inUrgent, recs, errs)
	errs = checkLane(&q.background, inBackground, recs, errs)
	if q.streak > maxUrgentStreak {
		errs = append(errs, fmt.Sprintf("streak %d > %d", q.streak, maxUrgentStreak))
	}
	if errs != nil {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// checkLane checks the invariants of runQueue for lane l, which holds the
// records queued as which.
func checkLane(l *lane, which queue, recs []*clusterState, errs []string) []string {
	inTurns := map[*flow]int{}
	for i := range l.turns.n {
		inTurns[l.turns.buf[(l.turns.head+i)&(len(l.turns.buf)-1)]]++
	}
	liveEntries := map[*clusterState]int{} // in the flow the record's key names
	live := 0
	for name, f := range l.flows {
		if f.name != name || f.live == 0 || inTurns[f] != 1 {
			errs = append(errs, fmt.Sprintf("lane %d: flow %q in the map as %q with %d live entries, %d times in the turns",
				which, f.name, name, f.live, inTurns[f]))
		}
		fLive := 0
		for _, r := range []*ring[entry]{&f.ahead, &f.entries} {
			for i := range r.n {
				e := r.at(i)
				if e.seq == e.rec.seq && e.rec.queued == which && flowOf(e.rec.key) == name {
					liveEntries[e.rec]++
					fLive++
				}
			}
		}
		if fLive != f.live {
			errs = append(errs, fmt.Sprintf("lane %d: flow %q counts %d live entries, holds %d", which, name, f.live, fLive))
		}
		live += fLive
	}
	for f, n := range inTurns {
		if n != 1 || (l.flows[f.name] != f && f.live != 0) {
			errs = append(errs, fmt.Sprintf("lane %d: flow %q %d times in the turns, %d live entries, not in the map",
				which, f.name, n, f.live))
		}
	}
	for _, rec := range recs {
		if want := b2i(rec.queued == which); liveEntries[rec] != want {
			errs = append(errs, fmt.Sprintf("lane %d: record %s (queued %d) has %d live entries, want %d",
				which, rec.key, rec.queued, liveEntries[rec], want))
		}
	}
	if live != l.live {
		errs = append(errs, fmt.Sprintf("lane %d: live %d, want %d", which, l.live, live))
	}
	if l.live == 0 && l.turns.len() > 0 {
		errs = append(errs, fmt.Sprintf("lane %d: %d flows and no live entry", which, l.turns.len()))
	}
	return errs
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// queueTest is a loop with one worker, which the cluster "busy" holds until
// release is called, so that plans queue in a known order. A signal "bg"
// makes a background plan, "urgent" an urgent one, "continues" an urgent
// one that continues begun work (Plan.Continues); then (if set) makes the
// next plan of a cluster whose plan is done, and during (if set) runs in
// every plan's step. Every plan logs its start as "<cluster>#<plan ID>":
// with one worker, the log is the run queue's order.
type queueTest struct {
	*testLoop
	rec     *recorder
	then    func(key string) (next, urgent bool)
	during  func(key string)
	started chan struct{}
	once    sync.Once
	held    chan struct{}
	freed   sync.Once
	nextID  uint64 // owned by the loop goroutine

	mu     sync.Mutex
	starts []string
}

const busyKey = "busy"

// start starts the loop and makes the busy cluster hold the worker; then
// and during must be set before.
func (q *queueTest) start(t *testing.T) *queueTest {
	t.Helper()
	q.started, q.held = make(chan struct{}), make(chan struct{})
	q.rec = newRecorder(q.handle)
	q.testLoop = startLoop(t, q.rec, Options{Workers: 1})
	t.Cleanup(q.free) // before the loop stops
	q.Notify(busyKey, "bg")
	recv(t, q.started, "the only worker to be busy")
	return q
}

func (q *queueTest) handle(ev Event) Outcome {
	switch {
	case ev.Kind == Signal:
		p := q.plan(ev.Key, ev.Name == "urgent" || ev.Name == "continues")
		p.Continues = ev.Name == "continues"
		return Outcome{Plan: p}
	case ev.Kind == PlanDone && q.then != nil:
		if next, urgent := q.then(ev.Key); next {
			return Outcome{Plan: q.plan(ev.Key, urgent)}
		}
	}
	return Outcome{}
}

func (q *queueTest) plan(key string, urgent bool) *Plan {
	q.nextID++
	what := fmt.Sprintf("%s#%d", key, q.nextID)
	p := plan(q.nextID, step("start", func(context.Context) error {
		q.mu.Lock()
		q.starts = append(q.starts, what)
		q.mu.Unlock()
		if q.during != nil {
			q.during(key)
		}
		if key == busyKey {
			q.once.Do(func() { close(q.started) })
			<-q.held
		}
		return nil
	}))
	p.Urgent = urgent
	return p
}

// queue notifies each of keys with signal, and waits until the last is
// handled: their plans wait for the busy worker, in the run queue.
func (q *queueTest) queue(t *testing.T, signal string, keys ...string) {
	t.Helper()
	last := keys[len(keys)-1]
	isLast := func(ev Event) bool { return ev.Key == last && ev.Name == signal }
	n := len(only(q.rec.snapshot(), isLast))
	for _, key := range keys {
		q.Notify(key, signal)
	}
	q.rec.waitUntil(t, last+" "+signal+" is handled", func(evs []Event) bool {
		return len(only(evs, isLast)) > n
	})
}

// release frees the worker, waits until the loop is idle, and returns the
// order in which the plans started after the busy one.
func (q *queueTest) release(t *testing.T) []string {
	t.Helper()
	q.free()
	q.waitIdle(t)
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.starts[1:])
}

// free lets the busy cluster's plans return; start also makes it a cleanup,
// so that a failed test still stops.
func (q *queueTest) free() { q.freed.Do(func() { close(q.held) }) }

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

func cluster(start string) string { return start[:strings.IndexByte(start, '#')] }

// Fairness: a cluster whose plans follow one another without end goes to
// the back of the queue after each, so another cluster's plan, at any
// priority, starts after at most one of its plans. The next plan of the
// flooding cluster is made when its last is done, or while it runs (then it
// waits, and is queued when the running one is done).
func TestRunQueueRoundRobin(t *testing.T) {
	for _, urgent := range []bool{false, true} {
		for _, whileRunning := range []bool{false, true} {
			t.Run(fmt.Sprintf("urgent=%v/whileRunning=%v", urgent, whileRunning), func(t *testing.T) {
				const stream = 1000
				signal := "bg"
				if urgent {
					signal = "urgent"
				}
				var aStarted atomic.Int32 // steps run on the worker
				q := &queueTest{}
				if whileRunning {
					q.during = func(key string) {
						if key == "a" && aStarted.Add(1) < stream {
							q.Notify(key, signal)
						}
					}
				} else {
					q.during = func(key string) {
						if key == "a" {
							aStarted.Add(1)
						}
					}
					q.then = func(key string) (bool, bool) {
						return key == "a" && aStarted.Load() < stream, urgent
					}
				}
				q.start(t)
				q.queue(t, signal, "a", "b")
				starts := q.release(t)
				if len(starts) != stream+1 {
					t.Fatalf("%d plans started, want %d of a and 1 of b", len(starts), stream)
				}
				if b := slices.IndexFunc(starts, func(s string) bool { return cluster(s) == "b" }); b > 1 {
					t.Errorf("b's plan started after %d of a's, want at most 1: %q", b, starts[:b+1])
				}
			})
		}
	}
}

// Flows: the namespaces take turns. Two hundred clusters queued at once
// in one namespace delay a cluster of another namespace queued after them
// by one plan, not by their two hundred; two namespaces' bursts alternate,
// and each namespace's clusters keep their order.
func TestRunQueueFlows(t *testing.T) {
	for _, signal := range []string{"bg", "urgent"} {
		t.Run(signal, func(t *testing.T) {
			q := (&queueTest{}).start(t)
			a, b := make([]string, 200), make([]string, 3)
			for i := range a {
				a[i] = fmt.Sprintf("a/c%03d", i)
			}
			for i := range b {
				b[i] = fmt.Sprintf("b/c%03d", i)
			}
			q.queue(t, signal, a...)
			q.queue(t, signal, b...)
			q.queue(t, signal, "one")
			want := []string{a[0], b[0], "one", a[1], b[1], a[2], b[2]}
			want = append(want, a[3:]...)
			if got := clustersOf(q.release(t)); !slices.Equal(got, want) {
				t.Errorf("plans started in order %q, want %q", got[:min(len(got), 10)], want[:10])
			}
		})
	}
}

// Priority: an urgent plan starts before the background plans of every
// other cluster, however many wait.
func TestRunQueueUrgentFirst(t *testing.T) {
	q := (&queueTest{}).start(t)
	waiting := keys("c", 50)
	q.queue(t, "bg", waiting...)
	q.queue(t, "urgent", "u")
	starts := q.release(t)
	want := append([]string{"u"}, waiting...)
	if got := clustersOf(starts); !slices.Equal(got, want) {
		t.Errorf("plans started in order %q, want %q", got, want)
	}
	st := q.Stats()
	if st.PlansUrgent != 1 || st.PlansBackground != 51 || st.PlansWaiting != 0 {
		t.Errorf("stats %+v, want 1 urgent and 51 background plans (busy's too), none waiting", st)
	}
}

// Starvation guard: urgent plans that never stop coming (each cluster's
// next follows its last) still let a waiting background plan start within
// maxUrgentStreak+1 starts.
func TestRunQueueBackgroundNotStarved(t *testing.T) {
	const (
		perCluster = 20 // urgent plans of each u cluster
		bPlans     = 5
	)
	done := map[string]int{} // then runs on the loop goroutine
	q := (&queueTest{then: func(key string) (bool, bool) {
		if key == busyKey {
			return false, false
		}
		done[key]++
		if key == "b" {
			return done[key] < bPlans, false
		}
		return done[key] < perCluster, true
	}}).start(t)
	urgent := keys("u", 10)
	q.queue(t, "urgent", urgent...)
	q.queue(t, "bg", "b")
	starts := clustersOf(q.release(t))

	var bAt []int
	for i, c := range starts {
		if c == "b" {
			bAt = append(bAt, i)
		}
	}
	if len(bAt) != bPlans {
		t.Fatalf("b started %d plans, want %d: %q", len(bAt), bPlans, starts)
	}
	if last := bAt[len(bAt)-1]; !slices.Contains(starts[last:], "u00") {
		t.Fatalf("the urgent plans stopped before b's last plan: %q", starts)
	}
	// b's first plan waited from the start: exactly maxUrgentStreak urgent
	// plans go ahead of it. Each later plan of b is made when the one
	// before is done, after the next urgent plan has started: one more.
	if bAt[0] != maxUrgentStreak {
		t.Errorf("b's first plan started after %d urgent plans, want %d: %q", bAt[0], maxUrgentStreak, starts[:bAt[0]+1])
	}
	for i := 1; i < len(bAt); i++ {
		if gap := bAt[i] - bAt[i-1] - 1; gap > maxUrgentStreak+1 {
			t.Errorf("b's plan %d started after %d urgent plans, want at most %d: %q",
				i+1, gap, maxUrgentStreak+1, starts[bAt[i-1]:bAt[i]+1])
		}
	}
}

// A cluster's waiting plan superseded by a newer one: the cluster stays
// queued once, and its plan runs at the higher of the two priorities (the
// newer plan carries what the older did), keeping its turn among the
// background plans when both are background. The same holds for a plan
// waiting for the cluster's own plan in flight (the busy cluster's), which
// is queued when that one is done.
func TestRunQueueSupersede(t *testing.T) {
	tests := []struct {
		name   string
		key    string // whose plan is superseded, queued between c0's and c2's
		first  string
		second string // after c2's
		want   []string
		urgent uint64
	}{{
		name:   "an urgent plan moves the cluster ahead",
		key:    "c1",
		first:  "bg",
		second: "urgent",
		want:   []string{"c1#5", "c0#2", "c2#4"},
		urgent: 1,
	}, {
		name:   "a background plan superseding an urgent one stays urgent",
		key:    "c1",
		first:  "urgent",
		second: "bg",
		want:   []string{"c1#5", "c0#2", "c2#4"},
		urgent: 1,
	}, {
		name:   "a background plan superseding a background one keeps its turn",
		key:    "c1",
		first:  "bg",
		second: "bg",
		want:   []string{"c0#2", "c1#5", "c2#4"},
	}, {
		name:   "behind a plan in flight, an urgent plan is queued urgent",
		key:    busyKey,
		first:  "bg",
		second: "urgent",
		want:   []string{"busy#5", "c0#2", "c2#4"},
		urgent: 1,
	}, {
		name:   "behind a plan in flight, a background plan superseding an urgent one is queued urgent",
		key:    busyKey,
		first:  "urgent",
		second: "bg",
		want:   []string{"busy#5", "c0#2", "c2#4"},
		urgent: 1,
	}, {
		name:   "behind a plan in flight, a background plan is queued last",
		key:    busyKey,
		first:  "bg",
		second: "bg",
		want:   []string{"c0#2", "c2#4", "busy#5"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := (&queueTest{}).start(t)
			q.queue(t, "bg", "c0")
			q.queue(t, tt.first, tt.key)
			q.queue(t, "bg", "c2")
			q.queue(t, tt.second, tt.key)
			if got := q.release(t); !slices.Equal(got, tt.want) {
				t.Errorf("plans started in order %q, want %q", got, tt.want)
			}
			st := q.Stats()
			if st.PlansSuperseded != 1 || st.PlansUrgent != tt.urgent || st.PlansRun != 4 || st.Clusters != 0 {
				t.Errorf("stats %+v, want 1 superseded, %d urgent, 4 run, no state left", st, tt.urgent)
			}
		})
	}
}

// A plan that continues begun work (the rest of a create) starts ahead of
// its namespace's plans that begin work, in the order such plans came,
// also when it supersedes a plan already queued; other namespaces keep
// their turns.
func TestContinuesGoesAheadInItsNamespace(t *testing.T) {
	q := (&queueTest{}).start(t)
	q.queue(t, "urgent", "ns/c0", "ns/c1", "ns/c2")
	q.queue(t, "urgent", "other/o0")
	q.queue(t, "continues", "ns/c2")
	q.queue(t, "continues", "ns/c3")
	want := []string{"ns/c2#6", "other/o0#5", "ns/c3#7", "ns/c0#2", "ns/c1#3"}
	if got := q.release(t); !slices.Equal(got, want) {
		t.Errorf("plans started in order %q, want %q", got, want)
	}
}

func clustersOf(starts []string) []string {
	out := make([]string, len(starts))
	for i, s := range starts {
		out[i] = cluster(s)
	}
	return out
}
