package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/patroni"
	"github.com/pgloop/pgloop/test/testbed"
)

// TestInDatabase checks what pgloop does inside PostgreSQL and Patroni
// (issue 13), on real Patroni and PostgreSQL: users and databases made
// from the manifest, a user added by a patch, a password rotation, no SQL
// call from an idle cluster, and Patroni's dynamic configuration applied
// to the running members without replacing a pod: a reloadable parameter,
// Patroni's ttl, and a parameter that needs a restart, one member at a
// time.
func TestInDatabase(t *testing.T) {
	ns := env.Namespace(t)
	// A short resync: the idle check waits for two of them.
	op := env.StartOperator(t, "indatabase", []string{ns}, "--resync-period=4s")
	ctx := Context(t, 12*time.Minute)
	const name = "idb"

	began := time.Now()
	env.CreateCluster(t, ns, name, 2, OnRealNode, func(pg *v1.Postgresql) {
		pg.Spec.Users = map[string]v1.UserFlags{"app": {v1.FlagCreateDB}, "reader": {}}
		pg.Spec.Databases = map[string]string{"appdb": "app", "reportdb": "reader"}
		pg.Spec.PostgreSQL.Parameters["work_mem"] = "6MB"
	})
	pg := inEffect(ctx, t, ns, name, 2)
	t.Logf("Running, roles synced and configuration applied after %v", time.Since(began).Round(time.Millisecond))
	pods := podUIDs(ctx, t, ns, name)

	t.Run("each user logs in to its database", func(t *testing.T) {
		for user, db := range map[string]string{"app": "appdb", "reader": "reportdb"} {
			conn := mustLogin(ctx, t, ns, name, pg.Status.Primary, user, db)
			var who, where string
			if err := conn.QueryRow(ctx, "SELECT current_user, current_database()").Scan(&who, &where); err != nil || who != user || where != db {
				t.Errorf("as %s on %s: current_user %q, current_database %q, %v", user, db, who, where, err)
			}
			var owner string
			if err := conn.QueryRow(ctx, "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = $1", db).Scan(&owner); err != nil || owner != user {
				t.Errorf("database %s is owned by %q (%v), want %s", db, owner, err, user)
			}
		}
		var createdb bool
		conn := env.SQL(ctx, t, env.Pod(ctx, t, ns, pg.Status.Primary))
		if err := conn.QueryRow(ctx, "SELECT rolcreatedb FROM pg_roles WHERE rolname = 'app'").Scan(&createdb); err != nil || !createdb {
			t.Errorf("role app: rolcreatedb %v, %v; want true (flag createdb)", createdb, err)
		}
		// Created with the cluster: the bootstrap's value, no restart.
		for _, p := range pods {
			if got := show(ctx, t, ns, p.name, "work_mem"); got != "6MB" {
				t.Errorf("pod %s: work_mem %s, want 6MB", p.name, got)
			}
		}
	})

	t.Run("a user added by a patch", func(t *testing.T) {
		patched := time.Now()
		if _, err := env.MergePatchCluster(ctx, ns, name, `{"spec":{"users":{"late":[]}}}`); err != nil {
			t.Fatal(err)
		}
		pg = inEffect(ctx, t, ns, name, 2)
		t.Logf("role late made and the cluster Running %v after the patch", time.Since(patched).Round(time.Millisecond))
		mustLogin(ctx, t, ns, name, pg.Status.Primary, "late", "postgres")
		if !slices.ContainsFunc(pg.Status.Database.Roles, func(r v1.RoleStatus) bool { return r.Name == "late" }) {
			t.Errorf("status.database.roles %v lacks late", pg.Status.Database.Roles)
		}
	})

	t.Run("a rotated password", func(t *testing.T) {
		secret := cluster.SecretName("app", name)
		old := password(ctx, t, ns, secret)
		asked := time.Now()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"now"}}}`, v1.AnnotationRotatePassword)
		if _, err := env.Kube.CoreV1().Secrets(ns).Patch(ctx, secret, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		rotated, err := testbed.WaitFor(ctx, testbed.ListWatch(env.Kube.CoreV1().Secrets(ns), ByName(secret)), func(s *corev1.Secret) (bool, error) {
			_, asking := s.Annotations[v1.AnnotationRotatePassword]
			return !asking && string(s.Data[cluster.SecretPasswordKey]) != old, nil
		})
		if err != nil {
			t.Fatalf("the Secret never got a new password: %v", err)
		}
		t.Logf("password rotated %v after the request", time.Since(asked).Round(time.Millisecond))
		if _, ok := rotated.Data["next-password"]; ok {
			t.Errorf("the rotated Secret still holds next-password")
		}
		mustLogin(ctx, t, ns, name, pg.Status.Primary, "app", "appdb")
		if err := login(ctx, ns, pg.Status.Primary, "app", old, "appdb"); !isAuthFailure(err) {
			t.Errorf("the old password: %v, want a password authentication failure", err)
		}
		pg = inEffect(ctx, t, ns, name, 2)
		// The request says what became of it.
		answered, err := env.WaitCluster(ctx, ns, name, "the rotation's request answered", func(pg *v1.Postgresql) bool {
			r := requestOf(pg, v1.RequestRotatePassword)
			return r != nil && r.Value == secret && r.Phase != v1.RequestPending
		})
		if r := requestOf(answered, v1.RequestRotatePassword); err != nil || r.Phase != v1.RequestSucceeded {
			t.Errorf("status.requests' rotation %+v (%v), want Succeeded", r, err)
		}
	})

	t.Run("an idle cluster makes no SQL call", func(t *testing.T) {
		before := sqlStatements(ctx, t, op, ns+"/"+name)
		if before == 0 {
			t.Fatalf("no SQL statement counted for %s/%s: the metric is not wired", ns, name)
		}
		// Two resyncs of the Running cluster (--resync-period=4s), counted
		// by the operator's transitions metric (the cluster is alone in
		// its namespace, which the operator alone watches). /metrics has no
		// watch: it is read every 200ms, within the test's deadline.
		resyncs := func() float64 {
			return operatorMetric(ctx, t, op, "pgloop_transitions_total", `event="resync"`)
		}
		waitResyncs := func(n float64) {
			t.Helper()
			start := resyncs()
			for resyncs() < start+n {
				select {
				case <-ctx.Done():
					t.Fatalf("fewer than %v resyncs of the idle cluster: %v", n, ctx.Err())
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
		get := func() *v1.Postgresql {
			t.Helper()
			pg, err := env.PG.Postgresqls(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return pg
		}
		// One resync first: a status change that was waiting for its
		// write (--status-delay) is written by then.
		waitResyncs(1)
		idle := get()
		waitResyncs(2)
		if after := sqlStatements(ctx, t, op, ns+"/"+name); after != before {
			t.Errorf("SQL statements %v -> %v over the resyncs of an idle cluster, want none", before, after)
		}
		// Nor a status write: the resync's timer is not kept in status.
		if now := get(); now.ResourceVersion != idle.ResourceVersion {
			t.Errorf("the idle cluster's resource went from version %s to %s over two resyncs, want no write:\n%+v\n%+v",
				idle.ResourceVersion, now.ResourceVersion, idle.Status, now.Status)
		}
	})

	t.Run("a sync requested by hand", func(t *testing.T) {
		before := sqlStatements(ctx, t, op, ns+"/"+name)
		at := time.Now().UTC().Format(time.RFC3339Nano)
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1.AnnotationSyncRequestedAt, at)
		if _, err := env.MergePatchCluster(ctx, ns, name, patch); err != nil {
			t.Fatal(err)
		}
		pg = inEffect(ctx, t, ns, name, 2)
		if pg.Status.Database == nil || pg.Status.Database.SyncRequest != at {
			pg, _ = env.WaitCluster(ctx, ns, name, "handled the sync request", func(pg *v1.Postgresql) bool {
				return pg.Status.Database != nil && pg.Status.Database.SyncRequest == at && pg.Status.State == fsm.Running
			})
		}
		if pg == nil {
			t.Fatal("the sync request was never handled")
		}
		if after := sqlStatements(ctx, t, op, ns+"/"+name); after <= before {
			t.Errorf("SQL statements %v -> %v: the requested sync made none", before, after)
		}
		if !slices.ContainsFunc(pg.Status.History, func(h v1.Transition) bool { return h.Event == fsm.EventOutOfSync }) {
			t.Errorf("history %v has no outOfSync transition", pg.Status.History)
		}
		answered, err := env.WaitCluster(ctx, ns, name, "the sync request answered", func(pg *v1.Postgresql) bool {
			r := requestOf(pg, v1.RequestSync)
			return r != nil && r.Value == at && r.Phase != v1.RequestPending
		})
		if r := requestOf(answered, v1.RequestSync); err != nil || r.Phase != v1.RequestSucceeded || r.EndedAt == nil {
			t.Errorf("status.requests' sync %+v (%v), want Succeeded", r, err)
		}
	})

	t.Run("Patroni's ttl and a reloadable parameter, no pod replaced", func(t *testing.T) {
		patched := time.Now()
		if _, err := env.MergePatchCluster(ctx, ns, name,
			`{"spec":{"patroni":{"ttl":25},"postgresql":{"parameters":{"work_mem":"12MB"}}}}`); err != nil {
			t.Fatal(err)
		}
		pg = inEffect(ctx, t, ns, name, 2)
		t.Logf("applied, the cluster Running %v after the patch", time.Since(patched).Round(time.Millisecond))
		cfg := patroniConfig(ctx, t, ns, pg.Status.Primary)
		if ttl, _ := cfg["ttl"].(float64); ttl != 25 {
			t.Errorf("Patroni's GET /config ttl = %v, want 25", cfg["ttl"])
		}
		for _, p := range pods {
			if got := show(ctx, t, ns, p.name, "work_mem"); got != "12MB" {
				t.Errorf("pod %s: SHOW work_mem = %s, want 12MB", p.name, got)
			}
		}
		samePods(ctx, t, ns, name, pods)
	})

	t.Run("a value PostgreSQL refuses, fixed by an edit", func(t *testing.T) {
		// With a new user in the same edit: the roles are synced all the
		// same, the configuration is refused with PostgreSQL's words.
		if _, err := env.MergePatchCluster(ctx, ns, name,
			`{"spec":{"users":{"edited":[]},"postgresql":{"parameters":{"work_mem":"lots","no_such_setting":"1"}}}}`); err != nil {
			t.Fatal(err)
		}
		refused, err := env.WaitCluster(ctx, ns, name, "refuses the parameters", func(pg *v1.Postgresql) bool {
			c := condition(pg, v1.ConditionConfigApplied)
			return pg.Status.ObservedGeneration == pg.Generation && c != nil && c.Status == metav1.ConditionFalse &&
				strings.Contains(c.Message, `invalid value for parameter "work_mem": "lots"`) &&
				strings.Contains(c.Message, "no_such_setting: unrecognized configuration parameter") &&
				conditionTrue(pg, v1.ConditionRolesSynced)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s; %s", refused.Status.State, condition(refused, v1.ConditionConfigApplied).Message, condition(refused, v1.ConditionRolesSynced).Message)
		if refused.Status.State == fsm.Running {
			t.Errorf("Running with parameters PostgreSQL refuses")
		}
		mustLogin(ctx, t, ns, name, refused.Status.Primary, "edited", "postgres")
		for _, p := range pods {
			if got := show(ctx, t, ns, p.name, "work_mem"); got != "12MB" {
				t.Errorf("pod %s: SHOW work_mem = %s, want 12MB still: nothing refused may reach a member", p.name, got)
			}
		}
		fixed := time.Now()
		if _, err := env.MergePatchCluster(ctx, ns, name,
			`{"spec":{"postgresql":{"parameters":{"work_mem":"12MB","no_such_setting":null}}}}`); err != nil {
			t.Fatal(err)
		}
		pg = inEffect(ctx, t, ns, name, 2)
		t.Logf("fixed by an edit: Running %v later", time.Since(fixed).Round(time.Millisecond))
	})

	t.Run("a parameter that needs a restart: one member at a time", func(t *testing.T) {
		started := map[string]time.Time{}
		for _, p := range pods {
			started[p.name] = postmasterStart(ctx, t, ns, p.name)
		}
		patched := time.Now()
		if _, err := env.MergePatchCluster(ctx, ns, name, `{"spec":{"postgresql":{"parameters":{"max_connections":"120"}}}}`); err != nil {
			t.Fatal(err)
		}
		// The operator is killed as soon as a restart is pending, and a
		// new one finishes the work from the cluster's status and
		// Patroni's member data.
		if _, err := env.WaitCluster(ctx, ns, name, "has a restart pending", func(pg *v1.Postgresql) bool {
			return pg.Status.Config != nil && len(pg.Status.Config.PendingRestart) > 0
		}); err != nil {
			t.Fatal(err)
		}
		op.Kill()
		env.StartOperator(t, "indatabase-2", []string{ns})
		pg = inEffect(ctx, t, ns, name, 2)
		t.Logf("restarted and Running %v after the patch, the operator killed and started again on the way", time.Since(patched).Round(time.Millisecond))
		restarted := map[string]time.Time{}
		for _, p := range pods {
			if got := show(ctx, t, ns, p.name, "max_connections"); got != "120" {
				t.Errorf("pod %s: SHOW max_connections = %s, want 120", p.name, got)
			}
			restarted[p.name] = postmasterStart(ctx, t, ns, p.name)
			if !restarted[p.name].After(started[p.name]) {
				t.Errorf("pod %s: PostgreSQL not restarted (started %v, before %v)", p.name, restarted[p.name], started[p.name])
			}
		}
		primary := pg.Status.Primary
		for _, p := range pods {
			if p.name != primary && !restarted[p.name].Before(restarted[primary]) {
				t.Errorf("replica %s restarted at %v, not before the primary %s at %v", p.name, restarted[p.name], primary, restarted[primary])
			}
		}
		samePods(ctx, t, ns, name, pods)
		if c := pg.Status.Config; c == nil || len(c.PendingRestart) != 0 || !slices.Contains(c.Parameters, "max_connections") {
			t.Errorf("status.config %+v, want max_connections applied and nothing pending", c)
		}
	})
}

// inEffect waits until the cluster runs its current spec with n instances,
// its roles synced and its configuration applied everywhere.
func inEffect(ctx context.Context, t testing.TB, ns, name string, n int32) *v1.Postgresql {
	t.Helper()
	pg, err := env.WaitCluster(ctx, ns, name, fmt.Sprintf("running its spec with %d instances", n), func(pg *v1.Postgresql) bool {
		st := pg.Status
		return st.State == fsm.Running && st.ObservedGeneration >= pg.Generation && st.ReadyInstances == n && st.Primary != "" &&
			conditionTrue(pg, v1.ConditionReady) && conditionTrue(pg, v1.ConditionRolesSynced) && conditionTrue(pg, v1.ConditionConfigApplied)
	})
	if err != nil {
		t.Fatal(err)
	}
	return pg
}

type podID struct {
	name string
	uid  types.UID
}

func podUIDs(ctx context.Context, t testing.TB, ns, name string) []podID {
	t.Helper()
	list, err := env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: cluster.LabelClusterName + "=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var out []podID
	for _, p := range list.Items {
		out = append(out, podID{p.Name, p.UID})
	}
	slices.SortFunc(out, func(a, b podID) int { return strings.Compare(a.name, b.name) })
	return out
}

// replacedReady holds when n pods are Ready and none of them is one of
// old: every pod was replaced (a rollout).
func replacedReady(n int, old []podID) func([]*corev1.Pod) bool {
	return func(pods []*corev1.Pod) bool {
		if !ReadyPods(n)(pods) {
			return false
		}
		for _, p := range pods {
			if slices.ContainsFunc(old, func(o podID) bool { return o.uid == p.UID }) {
				return false
			}
		}
		return true
	}
}

// samePods fails t if a pod of the cluster was replaced.
func samePods(ctx context.Context, t testing.TB, ns, name string, want []podID) {
	t.Helper()
	if got := podUIDs(ctx, t, ns, name); !slices.Equal(got, want) {
		t.Errorf("pods %v, want the same pods %v: no pod is to be replaced", got, want)
	}
}

func password(ctx context.Context, t testing.TB, ns, secret string) string {
	t.Helper()
	s, err := env.Kube.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(s.Data[cluster.SecretPasswordKey])
}

// login connects to database db on pod as user with password.
func login(ctx context.Context, ns, pod, user, pw, db string) error {
	conn, err := connect(ctx, ns, pod, user, pw, db)
	if err == nil {
		_ = conn.Close(ctx)
	}
	return err
}

func connect(ctx context.Context, ns, pod, user, pw, db string) (*pgx.Conn, error) {
	p, err := env.Kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d dbname=%s sslmode=prefer connect_timeout=5", p.Status.PodIP, cluster.PostgresPort, db))
	if err != nil {
		return nil, err
	}
	cfg.User, cfg.Password = user, pw
	return pgx.ConnectConfig(ctx, cfg)
}

// mustLogin logs in as user, with the password of its Secret, to db on the
// primary pod, and returns the connection (closed when t ends).
func mustLogin(ctx context.Context, t testing.TB, ns, clusterName, pod, user, db string) *pgx.Conn {
	t.Helper()
	conn, err := connect(ctx, ns, pod, user, password(ctx, t, ns, cluster.SecretName(user, clusterName)), db)
	if err != nil {
		t.Fatalf("as %s with its Secret's password, to %s on %s: %v", user, db, pod, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func isAuthFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "28P01"
}

// show returns a parameter's value on a pod, as SHOW gives it.
func show(ctx context.Context, t testing.TB, ns, pod, param string) string {
	t.Helper()
	var v string
	if err := env.SQL(ctx, t, env.Pod(ctx, t, ns, pod)).QueryRow(ctx, "SELECT current_setting($1)", param).Scan(&v); err != nil {
		t.Fatalf("pod %s: SHOW %s: %v", pod, param, err)
	}
	return v
}

func postmasterStart(ctx context.Context, t testing.TB, ns, pod string) time.Time {
	t.Helper()
	var at time.Time
	if err := env.SQL(ctx, t, env.Pod(ctx, t, ns, pod)).QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&at); err != nil {
		t.Fatalf("pod %s: pg_postmaster_start_time: %v", pod, err)
	}
	return at
}

// patroniConfig is the dynamic configuration, from the Patroni of pod
// (GET /config).
func patroniConfig(ctx context.Context, t testing.TB, ns, pod string) map[string]any {
	t.Helper()
	p := env.Pod(ctx, t, ns, pod)
	cfg, err := (&patroni.Client{}).Config(ctx, fmt.Sprintf("http://%s:%d", p.Status.PodIP, cluster.PatroniPort))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var metricsAddr = regexp.MustCompile(`serving /healthz, /readyz and /metrics.*addr="?([0-9.:]+)`)

