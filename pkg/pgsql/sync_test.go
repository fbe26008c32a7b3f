package pgsql

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// roleAttributes reads a role's attributes as "CREATEDB LOGIN ..." (only
// those that are on), "" when the role does not exist.
func roleAttributes(t *testing.T, srv *server, name string) string {
	t.Helper()
	have := make([]bool, len(attributes))
	dest := make([]any, len(have))
	for i := range have {
		dest[i] = &have[i]
	}
	err := srv.super(t).QueryRow(context.Background(),
		"SELECT rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolcanlogin, rolreplication, rolbypassrls FROM pg_roles WHERE rolname = $1",
		name).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	var on []string
	for i, a := range attributes {
		if have[i] {
			on = append(on, a.on)
		}
	}
	return strings.Join(on, " ")
}

func databaseOwner(t *testing.T, srv *server, name string) string {
	t.Helper()
	var owner string
	err := srv.super(t).QueryRow(context.Background(),
		"SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = $1", name).Scan(&owner)
	if err != nil {
		t.Fatalf("database %s: %v", name, err)
	}
	return owner
}

func TestSyncCreatesThenLeavesAlone(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	var rec recorder
	d := Desired{
		Roles: []Role{
			{Name: "create_app", Flags: []string{"CREATEDB"}, Password: "app-pw-1"},
			{Name: "create_admin", Flags: []string{"CREATEROLE", "NOINHERIT"}, Password: "admin-pw-1"},
		},
		Databases: []Database{{Name: "create_appdb", Owner: "create_app"}, {Name: "create_admindb", Owner: "create_admin"}},
	}
	res, err := Sync(ctx, srv.endpoint(), d, rec.options())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"role create_app", "role create_admin", "database create_appdb", "database create_admindb"}
	if !slices.Equal(res.Created, want) || len(res.Altered) != 0 || len(res.Errors) != 0 {
		t.Errorf("first sync: %+v, want created %v", res, want)
	}
	if got := roleAttributes(t, srv, "create_app"); got != "INHERIT CREATEDB LOGIN" {
		t.Errorf("create_app: %q", got)
	}
	if got := roleAttributes(t, srv, "create_admin"); got != "CREATEROLE LOGIN" {
		t.Errorf("create_admin: %q", got)
	}
	for db, owner := range map[string]string{"create_appdb": "create_app", "create_admindb": "create_admin"} {
		if got := databaseOwner(t, srv, db); got != owner {
			t.Errorf("database %s owned by %s, want %s", db, got, owner)
		}
	}
	for _, login := range [][3]string{{"create_app", "app-pw-1", "create_appdb"}, {"create_admin", "admin-pw-1", "create_admindb"}} {
		if err := srv.login(ctx, login[0], login[1], login[2]); err != nil {
			t.Errorf("%s into %s: %v", login[0], login[2], err)
		}
	}
	// One SET, two statements per role, three per database.
	if got, want := rec.count(OutcomeOK), 1+2*2+2*3; got != want || len(rec.outcomes) != want {
		t.Errorf("observed %v, want %d ok", rec.outcomes, want)
	}

	res, err = Sync(ctx, srv.endpoint(), d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created)+len(res.Altered)+len(res.Errors) != 0 {
		t.Errorf("second sync did something: %+v", res)
	}
}

