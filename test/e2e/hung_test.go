package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/pgtest"
)

// TestHungPrimary freezes a cluster's PostgreSQL (its pod stays Ready:
// Patroni answers for it) and asks for a new user: the sync times out
// within its deadline, the cluster's RolesSynced condition says so and a
// retry timer is armed, while healthy clusters created meanwhile reach
// Running as they did before the freeze. Resumed, the cluster makes the
// user and runs again (issue 13).
func TestHungPrimary(t *testing.T) {
	ns, healthyNS := env.Namespace(t), env.Namespace(t)
	const connectTimeout = 3 * time.Second
	env.StartOperator(t, "hung", []string{ns, healthyNS},
		"--sql-connect-timeout="+connectTimeout.String(), "--sql-statement-timeout=3s", "--in-database-timeout=10s")
	env.StartLabeller(t, healthyNS)
	ctx := Context(t, 8*time.Minute)

	created := 0
	healthy := func(t *testing.T) time.Duration {
		t.Helper()
		created++
		name := fmt.Sprintf("healthy-%d", created)
		began := time.Now()
		env.CreateCluster(t, healthyNS, name, 1)
		env.MustState(ctx, t, healthyNS, name, fsm.Running)
		return time.Since(began)
	}
	var before []time.Duration
	for range 3 {
		before = append(before, healthy(t))
	}

	const name = "hung"
	env.CreateCluster(t, ns, name, 1, OnProcessNode, pgtest.WithApp)
	inEffect(ctx, t, ns, name, 1)
	if err := env.FreezePostgres(ctx, ns, name+"-0"); err != nil {
		t.Fatal(err)
	}
	unfreeze := sync.OnceFunc(func() {
		if err := env.SetFreeze(context.Background(), ns, name+"-0", false); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(unfreeze)
	// PostgreSQL no longer answers, the pod is still Ready.
	if err := frozenSQL(ctx, ns, name+"-0"); err != nil {
		t.Fatal(err)
	}

	asked := time.Now()
	if _, err := env.MergePatchCluster(ctx, ns, name, `{"spec":{"users":{"late":[]}}}`); err != nil {
		t.Fatal(err)
	}
	var during []time.Duration
	results := make(chan time.Duration, 1)
	go func() {
		// Healthy clusters made while the hung cluster's sync times out
		// and retries.
		var ds []time.Duration
		for range 3 {
			ds = append(ds, healthy(t))
		}
		slices.Sort(ds)
		results <- ds[1]
	}()
	pg, err := env.WaitCluster(ctx, ns, name, "shows the timeout with a retry timer", func(pg *v1.Postgresql) bool {
		c := condition(pg, v1.ConditionRolesSynced)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "did not answer within") && hasTimer(pg, fsm.TimerRetry)
	})
	if err != nil {
		t.Fatal(err)
	}
	shown := time.Since(asked)
	t.Logf("RolesSynced=False %q %v after the patch (connect timeout %v); state %s, retry timer pending",
		condition(pg, v1.ConditionRolesSynced).Message, shown.Round(time.Millisecond), connectTimeout, pg.Status.State)
	if pg.Status.State == fsm.Running {
		t.Errorf("a cluster whose new user does not exist is Running")
	}
	during = append(during, <-results)
	slices.Sort(before)
	ratio := float64(during[0]) / float64(before[1])
	t.Logf("healthy clusters' create -> Running: median %v before the freeze, %v while the hung cluster times out and retries (ratio %.2f)",
		before[1].Round(time.Millisecond), during[0].Round(time.Millisecond), ratio)

	unfreeze()
	resumed := time.Now()
	pg = inEffect(ctx, t, ns, name, 1)
	t.Logf("resumed: role late made and Running %v later", time.Since(resumed).Round(time.Millisecond))
	mustLogin(ctx, t, ns, name, pg.Status.Primary, "late", "postgres")

	// Deleted while its sync hangs: the deletion goes ahead, the plan in
	// flight is cancelled, nothing is left.
	if err := env.FreezePostgres(ctx, ns, name+"-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.MergePatchCluster(ctx, ns, name, `{"spec":{"users":{"later":[]}}}`); err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitCluster(ctx, ns, name, "syncs the new user", func(pg *v1.Postgresql) bool {
		return pg.Status.State == fsm.Updating && pg.Status.ObservedGeneration == pg.Generation
	}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	if err := env.PG.Postgresqls(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.WaitGone(ctx, ns, name); err != nil {
		t.Fatal(err)
	}
	t.Logf("deleted while hung mid-sync: gone %v later", time.Since(deleted).Round(time.Millisecond))
}

// frozenSQL checks that a pod's PostgreSQL accepts a connection but answers
// nothing, while its pod is Ready.
func frozenSQL(ctx context.Context, ns, pod string) error {
	p, err := env.Kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=postgres sslmode=prefer", p.Status.PodIP, cluster.PostgresPort))
	if err != nil {
		return err
	}
	if conn, err := pgx.ConnectConfig(cctx, cfg); err == nil {
		_ = conn.Close(ctx)
		return fmt.Errorf("pod %s: PostgreSQL answered while frozen", pod)
	}
	if !ReadyPods(1)([]*corev1.Pod{p}) {
		return fmt.Errorf("pod %s is not Ready while only its PostgreSQL is frozen", pod)
	}
	return nil
}

func condition(pg *v1.Postgresql, typ string) *metav1.Condition {
	for i := range pg.Status.Conditions {
		if c := &pg.Status.Conditions[i]; c.Type == typ {
			return c
		}
	}
	return nil
}

func hasTimer(pg *v1.Postgresql, name string) bool {
	return slices.ContainsFunc(pg.Status.Timers, func(t v1.Timer) bool { return t.Name == name })
}
