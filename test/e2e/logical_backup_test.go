package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/testbed"
)

// pgDumpall is the host's pg_dumpall of the cluster's major (15, that of
// pgloop's instance image), as the logical backup image's own.
const pgDumpall = "/usr/lib/postgresql/15/bin/pg_dumpall"

// TestLogicalBackup runs zalando's logical backup on real PostgreSQL
// (issue 17): the CronJob of a cluster with enableLogicalBackup, as
// zalando's operator makes it; a Job made from it as `kubectl create job
// --from=cronjob/...` makes one, whose pod the plane's job controller
// creates (kwok plays it: no container runs the image here); the image's
// dump, pg_dumpall with the job's environment, run from the test against
// the pod dump.sh would pick; then the backup turned off, which deletes the
// CronJob and its jobs.
func TestLogicalBackup(t *testing.T) {
	t.Parallel() // waits on timers: docs/testbed.md, "Suites run concurrently"
	ns := env.Namespace(t)
	const (
		name     = "lb"
		schedule = "15 3 1 1 *" // never during the test: the Job is made by hand
		bucket   = "backups-bucket"
		creds    = "backup-creds"
	)
	env.StartOperator(t, "backup", []string{ns},
		"--logical-backup-s3-bucket="+bucket, "--logical-backup-s3-region=eu-central-1", "--logical-backup-env-secret="+creds)
	ctx := Context(t, 10*time.Minute)
	if _, err := env.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: creds},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	env.CreateCluster(t, ns, name, 2, OnRealNode, func(pg *v1.Postgresql) {
		pg.Spec.EnableLogicalBackup = true
		pg.Spec.LogicalBackupSchedule = schedule
	})
	pg := inEffect(ctx, t, ns, name, 2)
	t.Logf("Running with its logical backup after %v", time.Since(began).Round(time.Millisecond))

	cronJobs := env.Kube.BatchV1().CronJobs(ns)
	cjName := cluster.LogicalBackupJobName(name)
	cj, err := cronJobs.Get(ctx, cjName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	container := &cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0]

	t.Run("the CronJob zalando users know", func(t *testing.T) {
		if cjName != "logical-backup-"+name {
			t.Errorf("name %s", cjName)
		}
		if ref := metav1.GetControllerOf(cj); ref == nil || ref.UID != pg.UID {
			t.Errorf("controller %v, want the cluster", ref)
		}
		if cj.Spec.Schedule != schedule || cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
			t.Errorf("schedule %q concurrency %s", cj.Spec.Schedule, cj.Spec.ConcurrencyPolicy)
		}
		if container.Image != cluster.DefaultLogicalBackupImage {
			t.Errorf("image %s", container.Image)
		}
		want := map[string]string{
			"SCOPE": name, "CLUSTER_NAME_LABEL": cluster.LabelClusterName, "PG_VERSION": "15", "PGPORT": "5432",
			"PGUSER": "postgres", "PGDATABASE": "postgres", "PGSSLMODE": "require",
			"LOGICAL_BACKUP_PROVIDER": "s3", "LOGICAL_BACKUP_S3_BUCKET": bucket, "LOGICAL_BACKUP_S3_BUCKET_PREFIX": "spilo",
			"LOGICAL_BACKUP_S3_BUCKET_SCOPE_SUFFIX": "/" + string(pg.UID), "LOGICAL_BACKUP_S3_REGION": "eu-central-1",
			"LOGICAL_BACKUP_S3_SSE": "AES256",
		}
		for _, e := range container.Env {
			if v, ok := want[e.Name]; ok && e.Value != v {
				t.Errorf("%s=%q, want %q", e.Name, e.Value, v)
			}
			delete(want, e.Name)
		}
		for n := range want {
			t.Errorf("no %s", n)
		}
		if len(container.EnvFrom) != 1 || container.EnvFrom[0].SecretRef == nil || container.EnvFrom[0].SecretRef.Name != creds {
			t.Errorf("envFrom %v, want the Secret %s", container.EnvFrom, creds)
		}
	})

	// The table the dump must hold, on the primary; the dump is taken
	// from a replica, as dump.sh prefers, once it has replayed it.
	primary := env.Pod(ctx, t, ns, pg.Status.Primary)
	if _, err := env.SQL(ctx, t, primary).Exec(ctx,
		"CREATE TABLE backup_probe (id int PRIMARY KEY, note text); INSERT INTO backup_probe VALUES (1, 'dumped by pg_dumpall')"); err != nil {
		t.Fatal(err)
	}

	var job *batchv1.Job
	t.Run("a job made from the CronJob runs its pod", func(t *testing.T) {
		// As `kubectl create job --from=cronjob/<name>`: the job template
		// in a Job the CronJob controls, annotated as made by hand. The
		// pod is sent to a kwok node: the process node would run it as a
		// Spilo pod (it tolerates the process node's taint, as the
		// cluster's pods do).
		tmpl := cj.Spec.JobTemplate.DeepCopy()
		tmpl.Spec.Template.Spec.NodeSelector = map[string]string{testbed.NodeLabel: "kwok"}
		job, err = env.Kube.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{
				Name:            cjName + "-manual",
				Labels:          tmpl.Labels,
				Annotations:     map[string]string{"cronjob.kubernetes.io/instantiate": "manual"},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, batchv1.SchemeGroupVersion.WithKind("CronJob"))},
			},
			Spec: tmpl.Spec,
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var pod *corev1.Pod
		if err := Eventually(ctx, "the job's pod running", func(ctx context.Context) (bool, error) {
			list, err := env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job.Name})
			if err != nil || len(list.Items) == 0 {
				return false, err
			}
			pod = &list.Items[0]
			return pod.Spec.NodeName != "" && (pod.Status.Phase == corev1.PodRunning || pod.Status.Phase == corev1.PodSucceeded), nil
		}); err != nil {
			t.Fatal(err)
		}
		t.Logf("pod %s %s on %s", pod.Name, pod.Status.Phase, pod.Spec.NodeName)
		if l := pod.Labels; l[cluster.LabelApplication] != cluster.ApplicationLogicalBackup || l[cluster.LabelClusterName] != name {
			t.Errorf("pod labels %v", l)
		}
		s := pod.Spec
		if s.RestartPolicy != corev1.RestartPolicyNever || s.ServiceAccountName != cluster.PodServiceAccountName ||
			len(s.Containers) != 1 || s.Containers[0].Image != cluster.DefaultLogicalBackupImage {
			t.Errorf("pod: restartPolicy %s serviceAccount %s containers %v", s.RestartPolicy, s.ServiceAccountName, s.Containers)
		}
		// A backup pod is no member: the cluster keeps its two.
		got, err := env.WaitCluster(ctx, ns, name, "Running with 2 ready instances", func(pg *v1.Postgresql) bool {
			return pg.Status.ReadyInstances == 2
		})
		if err != nil || got.Status.State != fsm.Running {
			t.Errorf("cluster %v: %+v", err, got)
		}
	})

	t.Run("the image's dump holds the cluster's data", func(t *testing.T) {
		host := backupHost(ctx, t, ns, name)
		if err := Eventually(ctx, "the table replayed on "+host.Name, func(ctx context.Context) (bool, error) {
			var n int
			err := env.SQL(ctx, t, host).QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'backup_probe'").Scan(&n)
			return n == 1, err
		}); err != nil {
			t.Fatal(err)
		}
		dump := runDump(ctx, t, ns, container, host)
		for _, want := range []string{"CREATE TABLE public.backup_probe", "dumped by pg_dumpall", "CREATE ROLE postgres"} {
			if !strings.Contains(dump, want) {
				t.Errorf("the dump (%d bytes) has no %q", len(dump), want)
			}
		}
		t.Logf("pg_dumpall from %s (%s): %d bytes", host.Name, host.Labels[cluster.LabelRole], len(dump))
	})

	t.Run("turned off, the CronJob goes", func(t *testing.T) {
		off := time.Now()
		if _, err := env.MergePatchCluster(ctx, ns, name, `{"spec":{"enableLogicalBackup":false}}`); err != nil {
			t.Fatal(err)
		}
		inEffect(ctx, t, ns, name, 2)
		if _, err := cronJobs.Get(ctx, cjName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the CronJob is still there (%v)", err)
		}
		t.Logf("Running without the CronJob %v after the edit", time.Since(off).Round(time.Millisecond))
		if job == nil {
			return
		}
		// Its jobs go with it: the garbage collector's work.
		if err := Eventually(ctx, "the job gone", func(ctx context.Context) (bool, error) {
			_, err := env.Kube.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Error(err)
		}
	})
}

