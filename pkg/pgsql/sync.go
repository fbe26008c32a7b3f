package pgsql

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Role is one role of the spec.
type Role struct {
	Name string
	// Flags are normalized upper-case role attributes (SUPERUSER,
	// NOSUPERUSER, INHERIT, NOINHERIT, LOGIN, NOLOGIN, CREATEROLE,
	// NOCREATEROLE, CREATEDB, NOCREATEDB, REPLICATION, NOREPLICATION,
	// BYPASSRLS, NOBYPASSRLS). The spec's validation checked them; anything
	// else still fails the role, and never reaches SQL.
	Flags []string
	// Password is the role's password; "" leaves it as it is.
	Password string
	// MemberOf, when set, is a role this one is made a member of (GRANT
	// member_of TO name) unless it is one already: a role a password
	// rotation created has its user's privileges.
	MemberOf string
}

// Database is one database of the spec and the role that owns it.
type Database struct{ Name, Owner string }

// Desired is what one sync applies.
type Desired struct {
	// Roles are created (CREATE ROLE name WITH <flags> PASSWORD '...') or
	// altered where they differ (ALTER ROLE name WITH <flags> PASSWORD
	// '...'). They get LOGIN unless NOLOGIN is given, as zalando does.
	Roles []Role
	// Databases are created (CREATE DATABASE name OWNER owner) when
	// missing and given to their owner (ALTER DATABASE name OWNER TO owner)
	// when someone else owns them.
	Databases []Database
	// Prepared are prepared databases (zalando's preparedDatabases), each
	// prepared after the roles and databases, over a connection to it:
	// memberships, search paths, schemas, default privileges and
	// extensions, each written only when the catalog lacks it.
	Prepared []PreparedDatabase
	// Pooler, when set, is the connection pooler's auth lookup, installed
	// after the roles and databases in every database that takes
	// connections and is not a template: PgBouncer runs its auth_query in
	// the database the client asks for.
	Pooler *Pooler
	// Drop are roles to drop (DROP ROLE IF EXISTS), after everything
	// else: the roles of password rotations past their retention. A role
	// PostgreSQL refuses to drop (it owns objects, or has privileges) is
	// reported in Result.NotDropped, not as an error of the sync: it stays,
	// as zalando leaves it.
	Drop []string
}

// Result says what a sync did; Errors are per item, the rest applied.
type Result struct {
	Created, Altered []string // "role app", "database foo", "pooler foo"
	Errors           []ItemError
	// Dropped are the roles of Desired.Drop dropped (or already gone);
	// NotDropped those PostgreSQL refused to drop, with why.
	Dropped    []string
	NotDropped []ItemError
}

// ItemError is the failure of one role, database or pooler lookup (named
// by its database) of a sync.
type ItemError struct {
	Kind string // KindRole, KindDatabase, KindPrepared or KindPooler
	Name string
	Err  error
}

// Error reads "role app: permission denied to create role".
func (e ItemError) Error() string { return e.Kind + " " + e.Name + ": " + e.Err.Error() }

func (e ItemError) Unwrap() error { return e.Err }

// Kinds of items.
const (
	KindRole     = "role"
	KindDatabase = "database"
	// KindPooler is the pooler's auth lookup in one database.
	KindPooler = "pooler"
	// KindPrepared is one part of a prepared database: the database
	// itself ("shop": memberships, search paths, database-wide default
	// privileges), one of its schemas ("shop schema data") or extensions
	// ("shop extension pgcrypto").
	KindPrepared = "prepared"
)

// maxIdentifierLength is NAMEDATALEN-1 of a stock build. PostgreSQL does not
// refuse a longer name, it truncates it (with a NOTICE); a role created
// under another name than asked for would fail every later sync, so longer
// names are refused here.
const maxIdentifierLength = 63

// attribute is one role attribute: its pg_roles column and its keywords.
type attribute struct{ column, on, off string }

// attributes in the order ALTER ROLE gets them and the catalog query reads
// them.
var attributes = []attribute{
	{"rolsuper", "SUPERUSER", "NOSUPERUSER"},
	{"rolinherit", "INHERIT", "NOINHERIT"},
	{"rolcreaterole", "CREATEROLE", "NOCREATEROLE"},
	{"rolcreatedb", "CREATEDB", "NOCREATEDB"},
	{"rolcanlogin", "LOGIN", "NOLOGIN"},
	{"rolreplication", "REPLICATION", "NOREPLICATION"},
	{"rolbypassrls", "BYPASSRLS", "NOBYPASSRLS"},
}

// loginAttribute is the index of LOGIN in attributes.
const loginAttribute = 4

