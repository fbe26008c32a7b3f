package v1

import (
	"net"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Backup is where the cluster's WAL and base backups go: a pgBackRest
// repository in an S3 bucket. Without it the cluster uses the operator's
// default repository (the --backup-s3-* flags), if there is one.
type Backup struct {
	// Enabled false turns continuous archiving off for this cluster, even
	// when the operator has a default repository. Unset or true archives
	// whenever a repository is known (this field's s3, else the operator's).
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// S3 is the repository, replacing the operator's default.
	// +optional
	S3 *BackupS3 `json:"s3,omitempty"`
}

// BackupS3 is a pgBackRest repository in an S3 bucket, reached over
// HTTPS (pgBackRest speaks nothing else).
type BackupS3 struct {
	// Endpoint is the S3 service's host, with :port when it is not 443.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Endpoint string `json:"endpoint"`
	// Bucket is the bucket; it must exist.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	Bucket string `json:"bucket"`
	// Region is the bucket's region. Empty means us-east-1.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Region string `json:"region,omitempty"`
	// SecretName is a Secret in the cluster's namespace with the keys
	// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and, when caKey is set,
	// the certificate authority of the endpoint.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SecretName string `json:"secretName"`
	// CAKey is the key of the Secret that holds the PEM certificate
	// authority the endpoint's certificate is checked against. Empty means
	// the image's system authorities.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CAKey string `json:"caKey,omitempty"`
}

// Names of the credentials in a repository's Secret.
const (
	BackupAccessKeyIDKey     = "AWS_ACCESS_KEY_ID"
	BackupSecretAccessKeyKey = "AWS_SECRET_ACCESS_KEY"
)

// bucketNameRE is S3's rule for a bucket name (path-style requests admit
// nothing else): lower-case letters, digits, dots and hyphens, starting and
// ending with a letter or digit.
var bucketNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// ValidateBackupS3 checks a repository, the spec's or the operator's.
func ValidateBackupS3(s *BackupS3, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if msg := validateEndpoint(s.Endpoint); msg != "" {
		errs = append(errs, field.Invalid(path.Child("endpoint"), s.Endpoint, msg))
	}
	if !bucketNameRE.MatchString(s.Bucket) || strings.Contains(s.Bucket, "..") {
		errs = append(errs, field.Invalid(path.Child("bucket"), s.Bucket,
			"must be an S3 bucket name: 3 to 63 lower-case letters, digits, dots and hyphens, starting and ending with a letter or digit"))
	}
	if s.Region != "" && !regexp.MustCompile(`^[a-z0-9-]+$`).MatchString(s.Region) {
		errs = append(errs, field.Invalid(path.Child("region"), s.Region, "must be lower-case letters, digits and hyphens"))
	}
	for _, msg := range validation.IsDNS1123Subdomain(s.SecretName) {
		errs = append(errs, field.Invalid(path.Child("secretName"), s.SecretName, msg))
	}
	if s.CAKey != "" {
		for _, msg := range validation.IsConfigMapKey(s.CAKey) {
			errs = append(errs, field.Invalid(path.Child("caKey"), s.CAKey, msg))
		}
	}
	return errs
}

// validateEndpoint says what is wrong with an endpoint, "" when nothing is:
// a host name or IP address, optionally with a port, and no scheme (the
// scheme is always https).
func validateEndpoint(endpoint string) string {
	if strings.Contains(endpoint, "://") {
		return "must be host or host:port, without a scheme (pgBackRest always uses https)"
	}
	host, port := endpoint, ""
	if h, p, err := net.SplitHostPort(endpoint); err == nil {
		host, port = h, p
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "port must be a number from 1 to 65535"
		}
	}
	if net.ParseIP(host) != nil {
		return ""
	}
	if len(validation.IsDNS1123Subdomain(host)) > 0 {
		return "must be a DNS name or an IP address, optionally with :port"
	}
	return ""
}

// Archives reports whether the spec turns archiving off: false when
// backup.enabled is false.
func (b *Backup) Archives() bool {
	return b == nil || b.Enabled == nil || *b.Enabled
}

// validateBackup checks spec.backup, and that a cluster with a repository
// of its own leaves archive_command to pgloop.
func (s *PostgresqlSpec) validateBackup(path *field.Path) field.ErrorList {
	if s.Backup == nil || s.Backup.S3 == nil {
		return nil
	}
	errs := ValidateBackupS3(s.Backup.S3, path.Child("backup", "s3"))
	if s.Backup.Archives() {
		for name := range s.PostgreSQL.Parameters {
			if strings.EqualFold(name, "archive_command") {
				errs = append(errs, field.Forbidden(path.Child("postgresql", "parameters").Key(name),
					"is pgloop's while backup.s3 is set (it archives to that repository); set backup.enabled: false to archive elsewhere"))
			}
		}
	}
	return errs
}
