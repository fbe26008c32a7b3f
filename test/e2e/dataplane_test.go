package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// TestDataPlane runs one cluster on real Patroni and PostgreSQL through
// pgloop (issue 7), as containers of the real node (issue 51): a leader
// and a streaming replica, a write replicated, scale 2 -> 3 -> 2, a pod
// deleted and re-created on its data, and a failover caused by killing the
// primary's processes from the host (SetHold).
func TestDataPlane(t *testing.T) {
	t.Parallel() // waits on timers: docs/testbed.md, "Suites run concurrently"
	ns := env.Namespace(t)
	env.StartOperator(t, "dataplane", []string{ns})
	ctx := Context(t, 10*time.Minute)
	const name = "dp"

	began := time.Now()
	env.CreateCluster(t, ns, name, 2, OnRealNode)
	pg := converged(ctx, t, ns, name, 2)
	t.Logf("Running after %v, primary %s", time.Since(began).Round(time.Millisecond), pg.Status.Primary)

	primary, replica := roles(ctx, t, pg)
	conn := env.SQL(ctx, t, primary)

	t.Run("leader and streaming replica", func(t *testing.T) {
		if p := primary.Labels[cluster.LabelRole]; p != cluster.RoleMaster {
			t.Errorf("primary %s is labelled %s=%q, want %q", primary.Name, cluster.LabelRole, p, cluster.RoleMaster)
		}
		mustStream(ctx, t, conn, primary.Name, replica.Name)
		t.Logf("replica %s streaming after %v", replica.Name, time.Since(began).Round(time.Millisecond))
	})

	t.Run("write on the primary, read on the replica", func(t *testing.T) {
		if _, err := conn.Exec(ctx, "CREATE TABLE e2e (id int PRIMARY KEY, note text)"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO e2e VALUES (1, 'written on the primary')"); err != nil {
			t.Fatal(err)
		}
		rconn := env.SQL(ctx, t, replica)
		var inRecovery bool
		if err := rconn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || !inRecovery {
			t.Fatalf("replica %s: pg_is_in_recovery = %v, %v; want true", replica.Name, inRecovery, err)
		}
		mustRead(ctx, t, rconn, 1, "written on the primary")
	})

	t.Run("scale 2 to 3 to 2", func(t *testing.T) {
		scale(ctx, t, ns, name, 3)
		third := env.Pod(ctx, t, ns, name+"-2")
		mustStream(ctx, t, conn, primary.Name, replica.Name, third.Name)
		mustRead(ctx, t, env.SQL(ctx, t, third), 1, "written on the primary")

		scale(ctx, t, ns, name, 2)
		mustStream(ctx, t, conn, primary.Name, replica.Name)
	})

	t.Run("a deleted pod comes back on its data", func(t *testing.T) {
		// A file in the replica's data directory: a new data directory
		// (a fresh base backup) would not have it.
		marker := filepath.Join(env.DataDir(ctx, t, replica), "pgroot", "pgdata", "pgloop-e2e-marker")
		if err := os.WriteFile(marker, []byte(replica.Name), 0o644); err != nil {
			t.Fatalf("while marking the replica's data directory: %v", err)
		}
		oldUID := replica.UID
		if err := env.Kube.CoreV1().Pods(ns).Delete(ctx, replica.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		pods, err := env.WaitPods(ctx, ns, name, func(pods []*corev1.Pod) bool {
			return ReadyPods(2)(pods) && slices.ContainsFunc(pods, func(p *corev1.Pod) bool {
				return p.Name == replica.Name && p.UID != oldUID
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			if p.Name == replica.Name {
				replica = p
			}
		}
		if _, err := os.Stat(marker); err != nil {
			t.Errorf("the re-created pod's data directory lost the marker: %v", err)
		}
		mustStream(ctx, t, conn, primary.Name, replica.Name)
		mustRead(ctx, t, env.SQL(ctx, t, replica), 1, "written on the primary")
	})

	t.Run("failover when the primary's processes are killed", func(t *testing.T) {
		converged(ctx, t, ns, name, 2)
		killed := time.Now()
		if err := env.SetHold(ctx, ns, primary.Name, true); err != nil {
			t.Fatal(err)
		}
		pg, err := env.WaitCluster(ctx, ns, name, "got a new primary", func(pg *v1.Postgresql) bool {
			return pg.Status.Primary == replica.Name
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("new primary %s after %v", replica.Name, time.Since(killed).Round(time.Millisecond))
		if !slices.ContainsFunc(pg.Status.History, func(tr v1.Transition) bool {
			return tr.Event == fsm.EventPrimaryChanged && strings.Contains(tr.Message, primary.Name) && strings.Contains(tr.Message, replica.Name)
		}) {
			t.Errorf("history has no %s entry from %s to %s: %s", fsm.EventPrimaryChanged, primary.Name, replica.Name, historyString(pg.Status.History))
		}
		if leader, err := env.LeaderRecord(ctx, ns, name); err != nil || leader != replica.Name {
			t.Errorf("leader record names %q (%v), want %s", leader, err, replica.Name)
		}
		newConn := env.SQL(ctx, t, env.Pod(ctx, t, ns, replica.Name))
		// Patroni labels its pod master right after asking PostgreSQL to
		// promote (pg_ctl promote -W), so the first writes may still meet
		// a server in recovery; clients retry those, and so do we.
		labelled := time.Now()
		err = Eventually(ctx, "a write on the new primary", func(ctx context.Context) (bool, error) {
			_, err := newConn.Exec(ctx, "INSERT INTO e2e VALUES (2, 'written after the failover')")
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == readOnlySQLTransaction {
				return false, err
			}
			if err != nil {
				return false, fmt.Errorf("%w: %w", errStop, err)
			}
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("new primary writable %v after pgloop named it", time.Since(labelled).Round(time.Millisecond))

		if err := env.SetHold(ctx, ns, primary.Name, false); err != nil {
			t.Fatal(err)
		}
		pg, err = env.WaitCluster(ctx, ns, name, "Running again with both instances", func(pg *v1.Postgresql) bool {
			return pg.Status.State == fsm.Running && pg.Status.ReadyInstances == 2 && pg.Status.Primary == replica.Name
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Running again %v after the kill; history: %s", time.Since(killed).Round(time.Millisecond), historyString(pg.Status.History))
		mustStream(ctx, t, newConn, replica.Name, primary.Name)
		old := env.SQL(ctx, t, env.Pod(ctx, t, ns, primary.Name))
		mustRead(ctx, t, old, 2, "written after the failover")
		// From here on the roles are swapped.
		primary, replica = env.Pod(ctx, t, ns, replica.Name), env.Pod(ctx, t, ns, primary.Name)
	})

	t.Run("rolling update: the replica first, the primary last", func(t *testing.T) {
		began := time.Now()
		pg, err := env.UpdateCluster(ctx, ns, name, func(pg *v1.Postgresql) {
			cpu := resource.MustParse("20m")
			pg.Spec.Resources.Requests.CPU = &cpu
		})
		if err != nil {
			t.Fatal(err)
		}
		pg, err = env.WaitCluster(ctx, ns, name, "Running on the new spec", func(got *v1.Postgresql) bool {
			return got.Status.State == fsm.Running && got.Status.ObservedGeneration >= pg.Generation &&
				got.Status.ReadyInstances == 2 && got.Status.Primary != "" && conditionTrue(got, v1.ConditionReady)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("rolled out in %v; history: %s", time.Since(began).Round(time.Millisecond), historyString(pg.Status.History))
		// Both pods were replaced, the replica first: replacing the
		// primary last hands the lock over once, gracefully, to a replica
		// already on the new spec.
		newPrimary, newReplica := env.Pod(ctx, t, ns, primary.Name), env.Pod(ctx, t, ns, replica.Name)
		if newPrimary.UID == primary.UID || newReplica.UID == replica.UID {
			t.Fatalf("not both pods replaced: %s %v, %s %v", primary.Name, newPrimary.UID != primary.UID, replica.Name, newReplica.UID != replica.UID)
		}
		// Creation times have whole seconds; a replacement waits for the
		// previous pod to be Ready, more than a second here.
		if newPrimary.CreationTimestamp.Before(&newReplica.CreationTimestamp) {
			t.Errorf("the primary %s was replaced (at %v) before the replica %s (at %v)",
				primary.Name, newPrimary.CreationTimestamp, replica.Name, newReplica.CreationTimestamp)
		}
		now, other := roles(ctx, t, pg)
		conn := env.SQL(ctx, t, now)
		mustStream(ctx, t, conn, now.Name, other.Name)
		mustRead(ctx, t, env.SQL(ctx, t, other), 2, "written after the failover")
	})

	t.Run("switchover through Patroni keeps the cluster Running", func(t *testing.T) {
		pg := converged(ctx, t, ns, name, 2)
		leader, candidate := roles(ctx, t, pg)
		began := time.Now()
		if err := Switchover(ctx, leader, candidate.Name); err != nil {
			t.Fatal(err)
		}
		// Done once the old leader streams from the new one as a replica
		// (it restarts PostgreSQL for that) and the cluster converged
		// again: every blip of the switchover is behind us then.
		mustStream(ctx, t, env.SQL(ctx, t, env.Pod(ctx, t, ns, candidate.Name)), candidate.Name, leader.Name)
		pg = converged(ctx, t, ns, name, 2)
		t.Logf("switchover to %s, converged after %v; history: %s", candidate.Name, time.Since(began).Round(time.Millisecond), historyString(pg.Status.History))
		if pg.Status.Primary != candidate.Name {
			t.Errorf("status.primary is %s, want %s", pg.Status.Primary, candidate.Name)
		}
		changes := 0
		for _, tr := range pg.Status.History {
			if tr.Time.Before(&metav1.Time{Time: began.Add(-time.Second)}) {
				continue
			}
			if tr.To != fsm.Running {
				t.Errorf("a planned switchover made the cluster %s: %s", tr.To, historyString(pg.Status.History))
			}
			if tr.Event == fsm.EventPrimaryChanged {
				changes++
			}
		}
		if changes != 1 {
			t.Errorf("%d primaryChanged entries for one switchover: %s", changes, historyString(pg.Status.History))
		}
	})
}

// TestDataPlaneSideBySide runs three clusters of two instances at once and
// reports their time to Running and their memory (docs/testbed.md).
func TestDataPlaneSideBySide(t *testing.T) {
	ns := env.Namespace(t)
	env.StartOperator(t, "sidebyside", []string{ns})
	ctx := Context(t, 6*time.Minute)
	names := []string{"side-a", "side-b", "side-c"}

	began := time.Now()
	for _, name := range names {
		env.CreateCluster(t, ns, name, 2, OnProcessNode)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		running  = map[string]time.Duration{}
		clusters = map[string]*v1.Postgresql{}
	)
	for _, name := range names {
		wg.Go(func() {
			pg, err := env.WaitCluster(ctx, ns, name, "converged", func(pg *v1.Postgresql) bool {
				return pg.Status.State == fsm.Running && pg.Status.ReadyInstances == 2 && conditionTrue(pg, v1.ConditionReady)
			})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			running[name] = time.Since(began)
			clusters[name] = pg
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var dirs []string
	node := env.ProcessNode(t)
	for _, name := range names {
		primary, replica := roles(ctx, t, clusters[name])
		mustStream(ctx, t, env.SQL(ctx, t, primary), primary.Name, replica.Name)
		for _, p := range []*corev1.Pod{primary, replica} {
			dirs = append(dirs, PodDir(node, p), env.DataDir(ctx, t, p))
		}
	}
	streaming := time.Since(began)
	pss, procs, err := Memory(dirs)
	if err != nil {
		t.Fatal(err)
	}
	if procs < 2*len(names)*2 {
		t.Errorf("found %d processes for %d instances: want a Patroni and a postmaster each at least", procs, 2*len(names))
	}
	var times []string
	for _, name := range names {
		times = append(times, fmt.Sprintf("%s %v", name, running[name].Round(100*time.Millisecond)))
	}
	t.Logf("figures: time to Running: %s; all replicas streaming after %v; memory: %d MiB PSS in %d processes, %.1f MiB per instance",
		strings.Join(times, ", "), streaming.Round(100*time.Millisecond), pss>>20, procs, float64(pss)/float64(1<<20)/float64(2*len(names)))
}

// readOnlySQLTransaction is PostgreSQL's SQLSTATE for a write refused by a
// server in recovery.
const readOnlySQLTransaction = "25006"

// converged waits until the cluster is Running on its current spec with n
// Ready instances, a primary and its Ready condition True: Running alone
// also covers a loss within the loss grace.
func converged(ctx context.Context, t testing.TB, ns, name string, n int32) *v1.Postgresql {
	t.Helper()
	pg, err := env.WaitCluster(ctx, ns, name, fmt.Sprintf("converged with %d instances", n), func(pg *v1.Postgresql) bool {
		st := pg.Status
		return st.State == fsm.Running && st.ObservedGeneration >= pg.Generation && st.ReadyInstances == n &&
			st.Primary != "" && conditionTrue(pg, v1.ConditionReady)
	})
	if err != nil {
		t.Fatal(err)
	}
	return pg
}

func conditionTrue(pg *v1.Postgresql, typ string) bool {
	for _, c := range pg.Status.Conditions {
		if c.Type == typ {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// roles returns the cluster's primary pod (status.primary) and its other
// pod; the cluster has two instances.
func roles(ctx context.Context, t testing.TB, pg *v1.Postgresql) (primary, replica *corev1.Pod) {
	t.Helper()
	if pg.Status.Primary == "" {
		t.Fatalf("cluster %s has no primary: %s", pg.Name, Summary(pg))
	}
	leader, err := env.LeaderRecord(ctx, pg.Namespace, pg.Name)
	if err != nil || leader != pg.Status.Primary {
		t.Fatalf("status.primary is %s but Patroni's leader record names %q (%v)", pg.Status.Primary, leader, err)
	}
	primary = env.Pod(ctx, t, pg.Namespace, pg.Status.Primary)
	other := pg.Name + "-0"
	if primary.Name == other {
		other = pg.Name + "-1"
	}
	return primary, env.Pod(ctx, t, pg.Namespace, other)
}

// mustStream waits until exactly the replicas stream from the primary conn
// is connected to.
func mustStream(ctx context.Context, t testing.TB, conn *pgx.Conn, primary string, replicas ...string) {
	t.Helper()
	want := slices.Sorted(slices.Values(replicas))
	var got []string
	err := Eventually(ctx, "replicas streaming from "+primary, func(ctx context.Context) (bool, error) {
		var err error
		got, err = Streaming(ctx, conn)
		return slices.Equal(got, want), err
	})
	if err != nil {
		t.Fatalf("%v: pg_stat_replication on %s shows %v streaming, want %v", err, primary, got, want)
	}
}

// mustRead waits until row id of table e2e reads note on conn's server.
func mustRead(ctx context.Context, t testing.TB, conn *pgx.Conn, id int, note string) {
	t.Helper()
	var got string
	err := Eventually(ctx, fmt.Sprintf("row %d replicated", id), func(ctx context.Context) (bool, error) {
		err := conn.QueryRow(ctx, "SELECT note FROM e2e WHERE id = $1", id).Scan(&got)
		if err == pgx.ErrNoRows {
			return false, nil
		}
		return got == note, err
	})
	if err != nil {
		t.Fatalf("%v: read %q", err, got)
	}
}

// scale sets numberOfInstances and waits until the cluster is Running with
// that many Ready instances.
func scale(ctx context.Context, t testing.TB, ns, name string, n int32) {
	t.Helper()
	if _, err := env.UpdateCluster(ctx, ns, name, func(pg *v1.Postgresql) {
		pg.Spec.NumberOfInstances = n
	}); err != nil {
		t.Fatal(err)
	}
	converged(ctx, t, ns, name, n)
}

func historyString(h []v1.Transition) string {
	var parts []string
	for _, tr := range h {
		parts = append(parts, fmt.Sprintf("%s -%s-> %s (%s %s)", tr.From, tr.Event, tr.To, tr.Reason, tr.Message))
	}
	return strings.Join(parts, "; ")
}
