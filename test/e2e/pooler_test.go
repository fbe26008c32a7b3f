package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// TestConnectionPooler runs zalando's connection pooler on real
// PostgreSQL (issue 16): PgBouncer pods for the primary and for the
// replicas, each reached by the application's role with its Secret's
// password, through the pooler's pod address (the plane has no Service
// proxy); then both turned off, which removes every pooler object, and
// turned on again with a new pooler password.
func TestConnectionPooler(t *testing.T) {
	ns := env.Namespace(t)
	env.StartOperator(t, "pooler", []string{ns})
	ctx := Context(t, 10*time.Minute)
	const name = "pool"

	began := time.Now()
	env.CreateCluster(t, ns, name, 2, OnRealNode, func(pg *v1.Postgresql) {
		pg.Spec.Users = map[string]v1.UserFlags{"app": {}}
		pg.Spec.Databases = map[string]string{"appdb": "app"}
		pg.Spec.EnableConnectionPooler = ptr.To(true)
		pg.Spec.EnableReplicaConnectionPooler = ptr.To(true)
		pg.Spec.ConnectionPooler = &v1.ConnectionPooler{NumberOfInstances: ptr.To[int32](1), Mode: "transaction"}
	})
	inEffect(ctx, t, ns, name, 2)
	t.Logf("Running with both poolers ready after %v", time.Since(began).Round(time.Millisecond))

	t.Run("the objects zalando users know", func(t *testing.T) {
		for _, role := range cluster.PoolerRoles {
			pooler := cluster.PoolerName(name, role)
			d, err := env.Kube.AppsV1().Deployments(ns).Get(ctx, pooler, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if d.Status.ReadyReplicas != 1 {
				t.Errorf("deployment %s: %d ready replicas, want 1", pooler, d.Status.ReadyReplicas)
			}
			if _, err := env.Kube.CoreV1().Services(ns).Get(ctx, pooler, metav1.GetOptions{}); err != nil {
				t.Errorf("service %s: %v", pooler, err)
			}
			pdb := cluster.PoolerPodDisruptionBudgetName(name, role)
			if _, err := env.Kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, pdb, metav1.GetOptions{}); err != nil {
				t.Errorf("poddisruptionbudget %s: %v", pdb, err)
			}
		}
		if password(ctx, t, ns, cluster.SecretName(v1.DefaultPoolerUser, name)) == "" {
			t.Errorf("the pooler's Secret has no password")
		}
	})

	t.Run("queries through each pooler", func(t *testing.T) {
		mustQueryThroughPooler(ctx, t, ns, name, cluster.RoleMaster, false)
		mustQueryThroughPooler(ctx, t, ns, name, cluster.RoleReplica, true)
	})

	t.Run("turned off, every pooler object goes", func(t *testing.T) {
		off := time.Now()
		if _, err := env.MergePatchCluster(ctx, ns, name,
			`{"spec":{"enableConnectionPooler":false,"enableReplicaConnectionPooler":false}}`); err != nil {
			t.Fatal(err)
		}
		inEffect(ctx, t, ns, name, 2)
		t.Logf("Running without poolers %v after the edit", time.Since(off).Round(time.Millisecond))
		for _, role := range cluster.PoolerRoles {
			pooler := cluster.PoolerName(name, role)
			mustBeGone(ctx, t, "deployment "+pooler, func(ctx context.Context) error {
				_, err := env.Kube.AppsV1().Deployments(ns).Get(ctx, pooler, metav1.GetOptions{})
				return err
			})
			mustBeGone(ctx, t, "service "+pooler, func(ctx context.Context) error {
				_, err := env.Kube.CoreV1().Services(ns).Get(ctx, pooler, metav1.GetOptions{})
				return err
			})
			pdb := cluster.PoolerPodDisruptionBudgetName(name, role)
			mustBeGone(ctx, t, "poddisruptionbudget "+pdb, func(ctx context.Context) error {
				_, err := env.Kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, pdb, metav1.GetOptions{})
				return err
			})
			// The garbage collector deletes the pods with the
			// Deployment's ReplicaSet.
			if _, err := env.WaitPodsSelected(ctx, ns, cluster.PoolerSelector(name, role),
				func(pods []*corev1.Pod) bool { return len(pods) == 0 }); err != nil {
				t.Errorf("pods of pooler %s: %v", pooler, err)
			}
		}
		secret := cluster.SecretName(v1.DefaultPoolerUser, name)
		mustBeGone(ctx, t, "secret "+secret, func(ctx context.Context) error {
			_, err := env.Kube.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
			return err
		})
	})

	t.Run("turned on again", func(t *testing.T) {
		on := time.Now()
		if _, err := env.MergePatchCluster(ctx, ns, name, `{"spec":{"enableConnectionPooler":true}}`); err != nil {
			t.Fatal(err)
		}
		inEffect(ctx, t, ns, name, 2)
		t.Logf("Running with the pooler again %v after the edit", time.Since(on).Round(time.Millisecond))
		// A new Secret, a new password: the sync set it, or PgBouncer
		// could not look the clients up.
		mustQueryThroughPooler(ctx, t, ns, name, cluster.RoleMaster, false)
		if _, err := env.Kube.AppsV1().Deployments(ns).Get(ctx, cluster.PoolerName(name, cluster.RoleReplica), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the replica pooler, still off: %v, want NotFound", err)
		}
	})
}

