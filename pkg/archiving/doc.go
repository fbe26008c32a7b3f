// Package archiving checks how the continuous WAL archiving of each cluster
// with a backup repository goes, and tells the state machine.
//
// Every --archive-check-period, off the loop and at most Workers at once,
// a Prober asks each such cluster's primary (the pod whose Patroni member
// data say it leads) as the superuser: pg_stat_archiver, the segments
// waiting in pg_wal, pg_wal's size, and the error files pgBackRest's
// asynchronous archive-push leaves in its spool (the archiver's own words:
// "unable to find a valid repository", an S3 error). Each check has a
// deadline; the superuser's password is read from its Secret only when the
// cache shows a new version of it.
//
// A report is published, and the loop notified (SignalArchiving), when it
// says something new: the first one, a change between failing and
// archiving, other words; a report that only moved on (a later segment)
// waits until the last one published is --archive-status-period old. So a
// healthy cluster's status is written at most that often for archiving,
// and a failure shows within one check period.
//
// The Prober is a facts.Reader: pkg/facts reads the informers' objects
// through it, with the cluster's last published report added
// (observed.Cluster.Archiving), and the state machine shows it in
// status.backup and the ContinuousArchiving condition (pkg/fsm's
// archiving.go). It writes nothing to the API itself.
package archiving
