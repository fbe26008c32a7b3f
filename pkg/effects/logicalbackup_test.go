package effects

import (
	"context"
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// backupCluster is the test cluster with the logical backup enabled.
func backupCluster(t *testing.T) *v1.Postgresql {
	t.Helper()
	pg := testCluster(t)
	pg.Spec.EnableLogicalBackup = true
	return pg
}

// checkCronJobDeletePrecondition fails t for a delete of a CronJob
// without the stored object's UID as precondition. It handles nothing.
func checkCronJobDeletePrecondition(t *testing.T, h *harness) {
	tracker := h.kube.Tracker()
	h.kube.PrependReactor("delete", "cronjobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteActionImpl)
		obj, err := tracker.Get(a.GetResource(), d.Namespace, d.Name)
		if err != nil {
			return false, nil, nil
		}
		if pre := d.DeleteOptions.Preconditions; pre == nil || pre.UID == nil || *pre.UID != obj.(metav1.Object).GetUID() {
			t.Errorf("delete cronjob %s: preconditions %+v, want its UID", d.Name, pre)
		}
		return false, nil, nil
	})
}

func cronJobGone(t *testing.T, h *harness, pg *v1.Postgresql) bool {
	t.Helper()
	_, err := h.kube.BatchV1().CronJobs(pg.Namespace).Get(context.Background(), cluster.LogicalBackupJobName(pg.Name), metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// TestEnsureLogicalBackup walks the CronJob through its life: created with
// the cluster, left alone when the apiserver and a user added to it,
// updated for a new schedule, deleted when turned off, and nothing
// written once gone.
func TestEnsureLogicalBackup(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := backupCluster(t)
		h := newHarness(t, []*v1.Postgresql{pg})
		uidsOnCreate(t, h)
		checkCronJobDeletePrecondition(t, h)
		ctx := context.Background()
		name := cluster.LogicalBackupJobName(pg.Name)
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		if got := h.kubeWrites(); !slices.Contains(got, "create cronjobs "+name) {
			t.Fatalf("no create of the CronJob in %v", got)
		}
		cronJobs := h.kube.BatchV1().CronJobs(pg.Namespace)
		cj, err := cronJobs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ref := metav1.GetControllerOf(cj); ref == nil || ref.UID != pg.UID {
			t.Errorf("controller %v, want the cluster", ref)
		}
		if cj.Spec.Schedule != cluster.DefaultLogicalBackupSchedule {
			t.Errorf("schedule %q", cj.Spec.Schedule)
		}

		// What the apiserver defaults and a user adds is left alone.
		cj.Spec.Suspend = ptr.To(true)
		cj.Spec.JobTemplate.Spec.Template.Spec.DNSPolicy = corev1.DNSClusterFirst
		cj.Labels["owner"] = "me"
		if _, err := cronJobs.Update(ctx, cj, metav1.UpdateOptions{FieldManager: someoneElse}); err != nil {
			t.Fatal(err)
		}
		h.kubeWrites()
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		if got := h.kubeWrites(); len(got) != 0 {
			t.Errorf("ensure of a current CronJob wrote %v", got)
		}

		setSpec(h, pg, func(s *v1.PostgresqlSpec) { s.LogicalBackupSchedule = "0 */6 * * *" })
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		if got, want := h.kubeWrites(), []string{"update cronjobs " + name}; !slices.Equal(got, want) {
			t.Errorf("writes %v, want %v", got, want)
		}
		cj, err = cronJobs.Get(ctx, name, metav1.GetOptions{})
		if err != nil || cj.Spec.Schedule != "0 */6 * * *" || !ptr.Deref(cj.Spec.Suspend, false) || cj.Labels["owner"] != "me" {
			t.Errorf("after the update: %v, schedule %q, suspend %v, labels %v", err, cj.Spec.Schedule, cj.Spec.Suspend, cj.Labels)
		}

		setSpec(h, pg, func(s *v1.PostgresqlSpec) { s.EnableLogicalBackup = false })
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		if got, want := h.kubeWrites(), []string{"delete cronjobs " + name}; !slices.Equal(got, want) {
			t.Errorf("writes %v, want %v", got, want)
		}
		if !cronJobGone(t, h, pg) {
			t.Error("the CronJob is still there")
		}
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		if got := h.kubeWrites(); len(got) != 0 {
			t.Errorf("ensure without a logical backup wrote %v", got)
		}
	})
}

// A CronJob of the name that another controls is neither updated nor
// deleted: the ensure fails on it while the backup is on, and leaves it
// once off.
func TestEnsureLogicalBackupForeign(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := backupCluster(t)
		foreign := &batchv1.CronJob{
			ObjectMeta: metav1.ObjectMeta{Name: cluster.LogicalBackupJobName(pg.Name), Namespace: pg.Namespace, UID: "foreign-uid",
				Labels: map[string]string{cluster.LabelApplication: cluster.ApplicationSpilo, cluster.LabelClusterName: pg.Name}},
			Spec: batchv1.CronJobSpec{Schedule: "1 1 * * *"},
		}
		h := newHarness(t, []*v1.Postgresql{pg}, foreign)
		if err := h.ensure(t, pg); err == nil {
			t.Error("ensure took over a CronJob it does not control")
		}
		setSpec(h, pg, func(s *v1.PostgresqlSpec) { s.EnableLogicalBackup = false })
		h.kubeWrites()
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		for _, w := range h.kubeWrites() {
			if w == "delete cronjobs "+foreign.Name || w == "update cronjobs "+foreign.Name {
				t.Errorf("foreign CronJob written: %s", w)
			}
		}
		if cronJobGone(t, h, pg) {
			t.Error("foreign CronJob deleted")
		}
	})
}

func TestCleanupLogicalBackup(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := backupCluster(t)
		h := newHarness(t, []*v1.Postgresql{pg})
		uidsOnCreate(t, h)
		checkCronJobDeletePrecondition(t, h)
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		h.pg.put(deleting(h.pg.get(pg.Namespace, pg.Name)))
		h.kubeWrites()
		if err := h.cleanup(t, pg); err != nil {
			t.Fatal(err)
		}
		if got := h.kubeWrites(); !slices.Contains(got, "delete cronjobs "+cluster.LogicalBackupJobName(pg.Name)) {
			t.Errorf("no delete of the CronJob in %v", got)
		}
		if !cronJobGone(t, h, pg) {
			t.Error("the CronJob is still there")
		}
	})
}
