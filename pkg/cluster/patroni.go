package cluster

import (
	appsv1 "k8s.io/api/apps/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Patroni's Kubernetes store, as Patroni 3.0.2 keeps it
// (patroni/dcs/kubernetes.py), in one of two kinds of object, the
// cluster's v1.AnnotationPatroniStore says which:
//
//   - ConfigMaps (KUBERNETES_USE_CONFIGMAPS=true, spiloEnv; the default):
//     named "<scope>-<key>" with the scope the cluster's name: "-config"
//     (dynamic configuration, initialize key, history), "-leader" (the
//     leader lock), "-failover" (a switchover or failover request) and
//     "-sync" (synchronous replication state). The master Service selects
//     the pod Patroni labels master.
//   - Endpoints (KUBERNETES_USE_CONFIGMAPS unset, zalando's default): the
//     same keys in Endpoints, but the leader lock is on "<scope>" itself,
//     the Endpoints of the master Service, which has no selector: the
//     leader writes its own address into its subsets, and that is how
//     the Service reaches the primary. "<scope>-config" survives only
//     with a Service of its name (ConfigService): the endpoints
//     controller deletes Endpoints without one.
//
// Patroni keeps everything in their annotations, never in data, and labels
// them with its KUBERNETES_LABELS (application=spilo) plus its scope label
// (cluster-name=<scope>): Selector(cluster) selects exactly them among
// ConfigMaps. Among Endpoints it also selects those the endpoints
// controller keeps for the Services with a selector (it copies their
// labels). They carry no owner reference. pgloop reads the leader lock
// (LeaderRecordName) and never writes either kind, apart from deleting
// them with the cluster.

// Annotations of the leader ConfigMap or Endpoints. Patroni writes them
// when it takes the lock and on every renewal (each loop_wait), all as
// strings.
const (
	// AnnotationLeader names the member holding the lock: the pod's name
	// (PATRONI_NAME). Patroni removes it when it releases the lock (a
	// graceful shutdown, a switchover); a member that was killed keeps it
	// until another takes the lock.
	AnnotationLeader = "leader"
	// AnnotationAcquireTime is when the current holder took the lock, and
	// AnnotationRenewTime when it last renewed it (ISO 8601 with the UTC
	// offset, as Python's isoformat writes it).
	AnnotationAcquireTime = "acquireTime"
	AnnotationRenewTime   = "renewTime"
	// AnnotationTTL is how many seconds the lock lasts without a renewal.
	AnnotationTTL = "ttl"
	// AnnotationTransitions counts the changes of holder.
	AnnotationTransitions = "transitions"
)

// LeaderConfigMapName is the ConfigMap that holds Patroni's leader lock for
// a cluster. Its AnnotationLeader is the truth about the primary: Patroni's
// role label follows it, late (a killed leader keeps spilo-role=master
// until its Patroni runs again).
func LeaderConfigMapName(cluster string) string {
	return cluster + "-leader"
}

// LeaderEndpointsName is the Endpoints that holds Patroni's leader lock
// for a cluster on v1.PatroniStoreEndpoints: the master Service's, named
// as Patroni's scope.
func LeaderEndpointsName(cluster string) string {
	return MasterServiceName(cluster)
}

// LeaderRecordName is the object that holds the leader lock of a cluster
// whose Patroni keeps its state in store: LeaderConfigMapName or
// LeaderEndpointsName.
func LeaderRecordName(store v1.PatroniStore, cluster string) string {
	if store == v1.PatroniStoreEndpoints {
		return LeaderEndpointsName(cluster)
	}
	return LeaderConfigMapName(cluster)
}

// Spilo's variables that choose Patroni's store.
const (
	envKubernetesAPI     = "DCS_ENABLE_KUBERNETES_API"
	envUseConfigMaps     = "KUBERNETES_USE_CONFIGMAPS"
	kubernetesConfigMaps = "true"
)

// StoreEnv are the Spilo container's variables TemplatePatroniStore
// reads: the informers' cache keeps them of a cached StatefulSet's
// template (pkg/informers).
var StoreEnv = []string{envKubernetesAPI, envUseConfigMaps}

// TemplatePatroniStore returns the store the Spilo container of sts's pod
// template runs Patroni on, as Spilo decides it from the environment (any
// value of KUBERNETES_USE_CONFIGMAPS means ConfigMaps), and false when it
// cannot tell: there is no Spilo container (ContainerName), or its Patroni
// keeps its state outside Kubernetes (DCS_ENABLE_KUBERNETES_API unset).
func TemplatePatroniStore(sts *appsv1.StatefulSet) (v1.PatroniStore, bool) {
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name != ContainerName {
			continue
		}
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		switch {
		case env[envKubernetesAPI] == "":
			return "", false
		case env[envUseConfigMaps] != "":
			return v1.PatroniStoreConfigMaps, true
		}
		return v1.PatroniStoreEndpoints, true
	}
	return "", false
}