// Sync connects to ep and applies d: every role first, then every database,
// each in the order given, then each prepared database (Desired.Prepared),
// then the pooler's lookup in each database by name (see Desired.Pooler).
// An item that fails is reported in Result.Errors and the others are still
// applied; once the deadline has passed or the connection is lost, the
// items left fail without being tried.
//
// The error is non-nil when nothing could be done (the connection failed)
// or when any item failed; then it lists the item errors, one per line.
func Sync(ctx context.Context, ep Endpoint, d Desired, opts Options) (Result, error) {
	opts = opts.withDefaults()
	var res Result
	s, err := connect(ctx, ep, opts)
	if err != nil {
		return res, err
	}
	defer s.close(ctx)
	for _, r := range d.Roles {
		if r.Password != "" {
			if err := s.hidePasswords(ctx); err != nil {
				return res, fmt.Errorf("%s: hide passwords from the server's log: %w", ep, err)
			}
			break
		}
	}

	fail := func(kind, name string, err error) {
		res.Errors = append(res.Errors, ItemError{Kind: kind, Name: name, Err: err})
	}
	for _, r := range d.Roles {
		if err := s.usable(ctx); err != nil {
			fail(KindRole, r.Name, notTried(err))
			continue
		}
		switch done, err := s.syncRole(ctx, r); {
		case err != nil:
			fail(KindRole, r.Name, err)
		case done != "":
			res.add(done, KindRole+" "+r.Name)
		}
		if r.MemberOf != "" {
			if err := s.grantMembership(ctx, r.Name, r.MemberOf); err != nil {
				fail(KindRole, r.Name, err)
			}
		}
	}
	for _, db := range d.Databases {
		if err := s.usable(ctx); err != nil {
			fail(KindDatabase, db.Name, notTried(err))
			continue
		}
		switch done, err := s.syncDatabase(ctx, db); {
		case err != nil:
			fail(KindDatabase, db.Name, err)
		case done != "":
			res.add(done, KindDatabase+" "+db.Name)
		}
	}

	items := len(d.Roles) + len(d.Databases)
	items += s.syncPrepared(ctx, d.Prepared, &res)
	if d.Pooler != nil {
		items += s.syncPooler(ctx, *d.Pooler, &res)
	}

	for _, name := range d.Drop {
		if err := s.usable(ctx); err != nil {
			res.NotDropped = append(res.NotDropped, ItemError{Kind: KindRole, Name: name, Err: notTried(err)})
			continue
		}
		if err := checkName(name); err != nil {
			res.NotDropped = append(res.NotDropped, ItemError{Kind: KindRole, Name: name, Err: err})
			continue
		}
		if err := s.exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
			res.NotDropped = append(res.NotDropped, ItemError{Kind: KindRole, Name: name, Err: err})
			continue
		}
		res.Dropped = append(res.Dropped, name)
	}

	if len(res.Errors) == 0 {
		return res, nil
	}
	errs := make([]error, len(res.Errors))
	for i, e := range res.Errors {
		errs[i] = e
	}
	return res, fmt.Errorf("%s: %d of %d items failed:\n%w",
		ep, len(res.Errors), items, errors.Join(errs...))
}

// What syncRole, syncDatabase and syncPooler did.
const (
	created = "created"
	altered = "altered"
)

func (r *Result) add(done, item string) {
	if done == created {
		r.Created = append(r.Created, item)
	} else {
		r.Altered = append(r.Altered, item)
	}
}

func notTried(cause error) error {
	msg := "not tried: " + cause.Error()
	if errors.Is(cause, context.DeadlineExceeded) {
		msg = "not tried: the deadline passed"
	}
	return &sqlError{msg: msg, err: cause}
}

// checkName refuses a name PostgreSQL would change rather than refuse.
func checkName(name string) error {
	switch {
	case strings.ContainsRune(name, 0):
		return errors.New("name contains a NUL byte")
	case len(name) > maxIdentifierLength:
		return fmt.Errorf("name is longer than %d bytes", maxIdentifierLength)
	}
	return nil
}

// wanted returns the attributes r asks for, by index into attributes: true
// for on, false for off, absent for "leave as it is"; LOGIN unless NOLOGIN.
func wanted(r Role) (map[int]bool, error) {
	want := map[int]bool{}
	for _, flag := range r.Flags {
		i, on := -1, false
		for j, a := range attributes {
			if flag == a.on || flag == a.off {
				i, on = j, flag == a.on
				break
			}
		}
		if i < 0 {
			return nil, fmt.Errorf("unknown role attribute %q", flag)
		}
		if prev, ok := want[i]; ok && prev != on {
			return nil, fmt.Errorf("conflicting role attributes %s and %s", attributes[i].on, attributes[i].off)
		}
		want[i] = on
	}
	if _, ok := want[loginAttribute]; !ok {
		want[loginAttribute] = true
	}
	return want, nil
}

