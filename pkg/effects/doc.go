// Package effects carries out what the state machine decides: it is the
// only package that writes to the Kubernetes API. It creates and updates
// the objects pkg/cluster builds, deletes them when a cluster goes, writes
// the status of the Postgresql resources, replaces pods, and records
// Kubernetes Events.
//
// Every effect is idempotent and writes only what differs, so running it
// again (a retry, a resync) is safe and, when nothing changed, free: with a
// Cache (the informers' caches) it reads nothing from the API either.
// Effects.Steps turns a plan of the state machine into the event loop's
// steps.
package effects
