package v1

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
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
	// Schedule is when full base backups are taken: a cron schedule of
	// five fields (minute, hour, day of month, month, day of week) in UTC,
	// or @daily, @weekly, @hourly... Empty means the operator's
	// --backup-schedule ("30 0 * * *" unless set); "none" takes none
	// (pgloop still takes the first full backup of a new repository, and
	// those asked for with `pgloop backup`).
	// +optional
	// +kubebuilder:validation:MaxLength=100
	Schedule string `json:"schedule,omitempty"`
	// DifferentialSchedule is when differential backups are taken (the
	// files changed since the last full backup), in the same syntax.
	// Empty means none.
	// +optional
	// +kubebuilder:validation:MaxLength=100
	DifferentialSchedule string `json:"differentialSchedule,omitempty"`
	// Retention is how many full backups the repository keeps, or for how
	// long; older ones are deleted, with the WAL only they needed, after
	// each backup. Unset means the operator's --backup-retention-full (5
	// unless set).
	// +optional
	Retention *BackupRetention `json:"retention,omitempty"`
	// RestoreDrill, when true, restores each new backup into a scratch
	// directory on the primary's data volume after it is taken, starts
	// PostgreSQL there until it is consistent and accepts connections,
	// then removes it: status.backup.lastRestoreDrill says how it went
	// and how long it took. It needs free space on the data volume as
	// large as the database, and CPU and I/O of the primary's pod.
	// +optional
	RestoreDrill bool `json:"restoreDrill,omitempty"`
}

// BackupRetention is pgBackRest's retention of full backups: by count or by
// age, one of the two (differential backups go with their full one).
type BackupRetention struct {
	// Full is how many full backups are kept.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9999
	Full int32 `json:"full,omitempty"`
	// FullDays keeps the full backups younger than this many days, and
	// the newest older one (what a restore to the start of the window
	// needs).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9999
	FullDays int32 `json:"fullDays,omitempty"`
}

// Types of base backup (pgBackRest's --type).
const (
	BackupFull         = "full"
	BackupDifferential = "diff"
	BackupIncremental  = "incr"
)

// BackupTypes are the types a user may ask for.
var BackupTypes = []string{BackupFull, BackupDifferential, BackupIncremental}

// ScheduleNone in spec.backup.schedule turns scheduled full backups off.
const ScheduleNone = "none"

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
	if s.Backup == nil {
		return nil
	}
	var errs field.ErrorList
	b := path.Child("backup")
	for _, f := range []struct{ name, value string }{{"schedule", s.Backup.Schedule}, {"differentialSchedule", s.Backup.DifferentialSchedule}} {
		if f.value == "" || f.value == ScheduleNone && f.name == "schedule" {
			continue
		}
		if _, err := ParseBackupSchedule(f.value); err != nil {
			errs = append(errs, field.Invalid(b.Child(f.name), f.value, err.Error()))
		}
	}
	if r := s.Backup.Retention; r != nil {
		switch {
		case r.Full != 0 && r.FullDays != 0:
			errs = append(errs, field.Invalid(b.Child("retention"), fmt.Sprintf("full: %d, fullDays: %d", r.Full, r.FullDays),
				"set full (a count) or fullDays (an age), not both: pgBackRest keeps full backups by one of them"))
		case r.Full < 0 || r.Full > 9999:
			errs = append(errs, field.Invalid(b.Child("retention", "full"), r.Full, "must be from 1 to 9999"))
		case r.FullDays < 0 || r.FullDays > 9999:
			errs = append(errs, field.Invalid(b.Child("retention", "fullDays"), r.FullDays, "must be from 1 to 9999"))
		}
	}
	if s.Backup.S3 == nil {
		return errs
	}
	errs = append(errs, ValidateBackupS3(s.Backup.S3, b.Child("s3"))...)
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

// cronParser reads backup schedules as Kubernetes' CronJob controller does:
// five fields, or a descriptor (@daily).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseBackupSchedule parses a backup schedule; times are UTC.
func ParseBackupSchedule(s string) (cron.Schedule, error) {
	if strings.HasPrefix(strings.TrimSpace(s), "TZ=") || strings.HasPrefix(strings.TrimSpace(s), "CRON_TZ=") {
		return nil, fmt.Errorf("must not name a time zone: backup schedules are in UTC")
	}
	sched, err := cronParser.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("must be five cron fields (minute hour day-of-month month day-of-week) or a descriptor such as @daily: %v", err)
	}
	return sched, nil
}

// BackupRunID names a base backup run of type typ asked for at t: the
// time, to the second in UTC, and the type (20261203-091500-full).
func BackupRunID(t time.Time, typ string) string {
	return t.UTC().Format("20060102-150405") + "-" + typ
}
