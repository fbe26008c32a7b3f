// Package traffic shapes the operator's own traffic to the Kubernetes API:
// the transports its clients' requests go through (each a rest.Config
// WrapTransport) on their way to the API server.
//
//   - Gate puts the requests of urgent plans (a user's action) ahead of
//     background work's, and with Pacing bounds background requests in
//     flight by the API server's latency (gate.go, pace.go).
//   - WriteWindows bounds the writes of each kind in flight by their
//     latency, or by the writes a second the server answers while writes
//     wait, and lets the waiting ones go by namespace in turns (fair.go,
//     ratewindow.go).
//   - Fence refuses writes once the leader election says this replica may
//     no longer hold its Lease (fence.go).
//
// A request's priority and a write's class are the marks of its context
// (pkg/reqclass), set by the event loop's executor and by pkg/effects; a
// step's deadline stands still while its request waits here
// (eventloop.PauseDeadline), so that pgloop's own queue never fails a
// step. What the shapers decide they tell to hooks, which pkg/operator
// points at pkg/metrics; pkg/metrics also names the kind of a write
// (metrics.RequestVerb), so the windows' kinds are the metrics'.
//
// pkg/operator builds one of each from its flags, in order (the fence
// innermost, the gate outermost), and arms the fence with its Lease lock.
package traffic
