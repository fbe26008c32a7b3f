package e2e

import (
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/testbed"
)

// Bad input: what the CRD refuses never reaches the operator; what it
// admits but pgloop cannot serve ends Invalid with the reason, creates
// nothing, and leaves the clusters next to it alone; fixing the spec
// brings it to Running.
func TestBadInput(t *testing.T) {
	ns := env.Namespace(t)
	env.StartLabeller(t, ns)
	op := env.StartOperator(t, "operator", []string{ns})
	ctx := Context(t, 2*stepDeadline)

	// 1. Refused by the schema: an API error, no object, nothing for the
	// operator to see.
	bad := NewCluster(ns, "refused", 2)
	bad.Spec.NumberOfInstances = 100
	if _, err := env.PG.Postgresqls(bad.Namespace).Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("create with numberOfInstances 100: %v, want Invalid", err)
	}

	// 2. Admitted by the schema, refused by pgloop.Validate.
	for _, tc := range []struct {
		name, message string
		mutate        func(*v1.Postgresql)
	}{
		{"owned-port", "spec.postgresql.parameters[port]", func(pg *v1.Postgresql) {
			pg.Spec.PostgreSQL.Parameters = map[string]string{"port": "5433"}
		}},
		{"few-senders", "spec.postgresql.parameters[max_wal_senders]", func(pg *v1.Postgresql) {
			pg.Spec.NumberOfInstances = 3
			pg.Spec.PostgreSQL.Parameters = map[string]string{"max_wal_senders": "1"}
		}},
	} {
		env.CreateCluster(t, ns, tc.name, 2, tc.mutate)
		pg := env.MustState(ctx, t, ns, tc.name, fsm.Invalid)
		if !strings.Contains(pg.Status.Message, tc.message) {
			t.Errorf("%s is Invalid with message %q, want it to name %s", tc.name, pg.Status.Message, tc.message)
		}
		assertCondition(t, pg, v1.ConditionDegraded, metav1.ConditionTrue)
		t.Logf("%s: %s", tc.name, Summary(pg))
	}

	// 3. A valid cluster next to them runs.
	env.CreateCluster(t, ns, "good", 2)
	env.MustState(ctx, t, ns, "good", fsm.Running)

	// By now the operator has had every chance to act on the others: it
	// created nothing for them, and never saw the refused one.
	for _, name := range []string{"refused", "owned-port", "few-senders"} {
		if _, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, cluster.StatefulSetName(name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("StatefulSet %s: %v, want NotFound", name, err)
		}
	}
	if _, err := env.PG.Postgresqls(ns).Get(ctx, "refused", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("cluster refused: %v, want NotFound", err)
	}
	if n := op.LogCount("cluster=" + ns + "/refused"); n != 0 {
		t.Errorf("the operator logged %d lines about the refused cluster", n)
	}

	// 4. Fixing the spec (a merge patch deleting the parameter) brings the
	// Invalid cluster to Running.
	began := time.Now()
	if _, err := env.MergePatchCluster(ctx, ns, "owned-port", `{"spec":{"postgresql":{"parameters":{"port":null}}}}`); err != nil {
		t.Fatal(err)
	}
	env.MustState(ctx, t, ns, "owned-port", fsm.Running)
	t.Logf("owned-port fixed: Invalid -> Running in %v", time.Since(began).Round(time.Millisecond))
	if _, err := testbed.WaitForStatefulSet(ctx, env.Kube, ns, cluster.StatefulSetName("owned-port"), testbed.StatefulSetReady); err != nil {
		t.Error(err)
	}
	few, err := env.PG.Postgresqls(ns).Get(ctx, "few-senders", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if few.Status.State != fsm.Invalid {
		t.Errorf("few-senders left Invalid without a spec change: %s", Summary(few))
	}
}
