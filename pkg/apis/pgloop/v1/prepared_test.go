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

// TestPreparedPrivileges checks the default privileges zalando's
// execCreateDatabaseSchema and syncDatabases set.
func TestPreparedPrivileges(t *testing.T) {
	p := PreparedDatabase{DefaultUsers: true, Schemas: map[string]PreparedSchema{
		"bar": {DefaultUsers: true}, "baz": {}, "public": {DefaultRoles: ptr.To(false)}}}
	str := func(ps []PreparedPrivileges) []string {
		var out []string
		for _, x := range ps {
			out = append(out, x.Owner+">"+x.Reader+","+x.Writer)
		}
		return out
	}
	for _, tt := range []struct {
		name  string
		got   []PreparedPrivileges
		owner string
		want  []string
	}{
		{"database", p.DatabasePrivileges("foo"), "",
			[]string{"foo_owner>foo_reader,foo_writer", "foo_owner_user>foo_reader,foo_writer"}},
		{"bar", p.SchemaPrivileges("foo", "bar"), "foo_bar_owner", []string{
			"foo_bar_owner>foo_reader,foo_writer", "foo_bar_owner_user>foo_reader,foo_writer",
			"foo_owner>foo_bar_reader,foo_bar_writer", "foo_owner_user>foo_bar_reader,foo_bar_writer",
			"foo_bar_owner>foo_bar_reader,foo_bar_writer", "foo_bar_owner_user>foo_bar_reader,foo_bar_writer"}},
		{"baz", p.SchemaPrivileges("foo", "baz"), "foo_baz_owner", []string{
			"foo_baz_owner>foo_reader,foo_writer",
			"foo_owner>foo_baz_reader,foo_baz_writer", "foo_owner_user>foo_baz_reader,foo_baz_writer",
			"foo_baz_owner>foo_baz_reader,foo_baz_writer"}},
		{"public", p.SchemaPrivileges("foo", "public"), "foo_owner",
			[]string{"foo_owner>foo_reader,foo_writer", "foo_owner_user>foo_reader,foo_writer"}},
	} {
		if got := str(tt.got); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
		if tt.owner != "" {
			if got := p.SchemaOwner("foo", tt.name); got != tt.owner {
				t.Errorf("owner of %s = %s, want %s", tt.name, got, tt.owner)
			}
		}
	}
}
