package e2e

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgloop/pgloop/pkg/fsm"
)

// What pkg/operator logs about leader election.
const (
	logLeading   = "leading: starting the clusters"
	logStandsBy  = "standing by: another replica leads"
	leaseID      = "pgloop-e2e"
	handoverMax  = 60 * time.Second
	leaderBudget = 3 * time.Minute
)

// Two replicas on one Lease: only the leader acts on clusters; SIGKILL it
// and the other takes over within the lease duration (15s by default),
// resumes the existing cluster and serves a new one.
func TestLeaderElection(t *testing.T) {
	ns := env.Namespace(t)
	env.StartLabeller(t, ns)
	flags := []string{"--leader-elect=true", "--leader-election-namespace", ns, "--leader-election-id", leaseID}

	a := env.StartOperator(t, "a", []string{ns}, flags...)
	ctx := Context(t, leaderBudget) // after the first operator, which may build pgloop
	if err := a.WaitLog(ctx, logLeading); err != nil {
		t.Fatal(err)
	}
	b := env.StartOperator(t, "b", []string{ns}, flags...)
	if err := b.WaitLog(ctx, logStandsBy); err != nil {
		t.Fatal(err)
	}
	lease, err := env.Kube.CoordinationV1().Leases(ns).Get(ctx, leaseID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holder := holderOf(lease)
	t.Logf("lease %s/%s held by %q", ns, leaseID, holder)

	// 1. Only the leader acts.
	env.CreateCluster(t, ns, "first", 2)
	env.MustState(ctx, t, ns, "first", fsm.Running)
	mention := fmt.Sprintf("cluster=%s/first", ns)
	if n := a.LogCount(mention); n == 0 {
		t.Errorf("the leader logged nothing about cluster first")
	}
	if n := b.LogCount(mention); n != 0 {
		t.Errorf("the standby logged %d lines about cluster first; it must not act", n)
	}
	if n := b.LogCount(logLeading); n != 0 {
		t.Errorf("the standby logged %q while a led", logLeading)
	}

	// 2. The leader dies without releasing the Lease; the standby waits
	// for it to expire and takes over.
	a.Kill()
	killed := time.Now()
	handoverCtx := Context(t, handoverMax)
	if err := b.WaitLog(handoverCtx, logLeading); err != nil {
		t.Fatalf("no handover within %v: %v", handoverMax, err)
	}
	handover := time.Since(killed)
	t.Logf("handover to b %v after the leader's SIGKILL", handover.Round(time.Millisecond))
	lease, err = env.Kube.CoordinationV1().Leases(ns).Get(ctx, leaseID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := holderOf(lease); h == holder || h == "" {
		t.Errorf("lease held by %q after the handover, was %q", h, holder)
	}

	// 3. The new leader resumes the cluster it finds and serves a new one.
	began := time.Now()
	env.CreateCluster(t, ns, "second", 2)
	env.MustState(ctx, t, ns, "second", fsm.Running)
	t.Logf("cluster second created after the handover: Running in %v", time.Since(began).Round(time.Millisecond))
	if err := b.WaitLog(ctx, mention); err != nil {
		t.Errorf("the new leader did not take cluster first up: %v", err)
	}
	first := env.MustState(ctx, t, ns, "first", fsm.Running)
	if first.Status.ReadyInstances != 2 {
		t.Errorf("cluster first after the handover: %s", Summary(first))
	}
}

func holderOf(lease *coordinationv1.Lease) string {
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}
