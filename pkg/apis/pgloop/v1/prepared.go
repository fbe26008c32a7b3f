package v1

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bounds of preparedDatabases, for the CRD's CEL cost estimate.
const (
	// MaxPreparedDatabases is the largest number of preparedDatabases.
	MaxPreparedDatabases = 16
	// MaxPreparedSchemas is the largest number of schemas of one prepared
	// database.
	MaxPreparedSchemas = 16
	// MaxPreparedExtensions is the largest number of extensions of one
	// prepared database.
	MaxPreparedExtensions = 16
)

// DefaultPreparedSchema is the schema a prepared database gets when it
// lists none, as zalando's postgres-operator does.
const DefaultPreparedSchema = "data"

// Suffixes of the roles of a prepared database or schema, zalando's names.
const (
	PreparedOwnerSuffix  = "_owner"
	PreparedReaderSuffix = "_reader"
	PreparedWriterSuffix = "_writer"
	PreparedUserSuffix   = "_user"
)

// PreparedDatabase is a database pgloop creates with its owner, reader and
// writer roles, default privileges, schemas and extensions.
type PreparedDatabase struct {
	// DefaultUsers adds the LOGIN roles <db>_owner_user, <db>_reader_user
	// and <db>_writer_user, members of their NOLOGIN counterparts, each
	// with a credentials Secret.
	// +optional
	DefaultUsers bool `json:"defaultUsers,omitempty"`
	// Extensions maps each extension to create to the schema it is created
	// in (CREATE EXTENSION ... SCHEMA, or ALTER EXTENSION ... SET SCHEMA
	// when it is in another one). The schema must exist: public, or one of
	// schemas.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(e, size(e) <= 63 && e.matches('^[a-z0-9_][-a-z0-9_]*$'))",message="extension names must be at most 63 lower case letters, digits, '_' or '-'"
	Extensions map[string]ExtensionSchema `json:"extensions,omitempty"`
	// Schemas are the schemas to create, owned by <db>_<schema>_owner (or
	// <db>_owner without defaultRoles). None means one schema, data.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(s, size(s) <= 63 && s.matches('^[a-z_][a-z0-9_]*$') && !s.startsWith('pg_'))",message="schema names must be at most 63 lower case letters, digits or '_', not starting with a digit or pg_"
	Schemas map[string]PreparedSchema `json:"schemas,omitempty"`
}

// ExtensionSchema is the schema an extension is created in.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
type ExtensionSchema string

// PreparedSchema is one schema of a prepared database.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.defaultUsers) && self.defaultUsers && has(self.defaultRoles) && !self.defaultRoles)",message="defaultUsers needs defaultRoles: the users are members of the schema's roles"
type PreparedSchema struct {
	// DefaultRoles creates the schema's NOLOGIN roles
	// <db>_<schema>_owner, _reader and _writer; the schema is owned by
	// <db>_<schema>_owner. Default true; false leaves the schema to
	// <db>_owner.
	// +optional
	DefaultRoles *bool `json:"defaultRoles,omitempty"`
	// DefaultUsers adds the schema's LOGIN roles <db>_<schema>_owner_user,
	// _reader_user and _writer_user, each with a credentials Secret.
	// +optional
	DefaultUsers bool `json:"defaultUsers,omitempty"`
}

// HasDefaultRoles says whether the schema has roles of its own.
func (p PreparedSchema) HasDefaultRoles() bool { return p.DefaultRoles == nil || *p.DefaultRoles }

// PreparedSchemaNames are the schemas of a prepared database, sorted:
// DefaultPreparedSchema when it lists none.
func (p PreparedDatabase) PreparedSchemaNames() []string {
	if len(p.Schemas) == 0 {
		return []string{DefaultPreparedSchema}
	}
	return slices.Sorted(maps.Keys(p.Schemas))
}

// Schema returns the settings of one of PreparedSchemaNames.
func (p PreparedDatabase) Schema(name string) PreparedSchema {
	if len(p.Schemas) == 0 && name == DefaultPreparedSchema {
		return PreparedSchema{}
	}
	return p.Schemas[name]
}

// PreparedRole is one role of a prepared database, as zalando names and
// links it.
//
// +k8s:deepcopy-gen=false
type PreparedRole struct {
	Name string
	// Login is true for the default users (the _user suffix).
	Login bool
	// MemberOf is the role granted to it: a writer is a member of its
	// reader, a user of its NOLOGIN counterpart. "" for none.
	MemberOf string
	// Admin is the role it is granted to WITH ADMIN OPTION, so that the
	// owner holds every other role of its database or schema, and a
	// database's owner those of its schemas. "" for the database's owner
	// roles: zalando grants them to its admin role, which pgloop has not.
	Admin string
	// SearchPath is the role's search_path: "$user", then the schemas it
	// is for.
	SearchPath []string
}