func TestSyncAltersWhatDiffers(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	sync := func(r Role) Result {
		t.Helper()
		res, err := Sync(ctx, srv.endpoint(), Desired{Roles: []Role{r}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	sync(Role{Name: "alter_app", Flags: []string{"CREATEDB"}, Password: "old-pw"})

	cases := []struct {
		name    string
		role    Role
		altered bool
		attrs   string
	}{
		{"same again", Role{Name: "alter_app", Flags: []string{"CREATEDB"}, Password: "old-pw"}, false, "INHERIT CREATEDB LOGIN"},
		{"no password leaves it", Role{Name: "alter_app", Flags: []string{"CREATEDB"}}, false, "INHERIT CREATEDB LOGIN"},
		{"flags given are set", Role{Name: "alter_app", Flags: []string{"NOCREATEDB", "REPLICATION"}}, true, "INHERIT LOGIN REPLICATION"},
		{"flags not given are left", Role{Name: "alter_app", Flags: []string{"LOGIN"}}, false, "INHERIT LOGIN REPLICATION"},
		{"NOLOGIN", Role{Name: "alter_app", Flags: []string{"NOLOGIN"}}, true, "INHERIT REPLICATION"},
		{"LOGIN unless NOLOGIN", Role{Name: "alter_app"}, true, "INHERIT LOGIN REPLICATION"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := sync(tc.role)
			if got := len(res.Altered) == 1 && res.Altered[0] == "role alter_app"; got != tc.altered || len(res.Created) != 0 {
				t.Errorf("result %+v, want altered %v", res, tc.altered)
			}
			if got := roleAttributes(t, srv, "alter_app"); got != tc.attrs {
				t.Errorf("attributes %q, want %q", got, tc.attrs)
			}
		})
	}

	t.Run("password", func(t *testing.T) {
		res := sync(Role{Name: "alter_app", Password: "new-pw"})
		if !slices.Equal(res.Altered, []string{"role alter_app"}) {
			t.Errorf("result %+v, want role alter_app altered", res)
		}
		var pgErr *pgconn.PgError
		if err := srv.login(ctx, "alter_app", "old-pw", "postgres"); !errors.As(err, &pgErr) || pgErr.Code != codeInvalidPassword {
			t.Errorf("old password: %v, want 28P01", err)
		}
		if err := srv.login(ctx, "alter_app", "new-pw", "postgres"); err != nil {
			t.Errorf("new password: %v", err)
		}
	})
}

func TestSyncDatabaseOwner(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	d := Desired{
		Roles:     []Role{{Name: "owner_a"}, {Name: "owner_b"}},
		Databases: []Database{{Name: "owner_db", Owner: "owner_a"}},
	}
	if _, err := Sync(ctx, srv.endpoint(), d, Options{}); err != nil {
		t.Fatal(err)
	}
	d.Databases[0].Owner = "owner_b"
	res, err := Sync(ctx, srv.endpoint(), d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Altered, []string{"database owner_db"}) || len(res.Created) != 0 {
		t.Errorf("result %+v, want database owner_db altered", res)
	}
	if got := databaseOwner(t, srv, "owner_db"); got != "owner_b" {
		t.Errorf("owner %s, want owner_b", got)
	}
}

func TestSyncMissingOwner(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	d := Desired{
		Roles: []Role{{Name: "missing_ok"}},
		Databases: []Database{
			{Name: "missing_db1", Owner: "missing_nobody"},
			{Name: "missing_db2", Owner: "missing_ok"},
		},
	}
	res, err := Sync(ctx, srv.endpoint(), d, Options{})
	if err == nil {
		t.Fatal("no error")
	}
	want := "database missing_db1: owner role missing_nobody does not exist"
	if len(res.Errors) != 1 || res.Errors[0].Error() != want {
		t.Errorf("errors %v, want %q", res.Errors, want)
	}
	if !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "primary 127.0.0.1:") {
		t.Errorf("error %q", err)
	}
	if !slices.Equal(res.Created, []string{"role missing_ok", "database missing_db2"}) {
		t.Errorf("created %v", res.Created)
	}
	var n int
	if err := srv.super(t).QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = 'missing_db1'").Scan(&n); err != nil || n != 0 {
		t.Errorf("missing_db1: %d, %v", n, err)
	}
}

