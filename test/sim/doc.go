// Package sim is a deterministic simulation of the whole operator (issue
// 15): the real pkg/controller, pkg/fsm, pkg/eventloop, pkg/facts and
// pkg/effects run against a simulated Kubernetes API, simulated pods and
// Patroni, and operator crashes, all on one simulated clock, every choice
// made by one seed. Run(seed) plays one run and checks invariants during
// and after it; the same seed gives the same trace.
//
// What is simulated, and how the run stays deterministic:
//
//   - The API (api.go) is one store behind client-go's fake clientsets:
//     resourceVersions, generations, the status subresource, Conflicts,
//     AlreadyExists, finalizers, JSON and merge patches. Faults are drawn
//     per call by the seed: 409, 429, 500, and writes that land but whose
//     reply is lost; a window in which every write is refused.
//   - Slow and hung calls are drawn per step of a plan (the fake
//     clientsets hold a lock while they answer, so a call cannot wait
//     inside them): the step waits, on the simulated clock, before its
//     calls, or until its deadline and fails as a timed-out call does.
//   - The informers are replaced by a cache the simulator fills (view.go),
//     with the API's changes delivered late, or dropped until a relist;
//     it notifies the loop as pkg/informers' handlers do.
//   - The loop runs on its goroutine, but its plans are handed to the
//     simulator (eventloop.Options.Exec), which runs one at a time, each
//     on a goroutine of its own that it waits for: at any moment only one
//     of the loop, a plan and the simulator runs, in an order the seed
//     decides.
//   - The StatefulSet controller, the kubelet and Patroni (world.go) act
//     on the API directly: pods that become Ready after a seeded delay,
//     never schedule, or crash; role labels and the leader record as
//     Patroni writes them. Patroni and SQL calls are faked at the
//     controller.Actor boundary: they succeed (or meet the step faults).
//   - The operator crashes at seeded times and restarts from what the API
//     holds: a new cache from a list, a new controller and loop, timers
//     re-armed from status (Machine.Resume).
//   - The leader loses its Lease at seeded times (handover.go): a new
//     incarnation starts from the API while the old one goes on, unaware,
//     for up to a step deadline, its plans' calls reaching the API, as
//     client-go's leader election lets it; each incarnation has its own
//     clock, and the simulator settles one loop before it moves the
//     other's.
package sim
