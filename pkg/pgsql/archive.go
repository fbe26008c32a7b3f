package pgsql

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"
)

// Archiver is how a primary's WAL archiving goes, as PostgreSQL and the
// archiver's own files tell it.
type Archiver struct {
	// ArchivedCount, LastArchivedWAL and LastArchivedTime are
	// pg_stat_archiver's: segments archived since the statistics' reset,
	// the last one, and when.
	ArchivedCount    int64
	LastArchivedWAL  string
	LastArchivedTime time.Time
	// FailedCount, LastFailedWAL and LastFailedTime are its failures.
	FailedCount    int64
	LastFailedWAL  string
	LastFailedTime time.Time
	// CurrentWAL is the segment being written, empty in recovery.
	CurrentWAL string
	// InRecovery says the server is a standby: it archives nothing
	// (archive_mode on), its source does.
	InRecovery bool
	// Ready counts the segments waiting to be archived (.ready files in
	// pg_wal/archive_status): what a failing archive leaves in pg_wal.
	Ready int64
	// WALBytes is the size of pg_wal.
	WALBytes int64
	// Errors are the archiver's own words: the text of each *.error file
	// in the error directory, by file name (pgBackRest's asynchronous
	// archive-push leaves one per segment it failed on, or global.error).
	Errors map[string]string
}

// Failing reports whether the last archive attempt failed: a failure after
// the last success.
func (a *Archiver) Failing() bool {
	return a.FailedCount > 0 && a.LastFailedTime.After(a.LastArchivedTime)
}

// archiverQuery reads pg_stat_archiver, the WAL position, the backlog and
// pg_wal's size in one row. pg_walfile_name fails on a server in
// recovery: a standby cluster's leader says so.
const archiverQuery = `SELECT a.archived_count, coalesce(a.last_archived_wal, ''), a.last_archived_time,
	a.failed_count, coalesce(a.last_failed_wal, ''), a.last_failed_time,
	CASE WHEN pg_is_in_recovery() THEN '' ELSE pg_walfile_name(pg_current_wal_lsn()) END, pg_is_in_recovery(),
	(SELECT count(*) FROM pg_ls_archive_statusdir() WHERE name LIKE '%.ready'),
	(SELECT coalesce(sum(size), 0) FROM pg_ls_waldir()),
	current_setting('data_directory')
FROM pg_stat_archiver a`

// errorFilesQuery reads the *.error files of the directories $1, by name;
// a directory that does not exist has none.
const errorFilesQuery = `SELECT f, pg_read_file(d || '/' || f, 0, 4096, true)
FROM unnest($1::text[]) AS d, LATERAL pg_ls_dir(d, true, false) AS f WHERE f LIKE '%.error'`

// ArchiveStatus reads how ep's archiving goes. errorDirs are where the
// archiver leaves its error files, relative to the data directory (they
// may climb out of it with ".."): reading them needs the superuser, or
// pg_read_server_files.
func ArchiveStatus(ctx context.Context, ep Endpoint, errorDirs []string, opts Options) (*Archiver, error) {
	opts = opts.withDefaults()
	s, err := connect(ctx, ep, opts)
	if err != nil {
		return nil, err
	}
	defer s.close(ctx)

	var a Archiver
	var archived, failed *time.Time
	var dataDir string
	if _, err := s.queryRow(ctx, archiverQuery, nil, &a.ArchivedCount, &a.LastArchivedWAL, &archived,
		&a.FailedCount, &a.LastFailedWAL, &failed, &a.CurrentWAL, &a.InRecovery, &a.Ready, &a.WALBytes, &dataDir); err != nil {
		return nil, fmt.Errorf("%s: read pg_stat_archiver: %w", ep, err)
	}
	if archived != nil {
		a.LastArchivedTime = *archived
	}
	if failed != nil {
		a.LastFailedTime = *failed
	}
	if len(errorDirs) == 0 {
		return &a, nil
	}
	dirs := make([]string, len(errorDirs))
	for i, d := range errorDirs {
		dirs[i] = path.Clean(path.Join(dataDir, d))
	}
	dir := strings.Join(dirs, ", ")
	ctx, cancel, bound := s.statement(ctx)
	defer cancel()
	rows, err := s.conn.Query(ctx, errorFilesQuery, dirs)
	if err != nil {
		opts.observe(err)
		return nil, fmt.Errorf("%s: read the archiver's errors in %s: %w", ep, dir, brief(err, bound))
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var text *string
		if err := rows.Scan(&name, &text); err != nil {
			opts.observe(err)
			return nil, fmt.Errorf("%s: read the archiver's errors in %s: %w", ep, dir, brief(err, bound))
		}
		if text == nil {
			continue // gone between the listing and the read
		}
		if a.Errors == nil {
			a.Errors = map[string]string{}
		}
		a.Errors[name] = strings.TrimSpace(*text)
	}
	if err := rows.Err(); err != nil {
		opts.observe(err)
		return nil, fmt.Errorf("%s: read the archiver's errors in %s: %w", ep, dir, brief(err, bound))
	}
	opts.observe(nil)
	return &a, nil
}

// ErrorText is the archiver's words in one line: the error files' texts,
// global.error first, then by name, without repeats. pgBackRest writes its
// error code on the first line, then the message and HINT lines: the code
// becomes "[103]", the hints are left out, a line said twice is said once.
func (a *Archiver) ErrorText() string {
	names := make([]string, 0, len(a.Errors))
	for n := range a.Errors {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if (names[i] == "global.error") != (names[j] == "global.error") {
			return names[i] == "global.error"
		}
		return names[i] < names[j]
	})
	var out []string
	seen := map[string]bool{}
	for _, n := range names {
		t := errorWords(a.Errors[n])
		if t != "" && !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return strings.Join(out, "; ")
}

// errorWords is one error file's text in one line.
func errorWords(text string) string {
	var words []string
	seen := map[string]bool{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.Join(strings.Fields(line), " ")
		switch {
		case line == "", strings.HasPrefix(line, "HINT:"), seen[line]:
			continue
		case i == 0 && isCode(line):
			line = "[" + line + "]"
		}
		seen[line] = true
		words = append(words, line)
	}
	return strings.Join(words, " ")
}

func isCode(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}
