package fsm

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// checkOutbox asserts the invariants written at the top of outbox.go that
// the outbox alone can check; the scripts check those involving the state.
func checkOutbox(o *outbox) error {
	switch {
	case o.effectsPlan > o.seq || o.statusPlan > o.seq:
		return fmt.Errorf("plans in flight %d (effects), %d (status) beyond the latest %d", o.effectsPlan, o.statusPlan, o.seq)
	case o.held && !o.dirty && o.statusPlan == 0:
		return errors.New("a held status is neither dirty nor in flight: it is lost")
	case o.cleanupDone && o.want != noWork:
		return fmt.Errorf("effects %d wanted after the cleanup", o.want)
	case o.forget && len(o.replace) > 0:
		return errors.New("a failed replacement to forget while pods wait to be replaced")
	}
	return nil
}

var (
	errRefused = errors.New("connection refused")
	errWaiting = fmt.Errorf("pods still terminating (%w)", ErrWaiting)
)

// outboxStep is one operation on an outbox and what it must give.
type outboxStep struct {
	do func(o *outbox) string // returns what happened, in the words of want
	// want, when not empty, is what do must return.
	want string
}

// send makes the next plan: retryPending says whether the retry timer is
// pending, events whether the input recorded Kubernetes Events.
func send(events, retryPending bool, want string) outboxStep {
	return sendWhile(0, events, retryPending, want)
}

// sendWhile is send while plan inFlight runs.
func sendWhile(inFlight uint64, events, retryPending bool, want string) outboxStep {
	return outboxStep{want: want, do: func(o *outbox) string {
		p, status := o.next(events, retryPending, inFlight)
		return planString(p, status)
	}}
}

// planString names what a plan carries: "none" for no plan, else
// "plan <id>" and its parts.
func planString(p *Plan, status bool) string {
	if p == nil {
		return "none"
	}
	s := fmt.Sprintf("plan %d", p.ID)
	if p.Ensure {
		s += " ensure"
	}
	if p.Cleanup {
		s += " cleanup"
	}
	if status {
		s += " status"
	}
	for _, r := range p.ReplacePods {
		s += " replace " + r.Name
	}
	if p.Nudge != "" {
		s += " nudge " + p.Nudge
	}
	return s
}

// result reports plan id's result to the outbox.
func result(id uint64, err error, want string) outboxStep {
	return outboxStep{want: want, do: func(o *outbox) string {
		r := o.report(id, err)
		if r.stale {
			return "stale"
		}
		s := [...]string{"nothing", "succeeded", "failed", "waiting"}[r.outcome]
		if r.written {
			s += ", written"
		}
		return s
	}}
}

func op(f func(o *outbox)) outboxStep {
	return outboxStep{do: func(o *outbox) string { f(o); return "" }}
}

// is checks one piece of the outbox's memory.
func is(what string, got func(o *outbox) any, want any) outboxStep {
	return outboxStep{want: fmt.Sprint(want), do: func(o *outbox) string { return fmt.Sprint(got(o)) }}
}

