package pgsql

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Setting is one parameter on one server, as PostgreSQL has it.
type Setting struct {
	Name  string
	Known bool // pg_settings has it; false for a name it does not know
	// Current is current_setting(name), with its unit ("4MB").
	Current string
	// File is the value in the configuration files, as Patroni wrote it:
	// the last row of pg_file_settings for the name (postgresql.conf,
	// or postgresql.auto.conf after ALTER SYSTEM); "" when InFile is false.
	File   string
	InFile bool
	// Applied is pg_file_settings.applied of that row: false while a reload
	// is due, or a restart for a parameter that needs one.
	Applied bool
	// PendingRestart is pg_settings.pending_restart: the file has a value
	// the server takes only when it restarts.
	PendingRestart bool
	// Error is pg_file_settings.error of that row, if any.
	Error string
}

// settingsQuery reads every name in $1 in one go: pg_settings knows names
// in lower case, as PostgreSQL compares them; the last row of
// pg_file_settings for a name is the one that wins.
const settingsQuery = `SELECT n.name,
	s.name IS NOT NULL,
	coalesce(current_setting(s.name, true), ''),
	coalesce(s.pending_restart, false),
	f.setting IS NOT NULL,
	coalesce(f.setting, ''),
	coalesce(f.applied, false),
	coalesce(f.error, '')
FROM unnest($1::text[]) AS n(name)
LEFT JOIN pg_settings s ON s.name = lower(n.name)
LEFT JOIN LATERAL (
	SELECT setting, applied, error FROM pg_file_settings
	WHERE name = lower(n.name) ORDER BY seqno DESC LIMIT 1
) f ON true`

// Settings reads the named parameters on ep, in one query. The map has an
// entry for every name, under the name as given.
func Settings(ctx context.Context, ep Endpoint, names []string, opts Options) (map[string]Setting, error) {
	if len(names) == 0 {
		return map[string]Setting{}, nil
	}
	opts = opts.withDefaults()
	s, err := connect(ctx, ep, opts)
	if err != nil {
		return nil, err
	}
	defer s.close(ctx)

	ctx, cancel, bound := s.statement(ctx)
	defer cancel()
	rows, err := s.conn.Query(ctx, settingsQuery, names)
	if err != nil {
		opts.observe(err)
		return nil, fmt.Errorf("%s: read settings: %w", ep, brief(err, bound))
	}
	defer rows.Close()
	out := make(map[string]Setting, len(names))
	for rows.Next() {
		var st Setting
		if err := rows.Scan(&st.Name, &st.Known, &st.Current, &st.PendingRestart,
			&st.InFile, &st.File, &st.Applied, &st.Error); err != nil {
			rows.Close()
			opts.observe(err)
			return nil, fmt.Errorf("%s: read settings: %w", ep, brief(err, bound))
		}
		out[st.Name] = st
	}
	err = rows.Err()
	opts.observe(err)
	if err != nil {
		return nil, fmt.Errorf("%s: read settings: %w", ep, brief(err, bound))
	}
	return out, nil
}

// CheckParameters asks the server on ep whether it would take each
// parameter's value, before it is sent to Patroni (which writes it to
// every member's postgresql.conf, where a bad line keeps a reload from
// applying and a restart from starting):
//   - a name PostgreSQL does not know is refused, unless it is an
//     extension's (a dotted name, which PostgreSQL keeps as a placeholder);
//   - a value is tried with set_config, in a transaction rolled back, for
//     the parameters a session may set (context user or superuser), which
//     validates it as PostgreSQL would; others are checked by their
//     member when Patroni writes them.
//
// It returns an error naming every refused parameter with the server's
// words, on one line ("parameter a: ...; parameter b: ..."), wrapping each;
// nil when all are acceptable.
func CheckParameters(ctx context.Context, ep Endpoint, params map[string]string, opts Options) error {
	if len(params) == 0 {
		return nil
	}
	opts = opts.withDefaults()
	s, err := connect(ctx, ep, opts)
	if err != nil {
		return err
	}
	defer s.close(ctx)
	var problems []error
	for _, name := range sortedNames(params) {
		var context string
		found, err := s.queryRow(ctx, "SELECT context FROM pg_settings WHERE name = lower($1)", []any{name}, &context)
		if err != nil {
			return fmt.Errorf("%s: parameter %s: %w", ep, name, err)
		}
		switch {
		case !found && !strings.Contains(name, "."):
			problems = append(problems, fmt.Errorf("parameter %s: unrecognized configuration parameter", name))
		case found && (context == "user" || context == "superuser"):
			if err := s.tryValue(ctx, name, params[name]); err != nil {
				problems = append(problems, fmt.Errorf("parameter %s = %q: %w", name, params[name], err))
			}
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return parameterErrors(problems)
}

// parameterErrors are the refused parameters of CheckParameters, on one
// line: the message goes to a status.
type parameterErrors []error

func (e parameterErrors) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e parameterErrors) Unwrap() []error { return e }

// tryValue sets name to value for a transaction that is rolled back.
func (s *session) tryValue(ctx context.Context, name, value string) error {
	ctx, cancel, bound := s.statement(ctx)
	defer cancel()
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		s.opts.observe(err)
		return brief(err, bound)
	}
	_, err = tx.Exec(ctx, "SELECT set_config($1, $2, true)", name, value)
	s.opts.observe(err)
	_ = tx.Rollback(ctx)
	if err != nil {
		return brief(err, bound)
	}
	return nil
}

func sortedNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
