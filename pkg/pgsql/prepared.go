package pgsql

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// PreparedDatabase is what a prepared database (zalando's
// preparedDatabases) needs besides its roles and the database itself,
// which the caller lists in Desired.Roles and Desired.Databases. Everything
// is granted or created when missing only: nothing is revoked or dropped.
type PreparedDatabase struct {
	Name string
	// Members are role memberships: Role granted to Member, WITH ADMIN
	// OPTION when Admin.
	Members []Membership
	// SearchPaths are the roles' search_path (ALTER ROLE ... SET).
	SearchPaths []SearchPath
	// Privileges are database-wide default privileges (and USAGE on the
	// schemas Owner creates).
	Privileges []Privileges
	// Schemas are created when missing, each with its default privileges
	// and USAGE on it for their readers and writers.
	Schemas []PreparedSchema
	// Extensions are created in their schema, or moved there.
	Extensions []Extension
}

// Membership is Role granted to Member.
type Membership struct {
	Role, Member string
	Admin        bool
}

// SearchPath is the search_path of Role: its elements, unquoted.
type SearchPath struct {
	Role string
	Path []string
}

// Privileges are default privileges: what Owner creates, Reader may read
// (SELECT on tables and sequences) and Writer may write (INSERT, UPDATE,
// DELETE on tables, USAGE and UPDATE on sequences); both may EXECUTE its
// functions and use its types, as zalando grants them.
type Privileges struct{ Owner, Reader, Writer string }

// PreparedSchema is one schema of a prepared database, owned by Owner
// when pgloop creates it (an existing one keeps its owner, as with
// zalando), with default privileges in it.
type PreparedSchema struct {
	Name, Owner string
	Privileges  []Privileges
}

// Extension is created in Schema (CREATE EXTENSION ... SCHEMA), or moved
// there (ALTER EXTENSION ... SET SCHEMA) when it is in another one.
type Extension struct{ Name, Schema string }

// Item names of a prepared database, after its name: "shop", "shop
// schema data", "shop extension pgcrypto".
func schemaItem(db, schema string) string { return db + " schema " + schema }
func extensionItem(db, ext string) string { return db + " extension " + ext }

// missingMembers lists, by 1-based index, the memberships ($1 granted to
// $2, with admin option when $3) the catalog lacks: NULL when none. A
// membership with the admin option satisfies one without.
const missingMembers = `
SELECT array_agg(w.i ORDER BY w.i) FROM unnest($1::text[], $2::text[], $3::bool[]) WITH ORDINALITY AS w(role, member, admin, i)
WHERE NOT EXISTS (SELECT FROM pg_auth_members m
	WHERE m.roleid = (SELECT oid FROM pg_roles WHERE rolname = w.role)
	AND m.member = (SELECT oid FROM pg_roles WHERE rolname = w.member)
	AND (m.admin_option OR NOT w.admin))`

// missingSearchPaths lists, by 1-based index, the roles $1 whose
// search_path, set for every database, is not $2 (elements joined by ',').
// The server stores the value as it quotes identifiers (quote_ident), so
// that is what is compared.
const missingSearchPaths = `
SELECT array_agg(w.i ORDER BY w.i) FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS w(role, path, i)
WHERE NOT EXISTS (SELECT FROM pg_db_role_setting s
	WHERE s.setdatabase = 0 AND s.setrole = (SELECT oid FROM pg_roles WHERE rolname = w.role)
	AND 'search_path=' || (SELECT string_agg(quote_ident(e), ', ' ORDER BY o)
		FROM unnest(string_to_array(w.path, ',')) WITH ORDINALITY AS p(e, o)) = ANY (s.setconfig))`

