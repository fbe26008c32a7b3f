package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// TestSwitchoverThroughPooler rolls a two-instance cluster with a primary
// connection pooler (a new pod annotation, so pgloop switches the primary
// over to the replica first) while one client inserts a row every 10ms
// through the pooler and another directly on whichever pod is the primary
// (issue 32): pgloop pauses the pooler around the switchover, so the
// pooler's client sees a stall and no error. It asserts counts only: no
// failed insert through the pooler, a pause and a resume logged per
// switchover, no pause left on record. The stalls and gaps are logged;
// PGLOOP_SWITCHOVER_ROUNDS (make bench-switchover) runs more rollouts and
// prints the table of docs/performance.md.
func TestSwitchoverThroughPooler(t *testing.T) {
	rounds := 1
	if v := os.Getenv("PGLOOP_SWITCHOVER_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("PGLOOP_SWITCHOVER_ROUNDS=%q: want a whole number of at least 1", v)
		}
		rounds = n
	}
	ns := env.Namespace(t)
	ctx := Context(t, time.Duration(10+5*rounds)*time.Minute)
	const name = "paused"

	op := env.StartOperator(t, "pause", []string{ns})
	createPooled(ctx, t, ns, name)

	var rows []string
	for i := range rounds {
		w := startPoolWriter(ctx, t, ns, name)
		r := rollout(ctx, t, ns, name, fmt.Sprintf("p%d", i))
		pw := w.stop(ctx, t, "an insert through the pooler after the rollout")
		t.Logf("rollout %d (switchover from %s): through the pooler %d inserts, %d failed, longest stall %v; direct longest gap %v; rollout took %v",
			i+1, r.primary, pw.inserts, pw.failed, pw.gap.Round(time.Millisecond), r.gap.Round(time.Millisecond), r.took.Round(time.Millisecond))
		if pw.failed > 0 {
			t.Errorf("rollout %d: %d inserts through the pooler failed, want none: %s", i+1, pw.failed, pw.errors())
		}
		rows = append(rows, fmt.Sprintf("| %d | %d | %d | %v | %v |", i+1, pw.inserts, pw.failed,
			pw.gap.Round(time.Millisecond), r.gap.Round(time.Millisecond)))
	}
	// The operator's account of each switchover: the pause, Patroni's
	// part, the wait for the route, the resume.
	var steps []string
	for _, line := range strings.Split(op.Log(), "\n") {
		for _, m := range []string{"pooler paused", "switched over", "takes writes through", "pooler resumed", "anyway"} {
			if strings.Contains(line, m) {
				steps = append(steps, line)
				break
			}
		}
	}
	t.Logf("the operator's steps:\n%s", strings.Join(steps, "\n"))
	if n := op.LogCount("pooler paused"); n < rounds {
		t.Errorf("%d pauses of the pooler logged for %d rollouts", n, rounds)
	}
	if n := op.LogCount("pooler resumed"); n < rounds {
		t.Errorf("%d resumes of the pooler logged for %d rollouts", n, rounds)
	}
	pg, err := env.PG.Postgresqls(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pg.Status.PoolerPause != nil {
		t.Errorf("status.poolerPause %+v after the rollouts, want none", pg.Status.PoolerPause)
	}
	t.Logf("rollouts of 2 instances, a 10 ms insert loop through the pooler and one direct:\n"+
		"| rollout | inserts through the pooler | failed | longest stall (pooler) | longest gap (direct) |\n|---|---|---|---|---|\n%s",
		strings.Join(rows, "\n"))
}

