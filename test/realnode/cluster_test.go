package realnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/e2e"
	"github.com/pgloop/pgloop/test/pgtest"
)

// TestClusterOnRealNode runs a 2-instance cluster of pgloop's image on the
// real node with the operator outside it, as `make run` does, and checks
// what runs: the containers, roles, databases and a parameter inside
// PostgreSQL, TLS, the master Service's name resolving in a pod and psql
// through it reaching the primary, Patroni's log through `kubectl logs`,
// and a failover when the primary's pod is deleted.
func TestClusterOnRealNode(t *testing.T) {
	ctx := e2e.Context(t, 10*time.Minute)
	ns := env.Namespace(t)
	const name = "real-pg"
	env.StartOperator(t, "real", []string{ns})
	env.CreateCluster(t, ns, name, 2, pgtest.OnRealNode, func(pg *v1.Postgresql) {
		pg.Spec.Users = map[string]v1.UserFlags{"app": {v1.FlagCreateDB}}
		pg.Spec.Databases = map[string]string{"appdb": "app"}
		pg.Spec.PostgreSQL.Parameters["work_mem"] = "7MB"
	})
	began := time.Now()
	pg := env.MustState(ctx, t, ns, name, fsm.Running)
	t.Logf("Running after %v, primary %s", time.Since(began).Round(time.Millisecond), pg.Status.Primary)

	pods, err := env.WaitPods(ctx, ns, name, e2e.ReadyPods(2))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if id := p.Status.ContainerStatuses[0].ContainerID; !strings.HasPrefix(id, "containerd://") || p.Spec.NodeName != "real-node-1" {
			t.Errorf("pod %s on %s, container %q: want a container on the real node", p.Name, p.Spec.NodeName, id)
		}
	}
	primary := env.Pod(ctx, t, ns, pg.Status.Primary)
	conn := env.SQL(ctx, t, primary)
	var workMem string
	var ssl bool
	var roles, dbs int
	if err := conn.QueryRow(ctx, `SELECT current_setting('work_mem'),
		(SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()),
		(SELECT count(*) FROM pg_roles WHERE rolname = 'app' AND rolcreatedb),
		(SELECT count(*) FROM pg_database d JOIN pg_roles r ON d.datdba = r.oid WHERE datname = 'appdb' AND rolname = 'app')`).
		Scan(&workMem, &ssl, &roles, &dbs); err != nil {
		t.Fatal(err)
	}
	if workMem != "7MB" || !ssl || roles != 1 || dbs != 1 {
		t.Errorf("work_mem %s, ssl %v, role app with CREATEDB %d, database appdb of app %d: want 7MB, true, 1, 1", workMem, ssl, roles, dbs)
	}

	// From inside a replica's pod: the master Service by name, through
	// kube-proxy, reaches the primary (not in recovery), over TLS.
	replica := pods[0].Name
	if replica == pg.Status.Primary {
		replica = pods[1].Name
	}
	password := secretPassword(ctx, t, ns, cluster.SecretName(cluster.SuperuserName, name))
	var out string
	// The Service's endpoints follow the role label, which Patroni sets
	// a moment after the pod turns Ready: a client retries, so does this.
	if err := e2e.Eventually(ctx, "psql through the master Service from "+replica, func(ctx context.Context) (bool, error) {
		var err error
		out, _, err = pgtest.Exec(ctx, env.Plane.Config, env.Kube, ns, replica, cluster.ContainerName, "env", "PGPASSWORD="+password, "psql",
			fmt.Sprintf("host=%s.%s.svc.cluster.local user=postgres dbname=postgres sslmode=require connect_timeout=5", name, ns),
			"-Atc", "SELECT pg_is_in_recovery(), inet_server_addr()")
		if err != nil {
			t.Logf("not yet: %v", err)
		}
		return err == nil, nil
	}); err != nil {
		t.Error(err)
	} else if !strings.HasPrefix(out, "f|"+primary.Status.PodIP) {
		t.Errorf("psql through the master Service from %s: %q; want the primary %s, not in recovery", replica, out, primary.Status.PodIP)
	}
	logs, err := pgtest.Logs(ctx, env.Kube, ns, pg.Status.Primary, cluster.ContainerName)
	if err != nil || !strings.Contains(logs, "the leader with the lock") {
		t.Errorf("kubectl logs of the primary: %v; want Patroni's log (\"the leader with the lock\"), got the end:\n%s", err, tail(logs, 10))
	}

	// A failover: the primary's pod deleted, the replica promoted.
	old := pg.Status.Primary
	if err := env.Kube.CoreV1().Pods(ns).Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	pg, err = env.WaitCluster(ctx, ns, name, "a new primary, Running", func(pg *v1.Postgresql) bool {
		return pg.Status.Primary != "" && pg.Status.Primary != old && pg.Status.State == fsm.Running
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover: %s primary and Running %v after %s's pod was deleted", pg.Status.Primary, time.Since(began).Round(time.Millisecond), old)
	if _, err := env.WaitPods(ctx, ns, name, e2e.ReadyPods(2)); err != nil {
		t.Fatal(err)
	}
	conn = env.SQL(ctx, t, env.Pod(ctx, t, ns, pg.Status.Primary))
	var inRecovery bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || inRecovery {
		t.Errorf("the new primary %s: in recovery %v, %v", pg.Status.Primary, inRecovery, err)
	}
}

func secretPassword(ctx context.Context, t *testing.T, ns, name string) string {
	t.Helper()
	s, err := env.Kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(s.Data["password"])
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
