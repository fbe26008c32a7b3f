package cluster

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// DefaultSourceRange is the loadBalancerSourceRanges of a load balancer
// whose cluster gives no allowedSourceRanges: the zalando operator's
// localhost, which no client outside the Kubernetes cluster matches. A load
// balancer is closed until its networks are named.
const DefaultSourceRange = "127.0.0.1/32"

// Services returns the cluster's Services: master, replica and Patroni
// config, in that order.
func Services(pg *v1.Postgresql, opts Options) []*corev1.Service {
	return []*corev1.Service{MasterService(pg, opts), ReplicaService(pg, opts), ConfigService(pg)}
}

// MasterService routes to the primary: the address applications write
// to. It also governs the StatefulSet's pod names. With ConfigMaps as
// Patroni's store it selects the pod Patroni labelled spilo-role=master;
// with Endpoints it has no selector, as the zalando operator makes it:
// Patroni's leader keeps its Endpoints (the leader lock, and the leader's
// own address in its subsets), which the endpoints controller then leaves
// alone, and which pgloop never writes.
func MasterService(pg *v1.Postgresql, opts Options) *corev1.Service {
	svc := roleService(pg, MasterServiceName(pg.Name), RoleMaster, RoleExposure(pg, RoleMaster, opts))
	if pg.PatroniStore() == v1.PatroniStoreEndpoints {
		svc.Spec.Selector = nil
	}
	return svc
}

// ReplicaService routes to the pods Patroni labelled spilo-role=replica,
// for read-only traffic.
func ReplicaService(pg *v1.Postgresql, opts Options) *corev1.Service {
	return roleService(pg, ReplicaServiceName(pg.Name), RoleReplica, RoleExposure(pg, RoleReplica, opts))
}

// enabled returns the cluster's setting when it has one, else the
// operator's.
func enabled(cluster *bool, operator bool) bool {
	if cluster != nil {
		return *cluster
	}
	return operator
}

// Exposure is how a Service is reached from outside the Kubernetes
// cluster, as zalando decides it: a node port overrides a load balancer;
// neither leaves it ClusterIP.
type Exposure struct {
	// NodePort makes the Service of type NodePort, on port Port of every
	// node; Port 0 lets the apiserver choose.
	NodePort bool
	Port     int32
	// LoadBalancer makes it of type LoadBalancer (when not NodePort).
	LoadBalancer bool
}

// RoleExposure is the exposure of the master or replica Service: the
// spec's enable*NodePort and *NodePort, else its enable*LoadBalancer or
// the operator's.
func RoleExposure(pg *v1.Postgresql, role string, opts Options) Exposure {
	s := &pg.Spec
	if role == RoleReplica {
		return exposure(s.EnableReplicaNodePort, s.ReplicaNodePort,
			enabled(s.EnableReplicaLoadBalancer, opts.EnableReplicaLoadBalancer))
	}
	return exposure(s.EnableMasterNodePort, s.MasterNodePort,
		enabled(s.EnableMasterLoadBalancer, opts.EnableMasterLoadBalancer))
}

// PoolerExposure is the exposure of the pooler Service of role: the
// spec's enable*PoolerNodePort and *PoolerNodePort, else its
// enable*PoolerLoadBalancer (unset means false).
func PoolerExposure(pg *v1.Postgresql, role string) Exposure {
	s := &pg.Spec
	if role == RoleReplica {
		return exposure(s.EnableReplicaPoolerNodePort, s.ReplicaPoolerNodePort,
			enabled(s.EnableReplicaPoolerLoadBalancer, false))
	}
	return exposure(s.EnableMasterPoolerNodePort, s.MasterPoolerNodePort,
		enabled(s.EnableMasterPoolerLoadBalancer, false))
}

// exposure applies zalando's precedence: an enabled node port, with the
// port named or 0, else the load balancer setting. A port named while the
// node port is not enabled is not used.
func exposure(nodePort *bool, port *int32, loadBalancer bool) Exposure {
	if nodePort != nil && *nodePort {
		e := Exposure{NodePort: true}
		if port != nil {
			e.Port = *port
		}
		return e
	}
	return Exposure{LoadBalancer: loadBalancer}
}

// ServiceAnnotations are the annotations of the Services of role (the
// role's Service and its pooler's): serviceAnnotations, with
// masterServiceAnnotations or replicaServiceAnnotations over them, as
// zalando merges them. Nil when there are none.
func ServiceAnnotations(pg *v1.Postgresql, role string) map[string]string {
	over := pg.Spec.MasterServiceAnnotations
	if role == RoleReplica {
		over = pg.Spec.ReplicaServiceAnnotations
	}
	out := copyMap(pg.Spec.ServiceAnnotations)
	if len(over) > 0 && out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, over)
	return out
}

// roleService builds a role's Service.
func roleService(pg *v1.Postgresql, name, role string, e Exposure) *corev1.Service {
	meta := objectMeta(pg, name)
	meta.Labels[LabelRole] = role
	meta.Annotations = ServiceAnnotations(pg, role)
	svc := &corev1.Service{
		TypeMeta:   serviceTypeMeta,
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: RoleSelector(pg.Name, role),
			Ports: []corev1.ServicePort{{
				Name:       PostgresPortName,
				Protocol:   corev1.ProtocolTCP,
				Port:       PostgresPort,
				TargetPort: intstr.FromInt32(PostgresPort),
			}},
		},
	}
	expose(svc, pg, e)
	return svc
}

// expose sets the Service's type for e. A load balancer admits the
// cluster's allowedSourceRanges, or DefaultSourceRange when there are
// none; a node port names its port when the spec does.
func expose(svc *corev1.Service, pg *v1.Postgresql, e Exposure) {
	switch {
	case e.NodePort:
		svc.Spec.Type = corev1.ServiceTypeNodePort
		svc.Spec.Ports[0].NodePort = e.Port
	case e.LoadBalancer:
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		svc.Spec.LoadBalancerSourceRanges = slices.Clone(pg.Spec.AllowedSourceRanges)
		if len(svc.Spec.LoadBalancerSourceRanges) == 0 {
			svc.Spec.LoadBalancerSourceRanges = []string{DefaultSourceRange}
		}
	}
}

// ConfigService is the headless, selector-less Service named after
// Patroni's config object, as the zalando operator creates it. With
// Endpoints as its store Patroni keeps its configuration in the Endpoints
// <cluster>-config, which the endpoints controller would delete without a
// Service of that name; with ConfigMaps (the default) it is kept so a
// cluster looks the same to tools written for zalando. Its ClusterIP None
// is immutable.
func ConfigService(pg *v1.Postgresql) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   serviceTypeMeta,
		ObjectMeta: objectMeta(pg, ConfigServiceName(pg.Name)),
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: corev1.ClusterIPNone,
		},
	}
}

var serviceTypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
