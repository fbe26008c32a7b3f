package v1

import (
	"net"
	"regexp"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// StandbyDescription makes the cluster a standby of another, as in
// zalando's manifest: its leader follows a primary outside the cluster (a
// Patroni standby cluster) and takes no writes; removing the field
// promotes it. pgloop streams from standbyHost; s3WalPath adds the
// source's pgBackRest repository, where the leader reads what the stream
// cannot give it (restore_command). With s3WalPath alone the standby
// restores the repository's newest backup and follows its archive.
type StandbyDescription struct {
	// StandbyHost is the host (a Service's DNS name, or an address) of the
	// primary to follow.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StandbyHost string `json:"standby_host,omitempty"`
	// StandbyPort is its port; empty means 5432. A string, as in zalando's
	// manifest.
	// +optional
	// +kubebuilder:validation:MaxLength=5
	StandbyPort string `json:"standby_port,omitempty"`
	// S3WalPath is the source's pgBackRest repository in this cluster's
	// bucket, as the source's status.backup.repository names it:
	// s3://BUCKET/pgloop/NAMESPACE/NAME/UID.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	S3WalPath string `json:"s3_wal_path,omitempty"`
	// GSWalPath is zalando's WAL-G path in Google Cloud Storage; pgloop
	// refuses it (pgBackRest cannot read WAL-G's archive).
	// +optional
	GSWalPath string `json:"gs_wal_path,omitempty"`
}

// DefaultStandbyPort is the port of a standby's source when none is given.
const DefaultStandbyPort = 5432

// repositoryPathRE is a pgloop repository as s3WalPath names it.
var repositoryPathRE = regexp.MustCompile(`^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/pgloop/([a-z0-9-]+)/([a-z0-9.-]+)/([0-9a-f-]{36}))/?$`)

// Port returns the source's port.
func (s *StandbyDescription) Port() int {
	if p, err := strconv.Atoi(s.StandbyPort); err == nil {
		return p
	}
	return DefaultStandbyPort
}

// Repository returns the bucket, path and stanza s3WalPath names; ok false
// when it names none.
func (s *StandbyDescription) Repository() (bucket, path, stanza string, ok bool) {
	m := repositoryPathRE.FindStringSubmatch(s.S3WalPath)
	if m == nil {
		return "", "", "", false
	}
	return m[1], m[2], m[4], true
}

// validateStandby checks spec.standby.
func (s *PostgresqlSpec) validateStandby(path *field.Path) field.ErrorList {
	sb := s.Standby
	if sb == nil {
		return nil
	}
	p := path.Child("standby")
	var errs field.ErrorList
	if sb.GSWalPath != "" {
		errs = append(errs, field.Forbidden(p.Child("gs_wal_path"),
			"pgloop's standbys stream from standby_host, or read a pgBackRest repository (s3_wal_path); WAL-G's archive in GCS cannot be read (docs/migrating.md)"))
	}
	switch {
	case sb.StandbyHost == "" && sb.S3WalPath == "":
		errs = append(errs, field.Required(p.Child("standby_host"),
			"the primary to follow (a Service's DNS name or an address), or s3_wal_path, the source's pgBackRest repository, or both"))
	case sb.StandbyHost == "":
	case net.ParseIP(sb.StandbyHost) == nil && len(validation.IsDNS1123Subdomain(sb.StandbyHost)) > 0:
		errs = append(errs, field.Invalid(p.Child("standby_host"), sb.StandbyHost, "must be a DNS name or an IP address"))
	}
	if sb.StandbyPort != "" {
		if n, err := strconv.Atoi(sb.StandbyPort); err != nil || n < 1 || n > 65535 {
			errs = append(errs, field.Invalid(p.Child("standby_port"), sb.StandbyPort, "must be a port number, 1 to 65535"))
		}
	}
	if sb.S3WalPath != "" {
		if _, _, _, ok := sb.Repository(); !ok {
			errs = append(errs, field.Invalid(p.Child("s3_wal_path"), sb.S3WalPath,
				"must be a pgloop repository, s3://BUCKET/pgloop/NAMESPACE/NAME/UID (the source's status.backup.repository); WAL-G paths cannot be read by pgBackRest"))
		}
	}
	if s.Clone != nil {
		errs = append(errs, field.Forbidden(p, "a cluster is a clone (spec.clone) or a standby, not both"))
	}
	return errs
}
