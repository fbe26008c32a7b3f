package fsm

import (
	"errors"
	"strings"
	"testing"
	"time"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// switching is an Updating 2-instance cluster whose next step is the
// switchover from c-0 to c-1, with a primary pooler when pooled.
func switching(pooled bool) Facts {
	return with(ready(1), func(f *Facts) {
		f.Outdated = 2
		f.Switchover = &Switchover{From: "c-0", To: "c-1"}
		f.PausePooler = pooled
	})
}

// A switchover of a cluster with a primary pooler records the pause in
// the status its plan writes first; once that plan reports, failed or
// not, every plan asks for the poolers' resume until one succeeds, and
// only then is the record removed.
func TestSwitchoverPauseResumeFollows(t *testing.T) {
	for _, failed := range []bool{false, true} {
		name := map[bool]string{false: "switchover succeeded", true: "switchover failed"}[failed]
		t.Run(name, func(t *testing.T) {
			m := newMachine(NewEngine(writeAtOnce()), statusIn(Updating))
			f := switching(true)
			res := m.Handle(Input{Kind: Signal}, f, t0)
			p := res.Plan
			if p == nil || p.Switchover == nil || p.ResumePoolers {
				t.Fatalf("plan %+v, want the switchover alone", p)
			}
			if p.Status == nil || p.Status.PoolerPause == nil || *p.Status.PoolerPause != (v1.PoolerPause{From: "c-0", To: "c-1"}) {
				t.Fatalf("status %+v, want the pause on record with the switchover", p.Status)
			}

			// A signal while it runs carries the switchover again, not
			// the resume.
			res = m.Handle(Input{Kind: Signal, InFlight: p.ID}, f, t0.Add(time.Second))
			if q := res.Plan; q != nil && q.ResumePoolers {
				t.Fatalf("plan %+v while the switchover runs, want no resume", q)
			}
			latest := p.ID
			if res.Plan != nil {
				latest = res.Plan.ID
			}

			var err error
			if failed {
				err = errors.New("switchover failed")
			}
			after := with(f, func(f *Facts) { f.Switchover = nil; f.Primary = "c-1" })
			res = m.Handle(Input{Kind: PlanDone, PlanID: latest, Err: err}, after, t0.Add(2*time.Second))
			resume := res.Plan
			if failed {
				// The failure arms the retry; the resume rides on its
				// plan as on any.
				if resume == nil {
					res = m.Handle(Input{Kind: TimerFired, Timer: TimerRetry, Epoch: m.st.Epoch}, after, t0.Add(time.Minute))
					resume = res.Plan
				}
			}
			if resume == nil || !resume.ResumePoolers || resume.Switchover != nil {
				t.Fatalf("after the switchover reported: plan %+v, want the resume", resume)
			}
			if m.st.PoolerPause == nil {
				t.Fatalf("the pause is off the record before the resume succeeded")
			}

			// A failed resume is asked again.
			res = m.Handle(Input{Kind: PlanDone, PlanID: resume.ID, Err: errors.New("pooler pod: connection refused")}, after, t0.Add(2*time.Minute))
			if m.st.PoolerPause == nil {
				t.Fatalf("the pause is off the record after a failed resume")
			}
			res = m.Handle(Input{Kind: TimerFired, Timer: TimerRetry, Epoch: m.st.Epoch}, after, t0.Add(3*time.Minute))
			if res.Plan == nil || !res.Plan.ResumePoolers {
				t.Fatalf("retry after a failed resume: plan %+v, want the resume again", res.Plan)
			}
			res = m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, after, t0.Add(4*time.Minute))
			if m.st.PoolerPause != nil {
				t.Fatalf("resumed: pause %+v still on record", m.st.PoolerPause)
			}
			if res.Plan == nil || res.Plan.Status == nil || res.Plan.Status.PoolerPause != nil || res.Plan.ResumePoolers {
				t.Fatalf("resumed: plan %+v, want the status written without the pause, no resume", res.Plan)
			}
		})
	}
}

// A restarted operator that finds a pause on record resumes the poolers
// before anything else removes it.
func TestRestartedOperatorResumesPoolers(t *testing.T) {
	st := statusIn(Updating)
	st.PoolerPause = &v1.PoolerPause{From: "c-0", To: "c-1"}
	m := NewEngine(writeAtOnce()).New(st)
	m.Resume(t0)
	f := with(ready(1), func(f *Facts) { f.Primary = "c-1"; f.PausePooler = true })
	res := m.Handle(Input{Kind: Signal}, f, t0)
	if res.Plan == nil || !res.Plan.ResumePoolers {
		t.Fatalf("plan %+v, want the resume", res.Plan)
	}
	m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, f, t0.Add(time.Second))
	if m.st.PoolerPause != nil {
		t.Errorf("pause %+v still on record after the resume", m.st.PoolerPause)
	}
}

// Without a primary pooler a switchover records no pause and asks for no
// resume.
func TestSwitchoverWithoutPooler(t *testing.T) {
	m := newMachine(NewEngine(writeAtOnce()), statusIn(Updating))
	res := m.Handle(Input{Kind: Signal}, switching(false), t0)
	if p := res.Plan; p == nil || p.Switchover == nil || p.Status == nil || p.Status.PoolerPause != nil {
		t.Fatalf("plan %+v, want the switchover without a pause on record", p)
	}
	after := with(switching(false), func(f *Facts) { f.Switchover = nil; f.Primary = "c-1" })
	res = m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, after, t0.Add(time.Second))
	if p := res.Plan; p != nil && p.ResumePoolers {
		t.Fatalf("plan %+v, want no resume", p)
	}
}

