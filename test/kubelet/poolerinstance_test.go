package kubelet

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/pgloop/pgloop/pkg/pooler"
)

// PoolerSetupSQL is what pgloop runs on the primary for a pooler, as the
// zalando operator does: the role, its schema, and the lookup of password
// hashes it may call, which reads pg_shadow as its owner (a superuser).
// app is a role that logs in through the pooler. TestKubelet uses it too.
const PoolerSetupSQL = `
CREATE ROLE pooler LOGIN PASSWORD 'pooler-secret';
CREATE SCHEMA pooler AUTHORIZATION pooler;
CREATE FUNCTION pooler.user_lookup(in i_username text, out uname text, out phash text)
RETURNS record AS $$
BEGIN
	SELECT usename, passwd FROM pg_catalog.pg_shadow WHERE usename = i_username INTO uname, phash;
	RETURN;
END;
$$ LANGUAGE plpgsql SECURITY DEFINER;
REVOKE ALL ON FUNCTION pooler.user_lookup(text) FROM public, pooler;
GRANT EXECUTE ON FUNCTION pooler.user_lookup(text) TO pooler;
CREATE ROLE app LOGIN PASSWORD 'app-secret';
`

// TestPooler runs a connection-pooler pod as the kubelet does (prepare;
// `pgloop pooler` built from this tree, which configures and runs PgBouncer
// from the pod's environment; the readiness probe) in front of a real
// PostgreSQL 15 that asks for passwords, its master Service resolved
// through a fake API: an app role connects through it with TLS required
// and runs SELECT 1 in transaction mode. Then the Service moves to another
// address (a failover): PgBouncer runs on, and the kubelet's Service proxy
// sends new connections to the new address; moved back, it serves again.
func TestPooler(t *testing.T) {
	requireInstalled(t, DefaultPgBouncer)
	pg := startStandIn(t)
	ctx := context.Background()
	requirePasswords(ctx, t, pg)

	k := pg.k
	k.opts.PgBouncer = DefaultPgBouncer
	k.opts.Pgloop = BuildPgloop(ctx, t)
	prefix, err := parsePodCIDR(freezeTestCIDR)
	if err != nil {
		t.Fatal(err)
	}
	poolerIP, err := lowestFree(prefix, func(a netip.Addr) bool { return a == pg.prep.ip }, canBind)
	if err != nil {
		t.Fatal(err)
	}
	k.ips = newIPPool(prefix, func(types.UID, netip.Addr) bool { return false })
	secrets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := secrets.Add(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: poolerSecret},
		Data:       map[string][]byte{"username": []byte("pooler"), "password": []byte("pooler-secret")},
	}); err != nil {
		t.Fatal(err)
	}
	k.lookup = cacheLookup{secrets: listersv1.NewSecretLister(secrets)}

	// The cluster's master Service and its primary, whose pod IP is the
	// stand-in's: pgloop's Service selects the role label.
	selector := map[string]string{"application": "spilo", "cluster-name": "db", "spilo-role": "master"}
	primary := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-0", Labels: selector},
		Status: corev1.PodStatus{
			PodIP:      pg.prep.ip.String(),
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
	other := primary.DeepCopy()
	other.Name, other.Labels = "db-1", map[string]string{"application": "spilo", "cluster-name": "db", "spilo-role": "replica"}
	other.Status.PodIP = poolerIP.Next().String() // nothing listens there
	kube := fake.NewClientset(primary, other, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"},
		Spec:       corev1.ServiceSpec{Selector: selector, Ports: []corev1.ServicePort{{Name: "postgresql", Port: 5432}}},
	})
	k.kube = kube

	pod := poolerPod("master")
	pod.Status.PodIP = poolerIP.String()
	in := newInstance(k, pod, nil)
	t.Cleanup(func() {
		in.stop(time.Second)
		if t.Failed() {
			out, _ := os.ReadFile(filepath.Join(in.prep.podDir, poolerLogFile))
			t.Logf("--- pgbouncer.log ---\n%s", out)
		}
	})

	in.reconcile(ctx, pod)
	if in.proc == nil {
		t.Fatalf("PgBouncer not started: %s %s", in.state.Reason, in.state.Message)
	}
	waitReady(t, in, true)
	ini, err := os.ReadFile(filepath.Join(in.prep.podDir, poolerConfigDir, pooler.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	// PgBouncer connects to the Service's stand-in, the kubelet's proxy on
	// the pod's IP.
	if want := fmt.Sprintf("* = host=%s port=15432 auth_user=pooler\n", poolerIP); !strings.Contains(string(ini), want) {
		t.Errorf("pgbouncer.ini lacks %q:\n%s", want, ini)
	}
	appConn := fmt.Sprintf("host=%s port=5432 user=app password=app-secret dbname=postgres sslmode=require default_query_exec_mode=simple_protocol client_encoding=UTF8", poolerIP)
	selectOne(ctx, t, appConn, true)
	selectOne(ctx, t, strings.Replace(appConn, "app-secret", "wrong", 1), false)
	// The pool is in transaction mode, as the pod asked (PgBouncer's
	// console takes only simple queries).
	admin, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=5432 user=pooler password=pooler-secret dbname=pgbouncer sslmode=require default_query_exec_mode=simple_protocol client_encoding=UTF8", poolerIP))
	if err != nil {
		t.Fatal(err)
	}
	var mode string
	rows, err := admin.Query(ctx, "SHOW POOLS")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		fields := rows.FieldDescriptions()
		row := map[string]any{}
		for i, f := range fields {
			row[f.Name] = vals[i]
		}
		if row["database"] == "postgres" && row["user"] == "app" {
			mode = fmt.Sprint(row["pool_mode"])
		}
	}
	rows.Close()
	_ = admin.Close(ctx)
	if mode != "transaction" {
		t.Errorf("pool mode of postgres/app: %q, want transaction", mode)
	}

	// Failover: the Service selects another pod. PgBouncer runs on (its
	// clients and a PAUSE stay); the Service proxy routes new connections
	// to the new address.
	pid := in.state.PID
	relabel(ctx, t, kube, primary.Name, "replica")
	relabel(ctx, t, kube, other.Name, "master")
	in.pooler.checked = time.Time{}
	in.reconcile(ctx, pod)
	if in.pooler.upstream.Addr != other.Status.PodIP || in.proc == nil || in.state.PID != pid {
		t.Fatalf("after the Service moved: upstream %v, pid %d (was %d), running %v", in.pooler.upstream, in.state.PID, pid, in.proc != nil)
	}
	if up := in.pooler.proxy.route(); up.Addr != other.Status.PodIP {
		t.Fatalf("the proxy routes a new connection to %v, want %s", up, other.Status.PodIP)
	}
	relabel(ctx, t, kube, other.Name, "replica")
	relabel(ctx, t, kube, primary.Name, "master")
	if up := in.pooler.proxy.route(); up.Addr != pg.prep.ip.String() {
		t.Fatalf("the proxy routes a new connection to %v after moving back, before the kubelet looked", up)
	}
	in.pooler.checked = time.Time{}
	in.reconcile(ctx, pod)
	if in.pooler.upstream.Addr != pg.prep.ip.String() || in.state.PID != pid {
		t.Fatalf("upstream %v, pid %d after moving back", in.pooler.upstream, in.state.PID)
	}
	selectOne(ctx, t, appConn, true)

	// A Service with no ready address: the proxy keeps the last one.
	relabel(ctx, t, kube, primary.Name, "replica")
	in.pooler.checked = time.Time{}
	in.reconcile(ctx, pod)
	if in.state.PID != pid || in.pooler.upstream.Addr != pg.prep.ip.String() {
		t.Errorf("without a ready address: pid %d (was %d), upstream %v", in.state.PID, pid, in.pooler.upstream)
	}
	if up := in.pooler.proxy.route(); up.Addr != pg.prep.ip.String() {
		t.Errorf("without a ready address the proxy routes to %v", up)
	}

	// A crash is one: back-off, then a start that waits for an address.
	_ = syscall.Kill(in.proc.pid, syscall.SIGKILL)
	in.crashed(<-in.proc.exits)
	if in.proc != nil || in.state.Reason != ReasonCrashLoop || in.state.Last == nil {
		t.Fatalf("after SIGKILL: running %v, reason %q, last %+v", in.proc != nil, in.state.Reason, in.state.Last)
	}
	time.Sleep(time.Until(in.restartAt))
	in.reconcile(ctx, pod)
	if in.proc != nil || in.state.Reason != ReasonContainerCreating || !strings.Contains(in.state.Message, "no ready address") {
		t.Fatalf("restarted with no ready address: running %v, %s: %s", in.proc != nil, in.state.Reason, in.state.Message)
	}
	relabel(ctx, t, kube, primary.Name, "master")
	in.reconcile(ctx, pod)
	if in.proc == nil || in.state.RestartCount != 1 {
		t.Fatalf("not restarted once the Service has an address: running %v, restarts %d, %s", in.proc != nil, in.state.RestartCount, in.state.Message)
	}
	waitReady(t, in, true)
	selectOne(ctx, t, appConn, true)
}

