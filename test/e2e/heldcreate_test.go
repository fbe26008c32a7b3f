package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// TestRunningWaitsForServices holds the first create of a new cluster's
// replica Service in the API server (an admission webhook that does not
// answer, as an API server under load does not), until the API server
// gives up on it after 30 s, while the cluster's pod comes up Ready as
// the primary. A burst of 10,000 clusters found pgloop saying Running
// while such a create was in flight, then Degraded when it failed
// (docs/scale.md). Here the cluster stays Creating, shows the failed
// create as its reason, never Degraded, and is Running only once the
// retry's create went through: its Service exists by then.
func TestRunningWaitsForServices(t *testing.T) {
	t.Parallel() // waits on timers: docs/testbed.md, "Suites run concurrently"
	ns := env.Namespace(t)
	ctx := Context(t, 4*time.Minute)
	const name = "held"
	replica := cluster.ReplicaServiceName(name)
	held := env.StartSlowAdmission(ctx, t, ns, 30*time.Second, func(svc string, attempt int) Verdict {
		if svc == replica && attempt == 1 {
			return Verdict{Hold: time.Hour} // until the API server gives up
		}
		return Verdict{}
	})
	env.StartLabeller(t, ns)
	// The operator's deadline is longer than the API server's: the
	// failure it sees is the API server's answer.
	env.StartOperator(t, "held", []string{ns}, "--step-timeout=1m")
	env.CreateCluster(t, ns, name, 1)

	primary := func(pods []*corev1.Pod) bool {
		return ReadyPods(1)(pods) && pods[0].Labels[cluster.LabelRole] == cluster.RoleMaster
	}
	if _, err := env.WaitPods(ctx, ns, name, primary); err != nil {
		t.Fatal(err)
	}
	if seen, now := held.Attempts(replica); seen != 1 || now != 1 {
		t.Fatalf("pod Ready as the primary with %d creates of Service %s seen, %d held: the test did not hold the create while the pod came up", seen, replica, now)
	}

	// Every status the cluster goes through until Running: never Degraded,
	// Running only with the Service there.
	var refused *v1.Postgresql
	pg, err := env.WaitCluster(ctx, ns, name, "Running", func(pg *v1.Postgresql) bool {
		switch st := pg.Status; {
		case st.State == fsm.Degraded:
			t.Fatalf("Degraded while the create of Service %s was held or retried: %s", replica, Summary(pg))
		case st.State == fsm.Creating && st.Reason == fsm.ReasonEffectsFailed && strings.Contains(st.Message, replica):
			refused = pg
		case st.State == fsm.Running:
			if _, err := env.Kube.CoreV1().Services(ns).Get(ctx, replica, metav1.GetOptions{}); err != nil {
				t.Fatalf("Running without Service %s: %v\n%s", replica, err, Summary(pg))
			}
			return true
		}
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	if refused == nil {
		t.Errorf("the failed create of Service %s was never the reason shown in Creating", replica)
	} else {
		t.Logf("while the create failed: %s", Summary(refused))
	}
	running := 0
	for _, h := range pg.Status.History {
		if h.To == fsm.Degraded {
			t.Errorf("transition %s -> %s (%s: %s): a held create is no loss", h.From, h.To, h.Event, h.Reason)
		}
		if h.To == fsm.Running {
			running++
		}
	}
	if running != 1 {
		t.Errorf("%d transitions to Running, want 1: %s", running, Summary(pg))
	}
	seen, _ := held.Attempts(replica)
	t.Logf("Running after %d creates of %s: %s", seen, replica, Summary(pg))
}
