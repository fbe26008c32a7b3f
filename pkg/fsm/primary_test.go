package fsm

import (
	"slices"
	"strings"
	"testing"
	"time"
)

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