// missingPrivileges counts the default privileges of role $1 in schema $2
// ("" for database-wide ones) that the catalog lacks: $3 object types
// (pg_default_acl.defaclobjtype), $4 grantees, $5 privileges; and the
// grantees $6 without USAGE on schema $2.
const missingPrivileges = `
SELECT (SELECT count(*) FROM unnest($3::text[], $4::text[], $5::text[]) AS w(objtype, grantee, privilege)
	WHERE NOT EXISTS (SELECT FROM pg_default_acl d, aclexplode(d.defaclacl) a
		WHERE d.defaclrole = (SELECT oid FROM pg_roles WHERE rolname = $1)
		AND d.defaclnamespace = CASE WHEN $2 = '' THEN 0 ELSE (SELECT oid FROM pg_namespace WHERE nspname = $2) END
		AND d.defaclobjtype = w.objtype::"char"
		AND a.grantee = (SELECT oid FROM pg_roles WHERE rolname = w.grantee)
		AND a.privilege_type = w.privilege))
	+ (SELECT count(*) FROM unnest($6::text[]) AS g(grantee)
	WHERE NOT EXISTS (SELECT FROM pg_namespace n, aclexplode(n.nspacl) a
		WHERE n.nspname = $2 AND a.privilege_type = 'USAGE'
		AND a.grantee = (SELECT oid FROM pg_roles WHERE rolname = g.grantee)))`

// grant is one default privilege: an object type (its defaclobjtype and
// its keyword in ALTER DEFAULT PRIVILEGES), whether the reader or the
// writer gets it, and the privilege.
type grant struct {
	objtype, objects string
	writer           bool
	privilege        string
}

// grants are zalando's default privileges (globalDefaultPrivilegesSQL,
// schemaDefaultPrivilegesSQL), in the order it grants them.
var grants = []grant{
	{"r", "TABLES", false, "SELECT"},
	{"S", "SEQUENCES", false, "SELECT"},
	{"r", "TABLES", true, "INSERT"}, {"r", "TABLES", true, "UPDATE"}, {"r", "TABLES", true, "DELETE"},
	{"S", "SEQUENCES", true, "USAGE"}, {"S", "SEQUENCES", true, "UPDATE"},
	{"f", "FUNCTIONS", false, "EXECUTE"}, {"f", "FUNCTIONS", true, "EXECUTE"},
	{"T", "TYPES", false, "USAGE"}, {"T", "TYPES", true, "USAGE"},
}

// schemasGrant is the database-wide default privilege on schemas the owner
// creates.
var schemasGrant = []grant{{"n", "SCHEMAS", false, "USAGE"}, {"n", "SCHEMAS", true, "USAGE"}}

// checkPrepared refuses names PostgreSQL would change.
func checkPrepared(p PreparedDatabase) error {
	names := []string{p.Name}
	for _, m := range p.Members {
		names = append(names, m.Role, m.Member)
	}
	for _, sp := range p.SearchPaths {
		names = append(names, sp.Role)
		for _, e := range sp.Path {
			if strings.Contains(e, ",") {
				return fmt.Errorf("search_path element %q has a comma", e)
			}
		}
		names = append(names, sp.Path...)
	}
	for _, s := range p.Schemas {
		names = append(names, s.Name, s.Owner)
	}
	for _, e := range p.Extensions {
		names = append(names, e.Name, e.Schema)
	}
	for _, n := range names {
		if err := checkName(n); err != nil {
			return err
		}
	}
	return nil
}

// syncPrepared prepares each database of ps over a connection to it, the
// items of each in order: the database (memberships, search paths,
// database-wide privileges), each schema, each extension, of KindPrepared.
// It returns the number of items.
func (s *session) syncPrepared(ctx context.Context, ps []PreparedDatabase, res *Result) int {
	items := 0
	for _, p := range ps {
		names := []string{p.Name}
		for _, sc := range p.Schemas {
			names = append(names, schemaItem(p.Name, sc.Name))
		}
		for _, e := range p.Extensions {
			names = append(names, extensionItem(p.Name, e.Name))
		}
		items += len(names)
		// failAll fails the database's item with err, and the others as
		// not tried because of it.
		failAll := func(err error) {
			rest := notTried(err)
			for i, n := range names {
				if i > 0 {
					err = rest
				}
				res.Errors = append(res.Errors, ItemError{Kind: KindPrepared, Name: n, Err: err})
			}
		}
		if err := s.usable(ctx); err != nil {
			for _, n := range names {
				res.Errors = append(res.Errors, ItemError{Kind: KindPrepared, Name: n, Err: notTried(err)})
			}
			continue
		}
		if err := checkPrepared(p); err != nil {
			failAll(err)
			continue
		}
		other := s
		if p.Name != s.database() {
			ep := s.ep
			ep.Database = p.Name
			var err error
			if other, err = connect(ctx, ep, s.opts); err != nil {
				failAll(fmt.Errorf("connect to database %s: %w", p.Name, err))
				continue
			}
		}
		other.prepare(ctx, p, res)
		if other != s {
			other.close(ctx)
		}
	}
	return items
}