// sqlStatements sums pgloop_sql_statements_total of cluster key, every
// outcome, from the operator's /metrics.
func sqlStatements(ctx context.Context, t testing.TB, op *Operator, key string) float64 {
	t.Helper()
	return operatorMetric(ctx, t, op, "pgloop_sql_statements_total", `cluster="`+key+`"`)
}

// operatorMetric sums the series of the metric name whose labels contain
// label, from the operator's /metrics.
func operatorMetric(ctx context.Context, t testing.TB, op *Operator, name, label string) float64 {
	t.Helper()
	if err := op.WaitLog(ctx, "serving /healthz"); err != nil {
		t.Fatal(err)
	}
	m := metricsAddr.FindStringSubmatch(op.Log())
	if m == nil {
		t.Fatalf("operator %s logged no metrics address", op.Name)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m[1]+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return sumMetric(t, resp.Body, name, label)
}

func sumMetric(t testing.TB, r io.Reader, name, label string) float64 {
	t.Helper()
	var sum float64
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, label) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// requestOf is pg's record of its last request of kind (status.requests),
// nil when there is none or pg is nil.
func requestOf(pg *v1.Postgresql, kind string) *v1.RequestStatus {
	if pg == nil {
		return nil
	}
	for i := range pg.Status.Requests {
		if pg.Status.Requests[i].Kind == kind {
			return &pg.Status.Requests[i]
		}
	}
	return nil
}
