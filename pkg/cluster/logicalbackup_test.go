package cluster

import (
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// withBackup returns the minimal sample with the logical backup enabled.
func withBackup(t *testing.T) *v1.Postgresql {
	t.Helper()
	pg := loadSample(t, "minimal")
	pg.UID = "11111111-2222-3333-4444-555555555555"
	pg.Spec.EnableLogicalBackup = true
	return pg
}

func envValue(c *corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

func TestLogicalBackupCronJob(t *testing.T) {
	t.Run("off", func(t *testing.T) {
		pg := loadSample(t, "minimal")
		if cj := LogicalBackupCronJob(pg, Options{}); cj != nil {
			t.Errorf("built %s with enableLogicalBackup off", cj.Name)
		}
		if buildAll(t, pg).LogicalBackup != nil {
			t.Error("Build made a logical backup CronJob with enableLogicalBackup off")
		}
	})

	t.Run("zalando's CronJob", func(t *testing.T) {
		pg := withBackup(t)
		pg.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
		pg.Spec.NodeAffinity = &corev1.NodeAffinity{}
		pg.Spec.PodAnnotations = map[string]string{"a": "b"}
		cj := LogicalBackupCronJob(pg, Options{})
		if cj.Name != "logical-backup-"+pg.Name || cj.Namespace != pg.Namespace {
			t.Errorf("name %s/%s", cj.Namespace, cj.Name)
		}
		if refs := cj.OwnerReferences; len(refs) != 1 || refs[0].UID != pg.UID || !ptr.Deref(refs[0].Controller, false) {
			t.Errorf("owner references %v, want the cluster as controller", refs)
		}
		if l := cj.Labels; l[LabelApplication] != ApplicationSpilo || l[LabelClusterName] != pg.Name {
			t.Errorf("CronJob labels %v: the operator's informers see application=spilo only", l)
		}
		for what, l := range map[string]map[string]string{"job": cj.Spec.JobTemplate.Labels, "pod": cj.Spec.JobTemplate.Spec.Template.Labels} {
			if l[LabelApplication] != ApplicationLogicalBackup || l[LabelClusterName] != pg.Name {
				t.Errorf("%s labels %v: a backup pod must not pass for a member (application=spilo)", what, l)
			}
		}
		s := cj.Spec
		if s.Schedule != DefaultLogicalBackupSchedule || s.ConcurrencyPolicy != batchv1.ForbidConcurrent ||
			ptr.Deref(s.SuccessfulJobsHistoryLimit, 0) != 3 || ptr.Deref(s.FailedJobsHistoryLimit, 0) != 3 ||
			ptr.Deref(s.JobTemplate.Spec.TTLSecondsAfterFinished, 0) != 86400 {
			t.Errorf("spec: schedule %q concurrency %s history %v/%v ttl %v", s.Schedule, s.ConcurrencyPolicy,
				s.SuccessfulJobsHistoryLimit, s.FailedJobsHistoryLimit, s.JobTemplate.Spec.TTLSecondsAfterFinished)
		}
		pod := s.JobTemplate.Spec.Template.Spec
		if pod.RestartPolicy != corev1.RestartPolicyNever || pod.ServiceAccountName != PodServiceAccountName {
			t.Errorf("restartPolicy %s serviceAccount %s", pod.RestartPolicy, pod.ServiceAccountName)
		}
		if len(pod.Tolerations) != 1 || pod.Affinity != nil {
			t.Errorf("tolerations %v affinity %v: the cluster's tolerations, no node affinity", pod.Tolerations, pod.Affinity)
		}
		if s.JobTemplate.Spec.Template.Annotations["a"] != "b" {
			t.Errorf("pod annotations %v", s.JobTemplate.Spec.Template.Annotations)
		}
		if len(pod.Containers) != 1 {
			t.Fatalf("%d containers", len(pod.Containers))
		}
		c := &pod.Containers[0]
		if c.Name != LogicalBackupContainerName || c.Image != DefaultLogicalBackupImage || c.EnvFrom != nil {
			t.Errorf("container %s image %s envFrom %v", c.Name, c.Image, c.EnvFrom)
		}
		var names []string
		for _, e := range c.Env {
			names = append(names, e.Name)
		}
		want := []string{"SCOPE", "CLUSTER_NAME_LABEL", "POD_NAMESPACE", "PG_VERSION", "PGPORT", "PGUSER", "PGDATABASE",
			"PGSSLMODE", "PGPASSWORD", "LOGICAL_BACKUP_PROVIDER", "LOGICAL_BACKUP_S3_BUCKET", "LOGICAL_BACKUP_S3_BUCKET_PREFIX",
			"LOGICAL_BACKUP_S3_BUCKET_SCOPE_SUFFIX", "LOGICAL_BACKUP_S3_REGION", "LOGICAL_BACKUP_S3_ENDPOINT", "LOGICAL_BACKUP_S3_SSE"}
		if !slices.Equal(names, want) {
			t.Errorf("env\n got %v\nwant %v", names, want)
		}
		for name, value := range map[string]string{
			"SCOPE": pg.Name, "CLUSTER_NAME_LABEL": LabelClusterName, "PG_VERSION": pg.Spec.PostgreSQL.Version,
			"PGPORT": "5432", "PGUSER": "postgres", "PGDATABASE": "postgres", "PGSSLMODE": "require",
			"LOGICAL_BACKUP_PROVIDER": "s3", "LOGICAL_BACKUP_S3_BUCKET_PREFIX": "spilo",
			"LOGICAL_BACKUP_S3_BUCKET_SCOPE_SUFFIX": "/" + string(pg.UID),
		} {
			if e, _ := envValue(c, name); e.Value != value {
				t.Errorf("%s=%q, want %q", name, e.Value, value)
			}
		}
		pw, _ := envValue(c, "PGPASSWORD")
		if ref := pw.ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != SecretName(SuperuserName, pg.Name) {
			t.Errorf("PGPASSWORD from %v, want the superuser's Secret", pw.ValueFrom)
		}
		ns, _ := envValue(c, "POD_NAMESPACE")
		if ns.ValueFrom == nil || ns.ValueFrom.FieldRef == nil || ns.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
			t.Errorf("POD_NAMESPACE from %v", ns.ValueFrom)
		}
		if cj.Annotations[AnnotationPodTemplateHash] == "" {
			t.Error("no job template hash")
		}
	})

	t.Run("the operator's options and the spec's schedule", func(t *testing.T) {
		pg := withBackup(t)
		opts := Options{LogicalBackup: LogicalBackupOptions{Image: "backup:1", Schedule: "0 * * * *", Provider: "gcs",
			S3Bucket: "b", S3BucketPrefix: "p", S3Region: "r", EnvSecret: "creds"}}
		cj := LogicalBackupCronJob(pg, opts)
		c := &cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0]
		if cj.Spec.Schedule != "0 * * * *" || c.Image != "backup:1" {
			t.Errorf("schedule %q image %q", cj.Spec.Schedule, c.Image)
		}
		if _, ok := envValue(c, "LOGICAL_BACKUP_S3_REGION"); ok {
			t.Error("LOGICAL_BACKUP_S3_REGION set for gcs")
		}
		if e, _ := envValue(c, "LOGICAL_BACKUP_S3_BUCKET"); e.Value != "b" {
			t.Errorf("bucket %q", e.Value)
		}
		if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef == nil || c.EnvFrom[0].SecretRef.Name != "creds" {
			t.Errorf("envFrom %v, want the Secret creds", c.EnvFrom)
		}
		pg.Spec.LogicalBackupSchedule = "15 3 * * 0"
		if s := LogicalBackupCronJob(pg, opts).Spec.Schedule; s != "15 3 * * 0" {
			t.Errorf("schedule %q, want the spec's", s)
		}
	})
}

