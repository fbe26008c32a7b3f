package facts

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// TestLogicalBackupFacts checks that the logical backup CronJob is part
// of ObjectsCurrent in a cluster that is otherwise converged: the spec's
// when enabled, none of the cluster's when not.
func TestLogicalBackupFacts(t *testing.T) {
	plain := newPG("c1", 2)
	enabled := newPG("c1", 2)
	enabled.Spec.EnableLogicalBackup = true
	hourly := enabled.DeepCopy()
	hourly.Generation = 2
	hourly.Spec.LogicalBackupSchedule = "0 * * * *"
	cronJob := func(pg *v1.Postgresql) *batchv1.CronJob {
		cj := cluster.LogicalBackupCronJob(pg, cluster.Options{})
		cj.UID = "cronjob-uid"
		// What the apiserver defaults is no difference.
		cj.Spec.Suspend = ptr.To(false)
		cj.Spec.JobTemplate.Spec.Template.Spec.SchedulerName = "default-scheduler"
		return cj
	}
	foreign := func(cj *batchv1.CronJob) *batchv1.CronJob {
		cj = cj.DeepCopy()
		cj.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1.SchemeGroupVersion.String(), Kind: v1.PostgresqlKind,
			Name: "other", UID: "other-uid", Controller: ptr.To(true)}}
		return cj
	}
	going := func(cj *batchv1.CronJob) *batchv1.CronJob {
		cj = cj.DeepCopy()
		cj.DeletionTimestamp = ptr.To(ago(0))
		return cj
	}
	healthy := func(pg *v1.Postgresql, cj *batchv1.CronJob) []runtime.Object {
		objs := []runtime.Object{statefulSet(pg), lock(pg, "c1-0"), pod(pg, 0, master), pod(pg, 1)}
		if cj != nil {
			objs = append(objs, cj)
		}
		return objs
	}
	tests := []struct {
		name    string
		pg      *v1.Postgresql
		cj      *batchv1.CronJob
		current bool
	}{
		{"off, none", plain, nil, true},
		{"on, missing", enabled, nil, false},
		{"on, the spec's", enabled, cronJob(enabled), true},
		{"on, another schedule", hourly, cronJob(enabled), false},
		{"on, the name taken by another's", enabled, foreign(cronJob(enabled)), false},
		{"off, the cluster's still there", plain, cronJob(enabled), false},
		{"off, the cluster's going", plain, going(cronJob(enabled)), true},
		{"off, another's of the name", plain, foreign(cronJob(enabled)), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewDeriver(cluster.Options{}, true).Facts(objects(tt.pg, healthy(tt.pg, tt.cj)...), now)
			if f.SpecError != "" || f.Primary != "c1-0" || f.Ready != 2 {
				t.Fatalf("not a converged cluster: %+v", f)
			}
			if f.ObjectsCurrent != tt.current {
				t.Errorf("ObjectsCurrent %v, want %v", f.ObjectsCurrent, tt.current)
			}
		})
	}
}