// prepare applies p over a session connected to its database.
func (s *session) prepare(ctx context.Context, p PreparedDatabase, res *Result) {
	item := func(name string, f func() (string, error)) {
		if err := s.usable(ctx); err != nil {
			res.Errors = append(res.Errors, ItemError{Kind: KindPrepared, Name: name, Err: notTried(err)})
			return
		}
		switch done, err := f(); {
		case err != nil:
			res.Errors = append(res.Errors, ItemError{Kind: KindPrepared, Name: name, Err: err})
		case done != "":
			res.add(done, KindPrepared+" "+name)
		}
	}
	item(p.Name, func() (string, error) { return s.prepareDatabase(ctx, p) })
	for _, sc := range p.Schemas {
		item(schemaItem(p.Name, sc.Name), func() (string, error) { return s.prepareSchema(ctx, sc) })
	}
	for _, e := range p.Extensions {
		item(extensionItem(p.Name, e.Name), func() (string, error) { return s.prepareExtension(ctx, e) })
	}
}

// prepareDatabase grants the memberships, sets the search paths and the
// database-wide default privileges that are missing.
func (s *session) prepareDatabase(ctx context.Context, p PreparedDatabase) (string, error) {
	var stmts []string
	if len(p.Members) > 0 {
		var roles, members []string
		var admin []bool
		for _, m := range p.Members {
			roles, members, admin = append(roles, m.Role), append(members, m.Member), append(admin, m.Admin)
		}
		var missing []int
		if _, err := s.queryRow(ctx, missingMembers, []any{roles, members, admin}, &missing); err != nil {
			return "", fmt.Errorf("read memberships: %w", err)
		}
		for _, i := range missing {
			m := p.Members[i-1]
			stmt := "GRANT " + pgx.Identifier{m.Role}.Sanitize() + " TO " + pgx.Identifier{m.Member}.Sanitize()
			if m.Admin {
				stmt += " WITH ADMIN OPTION"
			}
			stmts = append(stmts, stmt)
		}
	}
	if len(p.SearchPaths) > 0 {
		var roles, paths []string
		for _, sp := range p.SearchPaths {
			roles, paths = append(roles, sp.Role), append(paths, strings.Join(sp.Path, ","))
		}
		var missing []int
		if _, err := s.queryRow(ctx, missingSearchPaths, []any{roles, paths}, &missing); err != nil {
			return "", fmt.Errorf("read search paths: %w", err)
		}
		for _, i := range missing {
			sp := p.SearchPaths[i-1]
			quoted := make([]string, len(sp.Path))
			for j, e := range sp.Path {
				quoted[j] = pgx.Identifier{e}.Sanitize()
			}
			stmts = append(stmts, "ALTER ROLE "+pgx.Identifier{sp.Role}.Sanitize()+" SET search_path TO "+strings.Join(quoted, ", "))
		}
	}
	for _, pr := range p.Privileges {
		more, err := s.privileges(ctx, "", pr)
		if err != nil {
			return "", err
		}
		stmts = append(stmts, more...)
	}
	if len(stmts) == 0 {
		return "", nil
	}
	if err := s.exec(ctx, strings.Join(stmts, ";\n")); err != nil {
		return "", err
	}
	return altered, nil
}