func TestOutbox(t *testing.T) {
	changed := op((*outbox).changed)
	ensure := op(func(o *outbox) { o.ask(ensureWork) })
	troubled := func(o *outbox) any { return o.troubled }
	replaced := func(o *outbox) any { return o.replaced }
	pod := func(name string) PodRef { return PodRef{Name: name, UID: "uid-" + name} }
	tests := []struct {
		name  string
		steps []outboxStep
	}{
		{name: "nothing due, no plan",
			steps: []outboxStep{send(false, false, "none"), changed, send(false, false, "plan 1 status"),
				result(1, nil, "nothing, written"), send(false, false, "none")}},
		{name: "Events alone make a plan",
			steps: []outboxStep{send(true, false, "plan 1")}},
		{name: "effects ride on every plan until the plan carrying them reports",
			steps: []outboxStep{ensure, send(false, false, "plan 1 ensure"), changed, send(false, false, "plan 2 ensure status"),
				result(1, nil, "stale"), send(false, false, "plan 3 ensure status"),
				result(3, nil, "succeeded, written"), send(false, false, "none")}},
		{name: "effects on the running plan are not sent again; asked again, they are",
			steps: []outboxStep{ensure, changed, send(false, false, "plan 1 ensure status"),
				sendWhile(1, false, false, "none"), changed, sendWhile(1, false, false, "plan 2 status"),
				result(1, nil, "succeeded"), result(2, nil, "nothing, written"),
				ensure, send(false, false, "plan 3 ensure"), ensure, sendWhile(3, false, false, "plan 4 ensure"),
				result(3, nil, "stale"), result(4, nil, "succeeded")}},
		{name: "a status in flight is carried again until it reports",
			steps: []outboxStep{changed, send(false, false, "plan 1 status"), send(true, false, "plan 2 status"),
				result(2, nil, "nothing, written"), send(true, false, "plan 3")}},
		{name: "failed effects are dropped: the retry asks again",
			steps: []outboxStep{ensure, changed, send(false, false, "plan 1 ensure status"),
				result(1, errRefused, "failed"), is("troubled", troubled, true),
				// The status may not have been written: again at once,
				// not held, since the effects may be what failed.
				send(false, true, "plan 2 status"), result(2, nil, "nothing, written"), send(false, false, "none"),
				ensure, send(false, false, "plan 3 ensure"), result(3, nil, "succeeded"), is("troubled", troubled, false)}},
		{name: "waiting effects are asked again on the next observation",
			steps: []outboxStep{ensure, send(false, false, "plan 1 ensure"), result(1, errWaiting, "waiting"),
				is("troubled", troubled, false), send(false, false, "none"),
				op(func(o *outbox) { o.signalled(ensureWork) }), send(false, false, "plan 2 ensure"),
				op(func(o *outbox) { o.signalled(ensureWork) }), result(2, nil, "succeeded"), send(false, false, "none")}},
		{name: "waiting effects asked again by a timer wait for no observation",
			steps: []outboxStep{ensure, send(false, false, "plan 1 ensure"), result(1, errWaiting, "waiting"),
				is("again", func(o *outbox) any { return o.again }, true),
				ensure, is("again", func(o *outbox) any { return o.again }, false), send(false, false, "plan 2 ensure"),
				result(2, nil, "succeeded"), send(false, false, "none")}},
		{name: "a failed status-only write waits for the retry timer",
			steps: []outboxStep{changed, send(false, false, "plan 1 status"), result(1, errRefused, "failed"),
				is("troubled", troubled, true),
				send(false, true, "none"), changed, send(false, true, "none"),
				// Any plan made for another reason carries the status.
				send(true, true, "plan 2 status"), result(2, errRefused, "failed"),
				// The retry timer fired: the held write goes.
				send(false, false, "plan 3 status"), result(3, nil, "nothing, written"),
				changed, send(false, true, "plan 4 status")}},
		{name: "a superseded plan's result is stale",
			steps: []outboxStep{ensure, send(false, false, "plan 1 ensure"), send(true, false, "plan 2 ensure"),
				result(2, errRefused, "failed"), send(false, false, "none"), result(1, nil, "stale")}},
		{name: "a cleanup that succeeds is acknowledged",
			steps: []outboxStep{op(func(o *outbox) { o.ask(cleanupWork) }), send(false, false, "plan 1 cleanup"),
				result(1, nil, "succeeded"), is("cleanupDone", func(o *outbox) any { return o.cleanupDone }, true)}},
		{name: "effects dropped meanwhile: the plan in flight still reports",
			steps: []outboxStep{ensure, send(false, false, "plan 1 ensure"), op(func(o *outbox) { o.ask(noWork) }),
				changed, send(false, false, "plan 2 status"), result(1, nil, "succeeded"), result(2, nil, "nothing, written")}},
		{name: "pods to replace ride on every plan until the latest reports",
			steps: []outboxStep{op(func(o *outbox) { o.replacePods([]PodRef{pod("c-1")}, []PodRef{pod("c-1")}) }),
				send(false, false, "plan 1 replace c-1"), send(true, false, "plan 2 replace c-1"),
				result(1, nil, "stale"), result(2, nil, "nothing"), send(false, false, "none"),
				// Remembered while the cache lists the pod, forgotten
				// once it does not.
				is("replaced", replaced, []string{"uid-c-1"}),
				op(func(o *outbox) { o.replacePods([]PodRef{pod("c-0")}, []PodRef{pod("c-1"), pod("c-0")}) }),
				is("replaced", replaced, []string{"uid-c-1", "uid-c-0"}),
				op(func(o *outbox) { o.replacePods(nil, []PodRef{pod("c-0")}) }),
				is("replaced", replaced, []string{"uid-c-0"})}},
		{name: "a failed replacement is forgotten when the next input begins",
			steps: []outboxStep{op(func(o *outbox) { o.replacePods([]PodRef{pod("c-1")}, []PodRef{pod("c-1")}) }),
				send(false, false, "plan 1 replace c-1"), result(1, errRefused, "failed"), send(false, true, "none"),
				is("replaced during the failing input", replaced, []string{"uid-c-1"}),
				op((*outbox).begin), is("replaced", replaced, []string(nil))}},
		{name: "a replacement asked during the failing input starts afresh",
			steps: []outboxStep{op(func(o *outbox) { o.replacePods([]PodRef{pod("c-1")}, []PodRef{pod("c-1")}) }),
				send(false, false, "plan 1 replace c-1"), result(1, errRefused, "failed"),
				op(func(o *outbox) { o.replacePods([]PodRef{pod("c-0")}, []PodRef{pod("c-1"), pod("c-0")}) }),
				op((*outbox).begin), is("replaced", replaced, []string{"uid-c-0"}), send(false, false, "plan 2 replace c-0")}},
		{name: "a nudge once per quota version, again after a failure once the retry fired",
			steps: []outboxStep{op(func(o *outbox) { o.askNudge("q1") }), send(false, false, "plan 1 nudge q1"),
				result(1, nil, "nothing"), op(func(o *outbox) { o.askNudge("q1") }), send(false, false, "none"),
				op(func(o *outbox) { o.askNudge("") }), send(false, false, "none"),
				op(func(o *outbox) { o.askNudge("q2") }), send(false, false, "plan 2 nudge q2"),
				result(2, errRefused, "failed"), op(func(o *outbox) { o.askNudge("q2") }), send(false, true, "none"),
				op(func(o *outbox) { o.retried(); o.askNudge("q2") }), send(false, true, "plan 3 nudge q2")}},
		{name: "a failed plan with a replacement and the status does not hold the status",
			steps: []outboxStep{changed, op(func(o *outbox) { o.replacePods([]PodRef{pod("c-1")}, []PodRef{pod("c-1")}) }),
				send(false, false, "plan 1 status replace c-1"), result(1, errRefused, "failed"),
				send(false, true, "plan 2 status")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var o outbox
			for i, s := range tc.steps {
				got := s.do(&o)
				if s.want != "" && got != s.want {
					t.Fatalf("step %d: %s, want %s", i, got, s.want)
				}
				if err := checkOutbox(&o); err != nil {
					t.Fatalf("step %d: %v (%+v)", i, err, o)
				}
			}
		})
	}
}

// TestOutboxPlanSharesNothingMutable: a plan's replacements are not
// changed by later asks (the executor reads them off the loop).
func TestOutboxPlanSharesNothingMutable(t *testing.T) {
	var o outbox
	c1, c0 := PodRef{Name: "c-1", UID: "1"}, PodRef{Name: "c-0", UID: "0"}
	o.replacePods([]PodRef{c1}, []PodRef{c1})
	p, _ := o.next(false, false, 0)
	o.replacePods([]PodRef{c0}, []PodRef{c1, c0})
	q, _ := o.next(false, false, 0)
	if len(p.ReplacePods) != 1 || len(q.ReplacePods) != 2 || !slices.Equal(o.replaced, []string{"1", "0"}) {
		t.Errorf("plans replace %v then %v, replaced %v", p.ReplacePods, q.ReplacePods, o.replaced)
	}
}
