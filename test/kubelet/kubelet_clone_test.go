package kubelet_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/test/kubelet"
	"github.com/pgloop/pgloop/test/testbed"
)

// cloneDeadline bounds TestKubeletClone: a plane and the object store, a
// build, a source that archives and is backed up, a two-member clone.
const cloneDeadline = 6 * time.Minute

// TestKubeletClone runs a clone as pgloop builds it (cluster.StatefulSet of
// a spec with clone.timestamp) through the process kubelet's translation of
// Spilo and real Patroni 3.0.2: a source cluster archives with pgloop's
// archive_command and real pgBackRest to the object store and is backed
// up, then rows are written before and after a time T; the clone, in
// another namespace, bootstraps its first member with Patroni's custom
// method (pgbackrest restore to T), promotes, and Patroni finishes the
// bootstrap (the clone's passwords); its replica copies the new primary.
// The clone holds exactly the rows before T, archives on its new timeline
// to its own path, and Patroni has removed pgBackRest's recovery settings.
func TestKubeletClone(t *testing.T) {
	kubelet.RequireInstalled(t, "/usr/bin/pgbackrest")
	ctx, cancel := context.WithTimeout(context.Background(), cloneDeadline)
	defer cancel()
	// The store first, so that it stops last: PostgreSQL archives its
	// last segments while it shuts down.
	storeStart := time.Now()
	store, err := testbed.StartObjectStore(ctx, testbed.ObjectStoreOptions{Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := store.Stop(); err != nil {
			t.Errorf("stopping the object store: %v", err)
		}
	})
	t.Logf("object store up in %v", time.Since(storeStart).Round(100*time.Millisecond))
	plane, k, step := startKubeletPlane(ctx, t)
	cs := plane.Client
	ca, err := os.ReadFile(store.S3.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	repo := &v1.BackupS3{Endpoint: store.S3.Endpoint, Bucket: store.S3.Bucket, SecretName: "s3", CAKey: "ca.crt"}
	newCluster := func(ns, name, uid string, instances int32) *v1.Postgresql {
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: repo.SecretName},
			Data: map[string][]byte{
				v1.BackupAccessKeyIDKey: []byte(store.S3.AccessKey), v1.BackupSecretAccessKeyKey: []byte(store.S3.SecretKey),
				repo.CAKey: ca,
			},
		}, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
		pg := planeCluster(ns, name, instances)
		pg.UID = types.UID(uid)
		pg.Spec.DockerImage = cluster.DefaultArchivingImage
		pg.Spec.Backup = &v1.Backup{S3: repo}
		return pg
	}

	// The source: archiving, one full backup.
	source := newCluster(plane.Namespace(t), "source", "0d4a7a52-7f3c-4b8e-9a57-1f0b7d5c2e11", 1)
	createClusterFrom(ctx, t, cs, source, cluster.Options{}, nil)
	srcPod, err := testbed.WaitForPod(ctx, cs, source.Namespace, cluster.PodName(source.Name, 0), testbed.PodReady)
	if err != nil {
		t.Fatal(k.failure(err))
	}
	step("source %s/%s Ready", source.Namespace, srcPod.Name)
	src := connectAs(ctx, t, cs, srcPod, source.Name)
	defer src.Close(context.Background())
	// Its first push makes the stanza (archive_command): before the
	// backup, which holds the stanza's lock.
	archiveOne(ctx, t, src, "source")
	step("source archived its first segment")
	var beforeBackup time.Time
	if err := src.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&beforeBackup); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(beforeBackup.Truncate(time.Second).Add(time.Second)))
	// As pgloop's base backups will start it: in the PostgreSQL
	// container, with the environment archive_command has.
	if _, err := src.Exec(ctx, `COPY (SELECT 1) TO PROGRAM 'pgbackrest --start-fast backup --type=full >"$PGBACKREST_SPOOL_PATH/backup.log" 2>&1'`); err != nil {
		out, _ := os.ReadFile(filepath.Join(pvDir(ctx, t, cs, k.root, srcPod), "pgbackrest", "spool", "backup.log"))
		t.Fatalf("backup: %v\n%s", err, out)
	}
	step("source backed up (pgbackrest backup --type=full through COPY TO PROGRAM)")
	if _, err := src.Exec(ctx, "CREATE TABLE t AS SELECT g AS i FROM generate_series(1, 1000) g"); err != nil {
		t.Fatal(err)
	}
	var now time.Time
	if err := src.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	at := now.Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(at.Add(time.Second)))
	if _, err := src.Exec(ctx, "INSERT INTO t SELECT g FROM generate_series(1001, 2000) g"); err != nil {
		t.Fatal(err)
	}
	archiveOne(ctx, t, src, "source")
	step("rows before and after T = %s archived", at.Format(time.RFC3339))

	// The clone, in another namespace.
	clone := newCluster(plane.Namespace(t), "copy", "5b0e3f7c-2a41-4d5e-8c1b-9e6f0a2d4b33", 2)
	clone.Spec.Clone = &v1.CloneSpec{Cluster: source.Name, Namespace: source.Namespace, UID: string(source.UID), Timestamp: at.Format(time.RFC3339)}
	for _, e := range clone.Validate() {
		if strings.Contains(e.Field, "clone") {
			t.Fatalf("the clone's spec: %v", e)
		}
	}
	began := time.Now()
	createClusterFrom(ctx, t, cs, clone, cluster.Options{}, nil)
	var primary, replica *corev1.Pod
	for i := range int32(2) {
		// Ready, and labelled by Patroni (the primary's label may come
		// after its readiness).
		p, err := testbed.WaitForPod(ctx, cs, clone.Namespace, cluster.PodName(clone.Name, i), func(p *corev1.Pod) (bool, error) {
			ready, err := testbed.PodReady(p)
			return ready && p.Labels[cluster.LabelRole] != "", err
		})
		if err != nil {
			t.Fatal(k.failure(err))
		}
		if p.Labels[cluster.LabelRole] == cluster.RoleMaster {
			primary = p
		} else {
			replica = p
		}
	}
	if primary == nil || replica == nil {
		t.Fatalf("the clone's members: primary %v, replica %v; want one of each", primary != nil, replica != nil)
	}
	step("clone %s/%s: both members Ready %v after it was created; primary %s", clone.Namespace, clone.Name, time.Since(began).Round(100*time.Millisecond), primary.Name)
	patroniLog, _ := os.ReadFile(filepath.Join(k.root, "pods", string(primary.UID), "patroni.log"))
	if !strings.Contains(string(patroniLog), "Running custom bootstrap script: "+cluster.RestoreCommand(clone)) {
		t.Errorf("Patroni's log does not show the restore:\n%s", patroniLog)
	}

	// Exactly the rows before T, on both members; a new timeline.
	dst := connectAs(ctx, t, cs, primary, clone.Name)
	defer dst.Close(context.Background())
	var count, timeline int
	if err := dst.QueryRow(ctx, "SELECT (SELECT count(*) FROM t), (SELECT timeline_id FROM pg_control_checkpoint())").Scan(&count, &timeline); err != nil {
		t.Fatal(err)
	}
	if count != 1000 || timeline < 2 {
		t.Errorf("the clone's primary has %d rows on timeline %d, want the 1000 before T on a new timeline", count, timeline)
	}
	rep := connectAs(ctx, t, cs, replica, clone.Name)
	defer rep.Close(context.Background())
	if err := rep.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&count); err != nil || count != 1000 {
		t.Errorf("the clone's replica: %d rows (%v), want 1000", count, err)
	}
	// Its own repository; pgBackRest's recovery settings gone (a later
	// replica of this member must not stop at T).
	segment := archiveOne(ctx, t, dst, "clone")
	if !strings.HasPrefix(segment, fmt.Sprintf("%08X", timeline)) {
		t.Errorf("the clone archived %s, want a segment of timeline %d", segment, timeline)
	}
	step("clone: 1000 rows on timeline %d; segment %s archived by its own archive_command (stanza %s, %s)", timeline, segment, cluster.Stanza(clone), cluster.RepositoryPath(clone))
	auto, err := os.ReadFile(filepath.Join(pvDir(ctx, t, cs, k.root, primary), "pgroot", "pgdata", "postgresql.auto.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, setting := range []string{"restore_command", "recovery_target"} {
		if strings.Contains(string(auto), setting) {
			t.Errorf("postgresql.auto.conf still has %s after the bootstrap:\n%s", setting, auto)
		}
	}

	// A clone to a time before the source's first backup: pgBackRest
	// finds nothing to restore, Patroni's bootstrap fails (it exits, and
	// is started again), the pod never becomes Ready, and pgBackRest's
	// words are in Patroni's log, the container's.
	early := newCluster(plane.Namespace(t), "early", "9c3d1e2f-4a5b-4c6d-8e7f-0a1b2c3d4e5f", 1)
	early.Spec.Clone = &v1.CloneSpec{Cluster: source.Name, Namespace: source.Namespace, UID: string(source.UID),
		Timestamp: beforeBackup.Truncate(time.Second).Format(time.RFC3339)}
	began = time.Now()
	createClusterFrom(ctx, t, cs, early, cluster.Options{}, nil)
	earlyPod, err := testbed.WaitForPod(ctx, cs, early.Namespace, cluster.PodName(early.Name, 0), func(p *corev1.Pod) (bool, error) {
		return p.UID != "" && containerStatus(p) != nil, nil
	})
	if err != nil {
		t.Fatal(k.failure(err))
	}
	const noBackup = "ERROR: [075]: unable to find backup set with stop time less than"
	var said string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		log, _ := os.ReadFile(filepath.Join(k.root, "pods", string(earlyPod.UID), "patroni.log"))
		if i := strings.Index(string(log), noBackup); i >= 0 {
			said, _, _ = strings.Cut(string(log[i:]), "\n")
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: pgBackRest's %q not in Patroni's log within a minute:\n%s", earlyPod.Name, noBackup, log)
		}
	}
	step("clone to %s, before the first backup: Patroni's log says %q %v after it was created", early.Spec.Clone.Timestamp, said, time.Since(began).Round(100*time.Millisecond))
	time.Sleep(5 * time.Second)
	earlyPod, err = cs.CoreV1().Pods(early.Namespace).Get(ctx, earlyPod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ready, _ := testbed.PodReady(earlyPod); ready {
		t.Errorf("%s is Ready with nothing restored", earlyPod.Name)
	}
	if cs := containerStatus(earlyPod); cs != nil {
		step("%s: ready %v, restarts %d, state %+v", earlyPod.Name, cs.Ready, cs.RestartCount, cs.State)
	}
	if log, _ := os.ReadFile(filepath.Join(k.root, "pods", string(earlyPod.UID), "patroni.log")); strings.Contains(string(log), "initialized a new cluster") {
		t.Errorf("%s: Patroni initialized a cluster after the restore failed:\n%s", earlyPod.Name, log)
	}

	src.Close(ctx)
	dst.Close(ctx)
	rep.Close(ctx)
	stopped := time.Now()
	if err := k.stop(); err != nil {
		t.Fatal(err)
	}
	step("kubelet stopped in %v", time.Since(stopped).Round(100*time.Millisecond))
	if left := processesOf(k.root); len(left) > 0 {
		t.Errorf("still running after the kubelet stopped: %s", strings.Join(left, "; "))
	}
}

