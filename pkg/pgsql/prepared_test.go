package pgsql

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// preparedDesired is a prepared database prep_db as zalando lays it out,
// with one schema (data) owned by the database's owner, the users of the
// owner, reader and writer, and pgcrypto in data.
func preparedDesired() Desired {
	nologin := []string{"NOLOGIN"}
	search := []string{"$user", "data"}
	return Desired{
		Roles: []Role{
			{Name: "prep_owner", Flags: nologin}, {Name: "prep_reader", Flags: nologin}, {Name: "prep_writer", Flags: nologin},
			{Name: "prep_owner_user", Password: "prep-owner-pw"},
			{Name: "prep_reader_user", Password: "prep-reader-pw"},
			{Name: "prep_writer_user", Password: "prep-writer-pw"},
		},
		Databases: []Database{{Name: "prep_db", Owner: "prep_owner"}},
		Prepared: []PreparedDatabase{{
			Name: "prep_db",
			Members: []Membership{
				{Role: "prep_reader", Member: "prep_owner", Admin: true},
				{Role: "prep_reader", Member: "prep_writer"},
				{Role: "prep_writer", Member: "prep_owner", Admin: true},
				{Role: "prep_owner", Member: "prep_owner_user"},
				{Role: "prep_reader", Member: "prep_reader_user"},
				{Role: "prep_reader_user", Member: "prep_owner", Admin: true},
				{Role: "prep_writer", Member: "prep_writer_user"},
				{Role: "prep_writer_user", Member: "prep_owner", Admin: true},
			},
			SearchPaths: []SearchPath{
				{Role: "prep_owner", Path: search}, {Role: "prep_reader", Path: search}, {Role: "prep_writer", Path: search},
				{Role: "prep_owner_user", Path: search}, {Role: "prep_reader_user", Path: search}, {Role: "prep_writer_user", Path: search},
			},
			Privileges: []Privileges{
				{Owner: "prep_owner", Reader: "prep_reader", Writer: "prep_writer"},
				{Owner: "prep_owner_user", Reader: "prep_reader", Writer: "prep_writer"},
			},
			Schemas: []PreparedSchema{{Name: "data", Owner: "prep_owner", Privileges: []Privileges{
				{Owner: "prep_owner", Reader: "prep_reader", Writer: "prep_writer"},
				{Owner: "prep_owner_user", Reader: "prep_reader", Writer: "prep_writer"},
			}}},
			Extensions: []Extension{{Name: "pgcrypto", Schema: "data"}},
		}},
	}
}

// TestSyncPrepared: the database, its schema and extension are made, and
// what its owner creates its reader reads, its writer writes, unqualified.
func TestSyncPrepared(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	res, err := Sync(ctx, srv.endpoint(), preparedDesired(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range []string{"prepared prep_db schema data", "prepared prep_db extension pgcrypto"} {
		if !slices.Contains(res.Created, item) {
			t.Errorf("created %v, want %s", res.Created, item)
		}
	}
	if !slices.Contains(res.Altered, "prepared prep_db") {
		t.Errorf("altered %v, want prepared prep_db", res.Altered)
	}

	var owner, schemaOwner, extSchema string
	if err := srv.super(t).QueryRow(ctx, "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'prep_db'").Scan(&owner); err != nil {
		t.Fatal(err)
	}
	conn, err := srv.connect(ctx, "postgres", superPassword, "prep_db")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, "SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'data'").Scan(&schemaOwner); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT n.nspname FROM pg_extension x JOIN pg_namespace n ON n.oid = x.extnamespace WHERE extname = 'pgcrypto'").Scan(&extSchema); err != nil {
		t.Fatal(err)
	}
	if owner != "prep_owner" || schemaOwner != "prep_owner" || extSchema != "data" {
		t.Errorf("database owner %s, schema owner %s, pgcrypto in %s; want prep_owner, prep_owner, data", owner, schemaOwner, extSchema)
	}

	// The owner's user creates as the owner; the others see the table
	// through their search_path.
	as := func(user, password string, sql ...string) error {
		c, err := srv.connect(ctx, user, password, "prep_db")
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		for _, s := range sql {
			if _, err := c.Exec(ctx, s); err != nil {
				return err
			}
		}
		return nil
	}
	if err := as("prep_owner_user", "prep-owner-pw", "SET ROLE prep_owner",
		"CREATE TABLE t (id serial PRIMARY KEY, v text)", "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'"); err != nil {
		t.Fatalf("owner: %v", err)
	}
	if err := as("prep_writer_user", "prep-writer-pw", "INSERT INTO t (v) VALUES ('w')", "UPDATE t SET v = 'x'", "SELECT f()"); err != nil {
		t.Errorf("writer: %v", err)
	}
	if err := as("prep_reader_user", "prep-reader-pw", "SELECT * FROM t", "SELECT data.digest('x', 'sha256')"); err != nil {
		t.Errorf("reader: %v", err)
	}
	var pgErr *pgconn.PgError
	if err := as("prep_reader_user", "prep-reader-pw", "INSERT INTO t (v) VALUES ('r')"); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("reader inserts: %v, want permission denied (42501)", err)
	}
}

// TestSyncPreparedTwice: a second sync only reads the catalog.
func TestSyncPreparedTwice(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	d := preparedDesired()
	if _, err := Sync(ctx, srv.endpoint(), d, Options{}); err != nil {
		t.Fatal(err)
	}
	var rec recorder
	res, err := Sync(ctx, srv.endpoint(), d, rec.options())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created)+len(res.Altered)+len(res.Errors) != 0 {
		t.Errorf("second sync did something: %+v", res)
	}
	// One SET, one read per role and database; then over the database's
	// connection: memberships, search paths, two privileges; the schema
	// and its two privileges; the extension.
	if got, want := rec.count(OutcomeOK), 1+6+1+(2+2)+(1+2)+1; got != want || len(rec.outcomes) != want {
		t.Errorf("observed %v, want %d ok", rec.outcomes, want)
	}
}

// TestSyncPreparedErrors: an extension that does not exist fails its item
// only; a database that does not exist fails its items, the first with the
// connection's error, the others as not tried.
func TestSyncPreparedErrors(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	d := preparedDesired()
	p := &d.Prepared[0]
	p.Extensions = append(p.Extensions, Extension{Name: "no_such_extension", Schema: "data"})
	d.Prepared = append(d.Prepared, PreparedDatabase{Name: "prep_missing",
		Schemas: []PreparedSchema{{Name: "data", Owner: "prep_owner"}}})
	res, err := Sync(ctx, srv.endpoint(), d, Options{})
	if err == nil {
		t.Fatal("no error")
	}
	var got []string
	for _, e := range res.Errors {
		got = append(got, e.Error())
	}
	want := []string{
		`prepared prep_db extension no_such_extension: extension "no_such_extension" is not available`,
		`prepared prep_missing: connect to database prep_missing: primary`,
		`prepared prep_missing schema data: not tried: connect to database prep_missing`,
	}
	if len(got) != len(want) {
		t.Fatalf("errors %q, want %d", got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d = %q, want it to start with %q", i, got[i], want[i])
		}
	}
	if !strings.Contains(err.Error(), "3 of 13 items failed") {
		t.Errorf("error %q, want 3 of 13 items failed", err)
	}
}