// createPooled creates a 2-instance cluster with a primary pooler (one
// PgBouncer pod, transaction mode), the role app and its database appdb,
// and the tables the writers insert into: writes (postgres, direct) and
// pooled (appdb, through the pooler).
func createPooled(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	env.CreateCluster(t, ns, name, 2, OnRealNode, func(pg *v1.Postgresql) {
		pg.Spec.Users = map[string]v1.UserFlags{"app": {}}
		pg.Spec.Databases = map[string]string{"appdb": "app"}
		pg.Spec.EnableConnectionPooler = ptr.To(true)
		pg.Spec.ConnectionPooler = &v1.ConnectionPooler{NumberOfInstances: ptr.To[int32](1), Mode: "transaction"}
	})
	pg := inEffect(ctx, t, ns, name, 2)
	conn := env.SQL(ctx, t, env.Pod(ctx, t, ns, pg.Status.Primary))
	if _, err := conn.Exec(ctx, "CREATE TABLE writes (at timestamptz NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	appdb := env.SQLDatabase(ctx, t, env.Pod(ctx, t, ns, pg.Status.Primary), "appdb")
	if _, err := appdb.Exec(ctx, "CREATE TABLE pooled (at timestamptz NOT NULL); GRANT INSERT ON pooled TO app"); err != nil {
		t.Fatal(err)
	}
}

// TestSwitchoverPauseOperatorRestart kills the operator while the pooler
// is pausing for a switchover (a transaction the test holds open through
// the pooler keeps PAUSE from completing), checks that nothing resumes it
// while the operator is down, and that the restarted operator resumes it
// (status.poolerPause), finishes the rollout and removes the record; the
// pooler's other client sees a stall and no error.
func TestSwitchoverPauseOperatorRestart(t *testing.T) {
	ns := env.Namespace(t)
	ctx := Context(t, 10*time.Minute)
	const name = "restarted"
	op := env.StartOperator(t, "pause-killed", []string{ns})
	createPooled(ctx, t, ns, name)
	old := podUIDs(ctx, t, ns, name)

	pods, err := env.WaitPodsSelected(ctx, ns, cluster.PoolerSelector(name, cluster.RoleMaster), ReadyPods(1))
	if err != nil {
		t.Fatal(err)
	}
	ip := pods[0].Status.PodIP
	poolerPW := password(ctx, t, ns, cluster.SecretName(v1.DefaultPoolerUser, name))
	// waiting is how many clients of appdb wait for a server: while the
	// pooler pauses, the writer's insert does.
	waiting := func(ctx context.Context) (int, error) {
		conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=pgbouncer sslmode=require connect_timeout=5 default_query_exec_mode=simple_protocol",
			ip, cluster.PostgresPort, v1.DefaultPoolerUser, poolerPW))
		if err != nil {
			return 0, err
		}
		defer conn.Close(context.Background())
		rows, err := conn.Query(ctx, "SHOW POOLS")
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				return 0, err
			}
			row := map[string]string{}
			for i, f := range rows.FieldDescriptions() {
				row[f.Name] = fmt.Sprint(vals[i])
			}
			if row["database"] == "appdb" {
				w, err := strconv.Atoi(row["cl_waiting"])
				if err != nil {
					return 0, fmt.Errorf("%w: SHOW POOLS cl_waiting %q", errStop, row["cl_waiting"])
				}
				n += w
			}
		}
		return n, rows.Err()
	}

	hold := connectPooler(ctx, t, appConfig(ctx, t, ns, name, ip))
	defer hold.Close(context.Background())
	if _, err := hold.Exec(ctx, "BEGIN; INSERT INTO pooled VALUES (clock_timestamp())"); err != nil {
		t.Fatal(err)
	}
	w := startPoolWriter(ctx, t, ns, name)
	if _, err := env.MergePatchCluster(ctx, ns, name, `{"spec":{"podAnnotations":{"rollout":"killed"}}}`); err != nil {
		t.Fatal(err)
	}
	if err := Eventually(ctx, "the pooler pausing for the switchover", func(ctx context.Context) (bool, error) {
		pg, err := env.PG.Postgresqls(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || pg.Status.PoolerPause == nil {
			return false, err
		}
		n, err := waiting(ctx)
		return err == nil && n > 0, err
	}); err != nil {
		t.Fatal(err)
	}
	op.Kill()
	// The held transaction ends: PAUSE completes, with no one to resume.
	if _, err := hold.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if n, err := waiting(ctx); err != nil || n == 0 {
		t.Fatalf("with the operator killed: %d clients waiting (%v), want the writer's", n, err)
	}
	inserts := w.count()
	pg, err := env.PG.Postgresqls(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pg.Status.PoolerPause == nil {
		t.Fatalf("the pooler is paused, and status.poolerPause does not say so")
	}
	t.Logf("operator killed with the pooler paused for the switchover %s -> %s", pg.Status.PoolerPause.From, pg.Status.PoolerPause.To)

	restarted := time.Now()
	op = env.StartOperator(t, "pause-restarted", []string{ns})
	if err := Eventually(ctx, "an insert through the pooler resumed by the restarted operator", func(context.Context) (bool, error) {
		return w.count() > inserts, nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("pooler resumed %v after the operator's restart", time.Since(restarted).Round(time.Millisecond))
	if _, err := env.WaitPods(ctx, ns, name, func(pods []*corev1.Pod) bool {
		return ReadyPods(2)(pods) && !slices.ContainsFunc(pods, func(p *corev1.Pod) bool {
			return slices.ContainsFunc(old, func(o podID) bool { return o.uid == p.UID })
		})
	}); err != nil {
		t.Fatal(err)
	}
	pg = inEffect(ctx, t, ns, name, 2)
	if pg.Status.PoolerPause != nil {
		t.Errorf("status.poolerPause %+v once Running, want none", pg.Status.PoolerPause)
	}
	pw := w.stop(ctx, t, "an insert through the pooler after the rollout")
	t.Logf("through the pooler: %d inserts, %d failed, longest stall %v (the operator was down part of it)",
		pw.inserts, pw.failed, pw.gap.Round(time.Millisecond))
	if pw.failed > 0 {
		t.Errorf("%d inserts through the pooler failed, want none: %s", pw.failed, pw.errors())
	}
	if n := op.LogCount("pooler resumed"); n == 0 {
		t.Errorf("the restarted operator logged no resume")
	}
}

// appConfig is the app role's connection to appdb through the pooler pod
// at ip: TLS, the simple protocol (transaction mode).
func appConfig(ctx context.Context, t *testing.T, ns, name, ip string) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d dbname=appdb user=app sslmode=require connect_timeout=5 default_query_exec_mode=simple_protocol",
		ip, cluster.PostgresPort))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Password = password(ctx, t, ns, cluster.SecretName("app", name))
	return cfg
}