// privileges returns the statements that give pr in schema ("" for the
// whole database) when any of it is missing, none when all is there.
func (s *session) privileges(ctx context.Context, schema string, pr Privileges) ([]string, error) {
	gs := grants
	var usage []string
	if schema == "" {
		gs = append(append([]grant{}, schemasGrant...), grants...)
	} else {
		usage = []string{pr.Reader, pr.Writer}
	}
	var objtypes, grantees, privs []string
	for _, g := range gs {
		grantee := pr.Reader
		if g.writer {
			grantee = pr.Writer
		}
		objtypes, grantees, privs = append(objtypes, g.objtype), append(grantees, grantee), append(privs, g.privilege)
	}
	var missing int
	if _, err := s.queryRow(ctx, missingPrivileges, []any{pr.Owner, schema, objtypes, grantees, privs, usage}, &missing); err != nil {
		return nil, fmt.Errorf("read default privileges of %s: %w", pr.Owner, err)
	}
	if missing == 0 {
		return nil, nil
	}
	alter := "ALTER DEFAULT PRIVILEGES FOR ROLE " + pgx.Identifier{pr.Owner}.Sanitize()
	if schema != "" {
		alter += " IN SCHEMA " + pgx.Identifier{schema}.Sanitize()
	}
	var out []string
	if schema != "" {
		out = append(out, "GRANT USAGE ON SCHEMA "+pgx.Identifier{schema}.Sanitize()+" TO "+
			pgx.Identifier{pr.Reader}.Sanitize()+", "+pgx.Identifier{pr.Writer}.Sanitize())
	}
	for _, g := range gs {
		grantee := pr.Reader
		if g.writer {
			grantee = pr.Writer
		}
		out = append(out, alter+" GRANT "+g.privilege+" ON "+g.objects+" TO "+pgx.Identifier{grantee}.Sanitize())
	}
	return out, nil
}

// prepareSchema creates sc when it is missing, then gives the default
// privileges in it that are missing.
func (s *session) prepareSchema(ctx context.Context, sc PreparedSchema) (string, error) {
	var exists bool
	if _, err := s.queryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)",
		[]any{sc.Name}, &exists); err != nil {
		return "", fmt.Errorf("read schema: %w", err)
	}
	done := ""
	if !exists {
		if err := s.exec(ctx, "CREATE SCHEMA "+pgx.Identifier{sc.Name}.Sanitize()+
			" AUTHORIZATION "+pgx.Identifier{sc.Owner}.Sanitize()); err != nil {
			return "", err
		}
		done = created
	}
	var stmts []string
	for _, pr := range sc.Privileges {
		more, err := s.privileges(ctx, sc.Name, pr)
		if err != nil {
			return done, err
		}
		stmts = append(stmts, more...)
	}
	if len(stmts) == 0 {
		return done, nil
	}
	if err := s.exec(ctx, strings.Join(stmts, ";\n")); err != nil {
		return done, err
	}
	if done == "" {
		done = altered
	}
	return done, nil
}

// prepareExtension creates e in its schema, or moves it there.
func (s *session) prepareExtension(ctx context.Context, e Extension) (string, error) {
	var schema string
	exists, err := s.queryRow(ctx, "SELECT n.nspname FROM pg_extension x JOIN pg_namespace n ON n.oid = x.extnamespace"+
		" WHERE x.extname = $1", []any{e.Name}, &schema)
	if err != nil {
		return "", fmt.Errorf("read extension: %w", err)
	}
	name, target := pgx.Identifier{e.Name}.Sanitize(), pgx.Identifier{e.Schema}.Sanitize()
	switch {
	case exists && schema == e.Schema:
		return "", nil
	case exists:
		if err := s.exec(ctx, "ALTER EXTENSION "+name+" SET SCHEMA "+target); err != nil {
			return "", err
		}
		return altered, nil
	}
	if err := s.exec(ctx, "CREATE EXTENSION "+name+" SCHEMA "+target); err != nil {
		return "", err
	}
	return created, nil
}
