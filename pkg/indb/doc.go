// Package indb is pgloop's one way into a cluster's database servers:
// everything pgloop does inside PostgreSQL, Patroni and PgBouncer, and
// every read there, goes through an Actor.
//
// The plans' steps (pkg/controller calls them, one method per step, each
// under the step's deadline):
//   - SyncRoles: the roles and databases of the spec, the prepared
//     databases, the pooler's role, over SQL on the primary as the
//     superuser (pkg/pgsql); with the password rotations, which write the
//     users' Secrets around the SQL (next-password first, then PostgreSQL,
//     then password): the only writes to the Kubernetes API this package
//     makes;
//   - Configure: Patroni's dynamic configuration (pkg/patroni), checked on
//     every member over SQL;
//   - RestartMembers and Switchover: through Patroni, the primary's
//     connection pooler paused around them on PgBouncer's admin console
//     (poolerpause.go), and ResumePoolers;
//   - StartBackup: a base backup run, started detached on the primary
//     (COPY ... TO PROGRAM of cluster.BackupProgram), which returns at
//     once.
//
// The archive checks' reads (pkg/archiving calls them, off the loop):
// Archiver (the archiver's statistics and pgBackRest's error files) and
// ReadBackup (what a base backup run left on the primary, turned into a
// report: backup.go's pgBackRest info, verify.go's verify and restore
// drill). They start nothing.
//
// Both reach the primary the same way (indb.go): the pod whose Patroni
// member data say it leads (members), as the superuser, whose passwords
// (the current one, then the one a rotation is setting) come from its
// Secret: read every time by a step, since a rotation may have changed it
// a moment ago; read again by a reader only when the caches show a new
// version of it.
//
// Errors that mean "not yet" wrap act.ErrWaiting; failures of one part of
// the work are act.PartError (roles, config, backup), so the machine
// reports each where it belongs.
package indb
