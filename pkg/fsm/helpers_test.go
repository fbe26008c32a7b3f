package fsm

import (
	"testing"
	"time"

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
		m.soft = softTimers{{Name: TimerResync, Deadline: metav1.NewTime(t0.Add(time.Minute)), Epoch: st.Epoch}}
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

// settle hands m a Signal with f at now and reports the plans that follow
// as succeeded, as an executor that finishes everything would: the
// machine ends where f leads it once its effects are done.
func settle(m *Machine, f Facts, now time.Time) Result {
	res := m.Handle(Input{Kind: Signal}, f, now)
	for i := 0; res.Plan != nil && i < 10; i++ {
		res = m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID}, f, now)
	}
	return res
}
