package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/testbed"
)

// TestArchiving archives real WAL with real pgBackRest to the plane's S3
// store over HTTPS (issue 31): a cluster on the operator's default
// repository archives a segment switched after rows were written, which
// pgBackRest's info finds in the bucket and status.backup shows; a
// cluster whose spec names a port nothing listens on shows
// ContinuousArchiving False with pgBackRest's words while the first
// stays True, and recovers once the spec is fixed by an edit; a cluster on
// an image not known to carry pgBackRest is not archived, and says why.
// spiloImage is zalando's Spilo, which has no pgBackRest.
const spiloImage = "ghcr.io/zalando/spilo-17:4.0-p2"

func TestArchiving(t *testing.T) {
	store := backupStore(t)
	ns := env.Namespace(t)
	env.StartOperator(t, "archiving", []string{ns}, repoArgs(store)...)
	ctx := Context(t, 12*time.Minute)
	repoSecrets(ctx, t, store, ns)
	archiving := func(pg *v1.Postgresql) {
		pg.Spec.DockerImage = cluster.DefaultArchivingImage
	}

	// The cluster on the default repository, and one whose own
	// repository is a port where nothing listens.
	began := time.Now()
	env.CreateCluster(t, ns, "arch", 1, OnRealNode, archiving)
	dead := freeLoopbackPort(t)
	env.CreateCluster(t, ns, "broken", 1, OnRealNode, archiving, func(pg *v1.Postgresql) {
		pg.Spec.Backup = &v1.Backup{S3: &v1.BackupS3{
			Endpoint: net.JoinHostPort(store.Host, strconv.Itoa(dead)), Bucket: store.Bucket, Region: store.Region,
			SecretName: repoCreds, CAKey: "ca.crt",
		}}
	})
	// And one on Spilo's image (an adopted cluster keeps it), on a kwok
	// node: nothing runs it.
	env.CreateCluster(t, ns, "spilo", 1, func(pg *v1.Postgresql) { pg.Spec.DockerImage = spiloImage })

	// A new cluster has archived nothing: Unknown until its first
	// segment, which writes and a switch make now.
	for _, name := range []string{"arch", "broken"} {
		pg, err := env.WaitCluster(ctx, ns, name, "Running, ContinuousArchiving Unknown: nothing archived yet", func(pg *v1.Postgresql) bool {
			c := meta.FindStatusCondition(pg.Status.Conditions, v1.ConditionContinuousArchiving)
			return pg.Status.State == fsm.Running && c != nil && c.Status == metav1.ConditionUnknown &&
				strings.HasPrefix(c.Message, "no WAL segment archived yet")
		})
		if err != nil {
			t.Fatal(err)
		}
		conn := env.SQL(ctx, t, env.Pod(ctx, t, ns, pg.Status.Primary))
		if _, err := conn.Exec(ctx, "CREATE TABLE first AS SELECT 1 AS one; SELECT pg_switch_wal()"); err != nil {
			t.Fatal(err)
		}
	}
	pg := archived(ctx, t, ns, "arch", "")
	t.Logf("arch: archiving after %v: %s", time.Since(began).Round(time.Millisecond), describeArchiving(pg))

	t.Run("a switched segment reaches the bucket", func(t *testing.T) {
		conn := env.SQL(ctx, t, env.Pod(ctx, t, ns, pg.Status.Primary))
		if _, err := conn.Exec(ctx, "CREATE TABLE t AS SELECT g AS id FROM generate_series(1, 1000) g"); err != nil {
			t.Fatal(err)
		}
		var segment string
		if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&segment); err != nil {
			t.Fatal(err)
		}
		switched := time.Now()
		pg := archived(ctx, t, ns, "arch", segment)
		t.Logf("segment %s in status %v after the switch: %s", segment, time.Since(switched).Round(time.Millisecond), describeArchiving(pg))
		info := repositoryInfo(ctx, t, store, pg)
		if info.Archive.Max < segment {
			t.Errorf("pgBackRest's info: archive %s to %s, want %s in it", info.Archive.Min, info.Archive.Max, segment)
		}
		if info.Status.Code != 0 && info.Status.Code != 2 { // 2: no backup yet, archives only
			t.Errorf("pgBackRest's info: status %d %q", info.Status.Code, info.Status.Message)
		}
	})

	t.Run("a failing archive is a visible cause, others unaffected", func(t *testing.T) {
		// PostgreSQL counts the failure when archive_command returns;
		// pgBackRest's words are in its spool by then or soon after.
		pg, err := env.WaitCluster(ctx, ns, "broken", "ContinuousArchiving False with pgBackRest's words", func(pg *v1.Postgresql) bool {
			c := meta.FindStatusCondition(pg.Status.Conditions, v1.ConditionContinuousArchiving)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == fsm.ReasonArchiveFailing &&
				strings.Contains(c.Message, "Connection refused")
		})
		if err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(pg.Status.Conditions, v1.ConditionContinuousArchiving)
		t.Logf("broken: %s", c.Message)
		if pg.Status.State != fsm.Running {
			t.Errorf("state %s: a failing archive must not change the state", pg.Status.State)
		}
		if a := pg.Status.Backup.Archiving; a == nil || !a.Failing || a.WaitingSegments < 1 {
			t.Errorf("status.backup.archiving %+v, want failing with segments waiting", a)
		}
		other, err := env.PG.Postgresqls(ns).Get(ctx, "arch", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(other.Status.Conditions, v1.ConditionContinuousArchiving); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("arch: ContinuousArchiving %+v while broken fails, want True", c)
		}
	})

	t.Run("the store away, then back: archiving catches up", func(t *testing.T) {
		store := env.Plane.ObjectStore
		// The repository's first backup, taken once archiving worked,
		// ends before the store goes.
		first := backedUp(ctx, t, ns, "arch", 1, "")
		if err := store.StopServer(false); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		restarted := false
		defer func() {
			if !restarted {
				if err := store.StartServer(context.Background()); err != nil {
					t.Errorf("restarting the object store: %v", err)
				}
			}
		}()
		pg, err := env.PG.Postgresqls(ns).Get(ctx, "arch", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		conn := env.SQL(ctx, t, env.Pod(ctx, t, ns, pg.Status.Primary))
		if _, err := conn.Exec(ctx, "INSERT INTO t SELECT g FROM generate_series(1001, 2000) g"); err != nil {
			t.Fatal(err)
		}
		var segment string
		if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&segment); err != nil {
			t.Fatal(err)
		}
		pg, err = env.WaitCluster(ctx, ns, "arch", "ContinuousArchiving False while the store is away", func(pg *v1.Postgresql) bool {
			c := meta.FindStatusCondition(pg.Status.Conditions, v1.ConditionContinuousArchiving)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == fsm.ReasonArchiveFailing
		})
		if err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(pg.Status.Conditions, v1.ConditionContinuousArchiving)
		t.Logf("arch: failing %v after the store stopped (archive_timeout 10s): %s", time.Since(stopped).Round(time.Millisecond), c.Message)
		if err := store.StartServer(ctx); err != nil {
			t.Fatal(err)
		}
		restarted = true
		back := time.Now()
		pg = archived(ctx, t, ns, "arch", segment)
		t.Logf("arch: %s archived %v after the store came back: %s", segment, time.Since(back).Round(time.Millisecond), describeArchiving(pg))
		if info := repositoryInfo(ctx, t, &store.S3, pg); info.Archive.Max < segment {
			t.Errorf("pgBackRest's info: archive to %s, want %s in it", info.Archive.Max, segment)
		}
		// No gap: a backup now, and pgBackRest's verify of the whole
		// repository after it, from the first backup (before the
		// outage) on.
		requestBackup(ctx, t, ns, "arch", v1.BackupFull)
		pg = backedUp(ctx, t, ns, "arch", 2, first.Status.Backup.LastBackup.Label)
		v := pg.Status.Backup.LastVerification
		if v == nil || !v.Succeeded {
			t.Fatalf("verification after the outage: %+v", v)
		}
		t.Logf("arch: verified after the outage: %s", v.Message)
	})

	t.Run("fixed by an edit, it archives", func(t *testing.T) {
		fixedAt := time.Now()
		if _, err := env.UpdateCluster(ctx, ns, "broken", func(pg *v1.Postgresql) {
			pg.Spec.Backup.S3.Endpoint = store.Endpoint
		}); err != nil {
			t.Fatal(err)
		}
		pg := archived(ctx, t, ns, "broken", "")
		t.Logf("broken: archiving %v after the edit: %s", time.Since(fixedAt).Round(time.Millisecond), describeArchiving(pg))
		if pg.Status.Backup.Archiving.WaitingSegments != 0 {
			// What waited is pushed before the condition is True (the
			// last attempt succeeded), but later ones may be queued.
			t.Logf("segments still waiting: %d", pg.Status.Backup.Archiving.WaitingSegments)
		}
		info := repositoryInfo(ctx, t, store, pg)
		if info.Archive.Max == "" {
			t.Errorf("pgBackRest's info finds no archive of broken after the fix: %+v", info)
		}
	})

	t.Run("an image without pgBackRest is not archived, and says so", func(t *testing.T) {
		pg, err := env.WaitCluster(ctx, ns, "spilo", "ContinuousArchiving False, ArchiveBlocked", func(pg *v1.Postgresql) bool {
			c := meta.FindStatusCondition(pg.Status.Conditions, v1.ConditionContinuousArchiving)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == fsm.ReasonArchiveBlocked
		})
		if err != nil {
			t.Fatal(err)
		}
		sts, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, cluster.StatefulSetName("spilo"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
			if strings.HasPrefix(e.Name, "PGBACKREST_") || e.Name == "SPILO_CONFIGURATION" && strings.Contains(e.Value, "pgbackrest") {
				t.Errorf("the StatefulSet of a blocked cluster archives: %s=%s", e.Name, e.Value)
			}
		}
		if pg.Status.Backup != nil {
			t.Errorf("status.backup %+v on a cluster that does not archive", pg.Status.Backup)
		}
	})
}

