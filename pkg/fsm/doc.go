// Package fsm is the per-cluster state machine of pgloop. It decides; it
// never acts: a transition does no I/O and never blocks, and it returns a
// Result (effects to run, timers to set or cancel, the new status). The
// event loop runs the effects off its goroutine and feeds their outcome
// back as another input.
//
// A transition depends on one input, the observed facts (Facts), the
// stored status, and what the Machine keeps that status does not: the
// outbox (what it remembers of its plans, outbox.go), its rollout (its part
// in the fleet's rollout budget and its wait for a maintenance window,
// rollout.go) and the soft timers (the resync, the status flush and the
// configuration's check, timers.go and configwait.go). A restarted operator has the status alone: Engine.New and
// Machine.Resume take from it what they can (a wait for a rollout slot or a
// window, the resync) and ask for the state's effects again, since the
// outcome of the last plan is unknown.
//
// The machine is built on github.com/looplab/fsm; the machines of one event
// loop share an Engine, one looplab/fsm instance pointed at each machine in
// turn (engine.go). Handle takes the input itself (a timer's event, a
// plan's result), then the same named steps for every input (pipeline.go,
// listed in docs/fsm.md): the fact-driven events of the transition table,
// and beside the state the activities that keep their own part of status,
// the base backups (backups.go) and the password rotation (rotation.go),
// each asking the plan for its work. project shows; it starts nothing. A
// guard runs once per event the machine tries, before
// the event is handed to looplab/fsm, on the status, the facts and what the
// machine remembers of its plans (Memory). enter_ and after_ callbacks
// (callbacks.go) only record into the status, the outbox, the rollout, the
// soft timers and the current call (the Engine's scratch of the Handle in
// progress: the Result being made). No callback calls the FSM's own
// methods, no transition is async, and the context handed to looplab/fsm
// is never cancellable.
package fsm
