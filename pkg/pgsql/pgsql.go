package pgsql

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Outcomes passed to Options.Observe.
const (
	OutcomeOK      = "ok"
	OutcomeError   = "error"
	OutcomeTimeout = "timeout"
)

// Defaults of Options.
const (
	DefaultConnectTimeout   = 5 * time.Second
	DefaultStatementTimeout = 10 * time.Second
)

// closeTimeout bounds the goodbye to the server: a connection that cannot
// say it in time is closed anyway.
const closeTimeout = time.Second

// statementGrace is how much longer than StatementTimeout the client waits
// for a statement. The server's statement_timeout (the same value) fires
// first and cancels the statement cleanly, so the connection survives for the
// next item; the client's own deadline is the backstop for a server that
// stopped answering, and it breaks the connection.
const statementGrace = 500 * time.Millisecond

// Options bound every connection and statement.
type Options struct {
	// ConnectTimeout bounds dial, startup and authentication of each
	// connection attempt. Default 5s.
	ConnectTimeout time.Duration
	// StatementTimeout bounds each statement; it is also the session's
	// statement_timeout. Default 10s.
	StatementTimeout time.Duration
	// Observe, when set, is called once per statement run (and once per
	// failed connection attempt) with its outcome: OutcomeOK, OutcomeError
	// (a server or client error) or OutcomeTimeout (a deadline or
	// statement_timeout). pgloop counts SQL statements by cluster and
	// outcome with it.
	Observe func(outcome string)
	// TLS, when set, is used for every connection (sslmode=require and what
	// the config verifies); nil means libpq's sslmode=prefer: TLS without
	// verification when the server offers it, else none.
	TLS *tls.Config
}

func (o Options) withDefaults() Options {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.StatementTimeout <= 0 {
		o.StatementTimeout = DefaultStatementTimeout
	}
	return o
}

func (o Options) observe(err error) {
	if o.Observe != nil {
		o.Observe(outcome(err))
	}
}

// Endpoint is one PostgreSQL server: host and port, as given by Patroni's
// member data (conn_url) or the pod IP.
type Endpoint struct {
	// Label says what the server is to the caller ("primary", "replica
	// acid-1"); errors start with it, then with host:port.
	Label string
	Host  string
	Port  int
	User  string
	// Passwords are tried in order; a password authentication failure
	// (SQLSTATE 28P01) moves on to the next. Used for the superuser while a
	// rotation of its password is half-way.
	Passwords []string
	// Database is the one to connect to; "" means "postgres".
	Database string
}

// String is the endpoint as errors name it: "primary 10.0.0.5:5432".
func (ep Endpoint) String() string {
	addr := net.JoinHostPort(ep.Host, strconv.Itoa(ep.Port))
	if ep.Label == "" {
		return addr
	}
	return ep.Label + " " + addr
}

// SQLSTATEs this package tells apart.
const (
	codeInvalidPassword = "28P01"
	codeQueryCanceled   = "57014" // statement_timeout, or a cancel request
)

// outcome classifies err for Options.Observe.
func outcome(err error) string {
	switch {
	case err == nil:
		return OutcomeOK
	case isTimeout(err):
		return OutcomeTimeout
	default:
		return OutcomeError
	}
}

// isTimeout says whether err is a deadline (the caller's, ConnectTimeout's
// or the client's statement deadline) or the server's statement_timeout.
func isTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) ||
		errors.As(err, &pgErr) && pgErr.Code == codeQueryCanceled
}

// sqlError is an error of a statement or connection as a reader wants it:
// the server's message, or the cause without pgx's wrapping. It keeps the
// original for errors.Is and errors.As.
type sqlError struct {
	msg string
	err error
}

func (e *sqlError) Error() string { return e.msg }
func (e *sqlError) Unwrap() error { return e.err }

// brief makes err readable. A timeout reads "did not answer within bound"
// (bound, what was left of the caller's deadline or the timeout of Options);
// a server error reads as the server's message; a network error as the
// network's.
func brief(err error, bound time.Duration) error {
	var pgErr *pgconn.PgError
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var connectErr *pgconn.ConnectError
	msg := err.Error()
	switch {
	case errors.As(err, &pgErr):
		msg = pgErr.Message // also "canceling statement due to statement timeout"
	case isTimeout(err) && bound <= 0:
		msg = "not tried: the deadline had passed"
	case isTimeout(err):
		msg = "did not answer within " + bound.Round(time.Millisecond).String()
	case errors.As(err, &dnsErr):
		msg = dnsErr.Error() // "lookup db.example: no such host"
	case errors.As(err, &opErr):
		msg = opErr.Err.Error() // "connect: connection refused"
	case errors.As(err, &connectErr):
		// Without "failed to connect to `user=... database=...`:" and the
		// address of the one attempt, which the caller says already:
		// "tls error: server refused TLS connection".
		msg = errors.Unwrap(connectErr).Error()
		if i := strings.Index(msg, "): "); i >= 0 && !strings.Contains(msg[:i], "\n") {
			msg = msg[i+len("): "):]
		}
	}
	return &sqlError{msg: msg, err: err}
}

// session is one connection to one endpoint.
type session struct {
	ep   Endpoint
	opts Options
	conn *pgx.Conn
}