// archived waits until the cluster is Running and its status shows
// archiving, past segment when it is not empty.
func archived(ctx context.Context, t testing.TB, ns, name, segment string) *v1.Postgresql {
	t.Helper()
	what := "Running, ContinuousArchiving True"
	if segment != "" {
		what += ", " + segment + " archived"
	}
	pg, err := env.WaitCluster(ctx, ns, name, what, func(pg *v1.Postgresql) bool {
		c := meta.FindStatusCondition(pg.Status.Conditions, v1.ConditionContinuousArchiving)
		b := pg.Status.Backup
		return pg.Status.State == fsm.Running && c != nil && c.Status == metav1.ConditionTrue &&
			b != nil && b.Archiving != nil && b.Archiving.LastArchivedWAL != "" && b.Archiving.LastArchivedWAL >= segment
	})
	if err != nil {
		t.Fatal(err)
	}
	return pg
}

func describeArchiving(pg *v1.Postgresql) string {
	b := pg.Status.Backup
	if b == nil || b.Archiving == nil {
		return "no archiving status"
	}
	a := b.Archiving
	return fmt.Sprintf("%s: last %s, failing %v, waiting %d, pg_wal %d bytes", b.Repository, a.LastArchivedWAL, a.Failing, a.WaitingSegments, a.WALBytes)
}

