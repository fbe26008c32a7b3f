package fsm

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// ready is a converged 2-instance cluster at generation gen.
func ready(gen int64) Facts {
	return Facts{Generation: gen, Desired: 2, Ready: 2, Primary: "c-0", ObjectsCurrent: true}
}

// starting is a 2-instance cluster whose pods are not Ready yet.
func starting(gen int64) Facts {
	return Facts{Generation: gen, Desired: 2, Ready: 0, ObjectsCurrent: true}
}

func unschedulable(gen int64) Facts {
	f := starting(gen)
	f.StuckReason, f.Stuck = "Unschedulable", "pod c-0: 0/3 nodes are available"
	return f
}

func invalid(gen int64, msg string) Facts {
	f := starting(gen)
	f.SpecError = msg
	return f
}

func with(f Facts, change func(*Facts)) Facts {
	change(&f)
	return f
}

// inState returns a machine resumed in state (statusIn).
func inState(t *testing.T, cfg *Config, state string) *Machine {
	t.Helper()
	return newMachine(NewEngine(*cfg), statusIn(state))
}

// statusIn is the status of a cluster in state, at epoch 5, having acted on
// generation 1, with the timer a real machine would hold there, due at
// t0+1m.
func statusIn(state string) *v1.PostgresqlStatus {
	st := &v1.PostgresqlStatus{State: state, Epoch: 5, ObservedGeneration: 1}
	timer := map[string]string{Creating: TimerTimeout, Updating: TimerTimeout, Degraded: TimerRetry}
	if name, ok := timer[state]; ok {
		st.Timers = []v1.Timer{{Name: name, Deadline: metav1.NewTime(t0.Add(time.Minute)), Epoch: 5}}
	}
	return st
}

// newMachine is e.New(st) as if it had been running in st's state: a
// Running machine holds its resync, due at 1m (status does not keep it).
func newMachine(e *Engine, st *v1.PostgresqlStatus) *Machine {
	m := e.New(st)
	if st != nil && st.State == Running {
		m.soft = []v1.Timer{{Name: TimerResync, Deadline: metav1.NewTime(t0.Add(time.Minute)), Epoch: st.Epoch}}
	}
	return m
}

func firedEvents(fired []Fired) []string {
	var out []string
	for _, f := range fired {
		out = append(out, f.Event)
	}
	return out
}

func TestEpochAndTimersOnStateChange(t *testing.T) {
	cfg := writeAtOnce()
	m := NewEngine(cfg).New(nil)
	res := m.Handle(Input{Kind: Signal}, starting(1), t0.Add(300*time.Millisecond))
	if res.Epoch != 1 || m.Status().Epoch != 1 {
		t.Fatalf("epoch %d, want 1", res.Epoch)
	}
	// The timeout waits for the effects to report: the wait for a worker
	// is not the cluster's.
	if len(res.Timers) != 0 || res.Plan == nil {
		t.Fatalf("timers %+v before the effects reported, want none; plan %+v", res.Timers, res.Plan)
	}
	res = m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, starting(1), t0.Add(300*time.Millisecond))
	// The deadline is rounded up to the second status can keep.
	want := t0.Add(cfg.CreateTimeout + time.Second)
	if len(res.Timers) != 1 || res.Timers[0].Name != TimerTimeout || !res.Timers[0].Deadline.Equal(want) {
		t.Fatalf("timers %+v, want timeout at %s", res.Timers, want)
	}
	res = m.Handle(Input{Kind: TimerFired, Timer: TimerTimeout, Epoch: 1}, unschedulable(1), want)
	if res.Epoch != 2 || len(res.Timers) != 1 || res.Timers[0].Name != TimerRetry || !res.Timers[0].Deadline.Equal(want.Add(cfg.RetryBase)) {
		t.Fatalf("after timeout: epoch %d timers %+v", res.Epoch, res.Timers)
	}
	// Backoff doubles on every retry in Degraded and is capped.
	deadline := want.Add(cfg.RetryBase)
	for i := 1; i <= 12; i++ {
		res = m.Handle(Input{Kind: TimerFired, Timer: TimerRetry, Epoch: 2}, unschedulable(1), deadline)
		if len(res.Timers) != 1 {
			t.Fatalf("retry %d: timers %+v", i, res.Timers)
		}
		wantDelay := min(cfg.RetryBase<<i, cfg.RetryMax)
		if got := res.Timers[0].Deadline.Sub(deadline); got != wantDelay {
			t.Fatalf("retry %d: delay %s, want %s", i, got, wantDelay)
		}
		deadline = res.Timers[0].Deadline
	}
	if m.Status().Attempt != 12 {
		t.Errorf("attempt %d, want 12", m.Status().Attempt)
	}
}

func TestStatusProjection(t *testing.T) {
	cfg := writeAtOnce()
	m := NewEngine(cfg).New(nil)
	m.Handle(Input{Kind: Signal}, unschedulable(1), t0)
	st := m.Status()
	if st.Ready != "0/2" || st.DesiredInstances != 2 {
		t.Errorf("ready %q desired %d", st.Ready, st.DesiredInstances)
	}
	prog := meta.FindStatusCondition(st.Conditions, v1.ConditionProgressing)
	if prog == nil || prog.Status != metav1.ConditionTrue || !strings.Contains(prog.Message, "0/3 nodes") {
		t.Errorf("progressing condition %+v: want True with the stuck message", prog)
	}
	res := m.Handle(Input{Kind: Signal}, ready(1), t0.Add(time.Second))
	m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, ready(1), t0.Add(time.Second))
	st = m.Status()
	if c := meta.FindStatusCondition(st.Conditions, v1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("ready condition %+v", c)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1.ConditionDegraded); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("degraded condition %+v", c)
	}
	if st.Primary != "c-0" || st.Ready != "2/2" {
		t.Errorf("primary %q ready %q", st.Primary, st.Ready)
	}
	if res.Plan == nil || res.Plan.Status == nil || len(res.Plan.Records) != 1 || res.Plan.Records[0].Reason != Running {
		t.Fatalf("plan %+v: want a status write and a Running event", res.Plan)
	}
	// The snapshot is a copy: later transitions do not change it.
	snap := res.Plan.Status
	frozen := snap.DeepCopy()
	res = m.Handle(Input{Kind: Signal}, with(ready(1), func(f *Facts) { f.Ready = 1 }), t0.Add(2*time.Second))
	if !equality.Semantic.DeepEqual(snap, frozen) {
		t.Errorf("snapshot changed by a later transition:\n%+v\nwas\n%+v", snap, frozen)
	}
	m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, with(ready(1), func(f *Facts) { f.Ready = 1 }), t0.Add(2*time.Second))
	// Nothing changed and every plan is done: nothing to do.
	res = m.Handle(Input{Kind: Signal}, with(ready(1), func(f *Facts) { f.Ready = 1 }), t0.Add(3*time.Second))
	if res.Plan != nil {
		t.Errorf("unchanged facts planned %+v", res.Plan)
	}
}

