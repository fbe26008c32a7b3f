// Package backup tests what pgloop's backups stand on (issue 31), for real
// on this machine: Debian's pgBackRest 2.45 archiving the WAL of a real
// PostgreSQL 15 and backing it up to the test bed's S3 object store
// (SeaweedFS over HTTPS), configured only by PGBACKREST_* environment
// variables as the operator will configure pods, then restoring it.
// docs/backups.md, "Test plane", has what its tests measured;
// BenchmarkBackup1GiB (make bench-backup) measures backup and restore times
// of 1 GiB and the data lost with a primary's volume, in
// docs/backups-bench.md.
package backup
