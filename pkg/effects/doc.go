// Package effects carries out what the state machine decides: it is the
// only package that writes to the Kubernetes API. It creates and updates
// the objects pkg/cluster builds, deletes them when a cluster goes, writes
// the status of the Postgresql resources, replaces pods, and records
// Kubernetes Events.
//
// Every effect is idempotent and writes only what differs, so running it
// again (a retry, a resync) is safe and, when nothing changed, free: with a
// Cache (the informers' caches) it reads nothing from the API either.
//
// This package knows neither the state machine nor the event loop: it has
// its own small types (Pod, Record) and its own ErrWaiting, and
// pkg/controller turns a plan of the machine into the loop's steps, each a
// call of one method of Effects.
package effects