func TestStatusSurvivesSupersededPlans(t *testing.T) {
	cfg := writeAtOnce()
	m := NewEngine(cfg).New(nil)
	first := m.Handle(Input{Kind: Signal}, starting(1), t0).Plan
	// While the first plan runs, more pod events: each later plan still
	// carries the ensure (not confirmed yet) and the newest status.
	second := m.Handle(Input{Kind: Signal}, with(starting(1), func(f *Facts) { f.Ready = 1 }), t0.Add(time.Second)).Plan
	if second == nil || !second.Ensure || second.Status == nil || second.Status.Ready != "1/2" {
		t.Fatalf("second plan %+v", second)
	}
	// The first plan's result is stale: it is ignored.
	res := m.Handle(Input{Kind: PlanDone, PlanID: first.ID, Err: errors.New("late")}, starting(1), t0.Add(2*time.Second))
	if res.Ignored == "" && len(res.Fired) > 0 {
		t.Errorf("stale result fired %v", res.Fired)
	}
	res = m.Handle(Input{Kind: PlanDone, PlanID: second.ID}, with(starting(1), func(f *Facts) { f.Ready = 1 }), t0.Add(3*time.Second))
	if got := firedEvents(res.Fired); !slices.Equal(got, []string{EventEffectsSucceeded}) {
		t.Errorf("fired %v", got)
	}
	if res.Plan != nil && res.Plan.Ensure {
		t.Errorf("ensure planned again after success: %+v", res.Plan)
	}
}

func TestHistoryIsBounded(t *testing.T) {
	cfg := writeAtOnce()
	cfg.LossGrace = 0 // every lost pod a transition
	m := NewEngine(cfg).New(nil)
	now := t0
	for i := 0; i < 3*v1.MaxHistory; i++ {
		now = now.Add(time.Second)
		m.Handle(Input{Kind: Signal}, ready(1), now)
		m.Handle(Input{Kind: Signal}, with(ready(1), func(f *Facts) { f.Ready = 1 }), now)
	}
	h := m.Status().History
	if len(h) != v1.MaxHistory {
		t.Fatalf("history has %d entries, want %d", len(h), v1.MaxHistory)
	}
	last := h[len(h)-1]
	if last.From != Running || last.To != Degraded || last.Event != EventPodsLost || !last.Time.Time.Equal(now) {
		t.Errorf("last transition %+v", last)
	}
}

func TestResumeKeepsDeadlines(t *testing.T) {
	cfg := writeAtOnce()
	deadline := t0.Add(7 * time.Minute)
	st := &v1.PostgresqlStatus{State: Creating, Epoch: 9, ObservedGeneration: 1,
		Timers: []v1.Timer{{Name: TimerTimeout, Deadline: metav1.NewTime(deadline), Epoch: 9}}}
	m := NewEngine(cfg).New(st)
	res := m.Resume(t0)
	if res.Epoch != 9 || len(res.Timers) != 1 || !res.Timers[0].Deadline.Equal(deadline) {
		t.Fatalf("resume %+v", res)
	}
	// The previous process's last plan may not have run: ensure again.
	res = m.Handle(Input{Kind: Signal}, starting(1), t0)
	if res.Plan == nil || !res.Plan.Ensure {
		t.Fatalf("no ensure after resume: %+v", res.Plan)
	}
	// The original deadline fires the timeout.
	res = m.Handle(Input{Kind: TimerFired, Timer: TimerTimeout, Epoch: 9}, starting(1), deadline)
	if res.To != Degraded {
		t.Fatalf("resumed timeout led to %s", res.To)
	}
	// An unknown state starts over as Pending.
	if m := NewEngine(cfg).New(&v1.PostgresqlStatus{State: "Frobnicating"}); m.State() != Pending {
		t.Errorf("unknown state resumed as %s", m.State())
	}
}

// TestEngineSurvivesPanickingCallback: a panic inside a transition reaches
// the caller (the loop records it on that cluster) and leaves the shared
// engine usable for every other machine.
func TestEngineSurvivesPanickingCallback(t *testing.T) {
	cfg := writeAtOnce()
	e := NewEngine(cfg)
	bad := e.New(nil)
	bad.st.History = nil
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		// A nil config makes enter_Creating's timer arithmetic panic.
		bad.cfg = nil
		bad.Handle(Input{Kind: Signal}, starting(1), t0)
	}()
	good := e.New(nil)
	if res := good.Handle(Input{Kind: Signal}, starting(1), t0); res.To != Creating {
		t.Fatalf("after a panic elsewhere the engine took %s to %s", Pending, res.To)
	}
}

