package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"path"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Continuous archiving with pgBackRest (docs/backups.md). A cluster with a
// repository (spec.backup.s3, else the operator's default) carries
// pgBackRest's whole configuration as PGBACKREST_* variables of its Spilo
// container, so the image needs the pgbackrest binary and nothing of
// pgloop's; PostgreSQL's archive_command runs it.
const (
	// pgbackrestDir holds pgBackRest's spool and lock directories, on
	// the data volume beside PGROOT: the spool's WAL not yet pushed
	// survives a pod's replacement with its volume.
	pgbackrestDir = DataMountPath + "/pgbackrest"
	// PGData is Spilo's data directory ($PGROOT/pgdata).
	PGData = PGRoot + "/pgdata"
	// backupCAVolume is the Secret volume with the repository's CA.
	backupCAVolume = "pgbackrest-ca"
	// backupCADir is where it is mounted.
	backupCADir = "/etc/pgbackrest/repo"
	// backupCAFile is the CA's file in it.
	backupCAFile = "ca.crt"
	// DefaultArchiveTimeout is archive_timeout when the operator sets none:
	// a primary that writes little still switches to a new WAL segment,
	// and pushes the last one, at least this often. It bounds the data a
	// lost volume loses when nothing else does (a replica).
	DefaultArchiveTimeout = 60 * time.Second
)

// DefaultArchivingImage is an image that archives: pgloop's instance image
// (DefaultImage), with Debian's pgbackrest and a start-up program that
// keeps the container's PGBACKREST_* variables for Patroni.
const DefaultArchivingImage = DefaultImage

// ArchiveCommand returns PostgreSQL's archive_command of a cluster whose
// repository is repo. Before its first push to a repository, and then at
// least hourly, the primary runs stanza-create, which makes the stanza or
// checks the one there (it refuses one that another database made, with
// another system identifier, so a repository is never taken over; an
// hourly run also remakes a stanza whose files were deleted); a marker in
// the spool, named after the repository, records it. Its error goes to
// the spool's stanza-create.error, where pkg/archiving reads the words.
// Only the first must succeed: an hourly check that fails (a backup that
// runs holds the stanza's lock: [050]) pushes anyway, and checks again at
// the next push, or the backup would wait in vain for its own WAL.
// io-timeout is 3 s for these commands only (pgBackRest's default is 60
// s): pgBackRest retries a refused connection about 8 times io-timeout, so
// an unreachable bucket is a failure, with pgBackRest's words in the
// spool, within about 25 s.
func ArchiveCommand(pg *v1.Postgresql, repo *v1.BackupS3) string {
	sum := sha256.Sum256([]byte(repo.Endpoint + "\x00" + repo.Bucket + "\x00" + RepositoryPath(pg)))
	marker := "stanza-" + hex.EncodeToString(sum[:6])
	return `s="$PGBACKREST_SPOOL_PATH"; m="$s/` + marker + `"; ` +
		`if [ -z "$(find "$m" -mmin -60 2>/dev/null)" ]; then ` +
		`mkdir -p "$s" && pgbackrest --io-timeout=3 stanza-create 2>"$s/` + StanzaCreateError + `" && ` +
		`{ rm -f "$s/` + StanzaCreateError + `"; : >"$m"; } || [ -e "$m" ] || exit 1; fi; ` +
		`exec pgbackrest --io-timeout=3 archive-push "%p"`
}

// StanzaCreateError is the file in the spool where archive_command leaves
// the words of a stanza-create that failed.
const StanzaCreateError = "stanza-create.error"

// Repository returns the repository the cluster archives to (see
// wantedRepository), nil also when its image cannot archive
// (ArchiveBlocked says so).
func Repository(pg *v1.Postgresql, opts Options) *v1.BackupS3 {
	if ArchiveBlocked(pg, opts) != "" {
		return nil
	}
	return wantedRepository(pg, opts)
}

