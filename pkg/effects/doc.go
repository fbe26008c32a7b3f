// Package effects carries out what the state machine decides, one method
// of Effects per kind of step. In the Kubernetes API it creates and updates
// the objects pkg/cluster builds (growing the data volumes' claims with
// the spec), deletes them when a cluster goes, writes the status of the
// Postgresql resources, replaces pods, nudges a StatefulSet a quota held
// back, and records Kubernetes Events. In the clusters it syncs roles and
// databases over SQL (SyncRoles, through pkg/pgsql), and brings Patroni's
// dynamic configuration to the spec, restarts members and switches over
// through Patroni's REST API (Configure, RestartMembers, Switchover,
// through pkg/patroni); around a switchover it pauses and resumes the
// primary's connection pooler on PgBouncer's admin console (Switchover,
// ResumePoolers, switchpause.go).
//
// It is not the only writer to the API: pkg/operator writes its leader
// Lease, pkg/events (the Event recorder) writes the Kubernetes Events
// recorded here and by the leader election, and `pgloop sync` and
// `pgloop backup` (cmd/pgloop/sync.go and backup.go, through
// annotateCluster) patch a Postgresql resource's annotations to ask for a
// sync or a backup. But it is the only one that writes the clusters'
// objects and statuses.
//
// The effects that bring something to the spec (Ensure, WriteStatus,
// Cleanup, ReplacePods, Nudge, SyncRoles, Configure) write only what
// differs, so running one again (a retry, a resync) is safe and, when
// nothing changed, cheap: with a Cache (the informers' caches) those on
// Kubernetes objects read nothing from the API either. The others act
// rather than converge: RecordEvents records its Events again each time,
// so it is not idempotent; RestartMembers and Switchover interrupt
// PostgreSQL, and a repeat is harmless only as far as their checks go (a
// restart asks Patroni to restart what is pending only; a switchover does
// nothing once the pods' member data show another primary). ResumePoolers
// is idempotent (RESUME of a pooler that is not paused succeeds).
//
// This package knows neither the state machine nor the event loop (it
// imports neither): it has its own small types (Pod, Record) and its own
// ErrWaiting, marks a write's class with pkg/reqclass, a leaf, and
// pkg/controller turns a plan of the machine into the loop's steps, each a
// call of one method of Effects.
package effects
