// Package archiving observes the continuous WAL archiving and the base
// backup runs of each cluster with a backup repository, and tells the
// state machine. It starts nothing: a base backup's start is a step of the
// machine's plan (pkg/fsm's backups.go, pkg/indb's StartBackup).
//
// Every --archive-check-period, off the loop and at most Workers at once,
// a Checker asks each such cluster's primary, through pkg/indb (the one way
// pgloop reaches a primary, as the superuser): pg_stat_archiver, the
// segments waiting in pg_wal, pg_wal's size, and the error files
// pgBackRest's asynchronous archive-push leaves in its spool (the
// archiver's own words: "unable to find a valid repository", an S3 error);
// and, while status.backup.running names a base backup run, what that run
// left on the primary: under way, ended (pgBackRest's words, the
// repository's listing, verify's and the restore drill's results), or no
// trace of it (NotStarted: the machine then asks for its start again).
// Each check has a deadline.
//
// A report is published, and the loop notified (SignalArchiving), when it
// says something new: the first one, a change between failing and
// archiving, other words, a run that has not started; a report that only
// moved on (a later segment) waits until the last one published is
// --archive-status-period old. So a healthy cluster's status is written at
// most that often for archiving, and a failure shows within one check
// period.
//
// The Checker is a facts.Reader: pkg/facts reads the informers' objects
// through it, with the cluster's last published reports added
// (observed.Cluster.Archiving and Backup), and the state machine shows
// them in status.backup and the ContinuousArchiving and
// LastBackupSucceeded conditions (pkg/fsm's archiving.go and backups.go).
// It writes nothing to the API itself.
package archiving
