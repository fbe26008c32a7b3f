package informers

import (
	"maps"
	"reflect"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"

	"github.com/pgloop/pgloop/pkg/cluster"
)

// TestShareLabelMaps checks that the caches' transform hands the objects of
// a cluster one map for their equal labels and selectors, another cluster
// its own, and annotations their own each.
func TestShareLabelMaps(t *testing.T) {
	a, b := newAPICluster("db", "lm1", 1), newAPICluster("db", "lm2", 1)
	want := a.services[0].DeepCopy()
	if _, err := slim(want); err != nil {
		t.Fatal(err)
	}
	a.slim(t)
	b.slim(t)
	if !reflect.DeepEqual(a.services[0], want) {
		t.Errorf("shared Service differs from the slim one\n got %+v\nwant %+v", a.services[0], want)
	}
	one := func(what string, x, y map[string]string) {
		t.Helper()
		if !maps.Equal(x, y) {
			t.Fatalf("%s: %v and %v differ: the test's premise is wrong", what, x, y)
		}
		if reflect.ValueOf(x).UnsafePointer() != reflect.ValueOf(y).UnsafePointer() {
			t.Errorf("%s: equal maps %v not one map", what, x)
		}
	}
	two := func(what string, x, y map[string]string) {
		t.Helper()
		if len(x) > 0 && reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer() {
			t.Errorf("%s: one map %v", what, x)
		}
	}
	sts := a.statefulSet
	one("the StatefulSet's labels and a Secret's", sts.Labels, a.secrets[0].Labels)
	one("two Secrets' labels", a.secrets[1].Labels, a.secrets[0].Labels)
	one("a claim's labels and the StatefulSet's", a.claims[0].Labels, sts.Labels)
	one("the budget's selector and the master Service's", a.budget.(*policyv1.PodDisruptionBudget).Spec.Selector.MatchLabels, a.services[0].Spec.Selector)
	two("two clusters' selectors", sts.Spec.Selector.MatchLabels, b.statefulSet.Spec.Selector.MatchLabels)
	two("two Secrets' annotations", a.secrets[0].Annotations, a.secrets[1].Annotations)
	if a.pods[0].Labels[cluster.LabelClusterName] != "lm1" || b.pods[0].Labels[cluster.LabelClusterName] != "lm2" {
		t.Errorf("pods' cluster labels %q, %q", a.pods[0].Labels[cluster.LabelClusterName], b.pods[0].Labels[cluster.LabelClusterName])
	}
}

// TestMapTable checks the table's lookups and its two generations: a map
// looked up in the last two periods is handed out, one not is forgotten.
func TestMapTable(t *testing.T) {
	now := time.Unix(0, 0)
	tab := newMapTable(time.Minute, func() time.Time { return now })
	m := map[string]string{"a": "1", "b": "2"}
	same := func(x, y map[string]string) bool {
		return reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer()
	}
	if c := tab.lookup(m); c != nil {
		t.Fatalf("empty table: lookup = %v", c)
	}
	tab.add(m)
	// Built in another order: the same content, the same hash.
	equal := map[string]string{"b": "2"}
	equal["a"] = "1"
	if c := tab.lookup(equal); !same(c, m) {
		t.Errorf("lookup of an equal map = %v, not the table's", c)
	}
	if c := tab.lookup(map[string]string{"a": "1"}); c != nil {
		t.Errorf("lookup of another content = %v", c)
	}
	if c := tab.lookup(map[string]string{"a": "1", "b": "3"}); c != nil {
		t.Errorf("lookup of another value = %v", c)
	}

	now = now.Add(90 * time.Second) // turned: m in the old generation
	if c := tab.lookup(equal); !same(c, m) {
		t.Errorf("after one turn: lookup = %v, not the table's", c)
	}
	now = now.Add(90 * time.Second) // turned again: m was looked up, so kept
	if c := tab.lookup(equal); !same(c, m) {
		t.Errorf("after a second turn: lookup = %v, not the table's", c)
	}
	now = now.Add(61 * time.Second)
	tab.lookup(map[string]string{"x": "y"}) // a turn, m not looked up
	now = now.Add(61 * time.Second)
	tab.lookup(map[string]string{"x": "y"}) // another: m forgotten
	if n := tab.len(); n != 0 {
		t.Errorf("after two periods without a lookup of it: %d maps kept, want 0", n)
	}
	if c := tab.lookup(equal); c != nil {
		t.Errorf("forgotten map handed out: %v", c)
	}

	tab.add(m)
	now = now.Add(5 * time.Minute) // no lookup for more than two periods
	if c := tab.lookup(equal); c != nil || tab.len() != 0 {
		t.Errorf("after 5 idle periods: lookup = %v, %d maps kept; want nil, 0", c, tab.len())
	}
}
