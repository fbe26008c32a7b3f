package indb

import (
	"fmt"
	"slices"
	"testing"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// TestPrepared checks what the sync gets of preparedDatabases: roles with
// their flags, the database owned by <db>_owner, memberships both ways
// (member of, and admin), the schema owned by its owner role, the
// extensions in name order.
func TestPrepared(t *testing.T) {
	spec := v1.PostgresqlSpec{PreparedDatabases: map[string]v1.PreparedDatabase{
		"shop": {DefaultUsers: true, Extensions: map[string]v1.ExtensionSchema{"pgcrypto": "data", "citext": "public"}},
	}}
	roles, dbs, ps := prepared(&spec)
	var got []string
	for _, r := range roles {
		got = append(got, fmt.Sprintf("%s %v %v", r.Name, r.Flags, r.login))
	}
	want := []string{
		"shop_owner [NOLOGIN] false", "shop_reader [NOLOGIN] false", "shop_writer [NOLOGIN] false",
		"shop_owner_user [LOGIN] true", "shop_reader_user [LOGIN] true", "shop_writer_user [LOGIN] true",
		"shop_data_owner [NOLOGIN] false", "shop_data_reader [NOLOGIN] false", "shop_data_writer [NOLOGIN] false",
	}
	if !slices.Equal(got, want) {
		t.Errorf("roles %q, want %q", got, want)
	}
	if len(dbs) != 1 || dbs[0].Name != "shop" || dbs[0].Owner != "shop_owner" {
		t.Errorf("databases %+v", dbs)
	}
	if len(ps) != 1 {
		t.Fatalf("prepared %+v", ps)
	}
	p := ps[0]
	got = nil
	for _, m := range p.Members {
		got = append(got, fmt.Sprintf("%s>%s %v", m.Role, m.Member, m.Admin))
	}
	want = []string{
		"shop_reader>shop_owner true", "shop_reader>shop_writer false", "shop_writer>shop_owner true",
		"shop_owner>shop_owner_user false", "shop_reader>shop_reader_user false", "shop_reader_user>shop_owner true",
		"shop_writer>shop_writer_user false", "shop_writer_user>shop_owner true",
		"shop_data_owner>shop_owner true", "shop_data_reader>shop_data_owner true",
		"shop_data_reader>shop_data_writer false", "shop_data_writer>shop_data_owner true",
	}
	if !slices.Equal(got, want) {
		t.Errorf("members %q, want %q", got, want)
	}
	if len(p.Schemas) != 1 || p.Schemas[0].Name != "data" || p.Schemas[0].Owner != "shop_data_owner" || len(p.Schemas[0].Privileges) != 4 {
		t.Errorf("schemas %+v", p.Schemas)
	}
	if len(p.Privileges) != 2 || len(p.SearchPaths) != len(roles) {
		t.Errorf("privileges %+v, search paths %+v", p.Privileges, p.SearchPaths)
	}
	if fmt.Sprint(p.Extensions) != "[{citext public} {pgcrypto data}]" {
		t.Errorf("extensions %v", p.Extensions)
	}
}