// TestPrimaryChanged: a change of the primary from one pod to another is
// recorded once, in the history and as a Normal Event, without a change of
// state; the first primary, the same pod again and repeated observations
// are not.
func TestPrimaryChanged(t *testing.T) {
	primary := func(f Facts, name string) Facts { f.Primary = name; return f }
	// lost is the Running cluster whose primary c-0 stopped being Ready.
	lost := func(f Facts) Facts {
		f.Ready, f.Primary, f.NoPrimary = 1, "", "the leader pod c-0 is not Ready"
		return f
	}
	type step struct {
		facts   Facts
		restart bool // a new operator process resumes the machine from its status first
	}
	start := []step{{facts: ready(1)}} // Pending -> Creating -> Running, primary c-0
	running := []string{"create Pending->Creating", "podsReady Creating->Running"}
	tests := []struct {
		name        string
		steps       []step
		wantState   string
		wantHistory []string // event from->to, and the message of primaryChanged
		wantEvents  []string // the PrimaryChanged Events' messages, over all steps
		wantFired   []string // by the last step
		wantPrimary string
		wantLast    string // status.lastPrimary
		// noGrace runs the case with Config.LossGrace 0: a loss in
		// Running is Degraded at once, as with --loss-grace=0.
		noGrace bool
	}{
		{name: "the first primary is no change",
			steps:     []step{{facts: starting(1)}, {facts: with(starting(1), func(f *Facts) { f.Ready = 1 })}, {facts: ready(1)}},
			wantState: Running, wantHistory: running, wantFired: []string{EventPodsReady}, wantPrimary: "c-0"},
		{name: "switchover while Running",
			steps:       append(slices.Clone(start), step{facts: primary(ready(1), "c-1")}),
			wantState:   Running,
			wantHistory: append(slices.Clone(running), "primaryChanged Running->Running primary changed from c-0 to c-1"),
			wantEvents:  []string{"primary changed from c-0 to c-1"}, wantFired: []string{EventPrimaryChanged}, wantPrimary: "c-1"},
		{name: "no duplicate on repeated events",
			steps: append(slices.Clone(start), step{facts: primary(ready(1), "c-1")}, step{facts: primary(ready(1), "c-1")},
				step{facts: primary(ready(1), "c-1")}),
			wantState:   Running,
			wantHistory: append(slices.Clone(running), "primaryChanged Running->Running primary changed from c-0 to c-1"),
			wantEvents:  []string{"primary changed from c-0 to c-1"}, wantPrimary: "c-1"},
		{name: "without a loss grace, failover: primary lost, another elected, the old one back as a replica", noGrace: true,
			steps: append(slices.Clone(start),
				step{facts: lost(ready(1))},
				step{facts: primary(lost(ready(1)), "c-1")},
				step{facts: primary(ready(1), "c-1")}),
			wantState: Running,
			wantHistory: append(slices.Clone(running), "podsLost Running->Degraded",
				"primaryChanged Degraded->Degraded primary changed from c-0 to c-1", "podsReady Degraded->Running"),
			wantEvents: []string{"primary changed from c-0 to c-1"}, wantFired: []string{EventPodsReady}, wantPrimary: "c-1"},
		{name: "without a loss grace, failover: while no primary is known, the last one is kept", noGrace: true,
			steps:     append(slices.Clone(start), step{facts: lost(ready(1))}),
			wantState: Degraded, wantHistory: append(slices.Clone(running), "podsLost Running->Degraded"),
			wantFired: []string{EventPodsLost}, wantLast: "c-0"},
		{name: "without a loss grace, failover and convergence in one observation: the change first", noGrace: true,
			steps:     append(slices.Clone(start), step{facts: lost(ready(1))}, step{facts: primary(ready(1), "c-1")}),
			wantState: Running,
			wantHistory: append(slices.Clone(running), "podsLost Running->Degraded",
				"primaryChanged Degraded->Degraded primary changed from c-0 to c-1", "podsReady Degraded->Running"),
			wantEvents: []string{"primary changed from c-0 to c-1"}, wantFired: []string{EventPrimaryChanged, EventPodsReady}, wantPrimary: "c-1"},
		{name: "without a loss grace, failover across a restart of the operator", noGrace: true,
			steps: append(slices.Clone(start), step{facts: lost(ready(1))},
				step{facts: primary(lost(ready(1)), "c-1"), restart: true}),
			wantState: Degraded,
			wantHistory: append(slices.Clone(running), "podsLost Running->Degraded",
				"primaryChanged Degraded->Degraded primary changed from c-0 to c-1"),
			wantEvents: []string{"primary changed from c-0 to c-1"}, wantFired: []string{EventPrimaryChanged}, wantPrimary: "c-1"},
		{name: "without a loss grace, the same primary back is no change", noGrace: true,
			steps:     append(slices.Clone(start), step{facts: lost(ready(1))}, step{facts: ready(1)}),
			wantState: Running, wantHistory: append(slices.Clone(running), "podsLost Running->Degraded", "podsReady Degraded->Running"),
			wantFired: []string{EventPodsReady}, wantPrimary: "c-0"},
		// The same, within the loss grace (steps are a second apart): the
		// cluster stays Running and the change is recorded once.
		{name: "switchover: the lock released for a moment, the old primary back as a replica",
			steps: append(slices.Clone(start),
				step{facts: with(ready(1), func(f *Facts) { f.Primary, f.NoPrimary = "", "no member holds Patroni's leader lock (c-leader)" })},
				step{facts: primary(with(ready(1), func(f *Facts) { f.Ready = 1 }), "c-1")},
				step{facts: primary(ready(1), "c-1")}),
			wantState:   Running,
			wantHistory: append(slices.Clone(running), "primaryChanged Running->Running primary changed from c-0 to c-1"),
			wantEvents:  []string{"primary changed from c-0 to c-1"}, wantPrimary: "c-1"},
		{name: "failover within the loss grace",
			steps: append(slices.Clone(start),
				step{facts: lost(ready(1))},
				step{facts: primary(lost(ready(1)), "c-1")},
				step{facts: primary(ready(1), "c-1")}),
			wantState:   Running,
			wantHistory: append(slices.Clone(running), "primaryChanged Running->Running primary changed from c-0 to c-1"),
			wantEvents:  []string{"primary changed from c-0 to c-1"}, wantPrimary: "c-1"},
		{name: "within the loss grace, while no primary is known, the last one is kept",
			steps:     append(slices.Clone(start), step{facts: lost(ready(1))}),
			wantState: Running, wantHistory: running, wantLast: "c-0"},
		{name: "failover across a restart of the operator within the loss grace",
			steps: append(slices.Clone(start), step{facts: lost(ready(1))},
				step{facts: primary(lost(ready(1)), "c-1"), restart: true}),
			wantState:   Running,
			wantHistory: append(slices.Clone(running), "primaryChanged Running->Running primary changed from c-0 to c-1"),
			wantEvents:  []string{"primary changed from c-0 to c-1"}, wantFired: []string{EventPrimaryChanged}, wantPrimary: "c-1"},
		{name: "the same primary back within the loss grace is no change",
			steps:     append(slices.Clone(start), step{facts: lost(ready(1))}, step{facts: ready(1)}),
			wantState: Running, wantHistory: running, wantPrimary: "c-0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeAtOnce()
			if tc.noGrace {
				cfg.LossGrace = 0
			}
			e := NewEngine(cfg)
			m := e.New(nil)
			var res Result
			var events []string
			for i, s := range tc.steps {
				now := t0.Add(time.Duration(i) * time.Second)
				if s.restart {
					m = NewEngine(cfg).New(m.Status())
					m.Resume(now)
				}
				res = m.Handle(Input{Kind: Signal}, s.facts, now)
				if res.Plan == nil {
					continue
				}
				for _, ev := range res.Plan.Records {
					if ev.Reason != ReasonPrimaryChanged {
						continue
					}
					if ev.Warning {
						t.Errorf("step %d: %s is a Warning, want Normal", i, ev.Message)
					}
					events = append(events, ev.Message)
				}
				// Every change is written: the plan carries the status.
				if res.Plan.Status == nil && slices.ContainsFunc(res.Fired, func(f Fired) bool { return f.Event == EventPrimaryChanged }) {
					t.Errorf("step %d: primary change without a status write", i)
				}
			}
			st := m.Status()
			if m.State() != tc.wantState {
				t.Errorf("state %s, want %s", m.State(), tc.wantState)
			}
			var history []string
			for _, h := range st.History {
				line := h.Event + " " + h.From + "->" + h.To
				if h.Event == EventPrimaryChanged {
					line += " " + h.Message
					if h.Reason != ReasonPrimaryChanged || h.Time.IsZero() {
						t.Errorf("history entry %+v", h)
					}
				} else if h.Message != "" {
					t.Errorf("a state change carries a message in the history: %+v", h)
				}
				history = append(history, line)
			}
			if !slices.Equal(history, tc.wantHistory) {
				t.Errorf("history\n got %q\nwant %q", history, tc.wantHistory)
			}
			if !slices.Equal(events, tc.wantEvents) {
				t.Errorf("PrimaryChanged events %q, want %q", events, tc.wantEvents)
			}
			if got := firedEvents(res.Fired); !slices.Equal(got, tc.wantFired) {
				t.Errorf("last step fired %v, want %v", got, tc.wantFired)
			}
			if st.Primary != tc.wantPrimary || st.LastPrimary != tc.wantLast {
				t.Errorf("primary %q lastPrimary %q, want %q %q", st.Primary, st.LastPrimary, tc.wantPrimary, tc.wantLast)
			}
			if tc.wantState == Running && !m.hasTimer(TimerLossGrace) && !strings.HasSuffix(st.Message, "primary "+tc.wantPrimary) {
				t.Errorf("Running with message %q: want it to name primary %s", st.Message, tc.wantPrimary)
			}
		})
	}
}

