package controller

import (
	"github.com/sirupsen/logrus"
	"k8s.io/utils/clock"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// Observer reads what is known about a cluster from local caches. It must
// not do network I/O: it runs on the loop goroutine.
type Observer interface {
	// Observe returns the cluster's facts and, for a cluster the controller
	// has not seen yet, its stored status (nil when it has none).
	Observe(key string) (fsm.Facts, *v1.PostgresqlStatus)
}

// StepBuilder turns a cluster's plan into the steps the executor runs.
type StepBuilder interface {
	Steps(key string, plan *fsm.Plan) []eventloop.Step
}

// Controller is the eventloop.Handler of pgloop.
type Controller struct {
	engine   *fsm.Engine
	obs      Observer
	eff      StepBuilder
	clock    clock.PassiveClock
	log      *logrus.Entry
	machines map[string]*fsm.Machine
	// budget is the fleet's rollout budget (budget.go); rolling and
	// waiting are its counts as OnRollouts was last told them.
	budget           budget
	rolling, waiting int
	// Hooks for metrics; each runs on the loop goroutine and must be cheap.
	// OnNew is called when a machine is created (resumed in state);
	// OnTransition for every handled event that fired at least one FSM
	// event; OnForget when a machine is dropped, with its last state;
	// OnRollouts when the number of clusters rolling pods that run
	// PostgreSQL, or waiting for a slot of the rollout budget to, changed.
	OnNew        func(key, state string)
	OnTransition func(key string, res *fsm.Result)
	OnForget     func(key, state string)
	OnRollouts   func(rolling, waiting int)
}

// New returns a Controller. log may be nil (the standard logger).
func New(cfg fsm.Config, obs Observer, eff StepBuilder, clk clock.PassiveClock, log *logrus.Entry) *Controller {
	if log == nil {
		log = logrus.NewEntry(logrus.StandardLogger())
	}
	return &Controller{engine: fsm.NewEngine(cfg), obs: obs, eff: eff, clock: clk, log: log, machines: map[string]*fsm.Machine{},
		budget: newBudget(0, nil)}
}

// SetRolloutBudget bounds the clusters that may roll pods that run
// PostgreSQL at once to max (0: no bound; the default). notify signals a
// cluster without blocking, from the loop goroutine (eventloop.Loop's
// Notify): when a slot frees, the controller wakes the next waiting
// cluster with it (SignalRollout). Call it before the loop runs.
func (c *Controller) SetRolloutBudget(max int, notify func(key, signal string)) {
	var wake func(string)
	if notify != nil {
		wake = func(key string) { notify(key, SignalRollout) }
	}
	c.budget = newBudget(max, wake)
}

// Resuming tells the controller which clusters the operator resumes at its
// start. Until the loop has handled each of them once, no cluster starts a
// rollout that was not under way: those under way before the restart take
// their slots back first, so a restart never lets more clusters roll than
// the budget. Call it before the loop runs.
func (c *Controller) Resuming(keys []string) { c.budget.expect(keys) }

// Machine returns the state machine of a cluster, nil when it has none. For
// inspection from the loop goroutine (and tests) only.
func (c *Controller) Machine(key string) *fsm.Machine { return c.machines[key] }

// Len is the number of clusters the controller holds a machine for.
func (c *Controller) Len() int { return len(c.machines) }

// Handle implements eventloop.Handler.
func (c *Controller) Handle(ev eventloop.Event) eventloop.Outcome {
	facts, stored := c.obs.Observe(ev.Key)
	c.budget.seen(ev.Key)
	defer c.countRollouts()
	m := c.machines[ev.Key]
	var resumed *fsm.Result
	if m == nil {
		if facts.Gone {
			// Never seen alive (or already forgotten): nothing to do.
			c.budget.forget(ev.Key)
			return eventloop.Outcome{Forget: true}
		}
		m = c.engine.New(stored)
		c.machines[ev.Key] = m
		if c.OnNew != nil {
			c.OnNew(ev.Key, m.State())
		}
		r := m.Resume(c.clock.Now())
		resumed = &r
	}
	facts.RolloutWait = c.budget.offer(ev.Key, facts.RolloutStarted)
	res := m.Handle(input(ev), facts, c.clock.Now())
	c.logResult(ev, &res)
	switch {
	case res.Forget:
		c.logBudget(ev.Key, c.budget.forget(ev.Key))
	case res.Ignored == "":
		c.logBudget(ev.Key, c.budget.report(ev.Key, res.Rollout, facts.RolloutStarted))
	}

	out := eventloop.Outcome{Epoch: res.Epoch, CancelInFlight: res.CancelInFlight, Forget: res.Forget}
	if resumed != nil && resumed.Epoch == res.Epoch {
		// A resumed cluster re-arms the timers its status kept, with the
		// deadlines the previous process set.
		out.Timers = timerOps(out.Timers, resumed.Timers)
	}
	out.Timers = timerOps(out.Timers, res.Timers)
	if res.Plan != nil {
		out.Plan = &eventloop.Plan{ID: res.Plan.ID, Urgent: res.Plan.Urgent, Continues: res.Plan.Continues, Steps: c.eff.Steps(ev.Key, res.Plan)}
	}
	if len(res.Fired) > 0 && c.OnTransition != nil {
		c.OnTransition(ev.Key, &res)
	}
	if res.Forget {
		delete(c.machines, ev.Key)
		if c.OnForget != nil {
			c.OnForget(ev.Key, m.State())
		}
	}
	return out
}

// countRollouts tells OnRollouts the budget's counts when they changed.
func (c *Controller) countRollouts() {
	rolling, waiting := c.budget.rolling(), c.budget.waiting()
	if rolling == c.rolling && waiting == c.waiting {
		return
	}
	c.rolling, c.waiting = rolling, waiting
	if c.OnRollouts != nil {
		c.OnRollouts(rolling, waiting)
	}
}

// logBudget logs a cluster's slot taken, freed or waited for.
func (c *Controller) logBudget(key string, change budgetChange) {
	var msg string
	switch change {
	case budgetTook:
		msg = "rollout slot taken"
	case budgetQueued:
		msg = "waiting for a rollout slot"
	case budgetFreed:
		msg = "rollout slot freed"
	case budgetLeft:
		msg = "no longer waiting for a rollout slot"
	default:
		return
	}
	if !c.log.Logger.IsLevelEnabled(logrus.InfoLevel) {
		return
	}
	c.log.WithFields(logrus.Fields{"cluster": key, "rolling": c.budget.rolling(), "waiting": c.budget.waiting()}).Info(msg)
}

func input(ev eventloop.Event) fsm.Input {
	switch ev.Kind {
	case eventloop.TimerFired:
		return fsm.Input{Kind: fsm.TimerFired, Timer: ev.Name, Epoch: ev.Epoch, InFlight: ev.InFlight}
	case eventloop.PlanDone:
		return fsm.Input{Kind: fsm.PlanDone, PlanID: ev.PlanID, Err: ev.Err}
	case eventloop.Panicked:
		return fsm.Input{Kind: fsm.Panicked, Err: ev.Err, InFlight: ev.InFlight}
	}
	return fsm.Input{Kind: fsm.Signal, InFlight: ev.InFlight}
}

// timerOps appends the machine's timer operations to dst. fsm.TimerOp and
// eventloop.TimerOp are one shape on either side of the controller: the
// state machine and the loop do not know each other (docs/design.md,
// Glossary), and a conversion, not a copy by field, keeps them in step (it
// stops compiling the day they differ).
func timerOps(dst []eventloop.TimerOp, ops []fsm.TimerOp) []eventloop.TimerOp {
	for _, op := range ops {
		dst = append(dst, eventloop.TimerOp(op))
	}
	return dst
}

func (c *Controller) logResult(ev eventloop.Event, res *fsm.Result) {
	// Building fields costs more than a transition: only when they print.
	if res.Ignored != "" {
		if c.log.Logger.IsLevelEnabled(logrus.DebugLevel) {
			c.log.WithField("cluster", ev.Key).Debugf("ignored: %s", res.Ignored)
		}
		return
	}
	if len(res.Fired) == 0 || !c.log.Logger.IsLevelEnabled(logrus.InfoLevel) {
		return
	}
	m := c.machines[ev.Key]
	for _, f := range res.Fired {
		entry := c.log.WithFields(logrus.Fields{"cluster": ev.Key, "event": f.Event, "from": f.From, "to": f.To})
		if f.Event == fsm.EventPrimaryChanged {
			// A switchover or failover: worth an Info line although the
			// state stays.
			if m != nil {
				entry = entry.WithField("primary", m.Status().Primary)
			}
			entry.Info("primary changed")
			continue
		}
		if m != nil && m.Status().Message != "" {
			entry = entry.WithField("reason", m.Status().Reason)
		}
		if f.From == f.To {
			entry.Debug("event")
			continue
		}
		entry.Info("transition")
	}
}
