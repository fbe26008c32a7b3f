// Package reqclass holds the marks a request's context carries so that
// the operator's transports (pkg/traffic) can order and window it: the
// priority of the plan the request belongs to (WithPriority, set by the
// event loop's executor on each plan's context) and the class of a write
// (WithWriteClass, set by the effects for a kind of write the API server
// serves at a cost of its own).
//
// Why a package of its own: the marks are set by the event loop and by
// pkg/effects and read by the transports, and none of them needs another
// for them; pkg/effects, in particular, knows nothing of the loop. It
// imports only the standard library.
package reqclass
