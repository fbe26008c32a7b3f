package fsm

import (
	"slices"
	"testing"
	"time"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// rotating is a Running cluster whose spec rotates app with a new role and
// flyway in place.
func rotating(rotated map[string]string) Facts {
	return with(ready(1), func(f *Facts) {
		modes := map[string]string{"app": v1.RotationNewRole, "flyway": v1.RotationInPlace}
		f.Rotation = RotationFacts{Global: modes, Listed: modes, Rotated: rotated}
		f.Sync = Want{Hash: "s1"}
		f.Target = "c-0"
	})
}

func hasRecord(p *Plan, reason string) bool {
	return p != nil && slices.ContainsFunc(p.Records, func(r Record) bool { return r.Reason == reason })
}

func timerOp(res Result, name string) (TimerOp, bool) {
	i := slices.IndexFunc(res.Timers, func(t TimerOp) bool { return t.Name == name })
	if i < 0 {
		return TimerOp{}, false
	}
	return res.Timers[i], true
}

// TestPasswordRotation walks one scheduled rotation: the schedule set an
// interval after the cluster is first seen, the rotation started when its
// timer fires (status names the users and roles, an Event says so), ended
// once both Secrets took it, the roles recorded; the next one drops the
// roles past their retention; and a machine resumed from the written
// status rotates nothing twice.
func TestPasswordRotation(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PasswordRotationInterval = time.Minute
	cfg.PasswordRotationUserRetention = 90 * time.Second // raised to 2m: twice the interval
	m := inState(t, &cfg, Running)

	res := m.Handle(Input{Kind: Signal}, rotating(nil), t0)
	r := m.st.PasswordRotation
	if r == nil || r.NextRotation == nil || !r.NextRotation.Time.Equal(t0.Add(time.Minute)) || r.Last != nil {
		t.Fatalf("first sight: status.passwordRotation %+v, want next at t0+1m and nothing run", r)
	}
	if op, ok := timerOp(res, TimerPasswordRotation); !ok || !op.Deadline.Equal(t0.Add(time.Minute)) {
		t.Fatalf("first sight: timers %+v, want %s at t0+1m", res.Timers, TimerPasswordRotation)
	}
	if res.Plan == nil || res.Plan.Status == nil {
		t.Fatalf("first sight: no status write: %+v", res.Plan)
	}
	if res.Plan != nil {
		m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, rotating(nil), t0)
	}

	// Nothing changed: nothing written.
	if res := m.Handle(Input{Kind: Signal}, rotating(nil), t0.Add(10*time.Second)); res.Plan != nil {
		t.Fatalf("an idle observation planned %+v", res.Plan)
	}

	due := t0.Add(time.Minute)
	res = m.Handle(Input{Kind: TimerFired, Timer: TimerPasswordRotation, Epoch: m.st.Epoch}, rotating(nil), due)
	r = m.st.PasswordRotation
	if r.Last == nil || r.Last.FinishedAt != nil || r.Last.ID != "20261130T120100Z" {
		t.Fatalf("due: last %+v, want rotation 20261130T120100Z under way", r.Last)
	}
	want := []v1.RotatedUser{{Name: "app", Mode: v1.RotationNewRole, Role: "app261130120100"}, {Name: "flyway", Mode: v1.RotationInPlace, Role: "flyway"}}
	if !slices.Equal(r.Last.Users, want) {
		t.Errorf("due: users %+v, want %+v", r.Last.Users, want)
	}
	if !r.NextRotation.Time.Equal(due.Add(time.Minute)) {
		t.Errorf("due: next %v, want %v", r.NextRotation, due.Add(time.Minute))
	}
	if !hasRecord(res.Plan, ReasonPasswordRotationStarted) || res.Plan.Status == nil {
		t.Fatalf("due: plan %+v, want the status and a %s Event", res.Plan, ReasonPasswordRotationStarted)
	}
	// The status written, the sync the rotation asks for is due at once:
	// Updating, with the roles' sync in the plan.
	res = m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, rotating(nil), due)
	if m.State() != Updating || res.Plan == nil || res.Plan.InDatabase == nil || res.Plan.InDatabase.Sync != "s1+rotation 20261130T120100Z" {
		t.Fatalf("after the status write: state %s, plan %+v, want Updating with the rotation's sync", m.State(), res.Plan)
	}
	m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, rotating(nil), due)

	// One Secret took it: still under way.
	half := map[string]string{"app": r.Last.ID}
	if res := m.Handle(Input{Kind: Signal}, rotating(half), due.Add(2*time.Second)); res.Plan != nil && hasRecord(res.Plan, ReasonPasswordsRotated) {
		t.Fatalf("one Secret of two: %+v", res.Plan)
	}
	both := map[string]string{"app": r.Last.ID, "flyway": r.Last.ID}
	res = m.Handle(Input{Kind: Signal}, rotating(both), due.Add(3*time.Second))
	r = m.st.PasswordRotation
	if r.Last.FinishedAt == nil || !hasRecord(res.Plan, ReasonPasswordsRotated) {
		t.Fatalf("both Secrets: last %+v, plan %+v: want it finished, with a %s Event", r.Last, res.Plan, ReasonPasswordsRotated)
	}
	if len(r.Roles) != 1 || r.Roles[0].Name != "app261130120100" || r.Roles[0].User != "app" {
		t.Fatalf("roles %+v, want app261130120100 of app", r.Roles)
	}
	m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, rotating(both), due.Add(3*time.Second))

	// A restarted operator resumes from the status written: no rotation
	// before the next date, the timer armed at it.
	written := m.st.DeepCopy()
	m2 := newMachine(NewEngine(cfg), written)
	res = m2.Handle(Input{Kind: Signal}, rotating(both), due.Add(10*time.Second))
	if res.Plan != nil && (res.Plan.Status != nil || len(res.Plan.Records) > 0) {
		t.Fatalf("resumed: plan %+v, want nothing written", res.Plan)
	}
	if m2.st.PasswordRotation.Last.ID != "20261130T120100Z" {
		t.Fatalf("resumed: last %+v", m2.st.PasswordRotation.Last)
	}

	// The second and third rotations: the third drops the first's role,
	// past its retention (2m).
	second := due.Add(time.Minute)
	res = m2.Handle(Input{Kind: TimerFired, Timer: TimerPasswordRotation, Epoch: m2.st.Epoch}, rotating(both), second)
	id2 := m2.st.PasswordRotation.Last.ID
	if id2 == "20261130T120100Z" || len(m2.st.PasswordRotation.Last.Drop) != 0 {
		t.Fatalf("second: last %+v", m2.st.PasswordRotation.Last)
	}
	m2.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, rotating(both), second)
	took := map[string]string{"app": id2, "flyway": id2}
	res = m2.Handle(Input{Kind: Signal}, rotating(took), second.Add(time.Second))
	m2.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, rotating(took), second.Add(time.Second))
	third := second.Add(time.Minute)
	m2.Handle(Input{Kind: TimerFired, Timer: TimerPasswordRotation, Epoch: m2.st.Epoch}, rotating(took), third)
	if d := m2.st.PasswordRotation.Last.Drop; !slices.Equal(d, []string{"app261130120100"}) {
		t.Fatalf("third: drop %v, want the first rotation's role", d)
	}
	id3 := m2.st.PasswordRotation.Last.ID
	m2.Handle(Input{Kind: Signal}, rotating(map[string]string{"app": id3, "flyway": id3}), third.Add(time.Second))
	var names []string
	for _, x := range m2.st.PasswordRotation.Roles {
		names = append(names, x.Name)
	}
	if !slices.Equal(names, []string{"app261130120200", "app261130120300"}) {
		t.Errorf("roles after the third %v", names)
	}
}

// TestPasswordRotationNone: a cluster without users to rotate keeps no
// rotation status nor timer.
func TestPasswordRotationNone(t *testing.T) {
	cfg := DefaultConfig()
	m := inState(t, &cfg, Running)
	res := m.Handle(Input{Kind: Signal}, ready(1), t0)
	if m.st.PasswordRotation != nil {
		t.Errorf("status.passwordRotation %+v, want none", m.st.PasswordRotation)
	}
	if _, ok := timerOp(res, TimerPasswordRotation); ok {
		t.Errorf("timers %+v", res.Timers)
	}
}
