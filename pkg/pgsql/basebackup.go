package pgsql

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// BackupFiles is what a base backup run left in its directory
// (cluster.BackupDir).
type BackupFiles struct {
	// Started says the run's ID.started exists: its backup began on this
	// server; VerifyStarted and DrillStarted say the same of its verify
	// (ID.verify.started) and its restore drill (ID.drill.started).
	Started, VerifyStarted, DrillStarted bool
	// Exit is its exit code once it ended, -1 while it runs.
	Exit int
	// Log is the end of ID.log: pgBackRest's warnings and errors.
	Log string
	// Verify is what pgBackRest's verify after the backup said so far
	// (the end of ID.verify), empty when it did not run.
	Verify string
	// Drill is what the restore drill after the backup said so far
	// (ID.drill), empty when none ran.
	Drill string
	// Info is the repository's listing the run wrote after it ended
	// (pgBackRest's info --output=json); nil before.
	Info []byte
}

// backupFilesQuery reads a run's files: $1 the directory, $2 the ID. Missing
// files read as NULL.
const backupFilesQuery = `SELECT (pg_stat_file($1 || '/' || $2 || '.started', true)).isdir IS TRUE,
	(pg_stat_file($1 || '/' || $2 || '.verify.started', true)).isdir IS TRUE,
	(pg_stat_file($1 || '/' || $2 || '.drill.started', true)).isdir IS TRUE,
	pg_read_file($1 || '/' || $2 || '.exit', 0, 64, true),
	(SELECT pg_read_file($1 || '/' || $2 || '.log', greatest(s.size - 8192, 0), 8192, true)
		FROM pg_stat_file($1 || '/' || $2 || '.log', true) s WHERE s.size IS NOT NULL),
	pg_read_file($1 || '/info.json', 0, 1048576, true),
	(SELECT pg_read_file($1 || '/' || $2 || '.verify', greatest(s.size - 65536, 0), 65536, true)
		FROM pg_stat_file($1 || '/' || $2 || '.verify', true) s WHERE s.size IS NOT NULL),
	(SELECT pg_read_file($1 || '/' || $2 || '.drill', greatest(s.size - 8192, 0), 8192, true)
		FROM pg_stat_file($1 || '/' || $2 || '.drill', true) s WHERE s.size IS NOT NULL)`

// Phases of a base backup run whose program BaseBackup starts: the names
// of cluster.BackupPhaseBackup, BackupPhaseVerify and BackupPhaseDrill.
const (
	PhaseBackup = "backup"
	PhaseVerify = "verify"
	PhaseDrill  = "drill"
)

// BaseBackup reads how the run id goes in dir (relative to the data
// directory) on ep, and when program is not empty and phase (PhaseBackup,
// PhaseVerify or PhaseDrill) has not started there, starts it: program is
// a shell command that returns at once (cluster.BackupProgram,
// VerifyProgram, DrillProgram), run by COPY ... TO PROGRAM, which needs
// the superuser or pg_execute_server_program.
func BaseBackup(ctx context.Context, ep Endpoint, dir, id, phase, program string, opts Options) (*BackupFiles, error) {
	opts = opts.withDefaults()
	s, err := connect(ctx, ep, opts)
	if err != nil {
		return nil, err
	}
	defer s.close(ctx)
	var dataDir string
	if _, err := s.queryRow(ctx, "SELECT current_setting('data_directory')", nil, &dataDir); err != nil {
		return nil, fmt.Errorf("%s: read data_directory: %w", ep, err)
	}
	dir = path.Clean(path.Join(dataDir, dir))
	read := func() (*BackupFiles, error) {
		var r BackupFiles
		var exit, log, verify, drill *string
		var info []byte
		if _, err := s.queryRow(ctx, backupFilesQuery, []any{dir, id}, &r.Started, &r.VerifyStarted, &r.DrillStarted, &exit, &log, &info, &verify, &drill); err != nil {
			return nil, fmt.Errorf("%s: read backup %s in %s: %w", ep, id, dir, err)
		}
		r.Exit = -1
		if exit != nil {
			if n, err := strconv.Atoi(strings.TrimSpace(*exit)); err == nil {
				r.Exit = n
			}
		}
		if log != nil {
			r.Log = *log
		}
		if verify != nil && r.VerifyStarted {
			r.Verify = *verify
		}
		if drill != nil && r.DrillStarted {
			r.Drill = *drill
		}
		if r.Exit >= 0 && len(info) > 0 {
			r.Info = info
		}
		return &r, nil
	}
	r, err := read()
	if err != nil || program == "" || r.phaseStarted(phase) {
		return r, err
	}
	// COPY takes no parameters: the program is a literal, which
	// cluster.BackupProgram builds from constants and a checked ID.
	lit, err := s.literal(program)
	if err != nil {
		return nil, err
	}
	if err := s.exec(ctx, "COPY (SELECT 1) TO PROGRAM "+lit); err != nil {
		return nil, fmt.Errorf("%s: start the %s of backup %s: %w", ep, phase, id, err)
	}
	return read()
}

// phaseStarted says whether phase of the run began on this server.
func (r *BackupFiles) phaseStarted(phase string) bool {
	switch phase {
	case PhaseVerify:
		return r.VerifyStarted
	case PhaseDrill:
		return r.DrillStarted
	}
	return r.Started
}
