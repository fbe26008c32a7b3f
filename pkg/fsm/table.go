package fsm

import (
	"slices"

	lfsm "github.com/looplab/fsm"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Guard decides whether an event may fire, on the machine's current status,
// the observed facts and what the machine remembers. Guards are pure, and
// run once per event the machine tries.
type Guard func(st *v1.PostgresqlStatus, f *Facts, mem Memory) bool

// Transition is one row of the transition table: the event, the states it
// may fire from, the state it leads to (the source itself when To is empty),
// the guard, and the guard's text for the diagram.
type Transition struct {
	Event string
	From  []string
	To    string
	Guard Guard
	When  string
}

// allBut lists every state except the given ones, in States order.
func allBut(except ...string) []string {
	var out []string
	for _, s := range States {
		if !slices.Contains(except, s) {
			out = append(out, s)
		}
	}
	return out
}

// Table is the whole state machine. "What happens when a pod becomes Ready"
// is the podsReady row.
var Table = []Transition{
	{Event: EventCleanedUp, From: allBut(Deleted), To: Deleted,
		Guard: func(_ *v1.PostgresqlStatus, f *Facts, mem Memory) bool { return f.Gone || mem.CleanupDone },
		When:  "cleanup done or resource gone"},
	{Event: EventDelete, From: allBut(Deleting, Deleted), To: Deleting,
		Guard: func(_ *v1.PostgresqlStatus, f *Facts, _ Memory) bool { return f.Deleting },
		When:  "deletionTimestamp set"},
	{Event: EventInvalidSpec, From: []string{Pending, Creating, Running, Updating, Degraded}, To: Invalid,
		Guard: func(_ *v1.PostgresqlStatus, f *Facts, _ Memory) bool { return f.SpecError != "" },
		When:  "spec cannot be served"},
	{Event: EventInvalidSpec, From: []string{Invalid},
		Guard: func(st *v1.PostgresqlStatus, f *Facts, _ Memory) bool {
			return f.SpecError != "" && (f.Generation != st.ObservedGeneration || f.SpecError != st.Message)
		},
		When: "spec edited, still invalid"},
	{Event: EventCreate, From: []string{Pending}, To: Creating,
		Guard: func(_ *v1.PostgresqlStatus, f *Facts, _ Memory) bool { return f.SpecError == "" },
		When:  "spec valid"},
	{Event: EventSpecChanged, From: []string{Invalid, Creating}, To: Creating,
		Guard: specChanged, When: "new generation, valid"},
	{Event: EventSpecChanged, From: []string{Running, Updating, Degraded}, To: Updating,
		Guard: specChanged, When: "new generation, valid"},
	// Facts.Replace lists every outdated pod that runs nothing at once, or
	// one that runs PostgreSQL once all are Ready: a fix of a stuck
	// cluster replaces its stuck pods without waiting, a rollout of a
	// serving one goes pod by pod, with a slot of the fleet's rollout
	// budget (rollout.go).
	{Event: EventReplacePod, From: []string{Creating, Updating, Degraded},
		Guard: func(st *v1.PostgresqlStatus, f *Facts, mem Memory) bool {
			return len(f.toReplace(mem.Replaced)) > 0 && (!f.ReplaceRunning || f.RolloutWait == "" && !windowClosed(st, f))
		},
		When: "outdated pods that run nothing, or all pods Ready and one outdated, with a rollout slot, in a maintenance window"},
	// A Running cluster that serves but is not what the spec asks is
	// updated, not lost: its objects or pods differ (an upgrade of
	// pgloop changed the StatefulSet or its pod template), or what runs
	// inside PostgreSQL does.
	{Event: EventOutOfSync, From: []string{Running}, To: Updating,
		Guard: func(st *v1.PostgresqlStatus, f *Facts, _ Memory) bool {
			return f.serving() && (!f.ObjectsCurrent || !applied(st, f))
		},
		When: "all pods Ready; objects or pods to update, roles, databases or configuration to apply, a restart pending, volumes to grow, or a connection pooler not ready or paused by pgloop"},
	// A rollout hands the primary's role over before replacing its pod.
	{Event: EventSwitchover, From: []string{Creating, Updating, Degraded},
		Guard: func(st *v1.PostgresqlStatus, f *Facts, mem Memory) bool {
			return f.Switchover != nil && f.Switchover.From != mem.SwitchedFrom && f.RolloutWait == "" && !windowClosed(st, f)
		},
		When: "the primary's pod is next to replace, a replica Ready, a rollout slot, in a maintenance window"},
	{Event: EventRestartMember, From: []string{Creating, Updating, Degraded},
		Guard: func(st *v1.PostgresqlStatus, f *Facts, mem Memory) bool {
			return !ConfigDue(st, f) && f.toRestart(mem.Restarted) != nil && !windowClosed(st, f)
		},
		When: "configuration applied, a member pending a restart, all pods Ready, in a maintenance window"},
	{Event: EventPodsReady, From: []string{Creating, Updating, Degraded}, To: Running,
		Guard: func(st *v1.PostgresqlStatus, f *Facts, mem Memory) bool {
			return f.converged() && applied(st, f) && !mem.Troubled && !mem.EnsurePending
		},
		When: "all pods Ready, primary elected, objects converged, roles and configuration applied, volumes grown, connection poolers ready and none paused by pgloop (status.poolerPause), the last ensure done and succeeded"},
	// A loss in Running first arms the lossGrace timer (Machine.graceLoss);
	// podsLost fires when it ran out, or at once with a concrete cause.
	{Event: EventPodsLost, From: []string{Running}, To: Degraded,
		Guard: podsLost,
		When:  "a pod or the primary lost, past the loss grace or stuck"},
	{Event: EventLossGrace, From: []string{Running}},
	{Event: EventTimeout, From: []string{Creating, Updating}, To: Degraded},
	{Event: EventRetry, From: []string{Invalid, Creating, Updating, Degraded, Deleting}},
	{Event: EventResync, From: []string{Running}},
	{Event: EventMaintenance, From: []string{Updating, Degraded}},
	{Event: EventEffectsSucceeded, From: allBut(Pending, Deleted)},
	{Event: EventEffectsFailed, From: []string{Running}, To: Degraded},
	{Event: EventEffectsFailed, From: []string{Invalid, Creating, Updating, Degraded, Deleting}},
	{Event: EventPanicked, From: []string{Pending, Invalid, Creating, Running, Updating, Degraded}, To: Degraded},
	{Event: EventPanicked, From: []string{Deleting}},
}

// podsLost is the podsLost guard, once the cluster is Running: it is not
// converged, and that is no blip: the loss grace is over, or a concrete
// cause shows the loss will not heal by itself within it (one seen since
// the newest pod was created: Facts.StuckStale).
func podsLost(_ *v1.PostgresqlStatus, f *Facts, mem Memory) bool {
	return !f.converged() && (mem.LossDue || (f.Stuck != "" && !f.StuckStale))
}

func specChanged(st *v1.PostgresqlStatus, f *Facts, _ Memory) bool {
	return f.SpecError == "" && f.Generation > st.ObservedGeneration
}

// From returns the rows of Table whose source states include state, in
// the order of Table: the events the state takes (whether one fires
// depends on its guard).
func From(state string) []Transition {
	var out []Transition
	for _, t := range Table {
		if slices.Contains(t.From, state) {
			out = append(out, t)
		}
	}
	return out
}

// guards maps an event to the guards of its rows, by source state.
type guardKey struct{ event, from string }

var guards = func() map[guardKey]Guard {
	m := map[guardKey]Guard{}
	for _, t := range Table {
		for _, from := range t.From {
			if _, dup := m[guardKey{t.Event, from}]; dup {
				panic("fsm: two rows for " + t.Event + " from " + from)
			}
			m[guardKey{t.Event, from}] = t.Guard
		}
	}
	return m
}()

// events is the looplab/fsm form of Table, built once.
var events = func() lfsm.Events {
	var out lfsm.Events
	for _, t := range Table {
		if t.To != "" {
			out = append(out, lfsm.EventDesc{Name: t.Event, Src: t.From, Dst: t.To})
			continue
		}
		// A self-transition needs one row per source state.
		for _, from := range t.From {
			out = append(out, lfsm.EventDesc{Name: t.Event, Src: []string{from}, Dst: from})
		}
	}
	return out
}()

// observeOrder is the order in which fact-driven events are tried after every
// input: deletion first, then the spec, then the pods.
var observeOrder = []string{
	EventCleanedUp, EventDelete, EventInvalidSpec, EventCreate, EventSpecChanged, EventOutOfSync,
	EventReplacePod, EventSwitchover, EventRestartMember, EventPodsReady, EventPodsLost,
}

// candidate is a fact-driven event a state takes, with its guard.
type candidate struct {
	event string
	guard Guard
}

// candidates lists, per state, the fact-driven events it takes in
// observeOrder: one lookup per round on the hot path instead of one per
// event.
var candidates = func() map[string][]candidate {
	m := map[string][]candidate{}
	for _, s := range States {
		rows := From(s)
		for _, ev := range observeOrder {
			if i := slices.IndexFunc(rows, func(t Transition) bool { return t.Event == ev }); i >= 0 {
				m[s] = append(m[s], candidate{event: ev, guard: rows[i].Guard})
			}
		}
	}
	return m
}()
