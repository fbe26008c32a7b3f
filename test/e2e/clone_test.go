package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// TestCloneToTime clones a cluster to a point in time through the operator
// (issue 31, spec.clone): a source on the operator's default repository
// archives with real pgBackRest and is backed up (pgbackrest backup started
// in its PostgreSQL container, as pgloop's base backups will be), rows are
// written before and after a time T; a two-member clone in another
// namespace, created with clone.timestamp T, becomes Running with exactly
// the rows before T on both members and archives to its own repository. A
// clone to a time before the source's first backup never becomes Running:
// the test records what its status and pods say.
func TestCloneToTime(t *testing.T) {
	t.Parallel() // waits on timers: docs/testbed.md, "Suites run concurrently"
	store := backupStore(t)
	src, dst := env.Namespace(t), env.Namespace(t)
	// A clone that cannot restore reaches its creation deadline within
	// the test (the others are Running in seconds).
	env.StartOperator(t, "clone", []string{src, dst}, append(repoArgs(store), "--create-timeout=60s")...)
	ctx := Context(t, 10*time.Minute)
	repoSecrets(ctx, t, store, src, dst)
	archiving := func(pg *v1.Postgresql) { pg.Spec.DockerImage = cluster.DefaultArchivingImage }
	began := time.Now()
	source := env.CreateCluster(t, src, "orders", 1, OnRealNode, archiving)
	pg := env.MustState(ctx, t, src, source.Name, fsm.Running)
	conn := env.SQL(ctx, t, env.Pod(ctx, t, src, pg.Status.Primary))
	// A time before any backup: the cluster's creation (its first
	// backup, pgloop's, comes once it archives).
	beforeBackup := source.CreationTimestamp.Time
	if _, err := conn.Exec(ctx, "CREATE TABLE first AS SELECT 1 AS one; SELECT pg_switch_wal()"); err != nil {
		t.Fatal(err)
	}
	backedUp(ctx, t, src, source.Name, 1, "")
	t.Logf("source %s/%s Running, archiving and backed up (pgloop's first backup) %v after it was created", src, source.Name,
		time.Since(began).Round(100*time.Millisecond))

	if _, err := conn.Exec(ctx, "CREATE TABLE t AS SELECT g AS i FROM generate_series(1, 1000) g"); err != nil {
		t.Fatal(err)
	}
	var now time.Time
	if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	at := now.Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(at.Add(time.Second)))
	var segment string
	// After T: more rows, and a table dropped by mistake.
	if _, err := conn.Exec(ctx, "INSERT INTO t SELECT g FROM generate_series(1001, 2000) g; DROP TABLE first"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&segment); err != nil {
		t.Fatal(err)
	}
	archived(ctx, t, src, source.Name, segment)

	// The clone, in the other namespace.
	cloneOf := func(at time.Time) func(*v1.Postgresql) {
		return func(pg *v1.Postgresql) {
			pg.Spec.Clone = &v1.CloneSpec{Cluster: source.Name, Namespace: src, UID: string(source.UID), Timestamp: at.Format(time.RFC3339)}
		}
	}
	began = time.Now()
	env.CreateCluster(t, dst, "orders-at-t", 2, OnRealNode, archiving, cloneOf(at))
	clone := env.MustState(ctx, t, dst, "orders-at-t", fsm.Running)
	t.Logf("clone %s/orders-at-t to %s Running %v after it was created: %s", dst, at.Format(time.RFC3339), time.Since(began).Round(100*time.Millisecond), Summary(clone))
	pods, err := env.WaitPods(ctx, dst, "orders-at-t", ReadyPods(2))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		c := env.SQL(ctx, t, p)
		var count, timeline, first int
		err := Eventually(ctx, p.Name+" has the rows before T", func(ctx context.Context) (bool, error) {
			if err := c.QueryRow(ctx, "SELECT (SELECT count(*) FROM t), (SELECT timeline_id FROM pg_control_checkpoint()), (SELECT count(*) FROM first)").Scan(&count, &timeline, &first); err != nil {
				return false, nil
			}
			return count == 1000, nil
		})
		if err != nil || timeline < 2 || first != 1 {
			t.Errorf("%s: %d rows on timeline %d, table first has %d rows (%v), want the 1000 before T on a new timeline and the table dropped after T", p.Name, count, timeline, first, err)
		}
	}
	cc := env.SQL(ctx, t, env.Pod(ctx, t, dst, clone.Status.Primary))
	if _, err := cc.Exec(ctx, "CREATE TABLE after_clone()"); err != nil {
		t.Fatal(err)
	}
	if err := cc.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&segment); err != nil {
		t.Fatal(err)
	}
	clone = archived(ctx, t, dst, "orders-at-t", segment)
	if want := "s3://" + store.Bucket + cluster.RepositoryPath(clone) + " "; !strings.HasPrefix(clone.Status.Backup.Repository, want) {
		t.Errorf("the clone archives to %s, want its own path %s", clone.Status.Backup.Repository, want)
	}
	t.Logf("clone archives on its own: %s", describeArchiving(clone))

	// A time before the source's first backup: no backup to restore.
	began = time.Now()
	env.CreateCluster(t, dst, "orders-early", 1, OnRealNode, archiving, cloneOf(beforeBackup.Truncate(time.Second)))
	// Patroni exits after the failed bootstrap and is restarted: the
	// cluster stays Creating, its reason the pod's back-off, until its
	// creation deadline.
	early, err := env.WaitCluster(ctx, dst, "orders-early", "Creating, CrashLoopBackOff", func(pg *v1.Postgresql) bool {
		return pg.Status.State == fsm.Creating && pg.Status.Reason == "CrashLoopBackOff"
	})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := env.Kube.CoreV1().Pods(dst).Get(ctx, cluster.PodName("orders-early", 0), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	restarts, ready := int32(0), false
	for _, s := range pod.Status.ContainerStatuses {
		restarts, ready = s.RestartCount, s.Ready
	}
	t.Logf("clone to a time before the first backup, %v after it was created: %s; pod ready %v, %d restarts", time.Since(began).Round(time.Second), Summary(early), ready, restarts)
	log, err := env.PodLog(ctx, pod, cluster.ContainerName)
	if err != nil {
		t.Errorf("%s: the container's log: %v", pod.Name, err)
	}
	if !strings.Contains(log, "ERROR: [075]: unable to find backup set with stop time less than") {
		t.Errorf("%s: pgBackRest's [075] not in Patroni's log:\n%s", pod.Name, lastN(log, 30))
	}
	// At the creation deadline.
	early, err = env.WaitCluster(ctx, dst, "orders-early", "out of Creating", func(pg *v1.Postgresql) bool {
		return pg.Status.State != fsm.Creating
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("clone to a time before the first backup, %v after it was created: %s", time.Since(began).Round(time.Second), Summary(early))
	if early.Status.State == fsm.Running {
		t.Errorf("a clone with nothing to restore is Running: %s", Summary(early))
	}
}

// TestRestoreDeleted deletes a cluster that takes writes, with its volumes
// and Secrets, and restores it from its repository into a new cluster
// (issue 31): a clone without a timestamp, to the end of the source's
// archive. Every row is there but those of the last WAL not yet archived,
// which archive_timeout bounds; the test measures what was lost.
func TestRestoreDeleted(t *testing.T) {
	store := backupStore(t)
	ns := env.Namespace(t)
	ctx := Context(t, 10*time.Minute)
	const bound = 10 * time.Second
	repoSecrets(ctx, t, store, ns)
	env.StartOperator(t, "restore", []string{ns}, append(repoArgs(store), "--archive-timeout="+bound.String())...)
	image := func(pg *v1.Postgresql) { pg.Spec.DockerImage = cluster.DefaultArchivingImage }
	source := env.CreateCluster(t, ns, "gone", 1, OnRealNode, image)
	pg := env.MustState(ctx, t, ns, "gone", fsm.Running)
	conn := env.SQL(ctx, t, env.Pod(ctx, t, ns, pg.Status.Primary))
	if _, err := conn.Exec(ctx, "CREATE TABLE w (id int PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp()); SELECT pg_switch_wal()"); err != nil {
		t.Fatal(err)
	}
	backedUp(ctx, t, ns, "gone", 1, "")

	// A row every 100 ms for 25 s (two and a half archive_timeouts),
	// then the cluster deleted while it is written to.
	committed := map[int]time.Time{}
	last := 0
	for end := time.Now().Add(25 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if _, err := conn.Exec(ctx, "INSERT INTO w (id) VALUES ($1)", last+1); err != nil {
			t.Fatal(err)
		}
		last++
		committed[last] = time.Now()
	}
	deleted := time.Now()
	if err := env.PG.Postgresqls(ns).Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.WaitGone(ctx, ns, "gone"); err != nil {
		t.Fatal(err)
	}
	// Its volumes and Secrets too, whatever the garbage collector has
	// not removed yet.
	sel := metav1.ListOptions{LabelSelector: cluster.LabelClusterName + "=gone"}
	if err := env.Kube.CoreV1().PersistentVolumeClaims(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		t.Fatal(err)
	}
	if err := env.Kube.CoreV1().Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rows written, the last %v before the deletion; cluster gone %v after it", last,
		deleted.Sub(committed[last]).Round(time.Millisecond), time.Since(deleted).Round(time.Millisecond))

	began := time.Now()
	env.CreateCluster(t, ns, "restored", 1, OnRealNode, image, func(pg *v1.Postgresql) {
		pg.Spec.Clone = &v1.CloneSpec{Cluster: "gone", UID: string(source.UID)}
	})
	restored := env.MustState(ctx, t, ns, "restored", fsm.Running)
	t.Logf("restored Running %v after its create", time.Since(began).Round(time.Millisecond))
	rc := env.SQL(ctx, t, env.Pod(ctx, t, ns, restored.Status.Primary))
	var count, maxID int
	if err := rc.QueryRow(ctx, "SELECT count(*), coalesce(max(id), 0) FROM w").Scan(&count, &maxID); err != nil {
		t.Fatal(err)
	}
	if count != maxID {
		t.Errorf("restored %d rows up to id %d: a gap", count, maxID)
	}
	lost := time.Duration(0)
	if maxID < last {
		lost = committed[last].Sub(committed[maxID])
		if maxID == 0 {
			lost = committed[last].Sub(committed[1])
		}
	}
	t.Logf("restored %d of %d rows: lost the last %d, committed in the last %v before the deletion (archive_timeout %v)",
		maxID, last, last-maxID, lost.Round(time.Millisecond), bound)
	// What was committed well before the last archive_timeout is there:
	// twice the bound, for a segment switched but not pushed yet.
	if lost > 2*bound+5*time.Second {
		t.Errorf("lost %v of writes, want at most about archive_timeout (%v)", lost, bound)
	}
}
