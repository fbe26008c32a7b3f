package operator

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/pgloop/pgloop/pkg/controller"
	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/metrics"
)

// TestInstrumentController checks that the controller's hooks, as
// instrument sets them, keep pgloop_clusters, pgloop_transitions_total and
// the rollout gauges.
func TestInstrumentController(t *testing.T) {
	m := metrics.New()
	c := controller.New(fsm.DefaultConfig(), nil, nil, nil, nil)
	instrument(c, m)

	c.OnNew("ns/a", fsm.Pending)
	c.OnNew("ns/b", fsm.Running) // resumed from status
	c.OnTransition("ns/a", &fsm.Result{From: fsm.Pending, To: fsm.Creating, Fired: []fsm.Fired{
		{Event: fsm.EventCreate, From: fsm.Pending, To: fsm.Creating},
	}})
	c.OnTransition("ns/a", &fsm.Result{From: fsm.Creating, To: fsm.Creating, Fired: []fsm.Fired{
		{Event: fsm.EventEffectsSucceeded, From: fsm.Creating, To: fsm.Creating},
	}})
	c.OnTransition("ns/a", &fsm.Result{From: fsm.Creating, To: fsm.Running, Fired: []fsm.Fired{
		{Event: fsm.EventPodsReady, From: fsm.Creating, To: fsm.Running},
	}})
	// Two events in one input: the gauge follows the final state.
	c.OnTransition("ns/b", &fsm.Result{From: fsm.Running, To: fsm.Deleted, Fired: []fsm.Fired{
		{Event: fsm.EventDelete, From: fsm.Running, To: fsm.Deleting},
		{Event: fsm.EventCleanedUp, From: fsm.Deleting, To: fsm.Deleted},
	}})
	c.OnForget("ns/b", fsm.Deleted)
	c.OnForget("ns/never-seen", fsm.Pending) // harmless
	c.OnRollouts(2, 3)
	c.OnRollouts(1, 0)

	wantStates := map[string]float64{fsm.Running: 1}
	for _, s := range fsm.States {
		if got := series(t, m, "pgloop_clusters", "state", s).GetGauge().GetValue(); got != wantStates[s] {
			t.Errorf("pgloop_clusters{state=%q} = %v, want %v", s, got, wantStates[s])
		}
	}
	wantTransitions := map[[3]string]float64{
		{fsm.Pending, fsm.Creating, fsm.EventCreate}:            1,
		{fsm.Creating, fsm.Creating, fsm.EventEffectsSucceeded}: 1,
		{fsm.Creating, fsm.Running, fsm.EventPodsReady}:         1,
		{fsm.Running, fsm.Deleting, fsm.EventDelete}:            1,
		{fsm.Deleting, fsm.Deleted, fsm.EventCleanedUp}:         1,
	}
	if n := len(family(t, m, "pgloop_transitions_total").GetMetric()); n != len(wantTransitions) {
		t.Errorf("transition series = %d, want %d", n, len(wantTransitions))
	}
	for l, want := range wantTransitions {
		got := series(t, m, "pgloop_transitions_total", "from", l[0], "to", l[1], "event", l[2]).GetCounter().GetValue()
		if got != want {
			t.Errorf("pgloop_transitions_total%v = %v, want %v", l, got, want)
		}
	}
	if got := series(t, m, "pgloop_rollouts_active").GetGauge().GetValue(); got != 1 {
		t.Errorf("pgloop_rollouts_active = %v, want 1", got)
	}
	if got := series(t, m, "pgloop_rollouts_waiting").GetGauge().GetValue(); got != 0 {
		t.Errorf("pgloop_rollouts_waiting = %v, want 0", got)
	}
}

type fakeSteps struct{ steps []eventloop.Step }

func (f fakeSteps) Steps(string, *fsm.Plan) []eventloop.Step { return slices.Clone(f.steps) }

// TestTimeSteps checks the wrapper of the effect steps: it keeps the
// steps, passes their errors and panics on, and counts as failed an error
// or a panic but not the cancellation of the plan.
func TestTimeSteps(t *testing.T) {
	m := metrics.New()
	boom := errors.New("boom")
	eff := timeSteps(fakeSteps{steps: []eventloop.Step{
		{Name: "writeStatus", Always: true, Timeout: time.Second, Run: func(context.Context) error { return nil }},
		{Name: "ensureStatefulSet", Run: func(context.Context) error { return boom }},
		{Name: "ensureService", Run: func(ctx context.Context) error { return ctx.Err() }},
		{Name: "deletePod", Run: func(context.Context) error { panic("bad") }},
		{Name: "noop"},
	}}, m.StepObserver)

	steps := eff.Steps("ns/a", &fsm.Plan{ID: 1})
	if len(steps) != 5 || steps[0].Name != "writeStatus" || !steps[0].Always || steps[0].Timeout != time.Second {
		t.Fatalf("steps not preserved: %+v", steps)
	}
	if steps[4].Run != nil {
		t.Error("a nil Run must stay nil")
	}
	if err := steps[0].Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := steps[1].Run(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("error not passed through: %v", err)
	}
	// Cancelled with its plan (cluster deleted): not a failure.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := steps[2].Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// Out of its own deadline: a failure.
	dctx, dcancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer dcancel()
	if err := steps[2].Run(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic must go on to the executor")
			}
		}()
		_ = steps[3].Run(context.Background())
	}()

	for name, want := range map[string]float64{"writeStatus": 0, "ensureStatefulSet": 1, "ensureService": 1, "deletePod": 1} {
		if got := series(t, m, "pgloop_effect_step_failures_total", "step", name).GetCounter().GetValue(); got != want {
			t.Errorf("failures{step=%s} = %v, want %v", name, got, want)
		}
	}
	for name, want := range map[string]uint64{"writeStatus": 1, "ensureStatefulSet": 1, "ensureService": 2, "deletePod": 1} {
		if got := series(t, m, "pgloop_effect_step_duration_seconds", "step", name).GetHistogram().GetSampleCount(); got != want {
			t.Errorf("durations{step=%s} count = %d, want %d", name, got, want)
		}
	}
}

// family returns the metric family name as m's registry serves it.
func family(t *testing.T, m *metrics.Metrics, name string) *dto.MetricFamily {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f
		}
	}
	t.Fatalf("%s is not served", name)
	return nil
}

// series returns the series of family name with the label pairs given
// (name, value, name, value...).
func series(t *testing.T, m *metrics.Metrics, name string, labels ...string) *dto.Metric {
	t.Helper()
	for _, s := range family(t, m, name).GetMetric() {
		values := map[string]string{}
		for _, l := range s.GetLabel() {
			values[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if values[labels[i]] != labels[i+1] {
				match = false
			}
		}
		if match {
			return s
		}
	}
	t.Fatalf("%s%v is not served", name, labels)
	return nil
}
