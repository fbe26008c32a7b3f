// Package metrics exposes what pgloop does as Prometheus metrics: how long
// events wait for the loop, what the loop holds (inbox, timers, plans) and
// how its workers are used, how many clusters are in each state, which
// transitions fire, the clusters rolling or waiting for the rollout budget,
// how long each effect step takes and how often it fails, the SQL
// statements and Patroni calls sent to the clusters, which requests the
// Kubernetes client sends and how many of them the request gate held back,
// the Kubernetes Events written and dropped (pkg/events), and whether this
// replica leads. Each metric is described once (Desc):
// the collectors are built from the descriptions, and docs/user-guide.md's
// list is generated from Descs.
//
// Everything is registered on the Metrics' own Registry, never on the
// global one, so tests and several operators in one process do not collide;
// Handler serves it, and pkg/operator serves the handler at /metrics. The
// package knows neither the controller nor the effects: of pkg/eventloop
// and pkg/fsm it uses only the loop's Stats and event kinds and the list
// of states. pkg/operator points the others at it: the loop's Observe and
// Stats, the controller's hooks, a wrapper of the effect steps, the
// effects' and the Patroni client's observers, the request gate and the
// write windows (pkg/traffic), the Event recorder, and the transport of
// every client (InstrumentTransport).
//
// What it hands out to be called does no I/O and takes no lock of
// pgloop's: it runs on the loop goroutine, in the executor's workers or in
// client-go's, and updates Prometheus' atomic collectors, at most after
// looking a series up by its labels under the vector's own lock (done once
// in advance for the loop's lag, its hottest path). The loop's statistics
// are read at each scrape (WatchLoop), not pushed by the loop.
package metrics