// requirePasswords makes the stand-in's PostgreSQL ask every TCP
// connection for a password (SCRAM, PostgreSQL 15's default encryption)
// and creates the pooler's and the app's roles over the unix socket.
func requirePasswords(ctx context.Context, t *testing.T, pg *instance) {
	t.Helper()
	hba := "local all all trust\nhost all all 127.0.0.0/8 scram-sha-256\n"
	if err := writeOwned(filepath.Join(standInDataDir(pg), "pg_hba.conf"), []byte(hba), pg.k.uid, pg.k.gid); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=%s dbname=postgres", pg.prep.socketDir, postgresPort, postgresUser))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, PoolerSetupSQL); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
}

// selectOne connects with connString and runs SELECT 1 over TLS; ok says
// whether that should work.
func selectOne(ctx context.Context, t *testing.T, connString string, ok bool) {
	t.Helper()
	// PgBouncer holds a client while it retries a server that refuses
	// (server_login_retry): a failure is a timeout.
	timeout := 10 * time.Second
	if !ok {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := func() error {
		conn, err := pgx.Connect(ctx, connString)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		if _, isTLS := conn.PgConn().Conn().(*tls.Conn); !isTLS {
			return fmt.Errorf("not a TLS connection: %T", conn.PgConn().Conn())
		}
		var n int
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("SELECT 1 returned %d", n)
		}
		return nil
	}()
	switch {
	case ok && err != nil:
		t.Fatalf("SELECT 1 through PgBouncer: %v", err)
	case !ok && err == nil:
		t.Fatal("SELECT 1 through PgBouncer worked with no server behind it")
	}
}

// relabel sets the role label of pod ns/name.
func relabel(ctx context.Context, t *testing.T, kube *fake.Clientset, name, role string) {
	t.Helper()
	pod, err := kube.CoreV1().Pods("ns").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Labels["spilo-role"] = role
	if _, err := kube.CoreV1().Pods("ns").Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitReady probes the instance as its goroutine would until its readiness
// is want.
func waitReady(t *testing.T, in *instance, want bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		in.probe()
		if in.state.Ready == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ready is not %v after 10s", want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