// TestNoPrimaryReason: a cluster Degraded for want of a primary says why
// there is none, as the informers observed it: at once without a loss
// grace, and when the grace ran out with it.
func TestNoPrimaryReason(t *testing.T) {
	const why = "no member holds Patroni's leader lock (c-leader)"
	noPrimary := with(ready(1), func(f *Facts) { f.Primary, f.NoPrimary = "", why })
	for _, grace := range []time.Duration{0, 10 * time.Second} {
		t.Run("loss grace "+grace.String(), func(t *testing.T) {
			cfg := writeAtOnce()
			cfg.LossGrace = grace
			m := NewEngine(cfg).New(nil)
			m.Handle(Input{Kind: Signal}, ready(1), t0)
			m.Handle(Input{Kind: Signal}, noPrimary, t0.Add(time.Second))
			if grace > 0 {
				m.Handle(Input{Kind: TimerFired, Timer: TimerLossGrace, Epoch: m.Status().Epoch}, noPrimary, t0.Add(time.Second+grace))
			}
			if st := m.Status(); st.State != Degraded || st.Reason != ReasonNoPrimary || st.Message != why {
				t.Errorf("state %s reason %q message %q", st.State, st.Reason, st.Message)
			}
		})
	}
}

// TestLossGrace: a Running cluster that loses a Ready pod or its primary
// stays Running for Config.LossGrace, its status saying what is missing,
// and is Degraded only if the loss outlasts the grace, or has a concrete
// cause. A switchover or a rejoining former primary is no flap: no history
// entry but the primary's change, no Event but PrimaryChanged.
func TestLossGrace(t *testing.T) {
	const grace = 10 * time.Second
	const noLeader = "no member holds Patroni's leader lock (c-leader)"
	pending := func(cause string) string {
		return cause + "; Degraded unless it recovers within the 10s loss grace"
	}
	// The facts of a Running 2-instance cluster whose primary is c-0.
	var (
		// Patroni released its leader lock; no member holds it yet.
		switching = with(ready(1), func(f *Facts) { f.Primary, f.NoPrimary = "", noLeader })
		// c-1 took the lock.
		moved = with(ready(1), func(f *Facts) { f.Primary = "c-1" })
		// c-0 restarts PostgreSQL as a replica of c-1: not Ready.
		rejoining   = with(moved, func(f *Facts) { f.Ready = 1 })
		replicaDown = with(ready(1), func(f *Facts) { f.Ready = 1 })
		stuckPod    = with(replicaDown, func(f *Facts) {
			f.StuckReason, f.Stuck = "Unschedulable", "pod c-1: 0/3 nodes are available"
		})
		edited   = with(replicaDown, func(f *Facts) { f.Generation, f.ObjectsCurrent = 2, false })
		deleting = with(replicaDown, func(f *Facts) { f.Deleting = true })
	)
	type step struct {
		at      time.Duration // since t0, when the cluster became Running
		facts   Facts
		fire    bool // fire the lossGrace timer, in the epoch it was set in, rather than observe
		restart bool // a new operator process resumes the machine from its status first
		// Optional checks after the step: the reason and message, and
		// the pending lossGrace deadline (since t0).
		wantReason, wantMessage string
		wantGrace               time.Duration
	}
	tests := []struct {
		name        string
		noGrace     bool // Config.LossGrace 0
		steps       []step
		wantState   string
		wantHistory []string // after create and podsReady: event from->to
		wantEvents  []string // Kubernetes Events' reasons, over all steps
		wantFired   []string // by the last step
		wantIgnored bool     // the last step
		wantReason  string
		wantMessage string
		wantReady   metav1.ConditionStatus
	}{
		{name: "switchover: no primary for a moment, then the former primary rejoins as a replica",
			steps: []step{
				{at: time.Second, facts: switching, wantReason: ReasonNoPrimary, wantMessage: pending(noLeader), wantGrace: 11 * time.Second},
				{at: 2 * time.Second, facts: moved, wantReason: ReasonReady},
				{at: 3 * time.Second, facts: rejoining, wantReason: ReasonPodsNotReady, wantMessage: pending("1/2 instances ready"),
					wantGrace: 13 * time.Second},
				{at: 5 * time.Second, facts: moved},
			},
			wantState: Running, wantHistory: []string{"primaryChanged Running->Running"}, wantEvents: []string{ReasonPrimaryChanged},
			wantReason: ReasonReady, wantMessage: "2/2 instances ready, primary c-1", wantReady: metav1.ConditionTrue},
		{name: "the lock handed over with both pods Ready throughout",
			steps:     []step{{at: time.Second, facts: switching}, {at: 1500 * time.Millisecond, facts: moved}},
			wantState: Running, wantHistory: []string{"primaryChanged Running->Running"}, wantEvents: []string{ReasonPrimaryChanged},
			wantFired: []string{EventPrimaryChanged}, wantReason: ReasonReady, wantMessage: "2/2 instances ready, primary c-1",
			wantReady: metav1.ConditionTrue},
		{name: "a replica not Ready for 2s",
			steps: []step{
				{at: time.Second, facts: replicaDown, wantReason: ReasonPodsNotReady, wantMessage: pending("1/2 instances ready"),
					wantGrace: 11 * time.Second},
				{at: 3 * time.Second, facts: ready(1)},
			},
			wantState: Running, wantReason: ReasonReady, wantMessage: "2/2 instances ready, primary c-0", wantReady: metav1.ConditionTrue},
		{name: "a loss outlasting the grace is Degraded when the timer fires",
			steps: []step{
				{at: time.Second, facts: replicaDown, wantGrace: 11 * time.Second},
				{at: 6 * time.Second, facts: replicaDown, wantGrace: 11 * time.Second},
				{at: 11 * time.Second, facts: replicaDown, fire: true},
			},
			wantState: Degraded, wantHistory: []string{"podsLost Running->Degraded"}, wantEvents: []string{Degraded},
			wantFired: []string{EventLossGrace, EventPodsLost}, wantReason: ReasonPodsNotReady, wantMessage: "1/2 instances ready",
			wantReady: metav1.ConditionFalse},
		{name: "the grace keeps its deadline while the cause changes",
			steps: []step{
				{at: time.Second, facts: switching, wantReason: ReasonNoPrimary, wantGrace: 11 * time.Second},
				{at: 2 * time.Second, facts: rejoining, wantReason: ReasonPodsNotReady, wantGrace: 11 * time.Second},
				{at: 11 * time.Second, facts: rejoining, fire: true},
			},
			wantState:   Degraded,
			wantHistory: []string{"primaryChanged Running->Running", "podsLost Running->Degraded"},
			wantEvents:  []string{ReasonPrimaryChanged, Degraded}, wantFired: []string{EventLossGrace, EventPodsLost},
			wantReason: ReasonPodsNotReady, wantMessage: "1/2 instances ready", wantReady: metav1.ConditionFalse},
		{name: "without a grace the loss is Degraded at once", noGrace: true,
			steps:     []step{{at: time.Second, facts: replicaDown}},
			wantState: Degraded, wantHistory: []string{"podsLost Running->Degraded"}, wantEvents: []string{Degraded},
			wantFired: []string{EventPodsLost}, wantReason: ReasonPodsNotReady, wantMessage: "1/2 instances ready",
			wantReady: metav1.ConditionFalse},
		{name: "a concrete cause skips the grace",
			steps:     []step{{at: time.Second, facts: stuckPod}},
			wantState: Degraded, wantHistory: []string{"podsLost Running->Degraded"}, wantEvents: []string{Degraded},
			wantFired: []string{EventPodsLost}, wantReason: "Unschedulable", wantMessage: stuckPod.Stuck,
			wantReady: metav1.ConditionFalse},
		{name: "a concrete cause seen during the grace ends it",
			steps:     []step{{at: time.Second, facts: replicaDown}, {at: 4 * time.Second, facts: stuckPod}},
			wantState: Degraded, wantHistory: []string{"podsLost Running->Degraded"}, wantEvents: []string{Degraded},
			wantFired: []string{EventPodsLost}, wantReason: "Unschedulable", wantMessage: stuckPod.Stuck,
			wantReady: metav1.ConditionFalse},
		{name: "a recovery cancels the timer: its late firing is stale",
			steps: []step{
				{at: time.Second, facts: replicaDown},
				{at: 2 * time.Second, facts: ready(1)},
				{at: 11 * time.Second, facts: ready(1), fire: true},
			},
			wantState: Running, wantIgnored: true, wantReason: ReasonReady, wantReady: metav1.ConditionTrue},
		{name: "a restarted operator re-arms the grace with its deadline",
			steps: []step{
				{at: time.Second, facts: replicaDown},
				{at: 4 * time.Second, facts: replicaDown, restart: true, wantReason: ReasonPodsNotReady, wantGrace: 11 * time.Second},
				{at: 11 * time.Second, facts: replicaDown, fire: true},
			},
			wantState: Degraded, wantHistory: []string{"podsLost Running->Degraded"}, wantEvents: []string{Degraded},
			wantFired: []string{EventLossGrace, EventPodsLost}, wantReason: ReasonPodsNotReady, wantMessage: "1/2 instances ready",
			wantReady: metav1.ConditionFalse},
		{name: "a restarted operator cancels the grace of a recovered cluster",
			steps:     []step{{at: time.Second, facts: replicaDown}, {at: 4 * time.Second, facts: ready(1), restart: true}},
			wantState: Running, wantReason: ReasonReady, wantMessage: "2/2 instances ready, primary c-0", wantReady: metav1.ConditionTrue},
		{name: "a spec edit during the grace updates; the grace is stale",
			steps: []step{
				{at: time.Second, facts: replicaDown},
				{at: 2 * time.Second, facts: edited},
				{at: 11 * time.Second, facts: edited, fire: true},
			},
			wantState: Updating, wantHistory: []string{"specChanged Running->Updating"}, wantEvents: []string{Updating},
			wantIgnored: true, wantReason: ReasonUpdating, wantReady: metav1.ConditionFalse},
		{name: "a deletion during the grace",
			steps:     []step{{at: time.Second, facts: replicaDown}, {at: 2 * time.Second, facts: deleting}},
			wantState: Deleting, wantHistory: []string{"delete Running->Deleting"}, wantEvents: []string{Deleting},
			wantFired: []string{EventDelete}, wantReason: ReasonDeleting, wantReady: metav1.ConditionFalse},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeAtOnce()
			cfg.LossGrace = grace
			if tc.noGrace {
				cfg.LossGrace = 0
			}
			m := NewEngine(cfg).New(nil)
			if res := m.Handle(Input{Kind: Signal}, ready(1), t0); res.To != Running {
				t.Fatalf("start: %s, want Running", res.To)
			}
			var (
				res        Result
				events     []string
				graceEpoch int64
			)
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				before := lossGrace(m)
				if s.restart {
					m = NewEngine(cfg).New(m.Status())
					resumed := m.Resume(now)
					if before != nil && !slices.Contains(resumed.Timers, TimerOp{Name: TimerLossGrace, Deadline: before.Deadline.Time}) {
						t.Errorf("step %d: resume re-armed %+v, want %s at %s", i, resumed.Timers, TimerLossGrace, before.Deadline)
					}
				}
				if s.fire {
					res = m.Handle(Input{Kind: TimerFired, Timer: TimerLossGrace, Epoch: graceEpoch}, s.facts, now)
				} else {
					res = m.Handle(Input{Kind: Signal}, s.facts, now)
				}
				st, after := m.Status(), lossGrace(m)
				if after != nil {
					graceEpoch = after.Epoch
				}
				if res.Plan != nil {
					for _, ev := range res.Plan.Records {
						events = append(events, ev.Reason)
						if ev.Warning != (ev.Reason == Degraded) {
							t.Errorf("step %d: Event %s warning=%v", i, ev.Reason, ev.Warning)
						}
					}
				}
				// The loop learns of every arming and cancelling.
				switch {
				case res.From != res.To:
					// A new epoch: finish hands over every timer again.
				case before == nil && after != nil:
					if !slices.Contains(res.Timers, TimerOp{Name: TimerLossGrace, Deadline: after.Deadline.Time}) {
						t.Errorf("step %d: grace armed in status, timers handed to the loop %+v", i, res.Timers)
					}
				case before != nil && after == nil && !s.fire:
					if !slices.Contains(res.Timers, TimerOp{Name: TimerLossGrace, Cancel: true}) {
						t.Errorf("step %d: grace cancelled in status, timers handed to the loop %+v", i, res.Timers)
					}
				}
				// While the grace runs: Running, and the status says what
				// is missing.
				if after != nil {
					if st.State != Running || st.ReadyInstances != s.facts.Ready || st.Primary != s.facts.Primary {
						t.Errorf("step %d: grace pending in %s with ready %d primary %q, facts %d %q",
							i, st.State, st.ReadyInstances, st.Primary, s.facts.Ready, s.facts.Primary)
					}
					wantCondition(t, st, v1.ConditionReady, metav1.ConditionFalse, st.Reason, st.Message)
					wantCondition(t, st, v1.ConditionDegraded, metav1.ConditionFalse, st.Reason, st.Message)
				}
				if s.wantReason != "" && st.Reason != s.wantReason {
					t.Errorf("step %d: reason %q, want %q", i, st.Reason, s.wantReason)
				}
				if s.wantMessage != "" && st.Message != s.wantMessage {
					t.Errorf("step %d: message %q, want %q", i, st.Message, s.wantMessage)
				}
				if s.wantGrace != 0 && (after == nil || !after.Deadline.Time.Equal(t0.Add(s.wantGrace))) {
					t.Errorf("step %d: lossGrace %+v, want its deadline at %s", i, after, t0.Add(s.wantGrace))
				}
			}
			st := m.Status()
			if st.State != tc.wantState {
				t.Fatalf("state %s (%s: %s), want %s", st.State, st.Reason, st.Message, tc.wantState)
			}
			var history []string
			for _, h := range st.History[2:] {
				history = append(history, h.Event+" "+h.From+"->"+h.To)
			}
			if !slices.Equal(history, tc.wantHistory) {
				t.Errorf("history %q, want %q", history, tc.wantHistory)
			}
			if !slices.Equal(events, tc.wantEvents) {
				t.Errorf("Events %q, want %q", events, tc.wantEvents)
			}
			if got := firedEvents(res.Fired); !slices.Equal(got, tc.wantFired) {
				t.Errorf("last step fired %v, want %v", got, tc.wantFired)
			}
			if (res.Ignored != "") != tc.wantIgnored {
				t.Errorf("last step ignored %q, want ignored %v", res.Ignored, tc.wantIgnored)
			}
			if st.Reason != tc.wantReason || (tc.wantMessage != "" && st.Message != tc.wantMessage) {
				t.Errorf("reason %q message %q, want %q %q", st.Reason, st.Message, tc.wantReason, tc.wantMessage)
			}
			if st.State != Running && lossGrace(m) != nil {
				t.Errorf("lossGrace pending in %s", st.State)
			}
			if c := meta.FindStatusCondition(st.Conditions, v1.ConditionReady); c == nil || c.Status != tc.wantReady {
				t.Errorf("Ready condition %+v, want %s", c, tc.wantReady)
			}
		})
	}
}