func TestLogicalBackupJobName(t *testing.T) {
	if got := LogicalBackupJobName("acid-minimal"); got != "logical-backup-acid-minimal" {
		t.Errorf("got %q", got)
	}
	// 52 characters at most, without a trailing '-'.
	long := strings.Repeat("a", 36) + "-" + strings.Repeat("b", 15)
	got := LogicalBackupJobName(long)
	if len(got) > 52 || strings.HasSuffix(got, "-") || !strings.HasPrefix(got, "logical-backup-"+strings.Repeat("a", 36)) {
		t.Errorf("%q (%d characters)", got, len(got))
	}
}

func TestCronJobNeedsUpdate(t *testing.T) {
	pg := withBackup(t)
	desired := LogicalBackupCronJob(pg, Options{})
	// stored is desired as the apiserver keeps it: defaulted fields, a
	// user's label, suspended by hand.
	stored := desired.DeepCopy()
	stored.Labels["owner"] = "me"
	stored.Spec.Suspend = ptr.To(true)
	stored.Spec.StartingDeadlineSeconds = ptr.To[int64](100)
	stored.Spec.JobTemplate.Spec.Template.Spec.DNSPolicy = corev1.DNSClusterFirst
	stored.Spec.JobTemplate.Spec.Template.Spec.Containers[0].TerminationMessagePath = "/dev/termination-log"

	other := pg.DeepCopy()
	other.Spec.LogicalBackupSchedule = "0 1 * * *"
	tests := []struct {
		name    string
		desired *batchv1.CronJob
		want    bool
	}{
		{"the same, defaulted", desired, false},
		{"another schedule", LogicalBackupCronJob(other, Options{}), true},
		{"another image", LogicalBackupCronJob(pg, Options{LogicalBackup: LogicalBackupOptions{Image: "x:1"}}), true},
		{"another bucket", LogicalBackupCronJob(pg, Options{LogicalBackup: LogicalBackupOptions{S3Bucket: "b2"}}), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := CronJobNeedsUpdate(stored, tc.desired); got != tc.want {
				t.Fatalf("CronJobNeedsUpdate = %v, want %v", got, tc.want)
			}
			applied := ApplyCronJob(stored, tc.desired)
			if CronJobNeedsUpdate(applied, tc.desired) {
				t.Error("still differs once applied")
			}
			if applied.Labels["owner"] != "me" || !ptr.Deref(applied.Spec.Suspend, false) {
				t.Errorf("a user's label %v or suspend %v lost", applied.Labels, applied.Spec.Suspend)
			}
			if stored.Spec.Schedule != desired.Spec.Schedule {
				t.Error("ApplyCronJob modified its argument")
			}
		})
	}
}
