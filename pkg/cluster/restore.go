package cluster

import (
	"path"
	"strconv"
	"strings"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Restores into a new cluster (docs/backups.md, "Restores"). A cluster
// with spec.clone.timestamp bootstraps its first member with Patroni's
// custom bootstrap method instead of initdb: Patroni runs RestoreCommand
// (pgbackrest restore from the source's repository path and stanza, to
// the time), keeps the recovery settings pgBackRest writes, starts
// PostgreSQL, which replays the source's archive up to the time and
// promotes onto a new timeline, and then finishes as after initdb
// (passwords, post_init). Replicas copy the new primary with
// pg_basebackup, as in every cluster: the method is the bootstrap's only.
const (
	// RestoreMethod is the name of the custom bootstrap method in
	// Patroni's bootstrap section.
	RestoreMethod = "pgloop_restore"
)

// restoreMethod is Patroni's custom bootstrap method (bootstrap.<name>).
type restoreMethod struct {
	// Command is run by Patroni without a shell (shlex.split).
	Command string `json:"command"`
	// KeepExistingRecoveryConf keeps what pgbackrest restore wrote:
	// recovery.signal, and restore_command and the recovery target in
	// postgresql.auto.conf, which Patroni otherwise removes (it also turns
	// hot_standby off until the end of recovery, "trusting pgBackRest").
	KeepExistingRecoveryConf bool `json:"keep_existing_recovery_conf"`
	// NoParams: Patroni adds --scope and --datadir otherwise, which
	// pgbackrest does not take; it reads pg1-path from the environment.
	NoParams bool `json:"no_params"`
}

// SourceRepositoryPath is the path in the bucket of the repository a clone
// restores from: the source's, RepositoryPath of the cluster named by
// spec.clone (its namespace, name and UID). "" without spec.clone.
func SourceRepositoryPath(pg *v1.Postgresql) string {
	c := pg.Spec.Clone
	if c == nil {
		return ""
	}
	return path.Join("/pgloop", c.SourceNamespace(pg.Namespace), c.Cluster, c.UID)
}

// SourceStanza is the source's stanza in its repository: its name (see
// Stanza).
func SourceStanza(pg *v1.Postgresql) string {
	if pg.Spec.Clone == nil {
		return ""
	}
	return pg.Spec.Clone.Cluster
}

// RestoreTarget is clone.timestamp as pgBackRest's --target for
// --type=time, in UTC: "2017-12-19 11:40:33+00". PostgreSQL reads it as
// recovery_target_time; pgBackRest parses it itself to choose the newest
// backup that ended before it, and its parser wants a space, not T, and
// an hour offset. "" when there is no valid timestamp.
func RestoreTarget(pg *v1.Postgresql) string {
	t, ok := pg.Spec.Clone.Time()
	if !ok {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.999999") + "+00"
}

// RestoreCommand returns the command Patroni runs to bootstrap the clone's
// first member, "" when the cluster is no clone to a time. Everything but
// the source is in the container's environment (pgbackrestEnv: the
// repository, credentials, pg1-path, spool): the repository's path and the
// stanza are given on the command line, where they win over the
// clone's own and where pgBackRest finds them again to write the
// restore_command of the recovery (options of the command line go into
// it, the environment's do not), so the replay reads the source's
// archive too. The clone's own PostgreSQL archives with the environment's
// path and stanza, its own: nothing of the clone lands in the source's
// repository.
//
//   - --type=time with --target: pgBackRest restores the newest backup that
//     ended before the target and writes recovery_target_time; the
//     timeline followed is PostgreSQL's default, latest (a source that
//     failed over is followed onto its newest timeline), and
//     recovery_target_inclusive its default, on: a transaction committed
//     at the time is in the copy.
//   - --target-action=promote: at the target the server ends recovery and
//     starts a new timeline, which Patroni waits for before it finishes
//     the bootstrap.
//
// No --delta: after a failed bootstrap Patroni moves the data directory
// aside (to pgdata.failed, replacing the one of the attempt before) and
// exits, and the next attempt restores into an empty directory, where
// --delta only adds a warning.
//
// Without a timestamp the restore is of the newest backup, and the
// replay goes to the end of the source's archive, where PostgreSQL
// promotes by itself (pgBackRest's --type=default).
func RestoreCommand(pg *v1.Postgresql) string {
	if pg.Spec.Clone == nil || pg.Spec.Clone.UID == "" {
		return ""
	}
	cmd := "pgbackrest --stanza=" + SourceStanza(pg) + " --repo1-path=" + SourceRepositoryPath(pg) + " restore"
	if pg.Spec.Clone.Timestamp == "" {
		return cmd
	}
	target := RestoreTarget(pg)
	if target == "" {
		return ""
	}
	return cmd + " --type=time " + strconv.Quote("--target="+target) + " --target-action=promote"
}

// RestoreBlocked says why a clone cannot restore: it has no repository to
// read (backup.enabled false, which Validate refuses, or no spec.backup.s3
// and no operator default), or its image is not known to carry pgBackRest
// (ArchiveBlocked). "" when it can, or when the cluster is no clone.
func RestoreBlocked(pg *v1.Postgresql, opts Options) string {
	if RestoreCommand(pg) == "" {
		return ""
	}
	if why := ArchiveBlocked(pg, opts); why != "" {
		return "cannot restore the clone: " + why
	}
	if Repository(pg, opts) == nil {
		return "cannot restore the clone: it has no pgBackRest repository to read the source's backups from (set spec.backup.s3, or the operator's --backup-s3-*)"
	}
	return ""
}

// restoreBootstrap returns the bootstrap method of a clone, nil for a
// cluster that runs initdb. A clone that cannot restore (RestoreBlocked)
// gets a method that fails with the reason in Patroni's log, rather than
// none: initdb would make an empty database where the user asked for a
// copy, and pgloop must not hand out an empty copy as if it were one.
func restoreBootstrap(pg *v1.Postgresql, opts Options) *restoreMethod {
	cmd := RestoreCommand(pg)
	if cmd == "" {
		return nil
	}
	if why := RestoreBlocked(pg, opts); why != "" {
		cmd = "sh -c " + strconv.Quote("echo "+shellQuote("pgloop: "+why)+" >&2; exit 1")
	}
	return &restoreMethod{Command: cmd, KeepExistingRecoveryConf: true, NoParams: true}
}

// shellQuote quotes s for sh, in single quotes.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
