package controller

import (
	"fmt"
	"slices"
	"testing"

	"github.com/pgloop/pgloop/pkg/fsm"
)

// checkBudget returns an error when one of budget's invariants does not
// hold (budget.go); states are the machines' last reports.
func checkBudget(b *budget, states map[string]fsm.Rollout) error {
	if b.max > 0 && len(b.holders) > b.max {
		return fmt.Errorf("%d clusters hold a slot, at most %d", len(b.holders), b.max)
	}
	for key, r := range states {
		_, held := b.holders[key]
		_, waiting := b.inResumed[key]
		if held != (r == fsm.Rolling) || waiting != (r == fsm.Queued) {
			return fmt.Errorf("%s reported %s: held %v, waiting %v", key, r, held, waiting)
		}
	}
	for key := range b.holders {
		if states[key] != fsm.Rolling {
			return fmt.Errorf("%s holds a slot, reported %s", key, states[key])
		}
	}
	seen := map[string]bool{}
	for i, line := range [][]string{b.fresh, b.resumed} {
		for _, key := range line {
			if seen[key] || b.inResumed[key] != (i == 1) {
				return fmt.Errorf("%s twice in line, or in the wrong one", key)
			}
			seen[key] = true
		}
	}
	if len(seen) != len(b.inResumed) {
		return fmt.Errorf("%d clusters in line, %d recorded", len(seen), len(b.inResumed))
	}
	return nil
}

// fleet drives a budget as the controller does, with machines reduced to
// what they report: a cluster that may roll rolls, one that may not waits.
type fleet struct {
	t      *testing.T
	b      budget
	states map[string]fsm.Rollout
	woken  []string
}

func newFleet(t *testing.T, max int) *fleet {
	f := &fleet{t: t, states: map[string]fsm.Rollout{}}
	f.b = newBudget(max, func(key string) { f.woken = append(f.woken, key) })
	return f
}

// look is one input of key that wants a slot (or not): it reports whether
// the cluster rolls after it.
func (f *fleet) look(key string, wants, started bool) bool {
	f.t.Helper()
	f.b.seen(key)
	r := fsm.NotRolling
	switch {
	case !wants:
	case f.b.offer(key, started) == "":
		r = fsm.Rolling
	default:
		r = fsm.Queued
	}
	f.b.report(key, r, started)
	f.states[key] = r
	if err := checkBudget(&f.b, f.states); err != nil {
		f.t.Fatalf("after %s: %v", key, err)
	}
	return r == fsm.Rolling
}

// wake hands the woken clusters an input each, as the loop does, and
// returns them.
func (f *fleet) wake() []string {
	woken := slices.Compact(f.woken)
	f.woken = nil
	for _, key := range woken {
		f.look(key, true, false)
	}
	return woken
}

func (f *fleet) wantRolling(keys ...string) {
	f.t.Helper()
	var got []string
	for key, r := range f.states {
		if r == fsm.Rolling {
			got = append(got, key)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, keys) {
		f.t.Fatalf("rolling %v, want %v", got, keys)
	}
}

func TestBudgetTurns(t *testing.T) {
	f := newFleet(t, 2)
	for _, key := range []string{"a", "b", "c", "d", "e"} {
		f.look(key, true, false)
	}
	f.wantRolling("a", "b")
	if n := f.b.waiting(); n != 3 {
		t.Fatalf("%d waiting, want 3", n)
	}
	// A waiting cluster's other inputs do not jump the line.
	if f.look("e", true, false) || len(f.woken) > 0 {
		t.Fatal("e rolls out of its turn")
	}
	// A slot frees: the first in line is woken, and only it.
	f.look("a", false, false)
	if woken := f.wake(); !slices.Equal(woken, []string{"c"}) {
		t.Fatalf("woken %v, want c", woken)
	}
	f.wantRolling("b", "c")
	// A slot kept for a woken cluster is not taken by the next one.
	f.look("b", false, false)
	if f.look("e", true, false) {
		t.Fatal("e took d's turn")
	}
	if woken := f.wake(); !slices.Equal(woken, []string{"d"}) {
		t.Fatalf("woken %v, want d", woken)
	}
	f.wantRolling("c", "d")
	// A waiting cluster that no longer needs a slot leaves its turn to
	// the next.
	f.look("c", false, false)
	f.woken = nil
	f.look("e", false, false)
	f.look("f", true, false)
	f.wantRolling("d", "f")
	// A cluster that is gone frees its slot.
	f.b.forget("d")
	delete(f.states, "d")
	if n := f.b.rolling(); n != 1 {
		t.Fatalf("%d rolling after d is gone, want 1", n)
	}
}

// A cluster whose rollout is under way goes before those that would start
// one.
func TestBudgetStartedFirst(t *testing.T) {
	f := newFleet(t, 1)
	f.look("a", true, false)
	f.look("b", true, false)
	f.look("c", true, true)
	f.look("a", false, false)
	if woken := f.wake(); !slices.Equal(woken, []string{"c"}) {
		t.Fatalf("woken %v, want c, whose rollout is under way", woken)
	}
	f.wantRolling("c")
	// A fresh waiter whose rollout gets under way moves ahead.
	f.look("d", true, false)
	f.look("d", true, true)
	f.look("c", false, false)
	if woken := f.wake(); !slices.Equal(woken, []string{"d"}) {
		t.Fatalf("woken %v, want d", woken)
	}
}

// After a restart, the rollouts under way take their slots before any
// starts, whatever order the clusters are seen in.
func TestBudgetRestart(t *testing.T) {
	f := newFleet(t, 2)
	f.b.expect([]string{"new1", "new2", "half1", "half2", "idle"})
	if f.look("new1", true, false) || f.look("new2", true, false) {
		t.Fatal("a rollout started before every resumed cluster was seen")
	}
	if !f.look("half1", true, true) || !f.look("half2", true, true) {
		t.Fatal("a rollout under way did not take its slot back")
	}
	f.look("idle", false, false)
	if len(f.woken) > 0 {
		t.Fatalf("woken %v with no slot free", f.woken)
	}
	f.wantRolling("half1", "half2")
	f.look("half1", false, true)
	if woken := f.wake(); !slices.Equal(woken, []string{"new1"}) {
		t.Fatalf("woken %v, want new1", woken)
	}

	// Every cluster seen with slots free: the fresh line opens at once.
	f = newFleet(t, 2)
	f.b.expect([]string{"new", "other"})
	f.look("new", true, false)
	f.look("other", false, false)
	if woken := f.wake(); !slices.Equal(woken, []string{"new"}) {
		t.Fatalf("woken %v once warm, want new", woken)
	}
	f.wantRolling("new")
}

func TestBudgetUnbounded(t *testing.T) {
	f := newFleet(t, 0)
	for _, key := range []string{"a", "b", "c"} {
		if !f.look(key, true, false) {
			t.Fatalf("%s waits with no bound", key)
		}
	}
	if r, w := f.b.rolling(), f.b.waiting(); r != 3 || w != 0 {
		t.Fatalf("rolling %d waiting %d, want 3 and 0", r, w)
	}
}
