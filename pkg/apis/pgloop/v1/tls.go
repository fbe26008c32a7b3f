package v1

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TLS is the cluster's own server certificate, as in zalando's manifest
// (spec.tls): a Secret mounted into every pod at TLSMountPath, whose files
// PostgreSQL (Spilo's SSL_CERTIFICATE_FILE, SSL_PRIVATE_KEY_FILE,
// SSL_CA_FILE) and the connection pooler serve to their clients instead of
// Spilo's self-signed certificate.
type TLS struct {
	// SecretName is the Secret with the certificate and its key (a
	// kubernetes.io/tls Secret has tls.crt and tls.key), in the cluster's
	// namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SecretName string `json:"secretName"`
	// CertificateFile is the certificate's key in the Secret (a path
	// relative to TLSMountPath, or an absolute path in the container);
	// empty means tls.crt.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CertificateFile string `json:"certificateFile,omitempty"`
	// PrivateKeyFile is the private key's key in the Secret, as
	// CertificateFile; empty means tls.key.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PrivateKeyFile string `json:"privateKeyFile,omitempty"`
	// CAFile is the certificate authority's certificate (PostgreSQL's
	// ssl_ca_file: clients presenting a certificate are checked against
	// it): in the Secret, or in CASecretName when set (mounted at
	// TLSCAMountPath). Empty means none.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CAFile string `json:"caFile,omitempty"`
	// CASecretName is a second Secret holding CAFile; it needs CAFile.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CASecretName string `json:"caSecretName,omitempty"`
}

// Where the pods mount spec.tls's Secrets, as zalando does.
const (
	TLSMountPath   = "/tls"
	TLSCAMountPath = "/tlsca"
	// TLSDefaultCertificateFile and TLSDefaultPrivateKeyFile are the keys
	// of a kubernetes.io/tls Secret.
	TLSDefaultCertificateFile = "tls.crt"
	TLSDefaultPrivateKeyFile  = "tls.key"
)

// TLSFile is where a file of spec.tls is in the container: an absolute
// path as it is, a relative one under dir (zalando's ensurePath), def when
// empty.
func TLSFile(file, dir, def string) string {
	switch {
	case file == "":
		return path.Join(dir, def)
	case path.IsAbs(file):
		return file
	}
	return path.Join(dir, file)
}

// CertificatePath is where the container finds spec.tls's certificate.
func (t *TLS) CertificatePath() string {
	return TLSFile(t.CertificateFile, TLSMountPath, TLSDefaultCertificateFile)
}

// PrivateKeyPath is where the container finds spec.tls's private key.
func (t *TLS) PrivateKeyPath() string {
	return TLSFile(t.PrivateKeyFile, TLSMountPath, TLSDefaultPrivateKeyFile)
}

// CAPath is where the container finds spec.tls's CA file; "" without
// caFile.
func (t *TLS) CAPath() string {
	if t.CAFile == "" {
		return ""
	}
	dir := TLSMountPath
	if t.CASecretName != "" {
		dir = TLSCAMountPath
	}
	return TLSFile(t.CAFile, dir, "")
}

// validateTLS checks spec.tls: the Secrets' names, and files that are
// clean paths (a relative one names a key of the Secret, which never has
// "..").
func (s *PostgresqlSpec) validateTLS(p *field.Path) field.ErrorList {
	t := s.TLS
	if t == nil {
		return nil
	}
	p = p.Child("tls")
	var errs field.ErrorList
	if t.SecretName == "" {
		errs = append(errs, field.Required(p.Child("secretName"), "the Secret with the server certificate and its private key"))
	}
	for _, n := range []struct {
		name, value string
	}{{"secretName", t.SecretName}, {"caSecretName", t.CASecretName}} {
		if n.value == "" {
			continue
		}
		for _, msg := range validation.IsDNS1123Subdomain(n.value) {
			errs = append(errs, field.Invalid(p.Child(n.name), n.value, msg))
		}
	}
	for _, f := range []struct {
		name, value string
	}{{"certificateFile", t.CertificateFile}, {"privateKeyFile", t.PrivateKeyFile}, {"caFile", t.CAFile}} {
		if f.value == "" {
			continue
		}
		switch {
		case strings.TrimSpace(f.value) != f.value || path.Clean(f.value) != f.value:
			errs = append(errs, field.Invalid(p.Child(f.name), f.value, "must be a clean path: a key of the Secret (tls.crt) or an absolute path in the container"))
		case !path.IsAbs(f.value) && (f.value == ".." || strings.HasPrefix(f.value, "../")):
			errs = append(errs, field.Invalid(p.Child(f.name), f.value, "must not leave the Secret's directory (..)"))
		}
	}
	if t.CASecretName != "" && t.CAFile == "" {
		errs = append(errs, field.Required(p.Child("caFile"), "caSecretName is set: name the CA certificate's key in it (ca.crt)"))
	}
	if t.CASecretName != "" && t.CASecretName == t.SecretName {
		errs = append(errs, field.Invalid(p.Child("caSecretName"), t.CASecretName, "is secretName: leave it out and set caFile only"))
	}
	return errs
}

