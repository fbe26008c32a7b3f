package kubelet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/test/kubelet"
	"github.com/pgloop/pgloop/test/testbed"
)

// poolerPassword and appPassword are those of kubelet.PoolerSetupSQL.
const (
	poolerPassword = "pooler-secret"
	appPassword    = "app-secret"
)

// startPooler runs a connection pooler in front of the cluster's master
// Service, as pgloop will: the Service, the pooler role and lookup
// function made on the primary (leader), the pooler user's Secret, and a
// pooler pod bound to the process node. It waits until the pod is Ready
// and returns it.
func startPooler(ctx context.Context, t *testing.T, k *runningKubelet, cs kubernetes.Interface, ns string, pg *v1.Postgresql, leader string) *corev1.Pod {
	t.Helper()
	svc := cluster.MasterService(pg, cluster.Options{})
	svc.OwnerReferences = nil
	if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	primary, err := cs.CoreV1().Pods(ns).Get(ctx, leader, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=prefer", primary.Status.PodIP, cluster.PostgresPort, cluster.SuperuserName))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Password = superuserPassword(ctx, t, cs, ns)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, kubelet.PoolerSetupSQL)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The test fails the leader over later: the replica must have the
	// roles by then, or the new primary refuses the pooler's login (seen
	// once: "password authentication failed for user pooler").
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Name != leader && p.Status.PodIP != "" {
			waitRoles(ctx, t, cfg, p.Status.PodIP)
		}
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: kubelet.PoolerTestSecret(clusterNm)},
		Data:       map[string][]byte{"username": []byte("pooler"), "password": []byte(poolerPassword)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := kubelet.PoolerTestPod(ns, clusterNm, "master")
	pod.Spec.NodeName = nodeName
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready, err := testbed.WaitForPod(ctx, cs, ns, pod.Name, testbed.PodReady)
	if err != nil {
		t.Fatal(k.failure(err))
	}
	return ready
}

// waitRoles waits until the instance at ip, a replica, has replayed the
// pooler's and the app's roles, connecting as cfg's superuser.
func waitRoles(ctx context.Context, t *testing.T, cfg *pgx.ConnConfig, ip string) {
	t.Helper()
	cfg = cfg.Copy()
	cfg.Host = ip
	var last error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		last = func() error {
			qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			conn, err := pgx.ConnectConfig(qctx, cfg)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			var n int
			if err := conn.QueryRow(qctx, "SELECT count(*) FROM pg_roles WHERE rolname IN ('pooler', 'app')").Scan(&n); err != nil {
				return err
			}
			if n != 2 {
				return fmt.Errorf("%d of the 2 roles replayed", n)
			}
			return nil
		}()
		if last == nil {
			return
		}
	}
	t.Fatalf("the replica at %s never had the pooler's and the app's roles: %v", ip, last)
}

// waitPoolerServes waits until a connection through the pooler pod, as the
// app role with TLS required, reaches the primary at primaryIP, and
// returns how long that took.
func waitPoolerServes(ctx context.Context, t *testing.T, k *runningKubelet, pooler *corev1.Pod, primaryIP string) time.Duration {
	t.Helper()
	began := time.Now()
	connString := fmt.Sprintf("host=%s port=5432 user=app password=%s dbname=postgres sslmode=require default_query_exec_mode=simple_protocol client_encoding=UTF8",
		pooler.Status.PodIP, appPassword)
	var last error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		last = func() error {
			qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			conn, err := pgx.Connect(qctx, connString)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			var server string
			var standby bool
			if err := conn.QueryRow(qctx, "SELECT host(inet_server_addr()), pg_is_in_recovery()").Scan(&server, &standby); err != nil {
				return err
			}
			if server != primaryIP || standby {
				return fmt.Errorf("through the pooler: server %s (in recovery %v), want the primary %s", server, standby, primaryIP)
			}
			return nil
		}()
		if last == nil {
			return time.Since(began)
		}
	}
	t.Fatal(k.failure(fmt.Errorf("the pooler %s does not reach the primary %s: %w", pooler.Name, primaryIP, last)))
	return 0
}

// deletePooler deletes the pooler pod and waits until the kubelet has
// stopped it and removed it.
func deletePooler(ctx context.Context, t *testing.T, k *runningKubelet, cs kubernetes.Interface, pooler *corev1.Pod) {
	t.Helper()
	if err := cs.CoreV1().Pods(pooler.Namespace).Delete(ctx, pooler.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err := cs.CoreV1().Pods(pooler.Namespace).Get(ctx, pooler.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return
		}
	}
	t.Fatal(k.failure(fmt.Errorf("pooler pod %s not removed 60s after its deletion", pooler.Name)))
}

// poolerRestarts is the restart count of the pooler pod's container.
func poolerRestarts(ctx context.Context, t *testing.T, cs kubernetes.Interface, pooler *corev1.Pod) int32 {
	t.Helper()
	p, err := cs.CoreV1().Pods(pooler.Namespace).Get(ctx, pooler.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == kubelet.PoolerContainer {
			return s.RestartCount
		}
	}
	t.Fatalf("pod %s has no %s container status", p.Name, kubelet.PoolerContainer)
	return 0
}
