// Package controller connects the generic event loop (pkg/eventloop) to the
// clusters' state machines (pkg/fsm). Controller is the loop's Handler: for
// each event it reads the cluster's facts from an Observer (pkg/facts, over
// the informers' caches), hands them to the cluster's fsm.Machine and
// returns what the machine decided as an eventloop.Outcome: its timers, and
// its plan as steps for the executor (a StepBuilder). A machine is made the
// first time a cluster is handled, from the status stored on its resource
// (a restarted operator resumes there, with the timers that status kept),
// and dropped when the machine forgets the cluster. The controller logs
// the transitions, and tells pkg/metrics through hooks (OnNew,
// OnTransition, OnForget, OnRollouts) it does not import.
//
// NewStepBuilder is the one place where a plan meets its actors: it makes
// the plan's steps, in a fixed order and with their timeouts, out of the
// calls of an Actor (*effects.Effects, the Kubernetes API) and a
// DatabaseActor (*indb.Actor, inside PostgreSQL, Patroni and PgBouncer),
// and hands the machine their errors as they are: both speak pkg/act's
// words (act.ErrWaiting, act.PartError). The machine and the actors know
// nothing of each other.
//
// It also holds the one policy that spans clusters, the fleet's rollout
// budget (budget.go, SetRolloutBudget): at most --max-rolling-clusters
// clusters replace pods that run PostgreSQL at once. Before each input it
// tells a machine whether a slot is its own (fsm.Facts.RolloutWait), and
// after it accounts for what the machine reports (fsm.Result.Rollout),
// waking the next waiting cluster (SignalRollout) when a slot frees.
//
// It decides nothing about a cluster itself (the machine does) and calls
// no API: Handle runs on the loop goroutine only, so it needs no locks, the
// Observer reads caches only, and the steps run later, on the executor's
// workers.
package controller