// connectAs connects to the PostgreSQL of pod, a member of the cluster
// named name, as its superuser.
func connectAs(ctx context.Context, t *testing.T, cs kubernetes.Interface, pod *corev1.Pod, name string) *pgx.Conn {
	t.Helper()
	s, err := cs.CoreV1().Secrets(pod.Namespace).Get(ctx, cluster.SecretName(cluster.SuperuserName, name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=prefer connect_timeout=5",
		pod.Status.PodIP, cluster.PostgresPort, cluster.SuperuserName))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Password = string(s.Data[cluster.SecretPasswordKey])
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connecting to %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return conn
}

// archiveOne writes a little, switches the WAL segment and waits until
// the archiver has pushed it; it returns the segment.
func archiveOne(ctx context.Context, t *testing.T, conn *pgx.Conn, who string) string {
	t.Helper()
	var segment string
	if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_current_wal_lsn())").Scan(&segment); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS archive_probe (id int); INSERT INTO archive_probe VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_switch_wal()"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		var archived, failed *string
		if err := conn.QueryRow(ctx, "SELECT last_archived_wal, last_failed_wal FROM pg_stat_archiver").Scan(&archived, &failed); err != nil {
			t.Fatal(err)
		}
		if archived != nil && *archived >= segment {
			return segment
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: segment %s not archived within a minute (last archived %v, last failed %v)", who, segment, deref(archived), deref(failed))
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "none"
	}
	return *s
}
