package pgsql

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Pooler is the connection pooler's auth lookup to install.
type Pooler struct {
	// User is the pooler's role (created as a Role of Desired.Roles by the caller, with LOGIN and its password).
	User string
	// Schema holds the lookup function.
	Schema string
}

// lookupBody is the body of <schema>.user_lookup, as zalando's
// postgres-operator installs it. It is compared with pg_proc.prosrc, so a
// function whose body someone changed is replaced.
const lookupBody = `
BEGIN
	SELECT usename, passwd FROM pg_catalog.pg_shadow
	WHERE usename = i_username INTO uname, phash;
	RETURN;
END;
`

// listDatabases is every database a client of the pooler may ask for: one
// text[] (NULL when there is none), so that queryRow reads it.
const listDatabases = "SELECT array_agg(datname ORDER BY datname) FROM pg_database" +
	" WHERE datallowconn AND NOT datistemplate"

// lookupInPlace reads, for schema $1, pooler role $2 and body $3, whether
// the role exists and whether everything lookupStatements would write is
// already there: the function, as written, SECURITY DEFINER and owned by
// the connecting role; EXECUTE on it for the pooler role (without GRANT
// OPTION) and its owner only, not PUBLIC; USAGE on the schema for the
// pooler role.
const lookupInPlace = `
WITH u AS (SELECT oid FROM pg_roles WHERE rolname = $2),
f AS (SELECT p.*, n.nspacl FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
	WHERE p.oid = to_regprocedure(format('%I.user_lookup(text)', $1::text)))
SELECT EXISTS (SELECT FROM u), EXISTS (SELECT FROM f, u
	WHERE f.prosecdef
	AND f.proowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
	AND f.prolang = (SELECT oid FROM pg_language WHERE lanname = 'plpgsql')
	AND f.prosrc = $3
	AND f.prorettype = 'record'::regtype
	AND f.proallargtypes = '{text,text,text}'::regtype[]::oid[]
	AND f.proargmodes = '{i,o,o}'
	AND f.proargnames = '{i_username,uname,phash}'
	AND f.proacl IS NOT NULL
	AND NOT EXISTS (SELECT FROM aclexplode(f.proacl) a
		WHERE a.grantee NOT IN (f.proowner, u.oid)
		OR a.grantee = u.oid AND (a.privilege_type <> 'EXECUTE' OR a.is_grantable))
	AND EXISTS (SELECT FROM aclexplode(f.proacl) a
		WHERE a.grantee = u.oid AND a.privilege_type = 'EXECUTE')
	AND EXISTS (SELECT FROM aclexplode(f.nspacl) a
		WHERE a.grantee = u.oid AND a.privilege_type = 'USAGE'))`

// lookupStatements is what zalando runs in each database, and an ALTER
// FUNCTION ... OWNER so that a function someone else made ends up as
// lookupInPlace wants it, rather than being rewritten at every sync. Sent as
// one simple query, it runs as one transaction.
func lookupStatements(p Pooler) string {
	schema := pgx.Identifier{p.Schema}.Sanitize()
	user := pgx.Identifier{p.User}.Sanitize()
	fn := schema + ".user_lookup(text)"
	return "CREATE SCHEMA IF NOT EXISTS " + schema + ";\n" +
		"CREATE OR REPLACE FUNCTION " + schema + ".user_lookup(in i_username text, out uname text, out phash text)\n" +
		"RETURNS record AS $$" + lookupBody + "$$ LANGUAGE plpgsql SECURITY DEFINER;\n" +
		"ALTER FUNCTION " + fn + " OWNER TO CURRENT_USER;\n" +
		"REVOKE ALL ON FUNCTION " + fn + " FROM public, " + user + ";\n" +
		"GRANT EXECUTE ON FUNCTION " + fn + " TO " + user + ";\n" +
		"GRANT USAGE ON SCHEMA " + schema + " TO " + user
}

// checkPooler refuses names PostgreSQL would change.
func checkPooler(p Pooler) error {
	if err := checkName(p.Schema); err != nil {
		return fmt.Errorf("schema %w", err)
	}
	if err := checkName(p.User); err != nil {
		return fmt.Errorf("pooler user %w", err)
	}
	return nil
}

// database is the one the session is connected to.
func (s *session) database() string {
	if s.ep.Database == "" {
		return "postgres"
	}
	return s.ep.Database
}

// syncPooler installs p's lookup in every database that takes connections,
// one item of KindPooler each, in the order of their names; it returns the
// number of items. When the databases cannot be listed, that is one item,
// named by the session's database.
func (s *session) syncPooler(ctx context.Context, p Pooler, res *Result) int {
	fail := func(db string, err error) {
		res.Errors = append(res.Errors, ItemError{Kind: KindPooler, Name: db, Err: err})
	}
	if err := s.usable(ctx); err != nil {
		fail(s.database(), notTried(err))
		return 1
	}
	var dbs []string
	if _, err := s.queryRow(ctx, listDatabases, nil, &dbs); err != nil {
		fail(s.database(), fmt.Errorf("list databases: %w", err))
		return 1
	}
	for _, db := range dbs {
		if err := s.usable(ctx); err != nil {
			fail(db, notTried(err))
			continue
		}
		switch wrote, err := s.poolerIn(ctx, db, p); {
		case err != nil:
			fail(db, err)
		case wrote:
			res.add(created, KindPooler+" "+db)
		}
	}
	return len(dbs)
}

// poolerIn installs p's lookup in db: over this session when it is
// connected there, else over a connection of its own to the same endpoint.
// It says whether it wrote anything.
func (s *session) poolerIn(ctx context.Context, db string, p Pooler) (bool, error) {
	if err := checkPooler(p); err != nil {
		return false, err
	}
	if db == s.database() {
		return s.installLookup(ctx, p)
	}
	ep := s.ep
	ep.Database = db
	other, err := connect(ctx, ep, s.opts)
	if err != nil {
		return false, fmt.Errorf("connect to database %s: %w", db, err)
	}
	defer other.close(ctx)
	return other.installLookup(ctx, p)
}

// installLookup writes p's lookup in the session's database unless it is
// all there already; it says whether it wrote.
func (s *session) installLookup(ctx context.Context, p Pooler) (bool, error) {
	var userExists, inPlace bool
	if _, err := s.queryRow(ctx, lookupInPlace, []any{p.Schema, p.User, lookupBody}, &userExists, &inPlace); err != nil {
		return false, fmt.Errorf("read lookup function: %w", err)
	}
	switch {
	case !userExists:
		return false, fmt.Errorf("pooler role %s does not exist", p.User)
	case inPlace:
		return false, nil
	}
	if err := s.exec(ctx, lookupStatements(p)); err != nil {
		return false, err
	}
	return true, nil
}