// PreparedRoles lists the roles of prepared database db: its own, then
// each schema's, each group in zalando's order (owner, reader, writer, then
// the users).
func (p PreparedDatabase) PreparedRoles(db string) []PreparedRole {
	schemas := p.PreparedSchemaNames()
	out := preparedGroup(db, "", append([]string{"$user"}, schemas...), p.DefaultUsers)
	owner := db + PreparedOwnerSuffix
	for _, s := range schemas {
		ps := p.Schema(s)
		if !ps.HasDefaultRoles() {
			continue
		}
		out = append(out, preparedGroup(db+"_"+s, owner, []string{"$user", s}, ps.DefaultUsers)...)
	}
	return out
}

// preparedGroup is the owner, reader and writer of prefix, and their users
// when users is set; admin is the role the owners are granted to.
func preparedGroup(prefix, admin string, searchPath []string, users bool) []PreparedRole {
	owner, reader, writer := prefix+PreparedOwnerSuffix, prefix+PreparedReaderSuffix, prefix+PreparedWriterSuffix
	out := []PreparedRole{
		{Name: owner, Admin: admin, SearchPath: searchPath},
		{Name: reader, Admin: owner, SearchPath: searchPath},
		{Name: writer, MemberOf: reader, Admin: owner, SearchPath: searchPath},
	}
	if users {
		out = append(out,
			PreparedRole{Name: owner + PreparedUserSuffix, Login: true, MemberOf: owner, Admin: admin, SearchPath: searchPath},
			PreparedRole{Name: reader + PreparedUserSuffix, Login: true, MemberOf: reader, Admin: owner, SearchPath: searchPath},
			PreparedRole{Name: writer + PreparedUserSuffix, Login: true, MemberOf: writer, Admin: owner, SearchPath: searchPath})
	}
	return out
}

// PreparedPrivileges are default privileges of a prepared database: what
// Owner creates (tables, sequences, functions, types; in a schema, or
// anywhere in the database, where schemas too) Reader may read and Writer
// may write, and both may use a schema they are given for.
//
// +k8s:deepcopy-gen=false
type PreparedPrivileges struct{ Owner, Reader, Writer string }

// DatabasePrivileges are the database-wide default privileges of prepared
// database db: for its owner and owner user, to its reader and writer.
func (p PreparedDatabase) DatabasePrivileges(db string) []PreparedPrivileges {
	return privilegesOf(owners(db, p.DefaultUsers), db)
}

// SchemaOwner is the owner of schema s of prepared database db: its own
// owner role, or the database's without defaultRoles.
func (p PreparedDatabase) SchemaOwner(db, s string) string {
	if p.Schema(s).HasDefaultRoles() {
		return db + "_" + s + PreparedOwnerSuffix
	}
	return db + PreparedOwnerSuffix
}

// SchemaPrivileges are the default privileges in schema s of prepared
// database db, as zalando sets them when it creates the schema: what the
// schema's owner (and its user) creates, to the database's reader and
// writer; and with the schema's own roles, what any owner of the database
// or the schema creates, to the schema's reader and writer.
func (p PreparedDatabase) SchemaPrivileges(db, s string) []PreparedPrivileges {
	ps := p.Schema(s)
	if !ps.HasDefaultRoles() {
		return privilegesOf(owners(db, p.DefaultUsers), db)
	}
	prefix := db + "_" + s
	out := privilegesOf(owners(prefix, ps.DefaultUsers), db)
	all := append(owners(db, p.DefaultUsers), owners(prefix, ps.DefaultUsers)...)
	return append(out, privilegesOf(all, prefix)...)
}

// owners are the owner role of prefix, and its user when users is set.
func owners(prefix string, users bool) []string {
	out := []string{prefix + PreparedOwnerSuffix}
	if users {
		out = append(out, prefix+PreparedOwnerSuffix+PreparedUserSuffix)
	}
	return out
}

func privilegesOf(owners []string, prefix string) []PreparedPrivileges {
	out := make([]PreparedPrivileges, 0, len(owners))
	for _, o := range owners {
		out = append(out, PreparedPrivileges{Owner: o, Reader: prefix + PreparedReaderSuffix, Writer: prefix + PreparedWriterSuffix})
	}
	return out
}

// PreparedDatabaseNames are the names of preparedDatabases, sorted.
func (s *PostgresqlSpec) PreparedDatabaseNames() []string {
	return slices.Sorted(maps.Keys(s.PreparedDatabases))
}

