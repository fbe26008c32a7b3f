// Package eventloop is the operator's shell: one goroutine that owns every
// cluster's state machine, fed by an inbox that never blocks its producers,
// with timers on a heap it owns and a bounded executor that runs effects off
// the loop. It knows nothing about Postgres: a Handler (the state machines)
// decides, the loop carries out what the Handler's Outcome says.
//
// Why: in the legacy operator a worker blocks for minutes on one cluster's
// effects and every cluster mapped to it waits. Here a transition never
// waits; waiting is a timer or a plan whose result comes back as an event,
// so a cluster whose effects hang until their deadline delays no other
// cluster's transition.
//
// Guarantees and choices a Handler relies on:
//
//  1. Handle is called on the loop goroutine only, one event at a time.
//  2. Events of one cluster are dispatched in the order they entered the
//     inbox; clusters take turns, one event each, so a flooding cluster
//     cannot starve the others. A Signal is merged into a waiting Signal of
//     the same cluster and name (which keeps its place); TimerFired,
//     PlanDone and Panicked are never merged or dropped by the inbox.
//     An urgent event (NotifyUrgent: a user's action; the PlanDone of an
//     urgent plan) puts its cluster ahead of the others: its events up to
//     the urgent one are taken before other clusters', except that after
//     16 urgent takes in a row another cluster gets one turn.
//  3. Every Outcome must carry the cluster's current epoch, even when
//     nothing changed: the zero Outcome means "epoch 0" and drops the
//     cluster's timers if its epoch was not 0.
//  4. A TimerFired is dispatched only if its epoch is the cluster's epoch
//     and the timer was neither set again nor cancelled after it fired.
//  5. Every plan that starts reports exactly one PlanDone, also when it
//     was cancelled (Err wraps context.Canceled) or its step deadline passed
//     (Err wraps context.DeadlineExceeded). A plan that never starts
//     (superseded by a newer one, dropped by CancelInFlight or Forget, or
//     waiting at shutdown) reports nothing.
//  6. A step that panics fails its plan with a *PanicError: the PlanDone
//     carries it, and a Panicked event with the same PlanID and Err
//     follows. A panic in Handle loses that event's Outcome (epoch, timers
//     and plans stay as they were) and is reported as a Panicked event
//     (PlanID 0); a panic while handling Panicked is only logged.
//  7. Forget drops the cluster's timers and waiting plan at once, and the
//     rest of its state when its plan in flight (or the Plan given with
//     Forget) is done. That plan's PlanDone is still delivered: the Handler
//     sees the result of its last effect and can ignore it. A later Outcome
//     that sets a timer or a plan without Forget cancels a pending Forget.
//  8. Plans waiting for a worker start in turns: the namespaces (the part
//     of the key before '/') take turns, one plan each, and within one its
//     clusters take turns, so a burst of clusters in one namespace delays
//     a cluster of another by one plan. Urgent plans (Plan.Urgent) start
//     before background ones, except that after four urgent starts in a
//     row a waiting background plan goes first: a background plan at the
//     head of its lane starts within five starts, however many urgent
//     plans arrive. A plan that supersedes an urgent one is urgent.
//     Turns order the starts, not the workers: the plans of one
//     namespace hold at most all the workers but those kept for urgent
//     plans (all but one when none is; at least one), so a step of
//     another namespace finds a worker free at once even while a burst
//     of one namespace's slow plans runs (200 creates in one namespace
//     held all 16 workers for 2 to 10 s each). A worker may then stay
//     free while plans of a namespace at its bound wait.
//  9. A plan's steps run under a context marked with its priority
//     (reqclass.PriorityOf), so that the requests they send can be
//     ordered by it where the loop no longer decides.
//  10. A plan holds a worker (or a place of the hung lane) for at most
//     Options.SlowAfter, unless 4 times the workers (the places) are
//     detached from them already; then it goes on, detached, holding
//     neither, and still reports one PlanDone. A cluster whose step of a name failed
//     after SlowAfter or longer runs its plans with a step of that name
//     in the hung lane (Options.HungWorkers places, the same turns as
//     the workers'), never on a worker, until a step of that name
//     succeeds or fails sooner (hung.go). So hung clusters, however
//     many, cannot take the workers healthy clusters need.
package eventloop
