package pgsql

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// poolerPassword is the pooler role's password in these tests.
const poolerPassword = "pooler-pw-1"

// poolerDesired is a pooler role, an application role, two databases and
// the pooler's lookup in schema pooler.
func poolerDesired() Desired {
	return Desired{
		Roles: []Role{
			{Name: "pooler", Password: poolerPassword},
			{Name: "pool_app", Password: "pool-app-pw-1"},
		},
		Databases: []Database{{Name: "pool_db1", Owner: "pool_app"}, {Name: "pool_db2", Owner: "pool_app"}},
		Pooler:    &Pooler{User: "pooler", Schema: "pooler"},
	}
}

// poolerDatabases lists the databases a sync installs the lookup in, as
// the server has them now (other tests of the package add some).
func poolerDatabases(t *testing.T, srv *server) []string {
	t.Helper()
	var dbs []string
	if err := srv.super(t).QueryRow(context.Background(), listDatabases).Scan(&dbs); err != nil {
		t.Fatal(err)
	}
	return dbs
}

// lookup runs pooler.user_lookup(name) in db as user, as PgBouncer's
// auth_query does, and returns the verifier it read.
func lookup(srv *server, user, password, db, name string) (string, error) {
	ctx := context.Background()
	conn, err := srv.connect(ctx, user, password, db)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var uname, phash string
	if err := conn.QueryRow(ctx, "SELECT * FROM pooler.user_lookup($1)", name).Scan(&uname, &phash); err != nil {
		return "", err
	}
	if uname != name {
		return "", fmt.Errorf("user_lookup(%q) returned user %q", name, uname)
	}
	return phash, nil
}

// TestSyncPoolerLookup: the pooler reads an application role's verifier in
// postgres and in both databases; the application role itself may not.
func TestSyncPoolerLookup(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	res, err := Sync(ctx, srv.endpoint(), poolerDesired(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var verifier string
	if err := srv.super(t).QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = 'pool_app'").Scan(&verifier); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(verifier, "SCRAM-SHA-256$") {
		t.Fatalf("pool_app's verifier %q is not SCRAM", verifier)
	}
	for _, db := range []string{"postgres", "pool_db1", "pool_db2"} {
		t.Run(db, func(t *testing.T) {
			if !slices.Contains(res.Created, "pooler "+db) {
				t.Errorf("created %v, want pooler %s", res.Created, db)
			}
			got, err := lookup(srv, "pooler", poolerPassword, db, "pool_app")
			if err != nil {
				t.Fatalf("as pooler: %v", err)
			}
			if got != verifier {
				t.Errorf("as pooler: %q, want %q", got, verifier)
			}
			var pgErr *pgconn.PgError
			if _, err := lookup(srv, "pool_app", "pool-app-pw-1", db, "pool_app"); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
				t.Errorf("as pool_app: %v, want permission denied (42501)", err)
			}
		})
	}
}

// TestSyncPoolerTwice: a sync of what is in place runs only its catalog
// queries, and no DDL reaches the server's log.
func TestSyncPoolerTwice(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	d := poolerDesired()
	if _, err := Sync(ctx, srv.endpoint(), d, Options{}); err != nil {
		t.Fatal(err)
	}
	dbs := poolerDatabases(t, srv)

	var rec recorder
	res, err := Sync(ctx, srv.endpoint(), d, rec.options())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created)+len(res.Altered)+len(res.Errors) != 0 {
		t.Errorf("second sync did something: %+v", res)
	}
	// One SET, one read per role and per database, the list of databases
	// and one read per database listed.
	if got, want := rec.count(OutcomeOK), 1+2+2+1+len(dbs); got != want || len(rec.outcomes) != want {
		t.Errorf("observed %v, want %d ok", rec.outcomes, want)
	}

	// Without a password to hide, every statement of the sync is logged.
	before, err := os.ReadFile(srv.logPath)
	if err != nil {
		t.Fatal(err)
	}
	res, err = Sync(ctx, srv.endpoint(), Desired{Pooler: d.Pooler}, Options{})
	if err != nil || len(res.Created)+len(res.Altered) != 0 {
		t.Errorf("sync of the pooler alone: %+v, %v", res, err)
	}
	after, err := os.ReadFile(srv.logPath)
	if err != nil {
		t.Fatal(err)
	}
	logged := string(after[len(before):])
	if n := strings.Count(logged, "user_lookup(text)"); n < len(dbs) {
		t.Errorf("the log has %d reads of the lookup, want at least %d:\n%s", n, len(dbs), logged)
	}
	for _, ddl := range []string{"CREATE ", "ALTER ", "GRANT ", "REVOKE "} {
		if strings.Contains(logged, ddl) {
			t.Errorf("the log has %q:\n%s", ddl, logged)
		}
	}
}

