package e2e

import (
	"context"
	"encoding/xml"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/testbed"
)

// TestBaseBackups takes real base backups with real pgBackRest into the
// plane's S3 store (issue 31): a new cluster's repository gets its first
// full backup once archiving works; `pgloop backup` (the annotation) takes
// more, full and differential; retention deletes the oldest full backup
// and the WAL only it needed, which listing the bucket shows, and
// status.backup says so; an operator restarted while a backup runs picks
// it up from status; a schedule (a timer of the cluster's machine) takes
// one when due.
func TestBaseBackups(t *testing.T) {
	t.Parallel() // waits on timers: docs/testbed.md, "Suites run concurrently"
	store := backupStore(t)
	ns := env.Namespace(t)
	ctx := Context(t, 12*time.Minute)
	repoSecrets(ctx, t, store, ns)
	args := repoArgs(store)
	op := env.StartOperator(t, "backups", []string{ns}, args...)

	began := time.Now()
	env.CreateCluster(t, ns, "bk", 1, OnRealNode, func(pg *v1.Postgresql) {
		pg.Spec.DockerImage = cluster.DefaultArchivingImage
		pg.Spec.Backup = &v1.Backup{Retention: &v1.BackupRetention{Full: 2}, RestoreDrill: true}
	})
	pg := env.MustState(ctx, t, ns, "bk", fsm.Running)
	conn := env.SQL(ctx, t, env.Pod(ctx, t, ns, pg.Status.Primary))
	if _, err := conn.Exec(ctx, "CREATE TABLE t AS SELECT g AS id FROM generate_series(1, 1000) g; SELECT pg_switch_wal()"); err != nil {
		t.Fatal(err)
	}

	// 1. The repository's first backup, full, once archiving works.
	first := backedUp(ctx, t, ns, "bk", 1, "")
	t.Logf("first backup %s (%s) recorded %v after the create: %s", first.Status.Backup.LastBackup.Label,
		fsm.BackupFirst, time.Since(began).Round(time.Millisecond), describeBackups(first))
	if d := first.Status.Backup.LastRestoreDrill; d == nil || !d.Succeeded {
		t.Errorf("status.backup.lastRestoreDrill %+v: want the first backup restored and started", d)
	} else {
		t.Logf("restore drill: %s", d.Message)
	}
	if c := meta.FindStatusCondition(first.Status.Conditions, v1.ConditionLastBackupSucceeded); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("LastBackupSucceeded %+v, want True", c)
	}
	firstLabel := first.Status.Backup.LastBackup.Label
	if got := bucketBackups(ctx, t, store, first); !slices.Equal(got, []string{firstLabel}) {
		t.Errorf("the bucket holds backups %v, want [%s]", got, firstLabel)
	}
	if p := first.Status.Backup.FirstRecoverabilityPoint; p == nil || !p.Equal(&first.Status.Backup.LastBackup.Stop) {
		t.Errorf("firstRecoverabilityPoint %v, want the backup's stop %v", p, first.Status.Backup.LastBackup.Stop)
	}

	// 2. Requested: a differential one, then two full ones (the second
	// across a restart of the operator): retention (2 full) deletes the
	// first full backup, its differential one, and the WAL before the
	// oldest kept.
	requested := time.Now()
	pg = requestBackup(ctx, t, ns, "bk", v1.BackupDifferential)
	pg = backedUp(ctx, t, ns, "bk", 2, pg.Status.Backup.LastBackup.Label)
	t.Logf("requested diff backup recorded %v after the request: %s", time.Since(requested).Round(time.Millisecond), describeBackups(pg))
	if l := pg.Status.Backup.LastBackup; l.Type != v1.BackupDifferential {
		t.Errorf("last backup %s is %s, want diff", l.Label, l.Type)
	}
	pg = requestBackup(ctx, t, ns, "bk", v1.BackupFull)
	backedUp(ctx, t, ns, "bk", 3, pg.Status.Backup.LastBackup.Label)

	pg = requestBackup(ctx, t, ns, "bk", v1.BackupFull)
	running, err := env.WaitCluster(ctx, ns, "bk", "a backup running", func(pg *v1.Postgresql) bool {
		return pg.Status.Backup != nil && pg.Status.Backup.Running != nil
	})
	if err != nil {
		t.Fatal(err)
	}
	op.Kill()
	t.Logf("operator killed while backup %s runs", running.Status.Backup.Running.ID)
	env.StartOperator(t, "backups-restarted", []string{ns}, args...)
	pg = backedUp(ctx, t, ns, "bk", 2, pg.Status.Backup.LastBackup.Label)
	t.Logf("after retention: %s", describeBackups(pg))
	b := pg.Status.Backup
	if b.LastFailure != nil {
		t.Errorf("a backup failed: %+v", b.LastFailure)
	}
	// The request across the restart says what became of it, in the
	// write that ended its run.
	if r := requestOf(pg, v1.RequestBackup); r == nil || r.Phase != v1.RequestSucceeded || r.Value != b.Request {
		t.Errorf("status.requests' backup %+v, want the last request (%s) Succeeded", r, b.Request)
	}
	if v := b.LastVerification; v == nil || !v.Succeeded || v.Backup != running.Status.Backup.Running.ID {
		t.Errorf("status.backup.lastVerification %+v: want the repository verified after %s", v, running.Status.Backup.Running.ID)
	} else {
		t.Logf("verified: %s", v.Message)
	}
	var labels []string
	for _, x := range b.Backups {
		labels = append(labels, x.Label)
	}
	if len(labels) != 2 || labels[0] == firstLabel || slices.Contains(labels, firstLabel) {
		t.Errorf("status.backup.backups %v: want the two newest full backups, not %s", labels, firstLabel)
	}
	if got := bucketBackups(ctx, t, store, pg); !slices.Equal(got, labels) {
		t.Errorf("the bucket holds backups %v, want %v (what status says)", got, labels)
	}
	oldest := b.Backups[0]
	if wal := bucketWAL(ctx, t, store, pg); len(wal) == 0 || wal[0] < oldest.WALStart[:24] {
		t.Errorf("the bucket's oldest WAL segment is %v, want none before %s (the oldest backup's first)", first3(wal), oldest.WALStart)
	} else {
		t.Logf("the bucket's WAL begins at %s; the oldest backup's at %s", wal[0], oldest.WALStart)
	}

	// 3. A schedule: a timer of the cluster's machine, due within a
	// minute.
	if _, err := env.UpdateCluster(ctx, ns, "bk", func(pg *v1.Postgresql) { pg.Spec.Backup.Schedule = "* * * * *" }); err != nil {
		t.Fatal(err)
	}
	scheduled, err := env.WaitCluster(ctx, ns, "bk", "a scheduled backup running", func(pg *v1.Postgresql) bool {
		r := pg.Status.Backup.Running
		return r != nil && r.Reason == fsm.BackupScheduled
	})
	if err != nil {
		t.Fatal(err)
	}
	id := scheduled.Status.Backup.Running.ID
	if _, err := env.UpdateCluster(ctx, ns, "bk", func(pg *v1.Postgresql) { pg.Spec.Backup.Schedule = v1.ScheduleNone }); err != nil {
		t.Fatal(err)
	}
	pg, err = env.WaitCluster(ctx, ns, "bk", "the scheduled backup "+id+" done, no schedule left", func(pg *v1.Postgresql) bool {
		b := pg.Status.Backup
		return b.Running == nil && b.NextScheduled == nil && b.LastBackup != nil && b.LastBackup.Start.After(scheduled.Status.Backup.Running.StartedAt.Add(-time.Second))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("scheduled backup %s: %s", id, describeBackups(pg))
}

// repoCreds is the Secret, in each namespace of the tests, with the
// credentials of the plane's store and its CA.
const repoCreds = "backup-creds"

// backupStore returns the plane's object store; the tests that use it
// fail when the plane runs none or pgbackrest is missing.
func backupStore(t testing.TB) *testbed.S3 {
	t.Helper()
	if env.Plane.ObjectStore == nil {
		t.Fatal("the plane runs no object store (testbed.Options.ObjectStore)")
	}
	if _, err := exec.LookPath("pgbackrest"); err != nil {
		t.Fatalf("pgbackrest is missing (%v): run `make data-plane-deps`", err)
	}
	return &env.Plane.ObjectStore.S3
}

// repoArgs are the operator's flags of a default repository in the
// plane's store, with an archive_timeout and check periods of seconds and
// no scheduled backup; flags given after them win.
func repoArgs(store *testbed.S3) []string {
	return []string{
		"--backup-s3-endpoint=" + store.Endpoint, "--backup-s3-bucket=" + store.Bucket, "--backup-s3-region=" + store.Region,
		"--backup-s3-secret=" + repoCreds, "--backup-s3-ca-key=ca.crt",
		"--archive-timeout=10s", "--archive-check-period=2s", "--archive-status-period=4s", "--backup-schedule=none",
	}
}

// repoSecrets makes the repository's credentials Secret, with the store's
// CA, in each namespace.
func repoSecrets(ctx context.Context, t testing.TB, store *testbed.S3, namespaces ...string) {
	t.Helper()
	ca, err := os.ReadFile(store.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range namespaces {
		if _, err := env.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: repoCreds},
			StringData: map[string]string{
				v1.BackupAccessKeyIDKey: store.AccessKey, v1.BackupSecretAccessKeyKey: store.SecretKey, "ca.crt": string(ca),
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// requestBackup asks for a backup of type typ as `pgloop backup` does.
func requestBackup(ctx context.Context, t testing.TB, ns, name, typ string) *v1.Postgresql {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`,
		v1.AnnotationBackupRequestedAt, time.Now().UTC().Format(time.RFC3339Nano), v1.AnnotationBackupType, typ)
	pg, err := env.MergePatchCluster(ctx, ns, name, patch)
	if err != nil {
		t.Fatal(err)
	}
	return pg
}

// backedUp waits until no backup runs, the last one succeeded, is not
// after, and the repository holds count backups.
func backedUp(ctx context.Context, t testing.TB, ns, name string, count int32, after string) *v1.Postgresql {
	t.Helper()
	pg, err := env.WaitCluster(ctx, ns, name, fmt.Sprintf("a backup after %q done, %d in the repository", after, count), func(pg *v1.Postgresql) bool {
		b := pg.Status.Backup
		c := meta.FindStatusCondition(pg.Status.Conditions, v1.ConditionLastBackupSucceeded)
		if b == nil || b.Running != nil || c == nil {
			return false
		}
		return c.Status == metav1.ConditionFalse || b.LastBackup != nil && b.LastBackup.Label != after && b.BackupCount == count
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(pg.Status.Conditions, v1.ConditionLastBackupSucceeded); c.Status != metav1.ConditionTrue {
		t.Fatalf("LastBackupSucceeded %s: %s", c.Status, c.Message)
	}
	return pg
}

func describeBackups(pg *v1.Postgresql) string {
	b := pg.Status.Backup
	if b == nil {
		return "no backup status"
	}
	var s []string
	for _, x := range b.Backups {
		s = append(s, fmt.Sprintf("%s %s took %s, %d bytes (%d stored), WAL %s-%s", x.Label, x.Type, x.Stop.Sub(x.Start.Time),
			x.Size, x.RepoSize, x.WALStart, x.WALStop))
	}
	return fmt.Sprintf("%d backups: %s", b.BackupCount, strings.Join(s, "; "))
}

// listBucket lists the keys under prefix in the store's bucket.
func listBucket(ctx context.Context, t testing.TB, store *testbed.S3, prefix string) []string {
	t.Helper()
	var keys []string
	token := ""
	for {
		q := "continuation-token=" + url.QueryEscape(token) + "&list-type=2&prefix=" + url.QueryEscape(prefix)
		if token == "" {
			q = "list-type=2&prefix=" + url.QueryEscape(prefix)
		}
		code, body, err := store.Do(ctx, nil, "GET", "/"+store.Bucket+"?"+strings.ReplaceAll(q, "+", "%20"), nil)
		if err != nil || code != 200 {
			t.Fatalf("list %s: %d %v %s", prefix, code, err, body)
		}
		var res struct {
			Contents []struct {
				Key string `xml:"Key"`
			} `xml:"Contents"`
			IsTruncated bool   `xml:"IsTruncated"`
			Next        string `xml:"NextContinuationToken"`
		}
		if err := xml.Unmarshal(body, &res); err != nil {
			t.Fatalf("list %s: %v", prefix, err)
		}
		for _, c := range res.Contents {
			keys = append(keys, c.Key)
		}
		if !res.IsTruncated || res.Next == "" {
			return keys
		}
		token = res.Next
	}
}

// bucketBackups lists the backups' directories of the cluster's
// repository, as the bucket holds them, oldest first.
func bucketBackups(ctx context.Context, t testing.TB, store *testbed.S3, pg *v1.Postgresql) []string {
	prefix := strings.TrimPrefix(cluster.RepositoryPath(pg), "/") + "/backup/" + cluster.Stanza(pg) + "/"
	var labels []string
	for _, k := range listBucket(ctx, t, store, prefix) {
		dir, _, ok := strings.Cut(strings.TrimPrefix(k, prefix), "/")
		if ok && !slices.Contains(labels, dir) && dir != "backup.history" {
			labels = append(labels, dir)
		}
	}
	slices.Sort(labels)
	return labels
}

// bucketWAL lists the WAL segments in the cluster's repository, sorted.
func bucketWAL(ctx context.Context, t testing.TB, store *testbed.S3, pg *v1.Postgresql) []string {
	prefix := strings.TrimPrefix(cluster.RepositoryPath(pg), "/") + "/archive/" + cluster.Stanza(pg) + "/"
	var segs []string
	for _, k := range listBucket(ctx, t, store, prefix) {
		base := k[strings.LastIndex(k, "/")+1:]
		if len(base) >= 24 && !strings.Contains(base[:24], ".") && strings.Count(k[len(prefix):], "/") == 2 {
			segs = append(segs, base[:24])
		}
	}
	slices.Sort(segs)
	return segs
}

func first3(s []string) []string { return s[:min(3, len(s))] }