// syncRole creates r or alters it where it differs from the catalog.
func (s *session) syncRole(ctx context.Context, r Role) (string, error) {
	if err := checkName(r.Name); err != nil {
		return "", err
	}
	want, err := wanted(r)
	if err != nil {
		return "", err
	}

	// Read the role: one row, or none when it does not exist.
	have := make([]bool, len(attributes))
	var verifier string
	var dest []any
	cols := make([]string, len(attributes))
	for i, a := range attributes {
		cols[i] = "r." + a.column
		dest = append(dest, &have[i])
	}
	dest = append(dest, &verifier)
	exists, err := s.queryRow(ctx, "SELECT "+strings.Join(cols, ", ")+", coalesce(a.rolpassword, '')"+
		" FROM pg_roles r LEFT JOIN pg_authid a ON a.oid = r.oid WHERE r.rolname = $1",
		[]any{r.Name}, dest...)
	if err != nil {
		return "", fmt.Errorf("read role: %w", err)
	}

	differs := !exists
	for i, on := range want {
		differs = differs || have[i] != on
	}
	setPassword := r.Password != "" && (!exists || !passwordMatches(verifier, r.Name, r.Password))
	if !differs && !setPassword {
		return "", nil
	}

	var sql strings.Builder
	if exists {
		sql.WriteString("ALTER ROLE ")
	} else {
		sql.WriteString("CREATE ROLE ")
	}
	sql.WriteString(pgx.Identifier{r.Name}.Sanitize())
	sql.WriteString(" WITH")
	for i, a := range attributes {
		if on, ok := want[i]; ok {
			sql.WriteString(" ")
			if on {
				sql.WriteString(a.on)
			} else {
				sql.WriteString(a.off)
			}
		}
	}
	if setPassword {
		password, err := s.literal(r.Password)
		if err != nil {
			return "", err
		}
		sql.WriteString(" PASSWORD ")
		sql.WriteString(password)
	}
	if err := s.exec(ctx, sql.String()); err != nil {
		return "", err
	}
	if exists {
		return altered, nil
	}
	return created, nil
}

// grantMembership makes role a member of memberOf, unless it is one.
func (s *session) grantMembership(ctx context.Context, role, memberOf string) error {
	if err := checkName(memberOf); err != nil {
		return err
	}
	var member bool
	if _, err := s.queryRow(ctx, "SELECT pg_has_role($1, $2, 'MEMBER')", []any{role, memberOf}, &member); err != nil {
		return fmt.Errorf("read membership in %s: %w", memberOf, err)
	}
	if member {
		return nil
	}
	return s.exec(ctx, "GRANT "+pgx.Identifier{memberOf}.Sanitize()+" TO "+pgx.Identifier{role}.Sanitize())
}

// syncDatabase creates db or gives it to its owner.
func (s *session) syncDatabase(ctx context.Context, db Database) (string, error) {
	if err := checkName(db.Name); err != nil {
		return "", err
	}
	var owner string
	exists, err := s.queryRow(ctx, "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = $1",
		[]any{db.Name}, &owner)
	if err != nil {
		return "", fmt.Errorf("read database: %w", err)
	}
	if exists && (db.Owner == "" || owner == db.Owner) {
		return "", nil
	}

	// 1. An owner that does not exist (its creation failed) fails the
	//    database here, with a message that says so, rather than with
	//    whatever CREATE DATABASE would make of it.
	// 2. No owner means the connecting role's, as CREATE DATABASE has it.
	if db.Owner != "" {
		var ownerExists bool
		if _, err := s.queryRow(ctx, "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)",
			[]any{db.Owner}, &ownerExists); err != nil {
			return "", fmt.Errorf("read owner role: %w", err)
		}
		if !ownerExists {
			return "", fmt.Errorf("owner role %s does not exist", db.Owner)
		}
	}

	name := pgx.Identifier{db.Name}.Sanitize()
	if exists {
		if err := s.exec(ctx, "ALTER DATABASE "+name+" OWNER TO "+pgx.Identifier{db.Owner}.Sanitize()); err != nil {
			return "", err
		}
		return altered, nil
	}
	sql := "CREATE DATABASE " + name
	if db.Owner != "" {
		sql += " OWNER " + pgx.Identifier{db.Owner}.Sanitize()
	}
	if err := s.exec(ctx, sql); err != nil {
		return "", err
	}
	return created, nil
}