// backupHost is the pod dump.sh dumps: a replica of the cluster when
// there is one (dump.sh prefers one on its own node; the backup pod runs
// on none of theirs here), else the master.
func backupHost(ctx context.Context, t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	for _, role := range []string{cluster.RoleReplica, cluster.RoleMaster} {
		list, err := env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
			LabelSelector: cluster.LabelClusterName + "=" + name + "," + cluster.LabelRole + "=" + role})
		if err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			if list.Items[i].Status.PodIP != "" {
				return &list.Items[i]
			}
		}
	}
	t.Fatalf("no pod of %s to dump", name)
	return nil
}

// runDump runs pg_dumpall as the image does (its dump function), with the
// backup container's PG* environment, the password read from the Secret
// it names, and PGHOST the pod dump.sh found, and returns the dump. The
// job asks for TLS (PGSSLMODE=require, Spilo serves it); the process
// nodes' PostgreSQL serves none, so the dump runs with sslmode disable.
func runDump(ctx context.Context, t *testing.T, ns string, c *corev1.Container, host *corev1.Pod) string {
	t.Helper()
	environ := []string{"PGHOST=" + host.Status.PodIP, "PGCONNECT_TIMEOUT=5"}
	for _, e := range c.Env {
		if !strings.HasPrefix(e.Name, "PG") || e.Name == "PG_VERSION" {
			continue
		}
		// PGSSLMODE is the job's, require: Spilo's pg_hba refuses
		// connections without TLS from another address than the pod's.
		value := e.Value
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, err := env.Kube.CoreV1().Secrets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s from Secret %s: %v", e.Name, ref.Name, err)
			}
			value = string(s.Data[ref.Key])
		}
		environ = append(environ, e.Name+"="+value)
	}
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, pgDumpall)
	cmd.Env, cmd.Stdout, cmd.Stderr = environ, &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s against %s: %v\n%s", pgDumpall, host.Name, err, stderr.String())
	}
	return out.String()
}
