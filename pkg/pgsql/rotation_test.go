package pgsql

import (
	"context"
	"slices"
	"testing"
)

// TestSyncMemberOfAndDrop: a role with MemberOf is made a member once (a
// second sync grants nothing); Drop drops a role, takes one already gone,
// and reports one PostgreSQL refuses to drop without failing the sync.
func TestSyncMemberOfAndDrop(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	d := Desired{Roles: []Role{{Name: "rot_app"}, {Name: "rot_app261203", Password: "pw-1", MemberOf: "rot_app"}, {Name: "rot_owner"}},
		Databases: []Database{{Name: "rot_db", Owner: "rot_owner"}}}
	if _, err := Sync(ctx, srv.endpoint(), d, Options{}); err != nil {
		t.Fatal(err)
	}
	var member bool
	if err := srv.super(t).QueryRow(ctx, "SELECT pg_has_role('rot_app261203', 'rot_app', 'MEMBER')").Scan(&member); err != nil || !member {
		t.Fatalf("rot_app261203 a member of rot_app: %v %v", member, err)
	}
	res, err := Sync(ctx, srv.endpoint(), d, Options{})
	if err != nil || len(res.Created)+len(res.Altered) != 0 {
		t.Fatalf("second sync: %+v %v, want nothing done", res, err)
	}

	res, err = Sync(ctx, srv.endpoint(), Desired{Drop: []string{"rot_app261203", "rot_gone", "rot_owner"}}, Options{})
	if err != nil {
		t.Fatalf("a refused drop failed the sync: %v", err)
	}
	if !slices.Equal(res.Dropped, []string{"rot_app261203", "rot_gone"}) {
		t.Errorf("dropped %v", res.Dropped)
	}
	if len(res.NotDropped) != 1 || res.NotDropped[0].Name != "rot_owner" {
		t.Errorf("not dropped %+v, want rot_owner (it owns rot_db)", res.NotDropped)
	}
	if got := roleAttributes(t, srv, "rot_app261203"); got != "" {
		t.Errorf("rot_app261203 still there: %s", got)
	}
}
