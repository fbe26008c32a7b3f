package cluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestServices(t *testing.T) {
	pg := loadSample(t, "full")
	svcs := Services(pg)
	cases := []struct {
		name        string
		selector    map[string]string
		headless    bool
		annotations map[string]string
	}{
		{"acid-full-cluster", map[string]string{"application": "spilo", "cluster-name": pg.Name, "spilo-role": "master"}, false, pg.Spec.ServiceAnnotations},
		{"acid-full-cluster-repl", map[string]string{"application": "spilo", "cluster-name": pg.Name, "spilo-role": "replica"}, false, pg.Spec.ServiceAnnotations},
		{"acid-full-cluster-config", nil, true, nil},
	}
	if len(svcs) != len(cases) {
		t.Fatalf("%d services, want %d", len(svcs), len(cases))
	}
	for i, c := range cases {
		s := svcs[i]
		if s.Name != c.name {
			t.Errorf("service %d is %s, want %s", i, s.Name, c.name)
			continue
		}
		if !mapsEqual(s.Spec.Selector, c.selector) || (c.selector == nil) != (s.Spec.Selector == nil) {
			t.Errorf("%s: selector %v, want %v", s.Name, s.Spec.Selector, c.selector)
		}
		if headless := s.Spec.ClusterIP == corev1.ClusterIPNone; headless != c.headless {
			t.Errorf("%s: clusterIP %q, headless want %v", s.Name, s.Spec.ClusterIP, c.headless)
		}
		if !mapsEqual(s.Annotations, c.annotations) {
			t.Errorf("%s: annotations %v, want %v", s.Name, s.Annotations, c.annotations)
		}
		if c.headless {
			if len(s.Spec.Ports) != 0 {
				t.Errorf("%s: ports %v, want none", s.Name, s.Spec.Ports)
			}
			continue
		}
		if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Port != 5432 || s.Spec.Ports[0].TargetPort.IntValue() != 5432 || s.Spec.Type != corev1.ServiceTypeClusterIP {
			t.Errorf("%s: %s ports %v, want ClusterIP on 5432", s.Name, s.Spec.Type, s.Spec.Ports)
		}
		if s.Labels[LabelRole] != c.selector[LabelRole] {
			t.Errorf("%s: role label %q, want %q", s.Name, s.Labels[LabelRole], c.selector[LabelRole])
		}
	}
}
