package cluster

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// TestServiceExposure is zalando's precedence for the Services' type: a
// node port over a load balancer, the spec's load balancer over the
// operator's, ClusterIP otherwise; for the poolers the same without an
// operator setting.
func TestServiceExposure(t *testing.T) {
	tests := []struct {
		name     string
		edit     func(*v1.PostgresqlSpec)
		opts     Options
		master   corev1.ServiceType
		port     int32
		replica  corev1.ServiceType
		poolers  [2]corev1.ServiceType
		poolPort int32
	}{
		{"none", func(*v1.PostgresqlSpec) {}, Options{},
			corev1.ServiceTypeClusterIP, 0, corev1.ServiceTypeClusterIP, [2]corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeClusterIP}, 0},
		{"node port over the spec's load balancer", func(s *v1.PostgresqlSpec) {
			s.EnableMasterLoadBalancer, s.EnableMasterNodePort, s.MasterNodePort = ptr.To(true), ptr.To(true), ptr.To[int32](30432)
		}, Options{},
			corev1.ServiceTypeNodePort, 30432, corev1.ServiceTypeClusterIP, [2]corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeClusterIP}, 0},
		{"node port over the operator's load balancer, port chosen by Kubernetes", func(s *v1.PostgresqlSpec) {
			s.EnableReplicaNodePort = ptr.To(true)
		}, Options{EnableReplicaLoadBalancer: true},
			corev1.ServiceTypeClusterIP, 0, corev1.ServiceTypeNodePort, [2]corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeClusterIP}, 0},
		{"a port named without its node port is not used", func(s *v1.PostgresqlSpec) {
			s.MasterNodePort = ptr.To[int32](30432)
			s.EnableMasterNodePort = ptr.To(false)
		}, Options{EnableMasterLoadBalancer: true},
			corev1.ServiceTypeLoadBalancer, 0, corev1.ServiceTypeClusterIP, [2]corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeClusterIP}, 0},
		{"poolers: a load balancer and a node port", func(s *v1.PostgresqlSpec) {
			s.EnableMasterPoolerLoadBalancer = ptr.To(true)
			s.EnableReplicaPoolerLoadBalancer = ptr.To(true)
			s.EnableReplicaPoolerNodePort, s.ReplicaPoolerNodePort = ptr.To(true), ptr.To[int32](30433)
		}, Options{},
			corev1.ServiceTypeClusterIP, 0, corev1.ServiceTypeClusterIP, [2]corev1.ServiceType{corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort}, 30433},
		{"poolers do not follow the operator's load balancers", func(*v1.PostgresqlSpec) {}, Options{EnableMasterLoadBalancer: true, EnableReplicaLoadBalancer: true},
			corev1.ServiceTypeLoadBalancer, 0, corev1.ServiceTypeLoadBalancer, [2]corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeClusterIP}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pg := loadSample(t, "minimal")
			pg.Spec.EnableConnectionPooler, pg.Spec.EnableReplicaConnectionPooler = ptr.To(true), ptr.To(true)
			pg.Spec.AllowedSourceRanges = []string{"10.0.0.0/8"}
			tt.edit(&pg.Spec)
			m, r := MasterService(pg, tt.opts), ReplicaService(pg, tt.opts)
			if m.Spec.Type != tt.master || m.Spec.Ports[0].NodePort != tt.port {
				t.Errorf("master: %s node port %d, want %s %d", m.Spec.Type, m.Spec.Ports[0].NodePort, tt.master, tt.port)
			}
			if r.Spec.Type != tt.replica {
				t.Errorf("replica: %s, want %s", r.Spec.Type, tt.replica)
			}
			for i, role := range PoolerRoles {
				s := PoolerService(pg, role)
				if s.Spec.Type != tt.poolers[i] {
					t.Errorf("%s pooler: %s, want %s", role, s.Spec.Type, tt.poolers[i])
				}
				if role == RoleReplica && s.Spec.Ports[0].NodePort != tt.poolPort {
					t.Errorf("replica pooler: node port %d, want %d", s.Spec.Ports[0].NodePort, tt.poolPort)
				}
				checkTypeFields(t, s)
			}
			checkTypeFields(t, m)
			checkTypeFields(t, r)
		})
	}
}

// checkTypeFields checks that a Service has the fields of its type only:
// a load balancer its source ranges, others none, and no node port
// unless NodePort.
func checkTypeFields(t *testing.T, s *corev1.Service) {
	t.Helper()
	lb := s.Spec.Type == corev1.ServiceTypeLoadBalancer
	if lb != (len(s.Spec.LoadBalancerSourceRanges) > 0) {
		t.Errorf("%s: %s with source ranges %v", s.Name, s.Spec.Type, s.Spec.LoadBalancerSourceRanges)
	}
	if lb && !slices.Equal(s.Spec.LoadBalancerSourceRanges, []string{"10.0.0.0/8"}) {
		t.Errorf("%s: source ranges %v, want allowedSourceRanges", s.Name, s.Spec.LoadBalancerSourceRanges)
	}
	if s.Spec.Type != corev1.ServiceTypeNodePort && s.Spec.Ports[0].NodePort != 0 {
		t.Errorf("%s: %s with node port %d", s.Name, s.Spec.Type, s.Spec.Ports[0].NodePort)
	}
}