// lossGrace is the pending lossGrace timer, nil when there is none.
func lossGrace(m *Machine) *v1.Timer {
	for _, t := range m.Status().Timers {
		if t.Name == TimerLossGrace {
			return &t
		}
	}
	return nil
}

func wantCondition(t *testing.T, st *v1.PostgresqlStatus, typ string, status metav1.ConditionStatus, reason, message string) {
	t.Helper()
	c := meta.FindStatusCondition(st.Conditions, typ)
	if c == nil || c.Status != status || c.Reason != reason || c.Message != message {
		t.Errorf("condition %s %+v, want %s %s %q", typ, c, status, reason, message)
	}
}

// retryDeadline is the pending retry timer's deadline; the zero time when
// there is none.
func retryDeadline(m *Machine) time.Time {
	for _, t := range m.Status().Timers {
		if t.Name == TimerRetry {
			return t.Deadline.Time
		}
	}
	return time.Time{}
}

// TestFailedStatusWriteBacksOff: a plan that writes only the status and
// fails is not planned again at once (the loop would retry as fast as the
// API server refuses, starving every other cluster's writes through the
// shared client rate limiter): the status stays dirty and goes with the
// retry timer's plan, the latest snapshot, with a backoff that grows while
// the writes fail and starts over once one succeeds.
func TestFailedStatusWriteBacksOff(t *testing.T) {
	cfg := writeAtOnce()
	refused := errors.New("step status: update status of postgresql ns/c: connection refused")
	// Each case's facts(n) differ from one observation to the next in the
	// ready count (for Running, in both counts, so it stays converged): the
	// status changes without a transition.
	tests := []struct {
		name  string
		from  string
		facts func(n int32) Facts
		// wantState after the first failure; a Running cluster goes to
		// Degraded, and that transition's Events make one more plan.
		wantState      string
		wantTransition bool
		// what the retry plans besides the status
		wantEnsure, wantCleanup bool
		// after a success: the state, and whether the backoff starts
		// over (Degraded keeps backing off while its pods are stuck).
		wantRecovered string
		wantReset     bool
	}{
		{name: "running", from: Running,
			facts:     func(n int32) Facts { return with(ready(1), func(f *Facts) { f.Desired, f.Ready = 2+n%2, 2+n%2 }) },
			wantState: Degraded, wantTransition: true, wantEnsure: true, wantRecovered: Running, wantReset: true},
		{name: "creating", from: Creating,
			facts:     func(n int32) Facts { return with(starting(1), func(f *Facts) { f.Ready = n % 2 }) },
			wantState: Creating, wantEnsure: true, wantRecovered: Creating, wantReset: true},
		{name: "updating", from: Updating,
			facts: func(n int32) Facts {
				return with(ready(1), func(f *Facts) { f.Ready, f.ObjectsCurrent = n%2, false })
			},
			wantState: Updating, wantEnsure: true, wantRecovered: Updating, wantReset: true},
		{name: "degraded", from: Degraded,
			facts:     func(n int32) Facts { return with(unschedulable(1), func(f *Facts) { f.Ready = n % 2 }) },
			wantState: Degraded, wantEnsure: true, wantRecovered: Degraded},
		{name: "invalid", from: Invalid,
			facts:     func(n int32) Facts { return with(invalid(1, "bad"), func(f *Facts) { f.Ready = n % 2 }) },
			wantState: Invalid, wantRecovered: Invalid, wantReset: true},
		{name: "deleting", from: Deleting,
			facts:     func(n int32) Facts { return with(starting(1), func(f *Facts) { f.Deleting, f.Ready = true, n%2 }) },
			wantState: Deleting, wantCleanup: true, wantRecovered: Deleted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := inState(t, &cfg, tc.from)
			now := t0
			var n int32
			observeNext := func() Result {
				t.Helper()
				n++
				now = now.Add(100 * time.Millisecond)
				return m.Handle(Input{Kind: Signal}, tc.facts(n), now)
			}
			// fail reports the plan failed and checks the write is held:
			// a retry timer is armed (and handed to the loop), and no
			// status-only plan is made until it fires.
			fail := func(p *Plan) time.Duration {
				t.Helper()
				// On a whole second, so the delay is not rounded up.
				if r := now.Truncate(time.Second); !r.Equal(now) {
					now = r.Add(time.Second)
				}
				failed := now
				res := m.Handle(Input{Kind: PlanDone, PlanID: p.ID, Err: refused}, tc.facts(n), now)
				deadline := retryDeadline(m)
				if deadline.IsZero() {
					t.Fatalf("no retry timer after a failed status write (timers %v)", m.Status().Timers)
				}
				if !slices.Contains(res.Timers, TimerOp{Name: TimerRetry, Deadline: deadline}) {
					t.Errorf("retry timer at %s not handed to the loop: %+v", deadline, res.Timers)
				}
				if res.Plan != nil {
					t.Fatalf("failed status write planned again at once: %+v", res.Plan)
				}
				for range 5 {
					if res := observeNext(); res.Plan != nil {
						t.Fatalf("status change planned before the retry timer fired: %+v", res.Plan)
					}
				}
				return deadline.Sub(failed)
			}
			// retry fires the retry timer at its deadline: exactly one
			// plan, carrying the latest status.
			retry := func() *Plan {
				t.Helper()
				now = retryDeadline(m)
				res := m.Handle(Input{Kind: TimerFired, Timer: TimerRetry, Epoch: m.Status().Epoch}, tc.facts(n), now)
				p := res.Plan
				if p == nil || p.Status == nil {
					t.Fatalf("retry fired: plan %+v, want one with the status", p)
				}
				if p.Ensure != tc.wantEnsure || p.Cleanup != tc.wantCleanup {
					t.Errorf("retry plan ensure=%v cleanup=%v, want %v %v", p.Ensure, p.Cleanup, tc.wantEnsure, tc.wantCleanup)
				}
				if !equality.Semantic.DeepEqual(p.Status, m.Status()) || p.Status.ReadyInstances != tc.facts(n).Ready {
					t.Errorf("retry plan's snapshot is not the latest status: ready %d, want %d", p.Status.ReadyInstances, tc.facts(n).Ready)
				}
				return p
			}

			// A status-only plan fails.
			p := observeNext().Plan
			if p == nil || p.Status == nil || p.Ensure || p.Cleanup || len(p.Records) != 0 {
				t.Fatalf("first plan %+v, want the status alone", p)
			}
			if tc.wantTransition {
				res := m.Handle(Input{Kind: PlanDone, PlanID: p.ID, Err: refused}, tc.facts(n), now)
				if got := firedEvents(res.Fired); !slices.Equal(got, []string{EventEffectsFailed}) {
					t.Fatalf("fired %v: want %s alone, no flapping back", got, EventEffectsFailed)
				}
				// The transition's Event (and status) go at once, once.
				p = res.Plan
				if p == nil || len(p.Records) != 1 || !p.Records[0].Warning || p.Status == nil {
					t.Fatalf("plan after %s -> %s: %+v", tc.from, m.State(), p)
				}
			}
			var delays []time.Duration
			for range 4 {
				delays = append(delays, fail(p))
				if m.State() != tc.wantState {
					t.Fatalf("state %s after a failed status write, want %s", m.State(), tc.wantState)
				}
				p = retry()
			}
			for i := 1; i < len(delays); i++ {
				if delays[i] <= delays[i-1] {
					t.Errorf("backoff does not grow: %v", delays)
				}
			}
			if delays[0] != cfg.RetryBase {
				t.Errorf("first delay %s, want %s", delays[0], cfg.RetryBase)
			}

			// The API server is back: the retry's plan succeeds.
			res := m.Handle(Input{Kind: PlanDone, PlanID: p.ID}, tc.facts(n), now)
			for i := 0; res.Plan != nil && i < 3; i++ {
				res = m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, tc.facts(n), now)
			}
			if m.State() != tc.wantRecovered {
				t.Fatalf("state %s after a successful retry, want %s", m.State(), tc.wantRecovered)
			}
			if !tc.wantReset {
				return
			}
			if a := m.Status().Attempt; a != 0 {
				t.Errorf("attempt %d after a success, want 0", a)
			}
			// Nothing held any more: the next change is written at once,
			// and if it fails the backoff starts over.
			p = observeNext().Plan
			if p == nil || p.Status == nil {
				t.Fatalf("status change after a success: plan %+v", p)
			}
			if p.Ensure {
				p = m.Handle(Input{Kind: PlanDone, PlanID: p.ID}, tc.facts(n), now).Plan
				if p == nil {
					p = observeNext().Plan
				}
			}
			if tc.wantTransition {
				p = m.Handle(Input{Kind: PlanDone, PlanID: p.ID, Err: refused}, tc.facts(n), now).Plan
			}
			if d := fail(p); d != cfg.RetryBase {
				t.Errorf("after a success the backoff starts at %s, want %s", d, cfg.RetryBase)
			}
		})
	}
}

