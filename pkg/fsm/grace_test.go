package fsm

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

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