// stanzaInfo is what `pgbackrest info --output=json` says of a stanza.
type stanzaInfo struct {
	Name   string `json:"name"`
	Status struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"status"`
	Archive struct {
		Min string
		Max string
	} `json:"-"`
	Archives []struct {
		Min string `json:"min"`
		Max string `json:"max"`
	} `json:"archive"`
}

// repositoryInfo runs pgBackRest's info on the cluster's repository, as
// the pods see it, from here.
func repositoryInfo(ctx context.Context, t testing.TB, store *testbed.S3, pg *v1.Postgresql) stanzaInfo {
	t.Helper()
	cmd := exec.CommandContext(ctx, "pgbackrest", "info", "--output=json")
	cmd.Env = append(os.Environ(),
		"PGBACKREST_REPO1_TYPE=s3",
		"PGBACKREST_REPO1_S3_ENDPOINT="+store.Host,
		"PGBACKREST_REPO1_S3_PORT="+strconv.Itoa(store.Port),
		"PGBACKREST_REPO1_S3_BUCKET="+store.Bucket,
		"PGBACKREST_REPO1_S3_REGION="+store.Region,
		"PGBACKREST_REPO1_S3_URI_STYLE=path",
		"PGBACKREST_REPO1_S3_KEY="+store.AccessKey,
		"PGBACKREST_REPO1_S3_KEY_SECRET="+store.SecretKey,
		"PGBACKREST_REPO1_S3_CA_FILE="+store.CAFile,
		"PGBACKREST_CONFIG=/dev/null",
		"PGBACKREST_STANZA="+cluster.Stanza(pg),
		"PGBACKREST_REPO1_PATH="+cluster.RepositoryPath(pg),
		"PGBACKREST_LOG_LEVEL_CONSOLE=off", "PGBACKREST_LOG_LEVEL_FILE=off", "PGBACKREST_LOCK_PATH="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pgbackrest info: %v\n%s", err, out)
	}
	var stanzas []stanzaInfo
	if err := json.Unmarshal(out, &stanzas); err != nil || len(stanzas) != 1 {
		t.Fatalf("pgbackrest info: %v: %s", err, out)
	}
	s := stanzas[0]
	for _, a := range s.Archives {
		if s.Archive.Min == "" || a.Min < s.Archive.Min {
			s.Archive.Min = a.Min
		}
		if a.Max > s.Archive.Max {
			s.Archive.Max = a.Max
		}
	}
	return s
}

// freeLoopbackPort returns a port of 127.0.0.1 where nothing listens now.
func freeLoopbackPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