func TestSyncRefusedRoles(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	long := strings.Repeat("x", 64)
	d := Desired{
		Roles: []Role{
			{Name: "public"},
			{Name: "refused_ok", Password: "fine"},
			{Name: "none"},
			{Name: "pg_refused"},
			{Name: long},
			{Name: "refused_flag", Flags: []string{"LOGIN; DROP ROLE postgres"}},
			{Name: "refused_both", Flags: []string{"LOGIN", "NOLOGIN"}},
		},
		Databases: []Database{{Name: "refused_db", Owner: "public"}, {Name: "refused_okdb", Owner: "refused_ok"}},
	}
	res, err := Sync(ctx, srv.endpoint(), d, Options{})
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		`role public: role name "public" is reserved`,
		`role none: role name "none" is reserved`,
		`role pg_refused: role name "pg_refused" is reserved`,
		"role " + long + ": name is longer than 63 bytes",
		`role refused_flag: unknown role attribute "LOGIN; DROP ROLE postgres"`,
		"role refused_both: conflicting role attributes LOGIN and NOLOGIN",
		"database refused_db: owner role public does not exist",
	}
	var got []string
	for _, e := range res.Errors {
		got = append(got, e.Error())
	}
	if !slices.Equal(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(err.Error(), "7 of 9 items failed") {
		t.Errorf("error %q", err)
	}
	if !slices.Equal(res.Created, []string{"role refused_ok", "database refused_okdb"}) {
		t.Errorf("created %v", res.Created)
	}
	if err := srv.login(ctx, "refused_ok", "fine", "refused_okdb"); err != nil {
		t.Error(err)
	}
}

func TestSyncPasswordsNeedNoCare(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	passwords := []string{
		`it's`,
		`back\slash\\`,
		`"double" 'single' ''`,
		`$$dollar$$ $tag$`,
		"p\u00e4ssw\u00f6rd \u65e5\u672c \U0001F418",
		`--; DROP ROLE postgres; --`,
		"tab\tnewline\n",
	}
	var d Desired
	for i, p := range passwords {
		d.Roles = append(d.Roles, Role{Name: "quote_" + strconv.Itoa(i), Password: p})
	}
	if _, err := Sync(ctx, srv.endpoint(), d, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range d.Roles {
		if err := srv.login(ctx, r.Name, r.Password, "postgres"); err != nil {
			t.Errorf("%s with %q: %v", r.Name, r.Password, err)
		}
	}
	// The verifiers the server made are read back as matching.
	res, err := Sync(ctx, srv.endpoint(), d, Options{})
	if err != nil || len(res.Altered) != 0 {
		t.Errorf("second sync: %+v, %v", res, err)
	}
}

func TestSyncPasswordFallback(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	d := Desired{Roles: []Role{{Name: "fallback_app"}}}

	var rec recorder
	ep := srv.endpoint()
	ep.Passwords = []string{"wrong", superPassword}
	if _, err := Sync(ctx, ep, d, rec.options()); err != nil {
		t.Fatal(err)
	}
	if rec.outcomes[0] != OutcomeError || rec.count(OutcomeError) != 1 {
		t.Errorf("observed %v, want one error first", rec.outcomes)
	}

	rec = recorder{}
	ep.Passwords = []string{"wrong", "wrong too"}
	_, err := Sync(ctx, ep, d, rec.options())
	want := `primary 127.0.0.1:` + strconv.Itoa(srv.port) + `: password authentication failed for user "postgres" (tried 2 passwords)`
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	if !slices.Equal(rec.outcomes, []string{OutcomeError, OutcomeError}) {
		t.Errorf("observed %v", rec.outcomes)
	}
}

// hangingServer accepts connections and never answers them.
func hangingServer(t *testing.T) (host string, port int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
			close(done)
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
	})
	addr := l.Addr().(*net.TCPAddr)
	return addr.IP.String(), addr.Port
}

