// Package fsm is the per-cluster state machine of pgloop. It decides; it
// never acts: a transition does no I/O and never blocks, and it returns a
// Result (effects to run, timers to set or cancel, the new status). The
// event loop runs the effects off its goroutine and feeds their outcome
// back as another input.
//
// A transition depends on one input, the observed facts (Facts) and the
// machine's memory. That memory is more than the stored status: the outbox
// (what the machine remembers of its plans, outbox.go), the rollout memory
// (its part in the fleet's rollout budget and its wait for a maintenance
// window, rollout.go) and the soft timers (the resync and the status flush,
// timers.go) live only in the Machine. A restarted operator has the status
// alone: Engine.New and Machine.Resume rebuild the rest from it, and ask
// for the state's effects again.
//
// The machine is built on github.com/looplab/fsm; the machines of one event
// loop share an Engine, one looplab/fsm instance pointed at each machine in
// turn (engine.go). A guard runs once per event the machine tries, before
// the event is handed to looplab/fsm, on the status, the facts and the
// guards' read-only view of the memory (Memory). enter_ and after_
// callbacks (callbacks.go) only record into the machine's memory (status,
// outbox, rollout, soft timers) and the current call (the Engine's scratch
// of the Handle in progress: the Result being made). No callback calls the
// FSM's own methods, no transition is async, and the context handed to
// looplab/fsm is never cancellable.
package fsm
