package cluster

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestPodDisruptionBudget(t *testing.T) {
	cases := []struct {
		instances int32
		want      int32
	}{{0, 0}, {1, 1}, {2, 1}, {16, 1}}
	for _, c := range cases {
		pg := loadSample(t, "minimal")
		pg.Spec.NumberOfInstances = c.instances
		pdb := PodDisruptionBudget(pg)
		if got := *pdb.Spec.MinAvailable; got != intstr.FromInt32(c.want) {
			t.Errorf("%d instances: minAvailable %v, want %d", c.instances, got.String(), c.want)
		}
		if pdb.Spec.MaxUnavailable != nil {
			t.Errorf("maxUnavailable set")
		}
		if pdb.Name != "postgres-acid-minimal-cluster-pdb" {
			t.Errorf("name %q", pdb.Name)
		}
		want := map[string]string{"application": "spilo", "cluster-name": pg.Name, "spilo-role": "master"}
		if !mapsEqual(pdb.Spec.Selector.MatchLabels, want) || len(pdb.Spec.Selector.MatchExpressions) > 0 {
			t.Errorf("selector %v, want the master: %v", pdb.Spec.Selector, want)
		}
	}
}