func TestSyncServerThatDoesNotAnswer(t *testing.T) {
	host, port := hangingServer(t)
	ep := Endpoint{Label: "primary", Host: host, Port: port, User: "postgres", Passwords: []string{"a", "b"}}
	d := Desired{Roles: []Role{{Name: "app", Password: "secret"}}}

	cases := []struct {
		name    string
		timeout time.Duration // of the caller's context; 0 for none
		connect time.Duration
		within  string
	}{
		{"ConnectTimeout", 0, time.Second, "did not answer within 1s"},
		{"caller's deadline", 300 * time.Millisecond, 5 * time.Second, "did not answer within 300ms"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			limit := tc.connect
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
				limit = tc.timeout
			}
			var rec recorder
			opts := rec.options()
			opts.ConnectTimeout = tc.connect
			start := time.Now()
			_, err := Sync(ctx, ep, d, opts)
			took := time.Since(start)
			// Not before the limit; after it by what a busy machine's
			// scheduler adds (the error says which deadline ended it).
			if took < limit-50*time.Millisecond || took > limit+30*time.Second {
				t.Errorf("took %s, want about %s", took, limit)
			}
			// Within 300ms of the caller's deadline, a few milliseconds went
			// before the connection attempt: the message says 29Xms.
			if err == nil || !strings.HasPrefix(err.Error(), "primary "+host+":"+strconv.Itoa(port)+" did not answer within ") {
				t.Fatalf("error %v, want %q", err, tc.within)
			}
			if tc.timeout == 0 && err.Error() != "primary "+host+":"+strconv.Itoa(port)+" "+tc.within {
				t.Errorf("error %q, want %q", err, tc.within)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error %v is not DeadlineExceeded", err)
			}
			// A timeout does not move on to the next password.
			if !slices.Equal(rec.outcomes, []string{OutcomeTimeout}) {
				t.Errorf("observed %v, want one timeout", rec.outcomes)
			}
		})
	}
}

func TestSyncDeadlinePassed(t *testing.T) {
	host, port := hangingServer(t)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	var rec recorder
	_, err := Sync(ctx, Endpoint{Label: "primary", Host: host, Port: port, User: "postgres"}, Desired{}, rec.options())
	want := "primary " + host + ":" + strconv.Itoa(port) + " not tried: the deadline had passed"
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	if !slices.Equal(rec.outcomes, []string{OutcomeTimeout}) {
		t.Errorf("observed %v", rec.outcomes)
	}
}

func TestSyncNothingListens(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	_, err = Sync(context.Background(), Endpoint{Label: "primary", Host: "127.0.0.1", Port: port, User: "postgres"}, Desired{}, rec.options())
	want := "primary 127.0.0.1:" + strconv.Itoa(port) + ": connect: connection refused"
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	if !slices.Equal(rec.outcomes, []string{OutcomeError}) {
		t.Errorf("observed %v", rec.outcomes)
	}
}

func TestSyncTLSRefused(t *testing.T) {
	srv := startServer(t)
	var rec recorder
	opts := rec.options()
	opts.TLS = &tls.Config{}
	_, err := Sync(context.Background(), srv.endpoint(), Desired{}, opts)
	want := "primary 127.0.0.1:" + strconv.Itoa(srv.port) + ": tls error: server refused TLS connection"
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	if !slices.Equal(rec.outcomes, []string{OutcomeError}) {
		t.Errorf("observed %v", rec.outcomes)
	}
}

// TestSyncStatementTimeout holds the row of a database in another
// transaction, so that changing its owner waits: the statement times out on
// the server, and the items after it are still applied on the same
// connection.
func TestSyncStatementTimeout(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	d := Desired{
		Roles:     []Role{{Name: "stmt_a"}, {Name: "stmt_b"}, {Name: "stmt_c"}},
		Databases: []Database{{Name: "stmt_db", Owner: "stmt_a"}, {Name: "stmt_after", Owner: "stmt_a"}},
	}
	if _, err := Sync(ctx, srv.endpoint(), d, Options{}); err != nil {
		t.Fatal(err)
	}
	tx, err := srv.super(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "ALTER DATABASE stmt_db OWNER TO stmt_b"); err != nil {
		t.Fatal(err)
	}

	// Only ALTER DATABASE, quick unlike CREATE DATABASE, after the timeout.
	d.Databases = []Database{{Name: "stmt_db", Owner: "stmt_c"}, {Name: "stmt_after", Owner: "stmt_c"}}
	var rec recorder
	opts := rec.options()
	opts.StatementTimeout = 500 * time.Millisecond
	res, err := Sync(ctx, srv.endpoint(), Desired{Databases: d.Databases}, opts)
	if err == nil {
		t.Fatal("no error")
	}
	want := "database stmt_db: canceling statement due to statement timeout"
	if len(res.Errors) != 1 || res.Errors[0].Error() != want {
		t.Errorf("errors %v, want %q", res.Errors, want)
	}
	if !slices.Equal(res.Altered, []string{"database stmt_after"}) {
		t.Errorf("altered %v", res.Altered)
	}
	if rec.count(OutcomeTimeout) != 1 || rec.count(OutcomeError) != 0 {
		t.Errorf("observed %v, want one timeout", rec.outcomes)
	}
}