// ArchiveBlocked says why a cluster that has a repository does not archive
// to it: its image is not one of Options.ArchivingImages, so it may lack
// pgBackRest, and an archive_command that fails keeps every WAL segment
// in pg_wal until the volume is full. "" when nothing blocks it.
func ArchiveBlocked(pg *v1.Postgresql, opts Options) string {
	if wantedRepository(pg, opts) == nil {
		return ""
	}
	// Read on every observation and every round of the archive checks:
	// no allocation (withDefaults would build the default resources).
	image := pg.Spec.DockerImage
	if image == "" {
		image = opts.Image
	}
	if image == "" {
		image = DefaultImage
	}
	images := opts.ArchivingImages
	if images == nil {
		images = defaultArchivingImages
	}
	if archivingImage(images, image) {
		return ""
	}
	return "image " + image + " is not known to carry pgBackRest (--archiving-images: " + strings.Join(images, ", ") +
		"): not archiving, since a failing archive_command keeps all WAL in pg_wal; use pgloop's instance image " + DefaultImage
}

// defaultArchivingImages is Options.ArchivingImages when nil.
var defaultArchivingImages = []string{InstanceRepository}

// archivingImage reports whether image is one of images: the same
// reference, or of the repository an entry names without a tag or digest.
// It allocates nothing: it runs on every observation.
func archivingImage(images []string, image string) bool {
	for _, e := range images {
		if e == image {
			return true
		}
		if !strings.Contains(e[strings.LastIndexByte(e, '/')+1:], ":") && !strings.Contains(e, "@") &&
			len(image) > len(e) && strings.HasPrefix(image, e) && (image[len(e)] == ':' || image[len(e)] == '@') {
			return true
		}
	}
	return false
}

// wantedRepository is the repository the spec asks for: spec.backup.s3,
// else the operator's default; nil when it has none, when backup.enabled
// is false, or when the cluster sets its own archive_command and no
// spec.backup.s3 (it archives its own way; Validate refuses an
// archive_command beside spec.backup.s3).
func wantedRepository(pg *v1.Postgresql, opts Options) *v1.BackupS3 {
	if !pg.Spec.Backup.Archives() {
		return nil
	}
	if pg.Spec.Backup != nil && pg.Spec.Backup.S3 != nil {
		return pg.Spec.Backup.S3
	}
	for name := range pg.Spec.PostgreSQL.Parameters {
		if strings.EqualFold(name, "archive_command") {
			return nil
		}
	}
	return opts.Backup
}

// RepositoryPath is the cluster's path in the bucket:
// /pgloop/<namespace>/<name>/<uid>. The UID keeps a new cluster of the
// same name out of the old one's backups, which stay for a restore.
func RepositoryPath(pg *v1.Postgresql) string {
	return path.Join("/pgloop", pg.Namespace, pg.Name, string(pg.UID))
}

// RepositoryURL names the cluster's repository for people:
// s3://<bucket><path> at <endpoint>.
func RepositoryURL(pg *v1.Postgresql, repo *v1.BackupS3) string {
	return "s3://" + repo.Bucket + RepositoryPath(pg) + " at " + repo.Endpoint
}

// Stanza is the cluster's pgBackRest stanza: its name (the repository
// path is the cluster's own).
func Stanza(pg *v1.Postgresql) string { return pg.Name }

// archiveParameters are the per-instance PostgreSQL settings of a cluster
// with a repository: archive_command, and archive_timeout unless the spec
// sets one (theirs is kept, per instance too, so that it wins).
func archiveParameters(pg *v1.Postgresql, opts Options) map[string]string {
	if Repository(pg, opts) == nil {
		return nil
	}
	timeout := opts.ArchiveTimeout
	if timeout <= 0 {
		timeout = DefaultArchiveTimeout
	}
	out := map[string]string{
		"archive_command": ArchiveCommand(pg, Repository(pg, opts)),
		"archive_timeout": strconv.Itoa(int(timeout.Round(time.Second).Seconds())),
	}
	for name, v := range pg.Spec.PostgreSQL.Parameters {
		if lower := strings.ToLower(name); lower == "archive_timeout" {
			out[lower] = v
		}
	}
	return out
}

