package cluster

import (
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// The logical backup of a cluster is zalando's: a CronJob
// logical-backup-<cluster> whose job runs one pod of the logical-backup
// image. Its script (dump.sh) finds a replica of the cluster through the
// Kubernetes API (the pods labelled cluster-name=SCOPE, spilo-role=replica,
// on its own node first; the master when there is none), so the pod runs
// as the cluster's pods do (PodServiceAccountName may list pods), then
// pipes pg_dumpall, as the superuser, through pigz to the provider's
// command line tool: the dump lands under
// <bucket>/<prefix>/<cluster>/<cluster's UID>/logical_backups/<epoch>.sql.gz.
//
// The CronJob is labelled as the cluster's other objects (application=
// spilo), so the operator's informers see it; its jobs and pods are
// labelled application=spilo-logical-backup, as zalando's are: Patroni,
// pgloop and tools written for zalando list a cluster's members by
// application=spilo and cluster-name, and a backup pod is none.
const (
	// ApplicationLogicalBackup is LabelApplication's value on the
	// logical backup's jobs and pods.
	ApplicationLogicalBackup = "spilo-logical-backup"
	// LogicalBackupContainerName is the backup container's name.
	LogicalBackupContainerName = "logical-backup"
	// DefaultLogicalBackupImage is zalando's logical backup image.
	DefaultLogicalBackupImage = "ghcr.io/zalando/postgres-operator/logical-backup:v2.0.1"
	// DefaultLogicalBackupSchedule is the schedule of clusters without
	// spec.logicalBackupSchedule: every day at 00:30.
	DefaultLogicalBackupSchedule = "30 00 * * *"
	// DefaultLogicalBackupProvider is where dumps are uploaded to, unless
	// configured: s3 (the others are gcs and az).
	DefaultLogicalBackupProvider = "s3"
	// DefaultLogicalBackupS3BucketPrefix is the first part of the dumps'
	// keys in the bucket, zalando's.
	DefaultLogicalBackupS3BucketPrefix = "spilo"
	// DefaultLogicalBackupS3SSE is the server side encryption the upload
	// asks for (aws s3 cp --sse), zalando's; empty asks for none.
	DefaultLogicalBackupS3SSE = "AES256"
	// logicalBackupJobPrefix prefixes the CronJob's name, zalando's
	// logical_backup_job_prefix default.
	logicalBackupJobPrefix = "logical-backup-"
	// maxCronJobNameLength is the longest name the apiserver takes for a
	// CronJob: its jobs' names add 11 characters to it.
	maxCronJobNameLength = 52
	// logicalBackupHistory is how many finished jobs of each outcome the
	// CronJob keeps, and logicalBackupTTL how long (seconds) a finished
	// job stays before the TTL controller deletes it: zalando's.
	logicalBackupHistory = 3
	logicalBackupTTL     = 86400
)

// LogicalBackupProviders are the values Options.LogicalBackup.Provider
// takes: those the image's script uploads to.
var LogicalBackupProviders = []string{"s3", "gcs", "az"}

// LogicalBackupOptions are the operator's settings of the logical backups,
// zalando's logical_backup_* options. Credentials are in EnvSecret, whose
// keys the container gets as environment variables: AWS_ACCESS_KEY_ID
// and AWS_SECRET_ACCESS_KEY for S3, LOGICAL_BACKUP_AZURE_STORAGE_* for
// Azure.
type LogicalBackupOptions struct {
	// Image is the backup image. Empty means DefaultLogicalBackupImage.
	Image string
	// Schedule is the schedule of clusters without
	// spec.logicalBackupSchedule. Empty means DefaultLogicalBackupSchedule.
	Schedule string
	// Provider is s3, gcs or az. Empty means DefaultLogicalBackupProvider.
	Provider string
	// S3Bucket is the bucket (for az, the dumps' path starts with it).
	S3Bucket string
	// S3BucketPrefix starts the dumps' keys. Empty means
	// DefaultLogicalBackupS3BucketPrefix.
	S3BucketPrefix string
	// S3Region, S3Endpoint (for a service other than AWS) and S3SSE (the
	// server side encryption, the operator's flag DefaultLogicalBackupS3SSE
	// by default) are passed to the aws command line tool when not empty.
	S3Region, S3Endpoint, S3SSE string
	// S3RetentionTime is how long dumps are kept in S3
	// (LOGICAL_BACKUP_S3_RETENTION_TIME) for clusters without
	// spec.logicalBackupRetention. Empty keeps them all.
	S3RetentionTime string
	// EnvSecret names a Secret of the cluster's namespace whose keys the
	// container gets as environment variables (envFrom): the
	// credentials. Empty means none.
	EnvSecret string
}

func (o LogicalBackupOptions) withDefaults() LogicalBackupOptions {
	if o.Image == "" {
		o.Image = DefaultLogicalBackupImage
	}
	if o.Schedule == "" {
		o.Schedule = DefaultLogicalBackupSchedule
	}
	if o.Provider == "" {
		o.Provider = DefaultLogicalBackupProvider
	}
	if o.S3BucketPrefix == "" {
		o.S3BucketPrefix = DefaultLogicalBackupS3BucketPrefix
	}
	return o
}

// LogicalBackupJobName is the name of the cluster's logical backup
// CronJob: logical-backup-<cluster>, cut to the length the apiserver takes
// (without a trailing '-'), as zalando does.
func LogicalBackupJobName(cluster string) string {
	name := logicalBackupJobPrefix + cluster
	if len(name) > maxCronJobNameLength {
		name = strings.TrimRight(name[:maxCronJobNameLength], "-")
	}
	return name
}

// LogicalBackupSchedule is the schedule of pg's logical backup:
// spec.logicalBackupSchedule, or the operator's.
func LogicalBackupSchedule(pg *v1.Postgresql, opts Options) string {
	if pg.Spec.LogicalBackupSchedule != "" {
		return pg.Spec.LogicalBackupSchedule
	}
	return opts.LogicalBackup.withDefaults().Schedule
}

// LogicalBackupRetention is how long pg's logical backups are kept in S3:
// spec.logicalBackupRetention, or the operator's; empty keeps them all.
func LogicalBackupRetention(pg *v1.Postgresql, opts Options) string {
	if pg.Spec.LogicalBackupRetention != "" {
		return pg.Spec.LogicalBackupRetention
	}
	return opts.LogicalBackup.S3RetentionTime
}

// logicalBackupLabels are the labels of the backup's jobs and pods.
func logicalBackupLabels(pg *v1.Postgresql) map[string]string {
	l := Labels(pg)
	l[LabelApplication] = ApplicationLogicalBackup
	return l
}

// LogicalBackupCronJob returns the cluster's logical backup CronJob, nil
// when spec.enableLogicalBackup is off. Its jobs run one pod, never
// restarted in place (a failed dump is the job controller's to retry),
// and one at a time: a backup still running when the next is due makes
// the next skip. The CronJob carries AnnotationPodTemplateHash, a hash of
// its job template as built here: the apiserver defaults many of the
// template's fields, so the hashes, not the templates, say whether it is
// the spec's (see CronJobNeedsUpdate).
func LogicalBackupCronJob(pg *v1.Postgresql, opts Options) *batchv1.CronJob {
	if !pg.Spec.EnableLogicalBackup {
		return nil
	}
	lb := opts.LogicalBackup.withDefaults()
	scopeSuffix := ""
	if pg.UID != "" {
		scopeSuffix = "/" + string(pg.UID)
	}
	env := []corev1.EnvVar{
		{Name: "SCOPE", Value: pg.Name},
		{Name: "CLUSTER_NAME_LABEL", Value: LabelClusterName},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
		{Name: "PG_VERSION", Value: pg.Spec.PostgreSQL.Version},
		{Name: "PGPORT", Value: strconv.Itoa(PostgresPort)},
		{Name: "PGUSER", Value: SuperuserName},
		{Name: "PGDATABASE", Value: SuperuserName},
		{Name: "PGSSLMODE", Value: "require"},
		{Name: "PGPASSWORD", ValueFrom: passwordRef(SecretName(SuperuserName, pg.Name))},
		{Name: "LOGICAL_BACKUP_PROVIDER", Value: lb.Provider},
		{Name: "LOGICAL_BACKUP_S3_BUCKET", Value: lb.S3Bucket},
		{Name: "LOGICAL_BACKUP_S3_BUCKET_PREFIX", Value: lb.S3BucketPrefix},
		{Name: "LOGICAL_BACKUP_S3_BUCKET_SCOPE_SUFFIX", Value: scopeSuffix},
	}
	if lb.Provider == "s3" {
		env = append(env,
			corev1.EnvVar{Name: "LOGICAL_BACKUP_S3_REGION", Value: lb.S3Region},
			corev1.EnvVar{Name: "LOGICAL_BACKUP_S3_ENDPOINT", Value: lb.S3Endpoint},
			corev1.EnvVar{Name: "LOGICAL_BACKUP_S3_SSE", Value: lb.S3SSE})
		// The image's script deletes dumps older than this after each
		// upload (S3 only). Set only when there is one, so a cluster
		// without it keeps the job template it had.
		if r := LogicalBackupRetention(pg, opts); r != "" {
			env = append(env, corev1.EnvVar{Name: "LOGICAL_BACKUP_S3_RETENTION_TIME", Value: r})
		}
	}
	container := corev1.Container{
		Name:            LogicalBackupContainerName,
		Image:           lb.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Env:             env,
		Resources:       resources(nil, opts.withDefaults()),
	}
	if lb.EnvSecret != "" {
		container.EnvFrom = []corev1.EnvFromSource{{
			SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: lb.EnvSecret}},
		}}
	}
	spec := corev1.PodSpec{
		Containers:         []corev1.Container{container},
		RestartPolicy:      corev1.RestartPolicyNever,
		ServiceAccountName: PodServiceAccountName,
	}
	// The cluster's tolerations, not its node affinity, as zalando's:
	// the backup pod may run wherever it is tolerated, it holds no data.
	for i := range pg.Spec.Tolerations {
		spec.Tolerations = append(spec.Tolerations, *pg.Spec.Tolerations[i].DeepCopy())
	}
	labels := logicalBackupLabels(pg)
	template := batchv1.JobTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: batchv1.JobSpec{
			TTLSecondsAfterFinished: ptr.To[int32](logicalBackupTTL),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: copyMap(labels), Annotations: copyMap(pg.Spec.PodAnnotations)},
				Spec:       spec,
			},
		},
	}
	meta := objectMeta(pg, LogicalBackupJobName(pg.Name))
	meta.Annotations = map[string]string{AnnotationPodTemplateHash: jsonHash(template)}
	return &batchv1.CronJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: batchv1.SchemeGroupVersion.String(), Kind: "CronJob"},
		ObjectMeta: meta,
		Spec: batchv1.CronJobSpec{
			Schedule:                   LogicalBackupSchedule(pg, opts),
			ConcurrencyPolicy:          batchv1.ForbidConcurrent,
			SuccessfulJobsHistoryLimit: ptr.To[int32](logicalBackupHistory),
			FailedJobsHistoryLimit:     ptr.To[int32](logicalBackupHistory),
			JobTemplate:                template,
		},
	}
}