// A restart of the primary for a setting is paused for as a switchover
// is, recorded from and to the primary; a replica's restart is not. The
// resume follows once the restart reported, never in the same plan.
func TestRestartOfThePrimaryPausesPoolers(t *testing.T) {
	restarting := func(pod string) Facts {
		return with(ready(1), func(f *Facts) {
			f.PendingRestart = []string{pod}
			f.Restart = &PodRef{Name: pod}
			f.PausePooler = true
		})
	}
	m := newMachine(NewEngine(writeAtOnce()), statusIn(Running))
	res := m.Handle(Input{Kind: Signal}, restarting("c-1"), t0)
	if p := res.Plan; p == nil || len(p.Restart) != 1 || p.Restart[0].Name != "c-1" || m.st.PoolerPause != nil {
		t.Fatalf("restart of a replica: plan %+v, pause %+v; want the restart, no pause", p, m.st.PoolerPause)
	}
	m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, ready(1), t0.Add(time.Second))
	if res.Plan.ResumePoolers || m.st.PoolerPause != nil {
		t.Fatalf("restart of a replica reported: pause %+v, want none", m.st.PoolerPause)
	}

	m = newMachine(NewEngine(writeAtOnce()), statusIn(Running))
	f := restarting("c-0")
	res = m.Handle(Input{Kind: Signal}, f, t0)
	p := res.Plan
	if p == nil || len(p.Restart) != 1 || p.Restart[0].Name != "c-0" || p.ResumePoolers {
		t.Fatalf("restart of the primary: plan %+v, want the restart alone", p)
	}
	if p.Status == nil || p.Status.PoolerPause == nil || *p.Status.PoolerPause != (v1.PoolerPause{From: "c-0", To: "c-0"}) {
		t.Fatalf("status %+v, want the pause from and to the primary on record", p.Status)
	}
	res = m.Handle(Input{Kind: Signal, InFlight: p.ID}, f, t0.Add(time.Second))
	if q := res.Plan; q != nil && q.ResumePoolers {
		t.Fatalf("plan %+v while the restart runs, want no resume", q)
	}
	latest := p.ID
	if res.Plan != nil {
		latest = res.Plan.ID
	}
	res = m.Handle(Input{Kind: PlanDone, PlanID: latest}, ready(1), t0.Add(2*time.Second))
	if res.Plan == nil || !res.Plan.ResumePoolers || len(res.Plan.Restart) != 0 {
		t.Fatalf("after the restart reported: plan %+v, want the resume", res.Plan)
	}
	m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, ready(1), t0.Add(3*time.Second))
	if m.st.PoolerPause != nil {
		t.Errorf("resumed: pause %+v still on record", m.st.PoolerPause)
	}
}

// Patroni may publish a restart of the primary done before the plan that
// asked for it reports (its member data change while PostgreSQL starts
// again). The plans made meanwhile do not carry the restart again, which
// would pause the pooler once more for nothing; they ask for the resume.
// The cluster is not Running while the pause is on record: its pooler's
// clients may still wait.
func TestRestartPublishedBeforeItsPlanReports(t *testing.T) {
	f := with(ready(1), func(f *Facts) {
		f.PendingRestart = []string{"c-0"}
		f.Restart = &PodRef{Name: "c-0"}
		f.PausePooler = true
	})
	m := newMachine(NewEngine(writeAtOnce()), statusIn(Updating))
	res := m.Handle(Input{Kind: Signal}, f, t0)
	p := res.Plan
	if p == nil || len(p.Restart) != 1 || m.st.PoolerPause == nil {
		t.Fatalf("plan %+v, pause %+v: want the primary's restart with its pause on record", p, m.st.PoolerPause)
	}
	done := with(ready(1), func(f *Facts) { f.PausePooler = true })
	res = m.Handle(Input{Kind: Signal, InFlight: p.ID}, done, t0.Add(time.Second))
	q := res.Plan
	if q == nil || len(q.Restart) != 0 || !q.ResumePoolers {
		t.Fatalf("restart published while its plan runs: plan %+v, want the resume and no restart", q)
	}
	if m.st.State == Running {
		t.Fatalf("Running with the pause %+v on record", m.st.PoolerPause)
	}
	if !strings.Contains(m.st.Message, "pooler to resume (paused for the restart of c-0)") {
		t.Errorf("message %q, want the pause named", m.st.Message)
	}
	m.Handle(Input{Kind: PlanDone, PlanID: p.ID}, done, t0.Add(2*time.Second))
	res = m.Handle(Input{Kind: PlanDone, PlanID: q.ID}, done, t0.Add(3*time.Second))
	if m.st.PoolerPause != nil || m.st.State != Running {
		t.Fatalf("resumed: state %s, pause %+v; want Running without a pause on record", m.st.State, m.st.PoolerPause)
	}
	if r := res.Plan; r != nil && (len(r.Restart) != 0 || r.ResumePoolers) {
		t.Errorf("resumed: plan %+v, want neither a restart nor a resume", r)
	}
}
