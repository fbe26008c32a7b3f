package facts

import (
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/observed"
)

// backupFacts are the base backups' facts of a cluster with a repository;
// s must be pg's. The schedules are parsed once per generation.
func (d *Deriver) backupFacts(s *derived, pg *v1.Postgresql, objs observed.Cluster) fsm.BackupFacts {
	d.mu.Lock()
	if !s.schedulesParsed {
		full, diff := cluster.BackupSchedules(pg, d.build)
		// A schedule that does not parse is a spec error (Validate):
		// the cluster is Invalid, and takes no scheduled backup.
		if sched, err := v1.ParseBackupSchedule(full); full != "" && err == nil {
			s.fullSchedule = cluster.SpreadSchedule(pg, d.build, sched) // never a typed nil: only set when parsed
		}
		if sched, err := v1.ParseBackupSchedule(diff); diff != "" && err == nil {
			s.diffSchedule = sched
		}
		s.schedulesParsed = true
	}
	f := fsm.BackupFacts{Full: s.fullSchedule, Differential: s.diffSchedule}
	d.mu.Unlock()
	f.Drill = pg.Spec.Backup != nil && pg.Spec.Backup.RestoreDrill
	f.Report = objs.Backup
	return f
}
