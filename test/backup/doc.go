// Package backup tests what pgloop's backups stand on (issue 31), for real
// on this machine: Debian's pgBackRest 2.45 archiving the WAL of a real
// PostgreSQL 15 and backing it up to the test bed's S3 object store
// (SeaweedFS over HTTPS), configured only by PGBACKREST_* environment
// variables as the operator will configure pods, then restoring it. It
// has tests only; docs/backups.md, "Test plane", has what they measured.
package backup
