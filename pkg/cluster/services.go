package cluster

import (
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

// MasterService routes to the pod Patroni labelled spilo-role=master, the
// primary: the address applications write to. It also governs the
// StatefulSet's pod names.
func MasterService(pg *v1.Postgresql, opts Options) *corev1.Service {
	return roleService(pg, MasterServiceName(pg.Name), RoleMaster,
		enabled(pg.Spec.EnableMasterLoadBalancer, opts.EnableMasterLoadBalancer))
}

// ReplicaService routes to the pods Patroni labelled spilo-role=replica,
// for read-only traffic.
func ReplicaService(pg *v1.Postgresql, opts Options) *corev1.Service {
	return roleService(pg, ReplicaServiceName(pg.Name), RoleReplica,
		enabled(pg.Spec.EnableReplicaLoadBalancer, opts.EnableReplicaLoadBalancer))
}

// enabled returns the cluster's setting when it has one, else the
// operator's.
func enabled(cluster *bool, operator bool) bool {
	if cluster != nil {
		return *cluster
	}
	return operator
}

// roleService builds a role's Service; a load balancer one admits the
// cluster's allowedSourceRanges, or DefaultSourceRange when there are none.
func roleService(pg *v1.Postgresql, name, role string, loadBalancer bool) *corev1.Service {
	meta := objectMeta(pg, name)
	meta.Labels[LabelRole] = role
	meta.Annotations = copyMap(pg.Spec.ServiceAnnotations)
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
	if loadBalancer {
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		svc.Spec.LoadBalancerSourceRanges = slices.Clone(pg.Spec.AllowedSourceRanges)
		if len(svc.Spec.LoadBalancerSourceRanges) == 0 {
			svc.Spec.LoadBalancerSourceRanges = []string{DefaultSourceRange}
		}
	}
	return svc
}

// ConfigService is the headless, selector-less Service named after
// Patroni's config object, as the zalando operator creates it. With
// Endpoints as its store Patroni keeps its configuration in the Endpoints
// <cluster>-config, which the endpoints controller would delete without a
// Service of that name; with ConfigMaps (pgloop's choice) it is kept so a
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