// Password rotation modes (RotationMode).
const (
	// RotationNewRole creates a new role each rotation, a member of the
	// user, named after it and the rotation's date, and points the
	// Secret at it: clients keeping the old credentials still log in
	// until the retention drops that role.
	RotationNewRole = "newRole"
	// RotationInPlace sets a new password for the user itself.
	RotationInPlace = "inPlace"
)

// RotatedUsers are the users whose password pgloop rotates on schedule,
// sorted, with the mode of each (RotationNewRole or RotationInPlace), as
// zalando decides: every user in usersWithSecretRotation or
// usersWithInPlaceSecretRotation; and, when the operator rotates all
// (global), every user of spec.users and every default user of
// preparedDatabases that owns no database of spec.databases, in
// RotationNewRole mode. usersIgnoringSecretRotation wins over both. The
// system users (postgres, standby, the pooler's) are never rotated on
// schedule.
func (s *PostgresqlSpec) RotatedUsers(global bool) (users []string, mode map[string]string) {
	mode = map[string]string{}
	if global {
		owners := map[string]bool{}
		for _, o := range s.Databases {
			owners[o] = true
		}
		for _, u := range append(slices.Sorted(maps.Keys(s.Users)), s.PreparedUsers()...) {
			if !owners[u] {
				mode[u] = RotationNewRole
			}
		}
	}
	for _, u := range s.UsersWithSecretRotation {
		mode[u] = RotationNewRole
	}
	for _, u := range s.UsersWithInPlaceSecretRotation {
		mode[u] = RotationInPlace
	}
	for _, u := range s.UsersIgnoringSecretRotation {
		delete(mode, u)
	}
	for _, u := range []string{SuperuserRole, ReplicationRole, s.PoolerUser()} {
		delete(mode, u)
	}
	return slices.Sorted(maps.Keys(mode)), mode
}

// The system roles, named as pkg/cluster names them.
const (
	SuperuserRole   = "postgres"
	ReplicationRole = "standby"
)

// validateRotation checks the password rotation lists: each names a user
// with a Secret (spec.users, or a default user of preparedDatabases), not a
// system user, and a user is rotated in one way only.
// maxRoleNameLength is the longest name PostgreSQL keeps (NAMEDATALEN-1).
const maxRoleNameLength = 63

func (s *PostgresqlSpec) validateRotation(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	known := map[string]bool{}
	for u := range s.Users {
		known[u] = true
	}
	for _, u := range s.PreparedUsers() {
		known[u] = true
	}
	lists := []struct {
		name  string
		users []string
	}{
		{"usersWithSecretRotation", s.UsersWithSecretRotation},
		{"usersWithInPlaceSecretRotation", s.UsersWithInPlaceSecretRotation},
		{"usersIgnoringSecretRotation", s.UsersIgnoringSecretRotation},
	}
	for _, l := range lists {
		for i, u := range l.users {
			fp := p.Child(l.name).Index(i)
			switch {
			case u == "":
				errs = append(errs, field.Required(fp, "a user's name"))
			case u == SuperuserRole || u == ReplicationRole || (s.AnyPoolerEnabled() && u == s.PoolerUser()):
				errs = append(errs, field.Invalid(fp, u, "a system user: pgloop never rotates it on a schedule (rotate it on demand with the pgloop.dev/rotate-password annotation on its Secret)"))
			case !known[u]:
				errs = append(errs, field.Invalid(fp, u, "not a user of spec.users nor a default user of spec.preparedDatabases: it has no Secret to rotate"))
			case slices.Contains(l.users[:i], u):
				errs = append(errs, field.Duplicate(fp, u))
			}
		}
	}
	for i, u := range s.UsersWithSecretRotation {
		// PostgreSQL cuts a name at 63 bytes: USERyymmdd would lose its date.
		if n := len(RotationRoleName(u, time.Time{}, 24*time.Hour)); n > maxRoleNameLength {
			errs = append(errs, field.Invalid(p.Child("usersWithSecretRotation").Index(i), u,
				fmt.Sprintf("its rotation roles (the name and yymmdd) would be %d bytes, PostgreSQL keeps %d: rotate it in place (usersWithInPlaceSecretRotation)", n, maxRoleNameLength)))
		}
	}
	for i, u := range s.UsersWithInPlaceSecretRotation {
		if slices.Contains(s.UsersWithSecretRotation, u) {
			errs = append(errs, field.Invalid(p.Child("usersWithInPlaceSecretRotation").Index(i), u,
				"also in usersWithSecretRotation: a user is rotated either with a new role or in place"))
		}
	}
	return errs
}
