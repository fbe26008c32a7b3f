package operator

import (
	"context"
	"errors"
	"time"

	"github.com/pgloop/pgloop/pkg/controller"
	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/metrics"
)

// instrument points the controller's hooks at m, so that it maintains
// pgloop_clusters, pgloop_transitions_total and the rollout gauges. The
// wiring lives here, not in pkg/metrics, so that the metrics know nothing
// of the controller. It replaces hooks already set.
func instrument(c *controller.Controller, m *metrics.Metrics) {
	c.OnNew = m.ClusterState
	c.OnTransition = func(key string, res *fsm.Result) {
		for _, f := range res.Fired {
			m.Transition(f.From, f.To, f.Event)
		}
		// Several events in one input: the gauge follows the final state.
		m.ClusterState(key, res.To)
	}
	c.OnForget = func(key, _ string) { m.ForgetCluster(key) }
	c.OnRollouts = m.Rollouts
}

// timeSteps returns a StepBuilder whose steps report each run to observer(name)
// (the metrics' StepObserver), called once per step as the step is made:
// how long the run took, and whether it failed. A step cancelled because
// its cluster's plan was cancelled (the cluster was deleted, or the
// operator is stopping) is timed but not failed; a step that ran out of
// its own deadline, or panicked, failed. A step without Run stays so, and
// reports nothing.
func timeSteps(e controller.StepBuilder, observer func(name string) func(took time.Duration, failed bool)) controller.StepBuilder {
	return timedSteps{e: e, observer: observer}
}

type timedSteps struct {
	e        controller.StepBuilder
	observer func(name string) func(took time.Duration, failed bool)
}

func (t timedSteps) Steps(key string, plan *fsm.Plan) []eventloop.Step {
	steps := t.e.Steps(key, plan)
	for n := range steps {
		steps[n].Run = t.wrap(steps[n].Name, steps[n].Run)
	}
	return steps
}

func (t timedSteps) wrap(name string, run func(context.Context) error) func(context.Context) error {
	if run == nil {
		return nil
	}
	observe := t.observer(name)
	return func(ctx context.Context) (err error) {
		start := time.Now()
		returned := false
		defer func() {
			// 1. A panic: the executor recovers it; count it here.
			// 2. An error, except the cancellation of the plan.
			observe(time.Since(start), !returned || (err != nil && !cancelled(ctx, err)))
		}()
		err = run(ctx)
		returned = true
		return err
	}
}

// cancelled tells an error caused by the plan's cancellation from a
// failure. The executor gives each step a deadline of its own, so a
// DeadlineExceeded is a step that took too long: a failure.
func cancelled(ctx context.Context, err error) bool {
	return errors.Is(err, context.Canceled) && errors.Is(ctx.Err(), context.Canceled)
}
