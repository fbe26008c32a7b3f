// Package status is what `pgloop status` shows: where each cluster's state
// machine is, why, and what happens next. It reads the Postgresql resources
// (and, for one cluster, its pods and its connection poolers' Deployments)
// through clients it is given and returns plain rows and views, so it is
// tested with fake clients and fixed clocks, without cobra or an API
// server. Printers turn rows and views into the list and detail text, JSON
// or YAML; Watch streams changes from a watch.
//
// What it shows of the state machine comes from the status the operator
// persists (state, stateSince, epoch, timers, conditions, history): the
// command reads it, it never recomputes the state machine.
package status