// PreparedRoleNames are the names of every role of preparedDatabases,
// sorted.
func (s *PostgresqlSpec) PreparedRoleNames() []string {
	var out []string
	for _, db := range s.PreparedDatabaseNames() {
		for _, r := range s.PreparedDatabases[db].PreparedRoles(db) {
			out = append(out, r.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// PreparedUsers are the LOGIN roles of preparedDatabases (defaultUsers),
// sorted: each has a credentials Secret.
func (s *PostgresqlSpec) PreparedUsers() []string {
	var out []string
	for _, db := range s.PreparedDatabaseNames() {
		for _, r := range s.PreparedDatabases[db].PreparedRoles(db) {
			if r.Login {
				out = append(out, r.Name)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// preparedNameRE is a prepared database's or schema's name: a plain
// lower-case identifier, so its roles' Secrets can be named after it.
var preparedNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// extensionNameRE is an extension's name, as contrib and the common
// extensions spell them (uuid-ossp).
var extensionNameRE = regexp.MustCompile(`^[a-z0-9_][-a-z0-9_]*$`)

// validatePrepared checks preparedDatabases as the CRD's rules do, and
// what they cannot: a database that is also in databases, a role that is
// also one of users or of another prepared database.
func (s *PostgresqlSpec) validatePrepared(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	path = path.Child("preparedDatabases")
	if s.PreparedDatabases != nil && len(s.PreparedDatabases) == 0 {
		errs = append(errs, field.Required(path, "list at least one database, or leave preparedDatabases out "+
			"(zalando's default database named after the cluster is not supported)"))
	}
	if len(s.PreparedDatabases) > MaxPreparedDatabases {
		errs = append(errs, field.TooMany(path, len(s.PreparedDatabases), MaxPreparedDatabases))
	}
	name := func(fp *field.Path, name, what string, max int) field.ErrorList {
		switch {
		case len(name) > max:
			return field.ErrorList{field.TooLong(fp, name, max)}
		case !preparedNameRE.MatchString(name):
			return field.ErrorList{field.Invalid(fp, name, what+" must be lower case letters, digits or '_', not starting with a digit")}
		case strings.HasPrefix(name, "pg_"):
			return field.ErrorList{field.Invalid(fp, name, what+" must not start with pg_, which PostgreSQL reserves")}
		}
		return nil
	}
	owners := map[string]string{} // role -> the database whose role it is
	for _, db := range s.PreparedDatabaseNames() {
		p, fp := s.PreparedDatabases[db], path.Key(db)
		dbErrs := name(fp, db, "a prepared database's name", MaxIdentifierLength-len(PreparedReaderSuffix+PreparedUserSuffix))
		if slices.Contains(reservedDatabases, db) {
			dbErrs = append(dbErrs, field.Forbidden(fp, "exists in every cluster and cannot be declared"))
		}
		if _, ok := s.Databases[db]; ok {
			dbErrs = append(dbErrs, field.Duplicate(fp, "is one of databases too"))
		}
		if len(p.Schemas) > MaxPreparedSchemas {
			dbErrs = append(dbErrs, field.TooMany(fp.Child("schemas"), len(p.Schemas), MaxPreparedSchemas))
		}
		for _, sc := range slices.Sorted(maps.Keys(p.Schemas)) {
			sp := fp.Child("schemas").Key(sc)
			dbErrs = append(dbErrs, name(sp, sc, "a schema's name", MaxIdentifierLength)...)
			if len(db)+1+len(sc)+len(PreparedWriterSuffix+PreparedUserSuffix) > MaxIdentifierLength {
				dbErrs = append(dbErrs, field.TooLong(sp, sc, MaxIdentifierLength-len(db)-1-len(PreparedWriterSuffix+PreparedUserSuffix)))
			}
			if ps := p.Schemas[sc]; ps.DefaultUsers && !ps.HasDefaultRoles() {
				dbErrs = append(dbErrs, field.Invalid(sp.Child("defaultUsers"), true,
					"defaultUsers needs defaultRoles: the users are members of the schema's roles"))
			}
		}
		if len(p.Extensions) > MaxPreparedExtensions {
			dbErrs = append(dbErrs, field.TooMany(fp.Child("extensions"), len(p.Extensions), MaxPreparedExtensions))
		}
		for _, ext := range slices.Sorted(maps.Keys(p.Extensions)) {
			ep := fp.Child("extensions").Key(ext)
			if len(ext) > MaxIdentifierLength || !extensionNameRE.MatchString(ext) {
				dbErrs = append(dbErrs, field.Invalid(ep, ext, "extension names must be at most 63 lower case letters, digits, '_' or '-'"))
			}
			if sc := string(p.Extensions[ext]); len(sc) > MaxIdentifierLength || !preparedNameRE.MatchString(sc) {
				dbErrs = append(dbErrs, field.Invalid(ep, sc, "an extension's schema must be at most 63 lower case letters, digits or '_', not starting with a digit"))
			}
		}
		errs = append(errs, dbErrs...)
		if len(dbErrs) > 0 {
			continue
		}
		for _, r := range p.PreparedRoles(db) {
			if _, ok := s.Users[r.Name]; ok {
				errs = append(errs, field.Duplicate(fp, fmt.Sprintf("its role %s is one of users too", r.Name)))
			} else if u := sameSecret(s.Users, r.Name); r.Login && u != "" {
				errs = append(errs, field.Duplicate(fp, fmt.Sprintf("its user %s would share its Secret with user %s ('_' becomes '-')", r.Name, u)))
			}
			if other, ok := owners[r.Name]; ok {
				errs = append(errs, field.Duplicate(fp, fmt.Sprintf("its role %s is one of prepared database %s's too", r.Name, other)))
			}
			owners[r.Name] = db
		}
	}
	return errs
}

// sameSecret returns the user whose Secret name would be role's: Secret
// names have '-' for '_'.
func sameSecret(users map[string]UserFlags, role string) string {
	for _, u := range slices.Sorted(maps.Keys(users)) {
		if strings.ReplaceAll(u, "_", "-") == strings.ReplaceAll(role, "_", "-") {
			return u
		}
	}
	return ""
}
