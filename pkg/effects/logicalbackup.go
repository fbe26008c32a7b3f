package effects

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// ensureLogicalBackup brings the logical backup CronJob in line with the
// spec: created or updated while spec.enableLogicalBackup is on, deleted
// (when it is pg's) once it is off. The jobs it made go with it (the
// garbage collector deletes them), the dumps uploaded stay.
func (r *run) ensureLogicalBackup(ctx context.Context, pg *v1.Postgresql, objs *cluster.Objects) error {
	cronJobs := r.kube.BatchV1().CronJobs(r.ns)
	cj := objs.LogicalBackup
	if cj == nil {
		name := cluster.LogicalBackupJobName(pg.Name)
		return deleteOwned(ctx, r, pg, "cronjob", name, cronJobs, cached(r, name, Cache.CronJob))
	}
	return ensureObject(ctx, r, cronJobs, "cronjob", cj, cached(r, cj.Name, Cache.CronJob),
		func(cur *batchv1.CronJob) (*batchv1.CronJob, bool, error) {
			if err := controlled(cur, pg, "cronjob"); err != nil {
				return nil, false, err
			}
			if !cluster.CronJobNeedsUpdate(cur, cj) {
				return nil, false, nil
			}
			return cluster.ApplyCronJob(cur, cj), true, nil
		})
}
