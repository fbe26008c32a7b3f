package v1

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// CloneSpec makes a new cluster a copy of another one's data, as zalando's
// spec.clone does: with a timestamp, a point-in-time recovery from the
// source's pgBackRest repository (docs/backups.md, "Restores"). The clone
// reads the repository it would archive to itself (its spec.backup.s3,
// else the operator's default) at the source's path
// /pgloop/<namespace>/<cluster>/<uid>, and archives to its own path from
// then on. Read once, when the cluster's first member bootstraps: a change
// later does nothing to a running cluster.
type CloneSpec struct {
	// Cluster is the source cluster's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Cluster string `json:"cluster"`
	// Namespace is the source cluster's namespace. Empty means the clone's
	// own. pgloop's field, not zalando's.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// UID is the source cluster's metadata.uid: it names the source's
	// repository path, which outlives the source. Required with
	// timestamp.
	// +optional
	// +kubebuilder:validation:MaxLength=36
	UID string `json:"uid,omitempty"`
	// Timestamp is the point to recover to, RFC 3339 with an offset, as
	// in zalando's manifest: "2017-12-19T12:40:33+01:00". The clone holds
	// every transaction committed at or before it. It must be in the past,
	// after the source's first base backup. Empty means the end of the
	// source's archive: everything it archived, also once the source is
	// deleted (zalando copies a running source with pg_basebackup
	// instead; pgloop's copy is as recent as the source's last archived
	// segment, archive_timeout at most behind a source that runs).
	// +optional
	// +kubebuilder:validation:MaxLength=40
	Timestamp string `json:"timestamp,omitempty"`

	// S3WalPath is zalando's WAL-G location of the source's archive. Not
	// read: pgloop restores from pgBackRest repositories only, and
	// pgBackRest cannot read WAL-G's archives (docs/migrating.md).
	// +optional
	S3WalPath string `json:"s3_wal_path,omitempty"`
	// S3Endpoint is zalando's; not read (see s3_wal_path).
	// +optional
	S3Endpoint string `json:"s3_endpoint,omitempty"`
	// S3AccessKeyID is zalando's; not read (see s3_wal_path).
	// +optional
	S3AccessKeyID string `json:"s3_access_key_id,omitempty"`
	// S3SecretAccessKey is zalando's; not read (see s3_wal_path).
	// +optional
	S3SecretAccessKey string `json:"s3_secret_access_key,omitempty"`
	// S3ForcePathStyle is zalando's; not read (see s3_wal_path).
	// +optional
	S3ForcePathStyle *bool `json:"s3_force_path_style,omitempty"`
}

// CloneTimestampLayout is the layout of clone.timestamp: RFC 3339, whose
// offset is required (Z or ±hh:mm).
const CloneTimestampLayout = time.RFC3339

// SourceNamespace is the source cluster's namespace: clone.namespace, else
// own, the clone's.
func (c *CloneSpec) SourceNamespace(own string) string {
	if c.Namespace != "" {
		return c.Namespace
	}
	return own
}

// Time returns clone.timestamp parsed; ok false when it is empty or not
// RFC 3339 (Validate says so).
func (c *CloneSpec) Time() (t time.Time, ok bool) {
	if c == nil || c.Timestamp == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(CloneTimestampLayout, c.Timestamp)
	return t, err == nil
}

// validateClone checks spec.clone of the cluster namespace/name created at
// created. A timestamp in the future is one after the cluster was created
// (when created is known): the time a user asked for a copy is the latest
// it can hold, and the check gives the same answer at every reading,
// unlike one against the clock, which would turn a refused cluster valid
// once its time came. A time in the past whose WAL is not archived yet
// (archive_timeout) fails the restore, which Patroni retries.
func validateClone(s *PostgresqlSpec, namespace, name string, created time.Time, path *field.Path) field.ErrorList {
	c := s.Clone
	if c == nil {
		return nil
	}
	var errs field.ErrorList
	p := path.Child("clone")
	errs = append(errs, ValidateClusterName(c.Cluster, p.Child("cluster"))...)
	if c.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(c.Namespace) {
			errs = append(errs, field.Invalid(p.Child("namespace"), c.Namespace, msg))
		}
	}
	if c.Cluster == name && c.SourceNamespace(namespace) == namespace && name != "" {
		errs = append(errs, field.Invalid(p.Child("cluster"), c.Cluster,
			"a cluster cannot be a clone of itself: name another cluster (or, with clone.namespace, one in another namespace)"))
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"s3_wal_path", c.S3WalPath != ""}, {"s3_endpoint", c.S3Endpoint != ""},
		{"s3_access_key_id", c.S3AccessKeyID != ""}, {"s3_secret_access_key", c.S3SecretAccessKey != ""},
		{"s3_force_path_style", c.S3ForcePathStyle != nil},
	} {
		if f.set {
			errs = append(errs, field.Forbidden(p.Child(f.name),
				"pgloop restores from pgBackRest repositories only (the clone's spec.backup.s3, else the operator's default, at the source's path /pgloop/<namespace>/<cluster>/<uid>); "+
					"WAL-G archives cannot be read by pgBackRest: see docs/migrating.md for moving a zalando cluster's data"))
		}
	}
	if c.UID != "" {
		for _, msg := range validation.IsDNS1123Label(c.UID) {
			errs = append(errs, field.Invalid(p.Child("uid"), c.UID, "must be the source cluster's metadata.uid: "+msg))
		}
	}
	if !s.Backup.Archives() {
		errs = append(errs, field.Forbidden(path.Child("backup", "enabled"),
			"is false, which leaves the cluster no pgBackRest repository, and a clone restores from its repository (at the source's path)"))
	}
	if c.UID == "" {
		errs = append(errs, field.Required(p.Child("uid"),
			"the source cluster's metadata.uid (kubectl get postgresql "+c.Cluster+" -o jsonpath='{.metadata.uid}'): it names the source's repository path"))
	}
	if c.Timestamp == "" {
		// The end of the source's archive: pgloop restores from the
		// repository, also when the source is gone.
		return errs
	}
	t, err := time.Parse(CloneTimestampLayout, c.Timestamp)
	switch {
	case err != nil:
		errs = append(errs, field.Invalid(p.Child("timestamp"), c.Timestamp,
			`must be RFC 3339 with an offset, e.g. "2017-12-19T12:40:33+01:00" or "2017-12-19T11:40:33Z"`))
	case !created.IsZero() && t.After(created):
		errs = append(errs, field.Invalid(p.Child("timestamp"), c.Timestamp,
			"is in the future: after the cluster was created ("+created.UTC().Format(time.RFC3339)+"); a restore can only reach a time already past"))
	}
	return errs
}