// connect opens a session to ep, trying its passwords in turn. Its error
// reads "primary 10.0.0.5:5432 did not answer within 5s" or "primary
// 10.0.0.5:5432: password authentication failed for user ...".
func connect(ctx context.Context, ep Endpoint, opts Options) (*session, error) {
	if ep.Port <= 0 || ep.Port > 65535 {
		return nil, fmt.Errorf("%s: port %d is out of range", ep, ep.Port)
	}
	passwords := ep.Passwords
	if len(passwords) == 0 {
		passwords = []string{""}
	}
	var err error
	tried := 0
	for _, password := range passwords {
		var conn *pgx.Conn
		var bound time.Duration
		conn, bound, err = connectOnce(ctx, ep, password, opts)
		if err == nil {
			return &session{ep: ep, opts: opts, conn: conn}, nil
		}
		opts.observe(err)
		tried++
		if isTimeout(err) {
			return nil, fmt.Errorf("%s %w", ep, brief(err, bound))
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != codeInvalidPassword {
			break
		}
	}
	err = brief(err, 0)
	if tried > 1 {
		err = &sqlError{msg: fmt.Sprintf("%s (tried %d passwords)", err, tried), err: err}
	}
	return nil, fmt.Errorf("%s: %w", ep, err)
}

// connectOnce makes one connection attempt, bounded by ConnectTimeout and
// ctx; it returns the bound that applied, for the error's message.
func connectOnce(ctx context.Context, ep Endpoint, password string, opts Options) (*pgx.Conn, time.Duration, error) {
	bound := opts.ConnectTimeout
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < bound {
		bound = max(time.Until(deadline), 0)
	}
	// Every field that matters is set below, over what ParseConfig took from
	// the environment (PGHOST, PGSSLMODE, PGPASSWORD, ...): the operator's
	// environment does not change where or how it connects.
	cfg, err := pgx.ParseConfig("sslmode=disable")
	if err != nil {
		return nil, bound, err
	}
	cfg.Host = ep.Host
	cfg.Port = uint16(ep.Port)
	cfg.User = ep.User
	cfg.Password = password
	cfg.Database = ep.Database
	if cfg.Database == "" {
		cfg.Database = "postgres"
	}
	cfg.Fallbacks = nil
	if opts.TLS != nil {
		cfg.TLSConfig = opts.TLS.Clone()
		if cfg.TLSConfig.ServerName == "" {
			cfg.TLSConfig.ServerName = ep.Host // what a verifying config checks
		}
	} else {
		// libpq's sslmode=prefer: TLS when the server offers it, which
		// Spilo's and pgloop's images always do (their pg_hba refuses
		// connections without it: hostnossl ... reject), else plain.
		cfg.TLSConfig = &tls.Config{InsecureSkipVerify: true, ServerName: ep.Host} //nolint:gosec // sslmode=prefer verifies nothing
		cfg.Fallbacks = []*pgconn.FallbackConfig{{Host: ep.Host, Port: uint16(ep.Port)}}
	}
	cfg.ValidateConnect = nil
	cfg.ConnectTimeout = opts.ConnectTimeout
	cfg.DialFunc = (&net.Dialer{KeepAlive: 5 * time.Minute}).DialContext
	cfg.RuntimeParams = map[string]string{
		"application_name":  "pgloop",
		"statement_timeout": strconv.FormatInt(opts.StatementTimeout.Milliseconds(), 10),
	}
	ctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	return conn, bound, err
}

// close says goodbye to the server, for at most closeTimeout.
func (s *session) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	_ = s.conn.Close(ctx)
}

// statement returns the context of one statement: ctx bounded by
// StatementTimeout (plus statementGrace, see there), and that bound.
func (s *session) statement(ctx context.Context) (context.Context, context.CancelFunc, time.Duration) {
	bound := s.opts.StatementTimeout
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < bound {
		bound = max(time.Until(deadline), 0)
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.StatementTimeout+statementGrace)
	return ctx, cancel, bound
}

// exec runs one statement that returns no rows. Without args it goes over
// the simple protocol, as CREATE DATABASE needs.
func (s *session) exec(ctx context.Context, sql string, args ...any) error {
	ctx, cancel, bound := s.statement(ctx)
	defer cancel()
	_, err := s.conn.Exec(ctx, sql, args...)
	s.opts.observe(err)
	if err != nil {
		return brief(err, bound)
	}
	return nil
}

// queryRow runs one query that returns at most one row, scanned into dest;
// found is false when it returned none.
func (s *session) queryRow(ctx context.Context, sql string, args []any, dest ...any) (found bool, err error) {
	ctx, cancel, bound := s.statement(ctx)
	defer cancel()
	err = s.conn.QueryRow(ctx, sql, args...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	} else {
		found = err == nil
	}
	s.opts.observe(err)
	if err != nil {
		return false, brief(err, bound)
	}
	return found, nil
}

// hidePasswords turns off, for this session, every way the server has of
// logging a statement's text: by kind (log_statement), on error
// (log_min_error_statement), by duration or sampling
// (log_min_duration_statement, log_min_duration_sample,
// log_transaction_sample_rate), and pg_stat_statements' record of utility
// statements. It must run before any statement that carries a password.
// Only a superuser may set these, and pgloop connects as one.
func (s *session) hidePasswords(ctx context.Context) error {
	return s.exec(ctx, "SET log_statement = 'none';"+
		" SET log_min_error_statement = 'panic';"+
		" SET log_min_duration_statement = -1;"+
		" SET log_min_duration_sample = -1;"+
		" SET log_transaction_sample_rate = 0;"+
		" SET pg_stat_statements.track_utility = off")
}

// literal quotes s as an SQL string literal with the connection's own
// escaping.
func (s *session) literal(str string) (string, error) {
	escaped, err := s.conn.PgConn().EscapeString(str)
	if err != nil {
		return "", err
	}
	return "'" + escaped + "'", nil
}

// usable says whether the session can still run statements: it cannot once
// ctx is done or a client-side timeout broke the connection.
func (s *session) usable(ctx context.Context) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case s.conn.IsClosed():
		return errConnectionLost
	}
	return nil
}

var errConnectionLost = errors.New("connection lost")
