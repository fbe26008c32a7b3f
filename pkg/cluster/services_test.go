package cluster

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestServices(t *testing.T) {
	pg := loadSample(t, "full")
	svcs := Services(pg, Options{})
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
		// full.yaml enables the master's load balancer only.
		wantType := corev1.ServiceTypeClusterIP
		if i == 0 {
			wantType = corev1.ServiceTypeLoadBalancer
		}
		if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Port != 5432 || s.Spec.Ports[0].TargetPort.IntValue() != 5432 || s.Spec.Type != wantType {
			t.Errorf("%s: %s ports %v, want %s on 5432", s.Name, s.Spec.Type, s.Spec.Ports, wantType)
		}
		if s.Labels[LabelRole] != c.selector[LabelRole] {
			t.Errorf("%s: role label %q, want %q", s.Name, s.Labels[LabelRole], c.selector[LabelRole])
		}
	}
}

func TestLoadBalancers(t *testing.T) {
	cases := []struct {
		name            string
		opts            Options
		master, replica *bool
		ranges          []string
		// wantMaster and wantReplica are the source ranges of a load
		// balancer; nil means a ClusterIP Service.
		wantMaster, wantReplica []string
	}{
		{name: "neither, by default"},
		{name: "the operator's defaults", opts: Options{EnableMasterLoadBalancer: true, EnableReplicaLoadBalancer: true},
			wantMaster: []string{DefaultSourceRange}, wantReplica: []string{DefaultSourceRange}},
		{name: "the cluster overrides the operator", opts: Options{EnableMasterLoadBalancer: true},
			master: ptr.To(false), replica: ptr.To(true), ranges: []string{"10.0.0.0/8"},
			wantReplica: []string{"10.0.0.0/8"}},
		{name: "ranges without a load balancer", ranges: []string{"10.0.0.0/8"}},
		{name: "master only, two ranges", master: ptr.To(true), ranges: []string{"10.0.0.0/8", "fd01::/48"},
			wantMaster: []string{"10.0.0.0/8", "fd01::/48"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pg := loadSample(t, "minimal")
			pg.Spec.EnableMasterLoadBalancer, pg.Spec.EnableReplicaLoadBalancer = c.master, c.replica
			pg.Spec.AllowedSourceRanges = c.ranges
			for _, x := range []struct {
				svc  *corev1.Service
				want []string
			}{{MasterService(pg, c.opts), c.wantMaster}, {ReplicaService(pg, c.opts), c.wantReplica}} {
				wantType := corev1.ServiceTypeClusterIP
				if x.want != nil {
					wantType = corev1.ServiceTypeLoadBalancer
				}
				if x.svc.Spec.Type != wantType || !slices.Equal(x.svc.Spec.LoadBalancerSourceRanges, x.want) {
					t.Errorf("%s: %s with ranges %q, want %s with %q", x.svc.Name, x.svc.Spec.Type, x.svc.Spec.LoadBalancerSourceRanges, wantType, x.want)
				}
			}
			if c.wantMaster != nil && c.ranges != nil && &pg.Spec.AllowedSourceRanges[0] == &MasterService(pg, c.opts).Spec.LoadBalancerSourceRanges[0] {
				t.Error("the Service shares the spec's slice")
			}
		})
	}
}