// connectPooler connects with cfg until the pooler serves. A Ready
// pooler pod accepts TCP (its readiness probe), but its first client can
// still wait past connect_timeout: the master Service must route
// (kube-proxy) before PgBouncer's auth_query gets a server, and a failed
// server login is retried only after server_login_retry.
func connectPooler(ctx context.Context, t *testing.T, cfg *pgx.ConnConfig) *pgx.Conn {
	t.Helper()
	var conn *pgx.Conn
	if err := Eventually(ctx, "a connection through the pooler at "+cfg.Host, func(ctx context.Context) (bool, error) {
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return false, err
		}
		conn = c
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	return conn
}

// startPoolWriter inserts a row every 10ms through the primary pooler's
// pod, as the app role, and counts what failed. A failed insert or
// connection is counted and the connection made again. It returns once
// the first insert committed.
func startPoolWriter(ctx context.Context, t *testing.T, ns, name string) *insertLoop {
	t.Helper()
	pods, err := env.WaitPodsSelected(ctx, ns, cluster.PoolerSelector(name, cluster.RoleMaster), ReadyPods(1))
	if err != nil {
		t.Fatal(err)
	}
	cfg := appConfig(ctx, t, ns, name, pods[0].Status.PodIP)
	// Only what fails once the pooler served is counted.
	conn := connectPooler(ctx, t, cfg)
	w := startInserts(ctx, func(ctx context.Context) (bool, error) {
		if conn == nil {
			c, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				return false, err
			}
			conn = c
		}
		// A stall is no failure: the bound is the test's.
		if _, err := conn.Exec(ctx, "INSERT INTO pooled VALUES (clock_timestamp())"); err != nil {
			_ = conn.Close(context.Background())
			conn = nil
			return false, err
		}
		return true, nil
	}, func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	})
	w.waitMore(ctx, t, "the pooled writer's first insert", 0)
	return w
}
