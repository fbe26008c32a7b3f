package e2e

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// TestPreparedDatabases checks preparedDatabases (issue 17) on real
// Patroni and PostgreSQL: database shop owned by shop_owner, its schema
// data owned by shop_data_owner, pgcrypto in data, the roles with
// zalando's memberships, and default privileges at work: what the owner
// creates the writer user writes and the reader user reads, each logging
// in with its Secret's password.
func TestPreparedDatabases(t *testing.T) {
	ns := env.Namespace(t)
	env.StartOperator(t, "prepared", []string{ns})
	ctx := Context(t, 8*time.Minute)
	const name = "prep"

	began := time.Now()
	env.CreateCluster(t, ns, name, 2, OnRealNode, func(pg *v1.Postgresql) {
		pg.Spec.PreparedDatabases = map[string]v1.PreparedDatabase{"shop": {DefaultUsers: true,
			Extensions: map[string]v1.ExtensionSchema{"pgcrypto": "data"},
			Schemas:    map[string]v1.PreparedSchema{"data": {}}}}
	})
	pg := inEffect(ctx, t, ns, name, 2)
	t.Logf("Running, prepared database synced after %v", time.Since(began).Round(time.Millisecond))
	primary := pg.Status.Primary

	super, err := connect(ctx, ns, primary, cluster.SuperuserName,
		password(ctx, t, ns, cluster.SecretName(cluster.SuperuserName, name)), "shop")
	if err != nil {
		t.Fatalf("as the superuser to shop: %v", err)
	}
	t.Cleanup(func() { _ = super.Close(ctx) })

	t.Run("database, schema, extension", func(t *testing.T) {
		var dbOwner, schemaOwner, extSchema string
		if err := super.QueryRow(ctx, "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'shop'").Scan(&dbOwner); err != nil || dbOwner != "shop_owner" {
			t.Errorf("database shop owned by %q (%v), want shop_owner", dbOwner, err)
		}
		// The schema has roles of its own (defaultRoles, by default).
		if err := super.QueryRow(ctx, "SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'data'").Scan(&schemaOwner); err != nil || schemaOwner != "shop_data_owner" {
			t.Errorf("schema data owned by %q (%v), want shop_data_owner", schemaOwner, err)
		}
		if err := super.QueryRow(ctx, "SELECT n.nspname FROM pg_extension x JOIN pg_namespace n ON n.oid = x.extnamespace WHERE x.extname = 'pgcrypto'").Scan(&extSchema); err != nil || extSchema != "data" {
			t.Errorf("pgcrypto in schema %q (%v), want data", extSchema, err)
		}
	})

	t.Run("roles and memberships", func(t *testing.T) {
		rows, err := super.Query(ctx, `SELECT r.rolname, r.rolcanlogin FROM pg_roles r WHERE r.rolname LIKE 'shop\_%' ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		var roles []string
		for rows.Next() {
			var n string
			var login bool
			if err := rows.Scan(&n, &login); err != nil {
				t.Fatal(err)
			}
			if login != slices.Contains([]string{"shop_owner_user", "shop_reader_user", "shop_writer_user"}, n) {
				t.Errorf("role %s: rolcanlogin %v", n, login)
			}
			roles = append(roles, n)
		}
		want := []string{"shop_data_owner", "shop_data_reader", "shop_data_writer", "shop_owner", "shop_owner_user",
			"shop_reader", "shop_reader_user", "shop_writer", "shop_writer_user"}
		if !slices.Equal(roles, want) {
			t.Errorf("roles %q, want %q", roles, want)
		}
		// zalando's table: member of, and admin.
		for _, m := range []struct {
			role, member string
			admin        bool
		}{
			{"shop_reader", "shop_writer", false}, {"shop_reader", "shop_owner", true}, {"shop_writer", "shop_owner", true},
			{"shop_owner", "shop_owner_user", false}, {"shop_reader", "shop_reader_user", false}, {"shop_writer", "shop_writer_user", false},
			{"shop_data_owner", "shop_owner", true}, {"shop_data_reader", "shop_data_writer", false}, {"shop_data_writer", "shop_data_owner", true},
		} {
			var admin bool
			err := super.QueryRow(ctx, `SELECT m.admin_option FROM pg_auth_members m
				WHERE m.roleid = $1::regrole AND m.member = $2::regrole`, m.role, m.member).Scan(&admin)
			if err != nil || admin != m.admin {
				t.Errorf("%s granted to %s: admin %v, %v; want admin %v", m.role, m.member, admin, err, m.admin)
			}
		}
		var status []string
		for _, r := range pg.Status.Database.Roles {
			status = append(status, r.Name)
		}
		if !slices.Equal(status, want) || !slices.Equal(pg.Status.Database.Databases, []string{"shop"}) {
			t.Errorf("status.database roles %q databases %q, want %q and [shop]", status, pg.Status.Database.Databases, want)
		}
	})

	t.Run("default privileges", func(t *testing.T) {
		// The owner user creates as shop_owner (it may SET ROLE to it);
		// the writer user writes and the reader user reads, with no grant
		// but the default privileges, the table found on their
		// search_path.
		owner := mustLogin(ctx, t, ns, name, primary, "shop_owner_user", "shop")
		for _, sql := range []string{"SET ROLE shop_owner",
			"CREATE TABLE data.items (id serial PRIMARY KEY, name text, digest bytea)"} {
			if _, err := owner.Exec(ctx, sql); err != nil {
				t.Fatalf("as shop_owner_user: %s: %v", sql, err)
			}
		}
		writer := mustLogin(ctx, t, ns, name, primary, "shop_writer_user", "shop")
		if _, err := writer.Exec(ctx, "INSERT INTO items (name, digest) VALUES ('a', digest('a', 'sha256'))"); err != nil {
			t.Errorf("as shop_writer_user: insert: %v", err)
		}
		reader := mustLogin(ctx, t, ns, name, primary, "shop_reader_user", "shop")
		var n int
		if err := reader.QueryRow(ctx, "SELECT count(*) FROM items").Scan(&n); err != nil || n != 1 {
			t.Errorf("as shop_reader_user: %d rows, %v; want 1", n, err)
		}
		var pgErr *pgconn.PgError
		if _, err := reader.Exec(ctx, "DELETE FROM items"); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("as shop_reader_user: delete: %v, want permission denied (42501)", err)
		}
	})
}
