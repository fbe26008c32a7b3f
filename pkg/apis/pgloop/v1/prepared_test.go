package v1

import (
	"fmt"
	"slices"
	"testing"

	"k8s.io/utils/ptr"
)

// TestPreparedRoles checks the roles of zalando's tables (docs/user.md,
// "Prepared databases with roles and default privileges").
func TestPreparedRoles(t *testing.T) {
	p := PreparedDatabase{DefaultUsers: true, Schemas: map[string]PreparedSchema{
		"bar": {DefaultUsers: true}, "public": {DefaultRoles: ptr.To(false)}}}
	var got []string
	for _, r := range p.PreparedRoles("foo") {
		got = append(got, fmt.Sprintf("%s login=%v member=%s admin=%s path=%v", r.Name, r.Login, r.MemberOf, r.Admin, r.SearchPath))
	}
	want := []string{
		"foo_owner login=false member= admin= path=[$user bar public]",
		"foo_reader login=false member= admin=foo_owner path=[$user bar public]",
		"foo_writer login=false member=foo_reader admin=foo_owner path=[$user bar public]",
		"foo_owner_user login=true member=foo_owner admin= path=[$user bar public]",
		"foo_reader_user login=true member=foo_reader admin=foo_owner path=[$user bar public]",
		"foo_writer_user login=true member=foo_writer admin=foo_owner path=[$user bar public]",
		"foo_bar_owner login=false member= admin=foo_owner path=[$user bar]",
		"foo_bar_reader login=false member= admin=foo_bar_owner path=[$user bar]",
		"foo_bar_writer login=false member=foo_bar_reader admin=foo_bar_owner path=[$user bar]",
		"foo_bar_owner_user login=true member=foo_bar_owner admin=foo_owner path=[$user bar]",
		"foo_bar_reader_user login=true member=foo_bar_reader admin=foo_bar_owner path=[$user bar]",
		"foo_bar_writer_user login=true member=foo_bar_writer admin=foo_bar_owner path=[$user bar]",
	}
	if !slices.Equal(got, want) {
		t.Errorf("roles:\n%q\nwant\n%q", got, want)
	}

	// No schemas: one, data, with its roles and no users.
	s := PostgresqlSpec{PreparedDatabases: map[string]PreparedDatabase{"shop": {}}}
	if got, want := s.PreparedRoleNames(), []string{"shop_data_owner", "shop_data_reader", "shop_data_writer",
		"shop_owner", "shop_reader", "shop_writer"}; !slices.Equal(got, want) {
		t.Errorf("role names = %q, want %q", got, want)
	}
	if got := s.PreparedUsers(); len(got) != 0 {
		t.Errorf("users = %q, want none", got)
	}
	s.PreparedDatabases["shop"] = PreparedDatabase{DefaultUsers: true}
	if got, want := s.PreparedUsers(), []string{"shop_owner_user", "shop_reader_user", "shop_writer_user"}; !slices.Equal(got, want) {
		t.Errorf("users = %q, want %q", got, want)
	}
}