// TestServiceAnnotations: masterServiceAnnotations and
// replicaServiceAnnotations over serviceAnnotations, on the role's Service
// and its pooler's, as zalando merges them; the config Service gets none.
func TestServiceAnnotations(t *testing.T) {
	pg := loadSample(t, "minimal")
	pg.Spec.EnableConnectionPooler, pg.Spec.EnableReplicaConnectionPooler = ptr.To(true), ptr.To(true)
	pg.Spec.ServiceAnnotations = map[string]string{"a": "all", "b": "all"}
	pg.Spec.MasterServiceAnnotations = map[string]string{"b": "master", "m": "master"}
	pg.Spec.ReplicaServiceAnnotations = map[string]string{"r": "replica"}
	want := map[string]map[string]string{
		MasterServiceName(pg.Name):       {"a": "all", "b": "master", "m": "master"},
		PoolerName(pg.Name, RoleMaster):  {"a": "all", "b": "master", "m": "master"},
		ReplicaServiceName(pg.Name):      {"a": "all", "b": "all", "r": "replica"},
		PoolerName(pg.Name, RoleReplica): {"a": "all", "b": "all", "r": "replica"},
		ConfigServiceName(pg.Name):       nil,
	}
	svcs := Services(pg, Options{})
	for _, p := range Poolers(pg, Options{}) {
		svcs = append(svcs, p.Service)
	}
	for _, s := range svcs {
		if w := want[s.Name]; !maps.Equal(s.Annotations, w) {
			t.Errorf("%s: annotations %v, want %v", s.Name, s.Annotations, w)
		}
	}
	// Only role annotations: the other role's Service has none.
	pg.Spec.ServiceAnnotations = nil
	if a := ReplicaService(pg, Options{}).Annotations; !maps.Equal(a, map[string]string{"r": "replica"}) {
		t.Errorf("replica annotations %v", a)
	}
	pg.Spec.ReplicaServiceAnnotations = nil
	if a := ReplicaService(pg, Options{}).Annotations; a != nil {
		t.Errorf("replica annotations %v, want nil", a)
	}
	// The spec's maps are not written to.
	if _, ok := pg.Spec.MasterServiceAnnotations["a"]; ok || len(pg.Spec.MasterServiceAnnotations) != 2 {
		t.Errorf("masterServiceAnnotations changed: %v", pg.Spec.MasterServiceAnnotations)
	}
}

// TestServiceTypeChanges walks a Service through the types as a user's
// edits would, applying each desired Service to what the apiserver would
// hold: a node port the apiserver allocated stays while the spec names
// none, a named one replaces it, and ClusterIP drops what only external
// Services have.
func TestServiceTypeChanges(t *testing.T) {
	pg := loadSample(t, "minimal")
	// apiserver stands in for what the apiserver does to a Service
	// written: it allocates a node port where a NodePort or
	// LoadBalancer Service has none, and defaults the traffic policy.
	next := int32(31000)
	apiserver := func(s *corev1.Service) *corev1.Service {
		s = s.DeepCopy()
		if s.Spec.Type == corev1.ServiceTypeNodePort || s.Spec.Type == corev1.ServiceTypeLoadBalancer {
			if s.Spec.Ports[0].NodePort == 0 {
				s.Spec.Ports[0].NodePort = next
				next++
			}
			if s.Spec.ExternalTrafficPolicy == "" {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
			}
		}
		s.Spec.ClusterIP = "10.96.0.10"
		return s
	}
	cur := apiserver(MasterService(pg, Options{}))
	steps := []struct {
		name     string
		edit     func(*v1.PostgresqlSpec)
		typ      corev1.ServiceType
		nodePort int32
	}{
		{"a node port, allocated", func(s *v1.PostgresqlSpec) { s.EnableMasterNodePort = ptr.To(true) }, corev1.ServiceTypeNodePort, 31000},
		{"a load balancer keeps it", func(s *v1.PostgresqlSpec) {
			s.EnableMasterNodePort = nil
			s.EnableMasterLoadBalancer = ptr.To(true)
		}, corev1.ServiceTypeLoadBalancer, 31000},
		{"a node port again keeps it", func(s *v1.PostgresqlSpec) { s.EnableMasterNodePort = ptr.To(true) }, corev1.ServiceTypeNodePort, 31000},
		{"a named port replaces it", func(s *v1.PostgresqlSpec) { s.MasterNodePort = ptr.To[int32](30432) }, corev1.ServiceTypeNodePort, 30432},
		{"ClusterIP drops it", func(s *v1.PostgresqlSpec) {
			s.EnableMasterNodePort, s.EnableMasterLoadBalancer, s.MasterNodePort = nil, nil, nil
		}, corev1.ServiceTypeClusterIP, 0},
		{"a node port anew, allocated anew", func(s *v1.PostgresqlSpec) { s.EnableMasterNodePort = ptr.To(true) }, corev1.ServiceTypeNodePort, 31001},
	}
	for _, st := range steps {
		st.edit(&pg.Spec)
		want := MasterService(pg, Options{})
		if !ServiceNeedsUpdate(cur, want) {
			t.Fatalf("%s: no update needed from %s", st.name, cur.Spec.Type)
		}
		cur = apiserver(ApplyService(cur, want))
		if cur.Spec.Type != st.typ || cur.Spec.Ports[0].NodePort != st.nodePort {
			t.Errorf("%s: %s node port %d, want %s %d", st.name, cur.Spec.Type, cur.Spec.Ports[0].NodePort, st.typ, st.nodePort)
		}
		if cur.Spec.ClusterIP != "10.96.0.10" {
			t.Errorf("%s: cluster IP %q changed", st.name, cur.Spec.ClusterIP)
		}
		if cur.Spec.Type == corev1.ServiceTypeClusterIP && cur.Spec.ExternalTrafficPolicy != "" {
			t.Errorf("%s: ClusterIP with traffic policy %s", st.name, cur.Spec.ExternalTrafficPolicy)
		}
		if ServiceNeedsUpdate(cur, want) {
			t.Errorf("%s: still differs after the update: it would be written on every sync", st.name)
		}
	}
}
