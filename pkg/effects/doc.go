// Package effects carries out the state machine's plans in the Kubernetes
// API, one method of Effects per kind of step: it creates and updates the
// objects pkg/cluster builds (growing the data volumes' claims with the
// spec), deletes them when a cluster goes, writes the status of the
// Postgresql resources, replaces pods, nudges a StatefulSet a quota held
// back, takes over a zalando cluster's objects (adopt.go), and records
// Kubernetes Events. What is done inside PostgreSQL, Patroni and PgBouncer
// is pkg/indb's.
//
// It is not the only writer to the API: pkg/operator writes its leader
// Lease, pkg/events the Events' aggregation, pkg/indb the users' Secrets
// during a password rotation, and `pgloop sync` and `pgloop backup`
// (cmd/pgloop) patch a Postgresql resource's annotations to ask for a
// sync or a backup. But it is the only one that writes the clusters'
// objects and statuses.
//
// The effects that bring something to the spec (Ensure, WriteStatus,
// Cleanup, ReplacePods, Nudge) write only what differs, so running one
// again (a retry, a resync) is safe and, when nothing changed, cheap: with
// a Cache (the informers' caches) they read nothing from the API either.
// RecordEvents acts rather than converges: it records its Events again
// each time, so it is not idempotent.
//
// This package knows neither the state machine nor the event loop (it
// imports neither): it shares pkg/act's words with the machine (act.Pod,
// act.Record, act.ErrWaiting), marks a write's class with pkg/reqclass (a
// leaf the operator's transports read), and pkg/controller turns a plan
// into the loop's steps, each a call of one method of Effects (or of
// pkg/indb's Actor).
package effects
