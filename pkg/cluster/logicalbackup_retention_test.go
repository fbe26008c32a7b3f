package cluster

import (
	"testing"
)

// TestLogicalBackupRetention: LOGICAL_BACKUP_S3_RETENTION_TIME, which the
// image's script deletes old dumps by, is the spec's, else the operator's,
// for S3 only; without either the job template is the one it was (its
// hash too), so no CronJob changes on upgrade.
func TestLogicalBackupRetention(t *testing.T) {
	plain := LogicalBackupCronJob(withBackup(t), Options{})
	tests := []struct {
		name, spec, operator, provider string
		want                           string // "" means no variable
	}{
		{"none", "", "", "", ""},
		{"the spec's", "3 months", "", "", "3 months"},
		{"the operator's", "", "1 year", "", "1 year"},
		{"the spec's over the operator's", "2 weeks", "1 year", "", "2 weeks"},
		{"not for gcs: its upload deletes nothing", "2 weeks", "", "gcs", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pg := withBackup(t)
			pg.Spec.LogicalBackupRetention = tt.spec
			opts := Options{LogicalBackup: LogicalBackupOptions{S3RetentionTime: tt.operator, Provider: tt.provider}}
			cj := LogicalBackupCronJob(pg, opts)
			e, ok := envValue(&cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0], "LOGICAL_BACKUP_S3_RETENTION_TIME")
			if ok != (tt.want != "") || e.Value != tt.want {
				t.Errorf("LOGICAL_BACKUP_S3_RETENTION_TIME %q (set %v), want %q", e.Value, ok, tt.want)
			}
			if tt.provider != "" {
				return
			}
			changed := cj.Annotations[AnnotationPodTemplateHash] != plain.Annotations[AnnotationPodTemplateHash]
			if changed != (tt.want != "") {
				t.Errorf("template hash changed %v, want %v", changed, tt.want != "")
			}
			if changed && !CronJobNeedsUpdate(plain, cj) {
				t.Errorf("a CronJob without the retention is not updated to it")
			}
		})
	}
}