// TestSyncCallerDeadlineMidway: once the caller's deadline passes, the
// items left are not tried.
func TestSyncCallerDeadlineMidway(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	if _, err := Sync(ctx, srv.endpoint(), Desired{Roles: []Role{{Name: "midway_a"}, {Name: "midway_b"}}, Databases: []Database{{Name: "midway_db", Owner: "midway_a"}}}, Options{}); err != nil {
		t.Fatal(err)
	}
	tx, err := srv.super(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "ALTER DATABASE midway_db OWNER TO midway_b"); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var rec recorder
	d := Desired{Databases: []Database{{Name: "midway_db", Owner: "midway_b"}, {Name: "midway_after", Owner: "midway_a"}}}
	start := time.Now()
	res, err := Sync(ctx, srv.endpoint(), d, rec.options())
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("took %s past a deadline of 1s", took)
	}
	want := []string{"database midway_db: did not answer within 1s", "database midway_after: not tried: the deadline passed"}
	var got []string
	for _, e := range res.Errors {
		got = append(got, e.Error())
	}
	if err == nil || len(got) != 2 || !strings.HasPrefix(got[0], "database midway_db: did not answer within ") || got[1] != want[1] {
		t.Errorf("errors %q, want like %q", got, want)
	}
	if rec.count(OutcomeTimeout) != 1 {
		t.Errorf("observed %v, want one timeout", rec.outcomes)
	}
}

// TestSyncLogsNoPassword: with every statement logged, no password of a
// sync or a SetPassword reaches the server's log, not even from a statement
// that failed, nor pg_stat_statements.
func TestSyncLogsNoPassword(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	srv.exec(t, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
	secrets := []string{"logged-create-7f3a", "logged-alter-9c1e", "logged-failed-2b8d", "logged-setpassword-5e6f"}
	d := Desired{Roles: []Role{
		{Name: "nolog_app", Password: secrets[0]},
		{Name: "public", Password: secrets[2]}, // refused: an error
	}}
	if _, err := Sync(ctx, srv.endpoint(), d, Options{}); err == nil {
		t.Fatal("no error for role public")
	}
	d.Roles[0].Password = secrets[1]
	if _, err := Sync(ctx, srv.endpoint(), d, Options{}); err == nil {
		t.Fatal("no error for role public")
	}
	if err := SetPassword(ctx, srv.endpoint(), "nolog_app", secrets[3], Options{}); err != nil {
		t.Fatal(err)
	}
	if err := srv.login(ctx, "nolog_app", secrets[3], "postgres"); err != nil {
		t.Fatal(err)
	}

	log, err := os.ReadFile(srv.logPath)
	if err != nil {
		t.Fatal(err)
	}
	// The log has statements, pgloop's among them (so it is the right log),
	// and an error of role public.
	for _, want := range []string{"statement: SET log_statement = 'none'", `role name "public" is reserved`} {
		if !strings.Contains(string(log), want) {
			t.Errorf("the server's log lacks %q", want)
		}
	}
	for _, secret := range secrets {
		if strings.Contains(string(log), secret) {
			t.Errorf("the server's log has password %q", secret)
		}
	}

	var kept int
	if err := srv.super(t).QueryRow(ctx, "SELECT count(*) FROM pg_stat_statements WHERE query LIKE '%logged-%'").Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if kept != 0 {
		t.Errorf("pg_stat_statements kept %d statements with a password", kept)
	}
}