// pgbackrestEnv is pgBackRest's configuration for the Spilo container, nil
// without a repository. Paths are the container's; pgBackRest reads every
// option from a PGBACKREST_ variable of its name.
func pgbackrestEnv(pg *v1.Postgresql, opts Options) []corev1.EnvVar {
	repo := Repository(pg, opts)
	if repo == nil {
		return nil
	}
	host, port := repo.Endpoint, ""
	if h, p, err := net.SplitHostPort(repo.Endpoint); err == nil {
		host, port = h, p
	}
	region := repo.Region
	if region == "" {
		region = "us-east-1"
	}
	secretRef := func(key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: repo.SecretName}, Key: key}}
	}
	env := []corev1.EnvVar{
		{Name: "PGBACKREST_STANZA", Value: Stanza(pg)},
		{Name: "PGBACKREST_PG1_PATH", Value: PGData},
		// Spilo's socket directory: stanza-create asks PostgreSQL there.
		{Name: "PGBACKREST_PG1_SOCKET_PATH", Value: "/var/run/postgresql"},
		{Name: "PGBACKREST_REPO1_TYPE", Value: "s3"},
		{Name: "PGBACKREST_REPO1_PATH", Value: RepositoryPath(pg)},
		{Name: "PGBACKREST_REPO1_S3_ENDPOINT", Value: host},
	}
	if port != "" {
		env = append(env, corev1.EnvVar{Name: "PGBACKREST_REPO1_S3_PORT", Value: port})
	}
	env = append(env,
		corev1.EnvVar{Name: "PGBACKREST_REPO1_S3_BUCKET", Value: repo.Bucket},
		corev1.EnvVar{Name: "PGBACKREST_REPO1_S3_REGION", Value: region},
		// Path-style requests work with every S3 service, and need no
		// DNS name per bucket.
		corev1.EnvVar{Name: "PGBACKREST_REPO1_S3_URI_STYLE", Value: "path"},
		corev1.EnvVar{Name: "PGBACKREST_REPO1_S3_KEY", ValueFrom: secretRef(v1.BackupAccessKeyIDKey)},
		corev1.EnvVar{Name: "PGBACKREST_REPO1_S3_KEY_SECRET", ValueFrom: secretRef(v1.BackupSecretAccessKeyKey)},
	)
	if repo.CAKey != "" {
		env = append(env, corev1.EnvVar{Name: "PGBACKREST_REPO1_S3_CA_FILE", Value: path.Join(backupCADir, backupCAFile)})
	}
	return append(env,
		// Asynchronous archiving: archive_command hands the segment to a
		// background process that pushes several at once, so a slow
		// bucket does not hold every commit-heavy primary to one
		// segment per round trip.
		corev1.EnvVar{Name: "PGBACKREST_ARCHIVE_ASYNC", Value: "y"},
		corev1.EnvVar{Name: "PGBACKREST_SPOOL_PATH", Value: pgbackrestDir + "/spool"},
		corev1.EnvVar{Name: "PGBACKREST_LOCK_PATH", Value: pgbackrestDir + "/lock"},
		// No log files: pgBackRest does not make their directory, and
		// the asynchronous push's failures are in the spool's .error
		// files (what pkg/archiving reads), its foreground's in
		// PostgreSQL's log.
		corev1.EnvVar{Name: "PGBACKREST_LOG_LEVEL_CONSOLE", Value: "warn"},
		corev1.EnvVar{Name: "PGBACKREST_LOG_LEVEL_STDERR", Value: "error"},
		corev1.EnvVar{Name: "PGBACKREST_LOG_LEVEL_FILE", Value: "off"},
	)
}

// backupCA returns the Secret volume with the repository's CA and its
// mount, when the repository names one.
func backupCA(pg *v1.Postgresql, opts Options) (*corev1.Volume, *corev1.VolumeMount) {
	repo := Repository(pg, opts)
	if repo == nil || repo.CAKey == "" {
		return nil, nil
	}
	return &corev1.Volume{
			Name: backupCAVolume,
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName:  repo.SecretName,
				Items:       []corev1.KeyToPath{{Key: repo.CAKey, Path: backupCAFile}},
				DefaultMode: ptr.To[int32](0o444),
			}},
		}, &corev1.VolumeMount{
			Name: backupCAVolume, MountPath: backupCADir, ReadOnly: true,
		}
}
