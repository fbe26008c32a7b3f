// Package informers keeps pgloop's view of the cluster: informer caches of
// the Postgresql resources, of the objects pgloop owns, and of those it
// reads (Patroni's ConfigMaps and Endpoints, Warning Events, ResourceQuotas,
// StorageClasses), and handlers that turn their watch events into Notify
// calls of the event loop. It derives nothing: the loop reads a cluster's
// objects from the caches (Objects, an observed.Cluster) and pkg/facts
// derives its fsm.Facts from them; the effects read the same caches
// (effects.Cache). It imports neither of them, nor the state machine:
// pkg/operator wires them together, and its tests check that they fit.
//
// Handlers never call the API and never block: they map an object to the
// cluster it belongs to and notify. Everything else is read from the caches
// when the loop asks, so a burst of pod updates costs one read once the
// loop's inbox has coalesced it. The shared ServiceAccount, Role and
// RoleBinding of a namespace are cached for the effects only: a change of
// them notifies nothing.
//
// The caches keep only what pgloop reads (slim: no managed fields, a pod's
// spec and status cut to what the facts read, no Secret data, ...), and
// hold each distinct string once, whatever the objects holding it (share):
// thousands of clusters' objects are mostly the same strings.
package informers