// TestDegradedRetriesDouble: in Degraded each retry whose ensure effects
// fail waits twice as long as the one before, as docs/fsm.md says (the
// failure used to count as an attempt too: four times per cycle).
func TestDegradedRetriesDouble(t *testing.T) {
	cfg := writeAtOnce()
	m := inState(t, &cfg, Degraded)
	failed := errors.New("step ensure: create statefulset: connection refused")
	f := unschedulable(1)
	var delays []time.Duration
	for range 5 {
		now := retryDeadline(m)
		if now.IsZero() {
			t.Fatalf("no retry timer pending (timers %v)", m.Status().Timers)
		}
		res := m.Handle(Input{Kind: TimerFired, Timer: TimerRetry, Epoch: m.Status().Epoch}, f, now)
		if res.Plan == nil || !res.Plan.Ensure {
			t.Fatalf("retry at %s: plan %+v, want the ensure effects", now, res.Plan)
		}
		m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID, Err: failed}, f, now)
		delays = append(delays, retryDeadline(m).Sub(now))
	}
	for i := 1; i < len(delays); i++ {
		if delays[i] != 2*delays[i-1] {
			t.Errorf("delays %v: want each twice the one before", delays)
			break
		}
	}
	if m.State() != Degraded {
		t.Errorf("state %s, want Degraded", m.State())
	}
}

// writeAtOnce is the default configuration with no StatusDelay: every
// status change has its plan, as the tests of the outbox expect.
func writeAtOnce() Config {
	cfg := DefaultConfig()
	cfg.StatusDelay = 0
	return cfg
}
