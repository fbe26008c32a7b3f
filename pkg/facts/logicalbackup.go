package facts

import (
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// logicalBackup compares the logical backup CronJob that exists (have,
// nil when none) with the one the spec asks for. It is current when the
// spec enables it and it is the spec's (cluster.CronJobNeedsUpdate), or
// the spec does not and none of pg's is left: otherwise the ensure effect
// has work. Another's CronJob of the name counts as missing when the spec
// enables one (the ensure fails on it, and says so) and as none when not.
func (d *Deriver) logicalBackup(s *derived, pg *v1.Postgresql, have *batchv1.CronJob) bool {
	want := d.desiredLogicalBackup(s, pg)
	if have != nil {
		if ref := metav1.GetControllerOf(have); ref == nil || ref.UID != pg.UID || have.DeletionTimestamp != nil {
			have = nil
		}
	}
	switch {
	case want == nil:
		return have == nil
	case have == nil:
		return false
	}
	return !cluster.CronJobNeedsUpdate(have, want)
}

// desiredLogicalBackup returns the logical backup CronJob pg asks for,
// nil when none; s must be pg's. It is built once per generation.
func (d *Deriver) desiredLogicalBackup(s *derived, pg *v1.Postgresql) *batchv1.CronJob {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !s.backupBuilt {
		s.backupBuilt = true
		s.backup = cluster.LogicalBackupCronJob(pg, d.build)
	}
	return s.backup
}
