package v1

import (
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// PoolerEnabled reports whether the spec asks for a connection pooler in
// front of the primary (master) or of the replicas (replica is true).
func (s *PostgresqlSpec) PoolerEnabled(replica bool) bool {
	if replica {
		return s.EnableReplicaConnectionPooler != nil && *s.EnableReplicaConnectionPooler
	}
	return s.EnableConnectionPooler != nil && *s.EnableConnectionPooler
}

// AnyPoolerEnabled reports whether either connection pooler is enabled.
func (s *PostgresqlSpec) AnyPoolerEnabled() bool {
	return s.PoolerEnabled(false) || s.PoolerEnabled(true)
}

// PoolerUser is the connection pooler's role: connectionPooler.user, or
// DefaultPoolerUser.
func (s *PostgresqlSpec) PoolerUser() string {
	if p := s.ConnectionPooler; p != nil && p.User != "" {
		return p.User
	}
	return DefaultPoolerUser
}

// PoolerSchema is the schema of the pooler's lookup function:
// connectionPooler.schema, or DefaultPoolerSchema.
func (s *PostgresqlSpec) PoolerSchema() string {
	if p := s.ConnectionPooler; p != nil && p.Schema != "" {
		return p.Schema
	}
	return DefaultPoolerSchema
}

// poolerNameRE is what PgBouncer's configuration and pgloop's SQL take as
// the pooler's user and schema: a plain lower-case identifier.
var poolerNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// validatePooler checks connectionPooler and the pooler's user against the
// spec's users, as the CRD's rules do.
func (s *PostgresqlSpec) validatePooler(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	p := s.ConnectionPooler
	pp := path.Child("connectionPooler")
	if p != nil {
		errs = append(errs, validatePoolerName(p.User, pp.Child("user"), append([]string{"postgres", "standby"}, postgresReservedRoles...))...)
		errs = append(errs, validatePoolerName(p.Schema, pp.Child("schema"), []string{"public", "information_schema"})...)
		if n := p.NumberOfInstances; n != nil && (*n < 1 || *n > 32) {
			errs = append(errs, field.Invalid(pp.Child("numberOfInstances"), *n, "must be between 1 and 32"))
		}
		if n := p.MaxDBConnections; n != nil && (*n < 1 || *n > 10000) {
			errs = append(errs, field.Invalid(pp.Child("maxDBConnections"), *n, "must be between 1 and 10000"))
		}
		if p.Mode != "" && p.Mode != "session" && p.Mode != "transaction" {
			errs = append(errs, field.NotSupported(pp.Child("mode"), p.Mode, []string{"session", "transaction"}))
		}
		if p.DockerImage != strings.TrimSpace(p.DockerImage) {
			errs = append(errs, field.Invalid(pp.Child("dockerImage"), p.DockerImage, "must not have leading or trailing whitespace"))
		}
		if p.Resources != nil {
			errs = append(errs, p.Resources.validate(pp.Child("resources"))...)
		}
	}
	if user := s.PoolerUser(); s.AnyPoolerEnabled() {
		if _, ok := s.Users[user]; ok {
			errs = append(errs, field.Invalid(pp.Child("user"), user,
				"must not be one of users: the connection pooler has a role of its own"))
		}
	}
	return errs
}

// validatePoolerName checks the pooler's user or schema name; "" is the
// default and valid.
func validatePoolerName(name string, path *field.Path, reserved []string) field.ErrorList {
	switch {
	case name == "":
		return nil
	case len(name) > MaxIdentifierLength:
		return field.ErrorList{field.TooLong(path, name, MaxIdentifierLength)}
	case !poolerNameRE.MatchString(name):
		return field.ErrorList{field.Invalid(path, name, "must be lower case letters, digits and '_', not starting with a digit")}
	case slices.Contains(reserved, name) || strings.HasPrefix(name, "pg_"):
		return field.ErrorList{field.Forbidden(path, "is reserved")}
	}
	return nil
}
