package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgloop/pgloop/pkg/cluster"
)

// TestRolloutSwitchover rolls a two-instance cluster's pods (a new pod
// annotation) twice while a client inserts a row every 10ms on whichever
// pod is the primary: once as pgloop does by default, handing the primary's
// role to the replica (Patroni's switchover) before replacing its pod, and
// once with --switchover=false, where the primary's pod is deleted and
// Patroni fails over. The longest gap between two committed inserts is the
// write outage of each (docs/testbed.md).
func TestRolloutSwitchover(t *testing.T) {
	ns := env.Namespace(t)
	ctx := Context(t, 10*time.Minute)
	const name = "roll"

	op := env.StartOperator(t, "switchover", []string{ns})
	env.CreateCluster(t, ns, name, 2, OnRealNode)
	pg := inEffect(ctx, t, ns, name, 2)
	conn := env.SQL(ctx, t, env.Pod(ctx, t, ns, pg.Status.Primary))
	if _, err := conn.Exec(ctx, "CREATE TABLE writes (at timestamptz NOT NULL)"); err != nil {
		t.Fatal(err)
	}

	// Three rollouts each: one sample says little on two busy cores.
	const rounds = 3
	var switchover, failover []time.Duration
	for i := range rounds {
		r := rollout(ctx, t, ns, name, fmt.Sprintf("s%d", i))
		if n := op.LogCount("switched over", "from="+r.primary); n != i+1 && !(i > 0 && n > 0) {
			t.Errorf("%d switchovers from %s logged after rollout %d", n, r.primary, i+1)
		}
		t.Logf("rollout %d with a switchover first: longest write gap %v, %d inserts in %v",
			i+1, r.gap.Round(time.Millisecond), r.inserts, r.took.Round(time.Millisecond))
		switchover = append(switchover, r.gap)
	}
	switchovers := op.LogCount("switched over")
	if switchovers < rounds {
		t.Errorf("%d switchovers logged for %d rollouts", switchovers, rounds)
	}

	if err := op.Stop(); err != nil {
		t.Fatal(err)
	}
	op = env.StartOperator(t, "failover", []string{ns}, "--switchover=false")
	inEffect(ctx, t, ns, name, 2)
	for i := range rounds {
		r := rollout(ctx, t, ns, name, fmt.Sprintf("f%d", i))
		t.Logf("rollout %d replacing the primary's pod (failover): longest write gap %v, %d inserts in %v",
			i+1, r.gap.Round(time.Millisecond), r.inserts, r.took.Round(time.Millisecond))
		failover = append(failover, r.gap)
	}
	if n := op.LogCount("switched over"); n != 0 {
		t.Errorf("%d switchovers logged with --switchover=false", n)
	}
	t.Logf("longest write gap per rollout: with a switchover first %v; with --switchover=false %v", rounded(switchover), rounded(failover))
}

func rounded(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

type rolloutResult struct {
	primary string // the primary before the rollout
	gap     time.Duration
	inserts int
	took    time.Duration
}

// rollout changes a pod annotation of the cluster, which replaces every
// pod, while a writer inserts on the primary every 10ms; it returns once
// the cluster runs the new pods, with the longest gap between two
// committed inserts.
func rollout(ctx context.Context, t *testing.T, ns, name, round string) rolloutResult {
	t.Helper()
	pg := inEffect(ctx, t, ns, name, 2)
	old := podUIDs(ctx, t, ns, name)
	w := startWriter(ctx, t, ns, name)
	began := time.Now()
	if _, err := env.MergePatchCluster(ctx, ns, name, fmt.Sprintf(`{"spec":{"podAnnotations":{"rollout":%q}}}`, round)); err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitPods(ctx, ns, name, replacedReady(2, old)); err != nil {
		t.Fatal(err)
	}
	inEffect(ctx, t, ns, name, 2)
	took := time.Since(began)
	// A last insert after the rollout closes the last gap.
	r := w.stop(ctx, t, "an insert after the rollout")
	return rolloutResult{primary: pg.Status.Primary, gap: r.gap, inserts: r.inserts, took: took}
}

// startWriter inserts a row every 10ms on the cluster's primary, found by
// asking each pod whether it is in recovery, and remembers the commit
// times; a failed insert only makes it look for the primary again. It
// returns once the first insert committed.
func startWriter(ctx context.Context, t *testing.T, ns, name string) *insertLoop {
	t.Helper()
	password := password(ctx, t, ns, cluster.SecretName(cluster.SuperuserName, name))
	var conn *pgx.Conn
	w := startInserts(ctx, func(ctx context.Context) (bool, error) {
		if conn == nil {
			if conn = primaryConn(ctx, ns, name, password); conn == nil {
				return false, nil
			}
		}
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := conn.Exec(ictx, "INSERT INTO writes VALUES (clock_timestamp())"); err != nil {
			_ = conn.Close(context.Background())
			conn = nil
			return false, nil
		}
		return true, nil
	}, func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	})
	// Writing before the rollout starts.
	w.waitMore(ctx, t, "the writer's first insert", 0)
	return w
}

// primaryConn connects to the pod of the cluster that is not in recovery,
// nil when none answers as a primary now.
func primaryConn(ctx context.Context, ns, name, password string) *pgx.Conn {
	pods, err := env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: cluster.LabelClusterName + "=" + name})
	if err != nil {
		return nil
	}
	for _, p := range pods.Items {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=prefer", p.Status.PodIP, cluster.PostgresPort))
		if err != nil {
			continue
		}
		cfg.Password = password
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		conn, err := pgx.ConnectConfig(cctx, cfg)
		if err != nil {
			cancel()
			continue
		}
		var recovery bool
		err = conn.QueryRow(cctx, "SELECT pg_is_in_recovery()").Scan(&recovery)
		cancel()
		if err == nil && !recovery {
			return conn
		}
		_ = conn.Close(context.Background())
	}
	return nil
}