// TestSyncPoolerLaterDatabase: a database made outside Sync gets the lookup
// at the next sync, and only it.
func TestSyncPoolerLaterDatabase(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	d := poolerDesired()
	if _, err := Sync(ctx, srv.endpoint(), d, Options{}); err != nil {
		t.Fatal(err)
	}
	srv.exec(t, "CREATE DATABASE pool_later")
	res, err := Sync(ctx, srv.endpoint(), d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Created, []string{"pooler pool_later"}) || len(res.Altered) != 0 {
		t.Errorf("result %+v, want pooler pool_later created", res)
	}
	if _, err := lookup(srv, "pooler", poolerPassword, "pool_later", "pool_app"); err != nil {
		t.Errorf("as pooler in pool_later: %v", err)
	}
}

// TestSyncPoolerRefused: a pooler that cannot be installed fails in every
// database, as items of its own; the roles are still applied.
func TestSyncPoolerRefused(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	cases := []struct {
		name   string
		role   string
		pooler Pooler
		want   string
	}{
		{"schema too long", "pool_long", Pooler{User: "pool_long", Schema: strings.Repeat("s", 64)},
			"schema name is longer than 63 bytes"},
		{"no pooler role", "pool_other", Pooler{User: "pool_nobody", Schema: "pool_nobody"},
			"pooler role pool_nobody does not exist"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Desired{Roles: []Role{{Name: tc.role, Password: "pw"}}, Pooler: &tc.pooler}
			res, err := Sync(ctx, srv.endpoint(), d, Options{})
			dbs := poolerDatabases(t, srv)
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d of %d items failed", len(dbs), 1+len(dbs))) {
				t.Errorf("error %v, want %d of %d items failed", err, len(dbs), 1+len(dbs))
			}
			var names []string
			for _, e := range res.Errors {
				names = append(names, e.Name)
				if e.Kind != KindPooler || e.Err.Error() != tc.want {
					t.Errorf("error %q, want %s %s: %s", e, KindPooler, e.Name, tc.want)
				}
			}
			if !slices.Equal(names, dbs) {
				t.Errorf("failed in %v, want %v", names, dbs)
			}
			if !slices.Equal(res.Created, []string{"role " + tc.role}) {
				t.Errorf("created %v, want role %s", res.Created, tc.role)
			}
			if err := srv.login(ctx, tc.role, "pw", "postgres"); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestSyncPoolerRepairs: a lookup someone changed in one database is
// written again there, and only there.
func TestSyncPoolerRepairs(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	d := poolerDesired()
	if _, err := Sync(ctx, srv.endpoint(), d, Options{}); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, db, sql string }{
		{"executable by public", "pool_db1", "GRANT EXECUTE ON FUNCTION pooler.user_lookup(text) TO public"},
		{"not security definer", "pool_db2", "ALTER FUNCTION pooler.user_lookup(text) SECURITY INVOKER"},
		{"schema usage revoked", "postgres", "REVOKE USAGE ON SCHEMA pooler FROM pooler"},
		{"owned by another role", "pool_db1", "ALTER FUNCTION pooler.user_lookup(text) OWNER TO pool_app"},
		{"dropped", "pool_db2", "DROP SCHEMA pooler CASCADE"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := srv.connect(ctx, "postgres", superPassword, tc.db)
			if err != nil {
				t.Fatal(err)
			}
			_, err = conn.Exec(ctx, tc.sql)
			conn.Close(ctx)
			if err != nil {
				t.Fatalf("%s: %v", tc.sql, err)
			}
			res, err := Sync(ctx, srv.endpoint(), d, Options{})
			if err != nil || !slices.Equal(res.Created, []string{"pooler " + tc.db}) {
				t.Errorf("result %+v, %v; want pooler %s created", res, err, tc.db)
			}
			if _, err := lookup(srv, "pooler", poolerPassword, tc.db, "pool_app"); err != nil {
				t.Errorf("as pooler: %v", err)
			}
			var pgErr *pgconn.PgError
			if _, err := lookup(srv, "pool_app", "pool-app-pw-1", tc.db, "pool_app"); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
				t.Errorf("as pool_app: %v, want permission denied (42501)", err)
			}
		})
	}
}
