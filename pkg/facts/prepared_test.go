package facts

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// TestPreparedSync checks that preparedDatabases are part of the sync:
// their default users' Secrets are ones it waits for, any change of them is
// a new sync, and their roles and databases are listed with the
// manifest's.
func TestPreparedSync(t *testing.T) {
	plain := newPG("c1", 2)
	plain.Spec.Users = map[string]v1.UserFlags{"app": {}}
	plain.Spec.Databases = nil
	base := []runtime.Object{statefulSet(plain), lock(plain, "c1-0"), pod(plain, 0, master), pod(plain, 1)}
	facts := func(pg *v1.Postgresql, secrets []runtime.Object) fsm.Facts {
		return NewDeriver(cluster.Options{}, true).Facts(objects(pg, append(base, secrets...)...), now)
	}
	without := facts(plain, credentials(plain, "1"))

	shop := plain.DeepCopy()
	shop.Spec.PreparedDatabases = map[string]v1.PreparedDatabase{"shop": {}}
	f := facts(shop, credentials(shop, "1"))
	if f.Sync.Missing || f.Sync.Hash == "" || f.Sync.Hash == without.Sync.Hash {
		t.Errorf("a prepared database: sync %+v, want a new hash (without: %+v)", f.Sync, without.Sync)
	}
	if want := []string{"shop"}; !slices.Equal(f.Databases, want) {
		t.Errorf("databases %q, want %q", f.Databases, want)
	}
	if want := []string{"app", "shop_data_owner", "shop_data_reader", "shop_data_writer", "shop_owner", "shop_reader", "shop_writer"}; !slices.Equal(f.Users, want) {
		t.Errorf("roles %q, want %q", f.Users, want)
	}

	users := shop.DeepCopy()
	users.Spec.PreparedDatabases["shop"] = v1.PreparedDatabase{DefaultUsers: true}
	all := credentials(users, "1")
	var names []string
	for _, o := range all {
		names = append(names, o.(*corev1.Secret).Name)
	}
	if !slices.Contains(names, cluster.SecretName("shop_writer_user", users.Name)) {
		t.Fatalf("secrets %q lack shop_writer_user's", names)
	}
	if f := facts(users, credentials(shop, "1")); !f.Sync.Missing {
		t.Errorf("the default users' Secrets absent: sync %+v, want Missing", f.Sync)
	}
	u := facts(users, all)
	if u.Sync.Missing || u.Sync.Hash == f.Sync.Hash {
		t.Errorf("default users: sync %+v, want another hash than %s", u.Sync, f.Sync.Hash)
	}

	schema := users.DeepCopy()
	schema.Spec.PreparedDatabases["shop"] = v1.PreparedDatabase{DefaultUsers: true,
		Schemas: map[string]v1.PreparedSchema{"data": {DefaultRoles: ptr.To(false)}}}
	if s := facts(schema, all); s.Sync.Hash == u.Sync.Hash || slices.Contains(s.Users, "shop_data_owner") {
		t.Errorf("a schema without roles: sync %+v roles %q, want another hash than %s, no shop_data_owner", s.Sync, s.Users, u.Sync.Hash)
	}

	// Prepared databases alone: not Patroni's bootstrap.
	bare := newPG("c1", 2)
	bare.Spec.Users, bare.Spec.Databases = nil, nil
	bare.Spec.PreparedDatabases = map[string]v1.PreparedDatabase{"shop": {}}
	if b := facts(bare, credentials(bare, "1")); b.Sync.Bootstrap || b.Sync.Hash == "" {
		t.Errorf("prepared databases alone: sync %+v, want no bootstrap", b.Sync)
	}
}