// mustQueryThroughPooler connects to the Ready pod of the pooler of role
// as the app role, with TLS as PgBouncer requires and the password of the
// app's Secret, and checks it reaches appdb on a server in recovery or
// not, as the role says.
func mustQueryThroughPooler(ctx context.Context, t *testing.T, ns, name, role string, replica bool) {
	t.Helper()
	pods, err := env.WaitPodsSelected(ctx, ns, cluster.PoolerSelector(name, role), ReadyPods(1))
	if err != nil {
		t.Fatal(err)
	}
	pod := pods[0]
	pw := password(ctx, t, ns, cluster.SecretName("app", name))
	// Simple protocol: in transaction mode a prepared statement would not
	// outlive its transaction.
	connString := fmt.Sprintf("host=%s port=%d dbname=appdb user=app sslmode=require connect_timeout=5 default_query_exec_mode=simple_protocol",
		pod.Status.PodIP, cluster.PostgresPort)
	var who, db string
	var inRecovery bool
	err = Eventually(ctx, "a query through pooler pod "+pod.Name, func(ctx context.Context) (bool, error) {
		cfg, err := pgx.ParseConfig(connString)
		if err != nil {
			return false, fmt.Errorf("%w: %v", errStop, err)
		}
		cfg.Password = pw
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return false, err
		}
		defer conn.Close(context.Background())
		err = conn.QueryRow(ctx, "SELECT current_user, current_database(), pg_is_in_recovery()").Scan(&who, &db, &inRecovery)
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if who != "app" || db != "appdb" || inRecovery != replica {
		t.Errorf("through pooler pod %s: user %q, database %q, in recovery %v; want app, appdb, %v", pod.Name, who, db, inRecovery, replica)
	}
	t.Logf("pooler %s (%s): queried appdb as app, in recovery %v", pod.Name, role, inRecovery)
}

// mustBeGone fails t unless get reports NotFound: the operator said
// Running, so the objects are gone already (no wait).
func mustBeGone(ctx context.Context, t *testing.T, what string, get func(context.Context) error) {
	t.Helper()
	if err := get(ctx); !apierrors.IsNotFound(err) {
		t.Errorf("%s after the pooler was turned off: %v, want NotFound", what, err)
	}
}

// TestConnectionPoolerStuck breaks a cluster's pooler (pods that ask for
// more CPU than any node has) and fixes it by an edit: the cluster is
// never Running while its pooler cannot run, its status says why in the
// scheduler's words, and the edit brings it to Running. It runs on real
// PostgreSQL: a cluster with a pooler is Running only once the pooler's
// role and lookup are in the database, which the KWOK nodes' pods (no
// Patroni) never get.
func TestConnectionPoolerStuck(t *testing.T) {
	ns := env.Namespace(t)
	env.StartOperator(t, "pooler", []string{ns})
	ctx := Context(t, 3*stepDeadline)
	const name = "stuckpool"

	env.CreateCluster(t, ns, name, 1, OnRealNode, func(pg *v1.Postgresql) {
		pg.Spec.EnableConnectionPooler = ptr.To(true)
		huge := resource.MustParse("1000")
		pg.Spec.ConnectionPooler = &v1.ConnectionPooler{NumberOfInstances: ptr.To[int32](1),
			Resources: &v1.Resources{Requests: &v1.ResourceDescription{CPU: &huge}, Limits: &v1.ResourceDescription{CPU: &huge}}}
	})
	pg, err := env.WaitCluster(ctx, ns, name, "a message naming the pooler's unschedulable pod", func(pg *v1.Postgresql) bool {
		return strings.Contains(pg.Status.Message, "connection pooler "+cluster.PoolerName(name, cluster.RoleMaster)) &&
			strings.Contains(pg.Status.Message, "Insufficient cpu")
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s: %s", pg.Status.State, pg.Status.Reason, pg.Status.Message)
	if pg.Status.State == "Running" {
		t.Errorf("Running while the pooler cannot run")
	}

	fixed := time.Now()
	if _, err := env.MergePatchCluster(ctx, ns, name,
		`{"spec":{"connectionPooler":{"resources":{"requests":{"cpu":"10m"},"limits":{"cpu":"100m"}}}}}`); err != nil {
		t.Fatal(err)
	}
	_, err = env.WaitCluster(ctx, ns, name, "Running with the edit", func(pg *v1.Postgresql) bool {
		return pg.Status.State == "Running" && pg.Status.ObservedGeneration >= pg.Generation
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Running %v after the edit", time.Since(fixed).Round(time.Millisecond))
	if _, err := env.WaitPodsSelected(ctx, ns, cluster.PoolerSelector(name, cluster.RoleMaster), ReadyPods(1)); err != nil {
		t.Fatal(err)
	}
}
