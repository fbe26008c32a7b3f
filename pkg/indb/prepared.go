package indb

import (
	"maps"
	"slices"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/pgsql"
)

// preparedRole is a role of preparedDatabases for the sync: its name and
// flags; a LOGIN one gets its Secret's password from the caller.
type preparedRole struct {
	pgsql.Role
	login bool
}

// prepared turns spec.preparedDatabases into what the sync applies: their
// roles (in the order of v1.PreparedDatabase.PreparedRoles, database by
// database in name order), the databases owned by their <db>_owner, and
// what each database needs beyond (memberships, search paths, schemas,
// default privileges, extensions).
func prepared(spec *v1.PostgresqlSpec) (roles []preparedRole, dbs []pgsql.Database, ps []pgsql.PreparedDatabase) {
	for _, db := range spec.PreparedDatabaseNames() {
		p := spec.PreparedDatabases[db]
		out := pgsql.PreparedDatabase{Name: db}
		for _, r := range p.PreparedRoles(db) {
			flags := []string{"NOLOGIN"}
			if r.Login {
				flags = []string{"LOGIN"}
			}
			roles = append(roles, preparedRole{Role: pgsql.Role{Name: r.Name, Flags: flags}, login: r.Login})
			if r.MemberOf != "" {
				out.Members = append(out.Members, pgsql.Membership{Role: r.MemberOf, Member: r.Name})
			}
			if r.Admin != "" {
				out.Members = append(out.Members, pgsql.Membership{Role: r.Name, Member: r.Admin, Admin: true})
			}
			out.SearchPaths = append(out.SearchPaths, pgsql.SearchPath{Role: r.Name, Path: r.SearchPath})
		}
		out.Privileges = privileges(p.DatabasePrivileges(db))
		for _, s := range p.PreparedSchemaNames() {
			out.Schemas = append(out.Schemas, pgsql.PreparedSchema{Name: s, Owner: p.SchemaOwner(db, s),
				Privileges: privileges(p.SchemaPrivileges(db, s))})
		}
		for _, e := range slices.Sorted(maps.Keys(p.Extensions)) {
			out.Extensions = append(out.Extensions, pgsql.Extension{Name: e, Schema: string(p.Extensions[e])})
		}
		dbs = append(dbs, pgsql.Database{Name: db, Owner: db + v1.PreparedOwnerSuffix})
		ps = append(ps, out)
	}
	return roles, dbs, ps
}

func privileges(in []v1.PreparedPrivileges) []pgsql.Privileges {
	out := make([]pgsql.Privileges, len(in))
	for i, p := range in {
		out[i] = pgsql.Privileges{Owner: p.Owner, Reader: p.Reader, Writer: p.Writer}
	}
	return out
}