// CronJobNeedsUpdate reports whether current differs from desired in what
// pgloop owns: the schedule, the concurrency policy, the history limits,
// the job template (by the hash annotation), and pgloop's labels and
// annotations. Suspend is left to users: `kubectl patch --type merge -p
// '{"spec":{"suspend":true}}'` pauses the backups and pgloop keeps it.
func CronJobNeedsUpdate(current, desired *batchv1.CronJob) bool {
	c, d := &current.Spec, &desired.Spec
	return c.Schedule != d.Schedule ||
		c.ConcurrencyPolicy != d.ConcurrencyPolicy ||
		ptr.Deref(c.SuccessfulJobsHistoryLimit, -1) != ptr.Deref(d.SuccessfulJobsHistoryLimit, -1) ||
		ptr.Deref(c.FailedJobsHistoryLimit, -1) != ptr.Deref(d.FailedJobsHistoryLimit, -1) ||
		!containsAll(current.Labels, desired.Labels) ||
		!containsAll(current.Annotations, desired.Annotations)
}

// ApplyCronJob returns a copy of current with what pgloop owns taken from
// desired, ready for an Update.
func ApplyCronJob(current, desired *batchv1.CronJob) *batchv1.CronJob {
	out := current.DeepCopy()
	out.Labels = mergeInto(out.Labels, desired.Labels)
	out.Annotations = mergeInto(out.Annotations, desired.Annotations)
	d := desired.DeepCopy()
	out.Spec.Schedule = d.Spec.Schedule
	out.Spec.ConcurrencyPolicy = d.Spec.ConcurrencyPolicy
	out.Spec.SuccessfulJobsHistoryLimit = d.Spec.SuccessfulJobsHistoryLimit
	out.Spec.FailedJobsHistoryLimit = d.Spec.FailedJobsHistoryLimit
	out.Spec.JobTemplate = d.Spec.JobTemplate
	return out
}
