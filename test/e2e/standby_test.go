package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// TestStandbyCluster runs a standby cluster with zalando's standby field
// (issue 31): it streams from its source's primary (a row written there
// appears within seconds), is promoted by removing the field, as a user
// does with kubectl edit, then takes writes and archives its new timeline
// to its own repository.
func TestStandbyCluster(t *testing.T) {
	t.Parallel() // waits on timers: docs/testbed.md, "Suites run concurrently"
	store := backupStore(t)
	ns := env.Namespace(t)
	ctx := Context(t, 10*time.Minute)
	repoSecrets(ctx, t, store, ns)
	env.StartOperator(t, "standby", []string{ns}, repoArgs(store)...)
	image := func(pg *v1.Postgresql) { pg.Spec.DockerImage = cluster.DefaultArchivingImage }

	env.CreateCluster(t, ns, "src", 1, OnRealNode, image)
	src := env.MustState(ctx, t, ns, "src", fsm.Running)
	srcPod := env.Pod(ctx, t, ns, src.Status.Primary)
	srcConn := env.SQL(ctx, t, srcPod)
	if _, err := srcConn.Exec(ctx, "CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 1000)"); err != nil {
		t.Fatal(err)
	}

	// As with zalando, the standby uses its source's credentials: the
	// replication user's to stream, the superuser's for pgloop (the
	// standby's catalog is the source's).
	sourceSecrets(ctx, t, ns, "src", "stb")
	began := time.Now()
	env.CreateCluster(t, ns, "stb", 1, OnRealNode, image, func(pg *v1.Postgresql) {
		pg.Spec.Standby = &v1.StandbyDescription{StandbyHost: srcPod.Status.PodIP, StandbyPort: strconv.Itoa(cluster.PostgresPort),
			S3WalPath: "s3://" + store.Bucket + cluster.RepositoryPath(src)}
	})
	stb := standbyRunning(ctx, t, ns, "stb")
	t.Logf("standby Running %v after its create", time.Since(began).Round(time.Millisecond))
	stbConn := env.SQL(ctx, t, env.Pod(ctx, t, ns, stb.Status.Primary))
	count := func(ctx context.Context) (n int, err error) {
		return n, stbConn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n)
	}
	var recovering bool
	if err := stbConn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovering); err != nil || !recovering {
		t.Fatalf("standby leader in recovery: %v %v", recovering, err)
	}
	if n, err := count(ctx); err != nil || n != 1000 {
		t.Fatalf("the standby has %d rows (%v), want the source's 1000", n, err)
	}
	if _, err := stbConn.Exec(ctx, "INSERT INTO t VALUES (0)"); err == nil {
		t.Error("the standby took a write")
	}
	// The source's repository is the standby's fallback.
	var restore string
	if err := stbConn.QueryRow(ctx, "SHOW restore_command").Scan(&restore); err != nil ||
		!strings.Contains(restore, "--repo1-path="+cluster.RepositoryPath(src)+" --stanza=src archive-get") {
		t.Errorf("restore_command %q (%v), want archive-get from the source's repository", restore, err)
	}

	// A row written on the source appears on the standby.
	written := time.Now()
	if _, err := srcConn.Exec(ctx, "INSERT INTO t VALUES (1001)"); err != nil {
		t.Fatal(err)
	}
	if err := Eventually(ctx, "row 1001 on the standby", func(ctx context.Context) (bool, error) {
		n, err := count(ctx)
		return n == 1001, err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("a row written on the source was on the standby %v later", time.Since(written).Round(time.Millisecond))

	// A second standby, from the source's repository alone: its newest
	// backup (pgloop's first), then the archive.
	backedUp(ctx, t, ns, "src", 1, "")
	sourceSecrets(ctx, t, ns, "src", "fromrepo")
	began = time.Now()
	env.CreateCluster(t, ns, "fromrepo", 1, OnRealNode, image, func(pg *v1.Postgresql) {
		pg.Spec.Standby = &v1.StandbyDescription{S3WalPath: "s3://" + store.Bucket + cluster.RepositoryPath(src)}
	})
	fromRepo := standbyRunning(ctx, t, ns, "fromrepo")
	t.Logf("standby from the repository Running %v after its create", time.Since(began).Round(time.Millisecond))
	repoConn := env.SQL(ctx, t, env.Pod(ctx, t, ns, fromRepo.Status.Primary))
	written = time.Now()
	if _, err := srcConn.Exec(ctx, "INSERT INTO t VALUES (1002); SELECT pg_switch_wal()"); err != nil {
		t.Fatal(err)
	}
	if err := Eventually(ctx, "row 1002 on the standby from the repository", func(ctx context.Context) (bool, error) {
		var n int
		err := repoConn.QueryRow(ctx, "SELECT count(*) FROM t WHERE id = 1002").Scan(&n)
		return n == 1, err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("a row written and switched on the source was on the standby from the repository %v later", time.Since(written).Round(time.Millisecond))

	// Promoted by an edit: the field removed.
	promoted := time.Now()
	if _, err := env.UpdateCluster(ctx, ns, "stb", func(pg *v1.Postgresql) { pg.Spec.Standby = nil }); err != nil {
		t.Fatal(err)
	}
	if err := Eventually(ctx, "the promoted standby takes a write", func(ctx context.Context) (bool, error) {
		_, err := stbConn.Exec(ctx, "INSERT INTO t VALUES (2000)")
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("the standby took writes %v after the edit", time.Since(promoted).Round(time.Millisecond))
	stb, err := env.WaitCluster(ctx, ns, "stb", "Running, roles synced, archiving its new timeline", func(pg *v1.Postgresql) bool {
		r := meta.FindStatusCondition(pg.Status.Conditions, v1.ConditionRolesSynced)
		a := meta.FindStatusCondition(pg.Status.Conditions, v1.ConditionContinuousArchiving)
		b := pg.Status.Backup
		return pg.Status.State == fsm.Running && pg.Status.ObservedGeneration == pg.Generation &&
			r != nil && r.Status == metav1.ConditionTrue && a != nil && a.Status == metav1.ConditionTrue &&
			b != nil && b.Archiving != nil && b.Archiving.LastArchivedWAL > "00000002"
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("promoted standby Running %v after the edit: %s", time.Since(promoted).Round(time.Millisecond), describeArchiving(stb))
	if n, err := count(ctx); err != nil || n != 1003 {
		t.Errorf("the promoted standby has %d rows (%v), want 1003 (1001, 1002 and its own)", n, err)
	}
	// The source goes on, untouched.
	var n int
	if err := srcConn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 1002 {
		t.Errorf("the source has %d rows (%v), want 1002", n, err)
	}
}

// sourceSecrets gives cluster standby the passwords of source's superuser
// and replication user: Secrets of standby's names with source's data.
func sourceSecrets(ctx context.Context, t testing.TB, ns, source, standby string) {
	t.Helper()
	for _, role := range []string{cluster.SuperuserName, cluster.ReplicationUserName} {
		s, err := env.Kube.CoreV1().Secrets(ns).Get(ctx, cluster.SecretName(role, source), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{}
		for k, v := range s.Labels {
			labels[k] = v
		}
		labels[cluster.LabelClusterName] = standby
		if _, err := env.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: cluster.SecretName(role, standby), Labels: labels},
			Data:       s.Data,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// standbyRunning waits until cluster name is Running as a standby
// (RolesSynced False, reason Standby).
func standbyRunning(ctx context.Context, t testing.TB, ns, name string) *v1.Postgresql {
	t.Helper()
	pg, err := env.WaitCluster(ctx, ns, name, "Running, RolesSynced False (Standby)", func(pg *v1.Postgresql) bool {
		c := meta.FindStatusCondition(pg.Status.Conditions, v1.ConditionRolesSynced)
		return pg.Status.State == fsm.Running && c != nil && c.Reason == fsm.ReasonStandby
	})
	if err != nil {
		t.Fatal(err)
	}
	return pg
}
