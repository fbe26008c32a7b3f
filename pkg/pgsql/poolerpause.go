package pgsql

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Commands of PgBouncer's admin console (its database "pgbouncer") that
// pgloop sends around a switchover.
const (
	// BouncerPause: PgBouncer closes every server connection once its
	// client releases it (in transaction mode, at the end of the
	// transaction), and holds new queries meanwhile; the command returns
	// when none is left. Clients see a stall, not an error.
	BouncerPause = "PAUSE"
	// BouncerResume: the held queries go on, on new server connections
	// to the configured host.
	BouncerResume = "RESUME"
)

// BouncerDatabase is the admin console's database name.
const BouncerDatabase = "pgbouncer"

// The admin console's answers to a command the pooler is already done
// with, in PgBouncer 1.18 and later (the capital P of older releases is
// matched too): both are success to pgloop.
var bouncerAlready = map[string]string{
	BouncerPause:  "already suspended/paused",
	BouncerResume: "pooler is not paused/suspended",
}

// Bouncer runs command (BouncerPause or BouncerResume) on the admin console
// of the PgBouncer at ep (ep.User an admin_users role, ep.Database ignored),
// over TLS without verification (the pooler's certificate is self-signed,
// as the connection-pooler image makes it), and returns once PgBouncer
// answered or ctx ends. A pooler already in the state asked for is
// success. Only application_name goes in the startup packet: PgBouncer
// refuses parameters it does not know (statement_timeout) unless
// ignore_startup_parameters lists them.
func Bouncer(ctx context.Context, ep Endpoint, command string, connectTimeout time.Duration) error {
	already, ok := bouncerAlready[command]
	if !ok {
		return fmt.Errorf("admin command %q is not one pgloop sends", command)
	}
	if connectTimeout <= 0 {
		connectTimeout = DefaultConnectTimeout
	}
	cfg, err := pgx.ParseConfig("sslmode=disable")
	if err != nil {
		return err
	}
	cfg.Host, cfg.Port, cfg.User, cfg.Database = ep.Host, uint16(ep.Port), ep.User, BouncerDatabase
	if len(ep.Passwords) > 0 {
		cfg.Password = ep.Passwords[0]
	}
	cfg.TLSConfig = &tls.Config{InsecureSkipVerify: true, ServerName: ep.Host} //nolint:gosec // a self-signed certificate
	cfg.Fallbacks, cfg.ValidateConnect = nil, nil
	cfg.ConnectTimeout = connectTimeout
	cfg.DialFunc = (&net.Dialer{}).DialContext
	cfg.RuntimeParams = map[string]string{"application_name": "pgloop"}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	conn, err := pgx.ConnectConfig(cctx, cfg)
	cancel()
	if err != nil {
		return fmt.Errorf("%s: %w", ep, brief(err, connectTimeout))
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	bound := time.Hour
	if deadline, ok := ctx.Deadline(); ok {
		bound = time.Until(deadline)
	}
	_, err = conn.Exec(ctx, command)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.Contains(strings.ToLower(pgErr.Message), already) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %s: %w", ep, command, brief(err, bound))
	}
	return nil
}

// BouncerEndpoint is the admin console of the PgBouncer at host:port for
// user and password.
func BouncerEndpoint(label, host string, port int, user, password string) Endpoint {
	return Endpoint{Label: label, Host: host, Port: port, User: user, Passwords: []string{password}, Database: BouncerDatabase}
}
