// Package model is a discrete-event model of three operator worker designs
// on the same workload, so that the question of issue 6 ("is raising the
// legacy operator's workers above the number of clusters a reasonable
// workaround?") gets an answer that does not depend on a real cluster:
//
//   - Legacy: the pattern of the zalando operator (zalando/postgres-operator
//     at a7aaad0a, pkg/controller, and client-go's cache.FIFO). W workers; a
//     cluster is pinned to a worker the first time it is seen (sticky
//     round-robin); one FIFO per worker, keyed by event type and cluster,
//     where a new event merges into a queued one of the same key; the FIFO's
//     lock is held while an event is processed, so the single shared intake
//     (the informer handler goroutine) blocks when it must Add to a busy
//     worker, and while it is blocked no event for any cluster is queued.
//     An event of a stuck cluster blocks its worker for the timeout (it
//     polls the API every PollInterval meanwhile); a healthy cluster's
//     event takes Service plus its API calls. The informer resync queues a
//     SYNC for every cluster; startup queues the initial list the same way.
//   - GoroutinePerCluster: the request's first proposal, at its best: one
//     queue and one goroutine per cluster, an intake that never blocks, the
//     same blocking waits and the same shared rate limit.
//   - Pgloop: one loop with a fixed cost per event, an inbox that never
//     blocks (signals of one cluster merge, timers and plan results are
//     never dropped, clusters take turns), plans of effects on an executor
//     of E slots with at most one plan in flight per cluster and a newer
//     plan superseding a waiting one; a stuck cluster's effects return
//     quickly (or hang at most to the step deadline) and its waiting is a
//     timer.
//
// Time is virtual: a priority queue of events and a clock that jumps from
// one to the next; no goroutines, no sleeps, no wall time. The workload is
// drawn once from a seeded math/rand/v2 generator, and the same workload is
// fed to every design, so a seed always gives the same figures.
//
// The API rate limit is one token bucket (QPS, burst) shared by everything a
// design does, as client-go's limiter is shared by all of an operator's
// workers; it hands out tokens first come, first served, like
// golang.org/x/time/rate's reservations.
//
// What the model leaves out, on purpose: pod events (a legacy worker's
// waits are modelled by their bound, not by the pods), deletes (for the
// intake a delete of a stuck cluster is an Add to the same busy worker, like
// an edit), the CPU the operators use, and the API server's own latency
// under load (every call takes CallLatency once it has its token).
package model
