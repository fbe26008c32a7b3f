package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/testbed"
)

// isolationCreateTimeout is the operator's --create-timeout here: short, so
// the stuck clusters are Degraded within the test, and long enough that
// they are all stuck, and still Creating, before a healthy cluster is
// measured next to them.
const isolationCreateTimeout = 30 * time.Second

// stuckWay is one way a cluster gets stuck, and the words of its cause that
// status.message must carry.
type stuckWay struct {
	name    string
	count   int
	quota   bool // in the namespace whose quota allows no pod
	mutate  func(*v1.Postgresql)
	message string
}

var stuckWays = []stuckWay{
	{name: "unschedulable", count: 7, mutate: func(pg *v1.Postgresql) {
		pg.Spec.NodeAffinity = &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: testbed.ImpossibleNodeLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"},
				}}}},
			},
		}
	}, message: "node affinity/selector"},
	{name: "oversized", count: 7, mutate: func(pg *v1.Postgresql) {
		cpu := resource.MustParse(testbed.OversizedCPU)
		pg.Spec.Resources.Requests.CPU = &cpu
		pg.Spec.Resources.Limits.CPU = &cpu
	}, message: "Insufficient cpu"},
	{name: "quota", count: 6, quota: true, mutate: func(*v1.Postgresql) {}, message: "exceeded quota"},
}

// Twenty clusters stuck three ways do not slow a healthy cluster down: its
// create → Running time with them is of the order of its time without
// them, not of a timeout. The stuck ones say why in status.message, and
// deleting one completes promptly.
func TestIsolation(t *testing.T) {
	healthyNS, stuckNS, quotaNS := env.Namespace(t), env.Namespace(t), env.Namespace(t)
	for _, ns := range []string{healthyNS, stuckNS, quotaNS} {
		env.StartLabeller(t, ns)
	}
	quotaCtx := Context(t, time.Minute)
	if _, err := testbed.CreateQuota(quotaCtx, env.Kube, testbed.NoPodsQuota(quotaNS, "no-pods")); err != nil {
		t.Fatal(err)
	}
	env.StartOperator(t, "operator", []string{healthyNS, stuckNS, quotaNS},
		"--create-timeout", isolationCreateTimeout.String())

	// healthy creates a healthy cluster and returns its create → Running
	// time, as the client sees it.
	healthy := func(name string) time.Duration {
		t.Helper()
		ctx := Context(t, stepDeadline)
		began := time.Now()
		env.CreateCluster(t, healthyNS, name, 2)
		env.MustState(ctx, t, healthyNS, name, fsm.Running)
		return time.Since(began)
	}

	// 1. Baseline, nothing stuck: a warm-up cluster first (the operator's
	// first cluster pays for cold caches and connections), then the one
	// measured.
	warmup := healthy("warmup")
	baseline := healthy("baseline")
	t.Logf("healthy create -> Running, none stuck: %v (warm-up %v)", baseline.Round(time.Millisecond), warmup.Round(time.Millisecond))

	// 2. Twenty stuck clusters.
	stuckCreated := time.Now()
	type stuckCluster struct {
		ns, name string
		way      stuckWay
	}
	var stuck []stuckCluster
	for _, way := range stuckWays {
		ns := stuckNS
		if way.quota {
			ns = quotaNS
		}
		for i := range way.count {
			name := fmt.Sprintf("%s-%d", way.name, i)
			env.CreateCluster(t, ns, name, 1, way.mutate)
			stuck = append(stuck, stuckCluster{ns, name, way})
		}
	}

	// 3. A healthy cluster created in the same burst is measured for the
	// record only: it shares the API with twenty creations, which is
	// contention, not isolation.
	duringBurst := healthy("during-burst")
	t.Logf("healthy create -> Running, created right after the %d stuck ones: %v (not asserted)", len(stuck), duringBurst.Round(time.Millisecond))

	// 4. Once every stuck cluster is stuck, Creating and saying why (in
	// the Progressing condition until the timeout), a healthy cluster is
	// measured; again once they are Degraded and retrying.
	stuckCtx := Context(t, isolationCreateTimeout+stepDeadline)
	degraded := 0
	for _, s := range stuck {
		pg, err := env.WaitCluster(stuckCtx, s.ns, s.name, "stuck with its cause", func(pg *v1.Postgresql) bool {
			return strings.Contains(causeOf(pg), s.way.message)
		})
		if err != nil {
			t.Fatal(err)
		}
		if pg.Status.State == fsm.Degraded {
			degraded++
		}
	}
	allStuck := time.Since(stuckCreated)
	t.Logf("all %d clusters stuck with their cause %v after their creation (%d already Degraded)", len(stuck), allStuck.Round(time.Millisecond), degraded)
	whileCreating := healthy("while-creating")
	t.Logf("healthy create -> Running, %d stuck and Creating: %v", len(stuck), whileCreating.Round(time.Millisecond))
	if time.Since(stuckCreated) > isolationCreateTimeout {
		t.Logf("note: the create timeout of the stuck clusters passed during that measurement")
	}

	for _, s := range stuck {
		pg, err := env.WaitCluster(stuckCtx, s.ns, s.name, "Degraded with its cause in status.message", func(pg *v1.Postgresql) bool {
			return pg.Status.State == fsm.Degraded && strings.Contains(pg.Status.Message, s.way.message)
		})
		if err != nil {
			t.Fatal(err)
		}
		assertCondition(t, pg, v1.ConditionDegraded, metav1.ConditionTrue)
	}
	t.Logf("all %d stuck clusters Degraded with their cause %v after their creation (create timeout %v)",
		len(stuck), time.Since(stuckCreated).Round(time.Millisecond), isolationCreateTimeout)

	whileDegraded := healthy("while-degraded")
	t.Logf("healthy create -> Running, %d stuck and Degraded: %v", len(stuck), whileDegraded.Round(time.Millisecond))

	// Noise on two busy cores is large in relative terms and small in
	// absolute ones; a wait of the order of a timeout is neither.
	limit := 3*baseline + 5*time.Second
	for what, d := range map[string]time.Duration{"while Creating": whileCreating, "while Degraded": whileDegraded} {
		if d > limit {
			t.Errorf("healthy cluster %s took %v, more than 3 x baseline %v + 5s = %v", what, d, baseline, limit)
		}
	}

	// 5. Deleting a stuck cluster, of each way, completes promptly: far
	// below the create timeout.
	const deleteBound = 10 * time.Second
	for _, way := range stuckWays {
		var s stuckCluster
		for _, c := range stuck {
			if c.way.name == way.name {
				s = c
				break
			}
		}
		ctx := Context(t, stepDeadline)
		began := time.Now()
		if err := env.PG.Postgresqls(s.ns).Delete(ctx, s.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := env.WaitGone(ctx, s.ns, s.name); err != nil {
			t.Fatal(err)
		}
		took := time.Since(began)
		t.Logf("delete of stuck cluster %s/%s (%s): gone in %v", s.ns, s.name, way.name, took.Round(time.Millisecond))
		if took > deleteBound {
			t.Errorf("deleting stuck cluster %s took %v, want under %v", s.name, took, deleteBound)
		}
	}
}

// causeOf is what a cluster says about why it is not converging: its
// status message and, while it is Creating or Updating, the Progressing
// condition's message.
func causeOf(pg *v1.Postgresql) string {
	cause := pg.Status.Message
	for _, c := range pg.Status.Conditions {
		if c.Type == v1.ConditionProgressing && c.Status == metav1.ConditionTrue {
			cause += "\n" + c.Message
		}
	}
	return cause
}
