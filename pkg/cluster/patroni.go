package cluster

// Patroni's Kubernetes store, as Patroni 3.0.2 keeps it
// (patroni/dcs/kubernetes.py) with KUBERNETES_USE_CONFIGMAPS=true, which
// pgloop always sets (spiloEnv): no Endpoints, only ConfigMaps, named
// "<scope>-<key>" with the scope the cluster's name: "-config" (dynamic
// configuration, initialize key, history), "-leader" (the leader lock),
// "-failover" (a switchover or failover request) and "-sync" (synchronous
// replication state). Patroni keeps everything in their annotations, never
// in data, and labels them with its KUBERNETES_LABELS (application=spilo)
// plus its scope label (cluster-name=<scope>): Selector(cluster) selects
// exactly them among ConfigMaps. They carry no owner reference.
//
// In Endpoints mode the lock would be on the Endpoints "<scope>", which
// pgloop does not read: it never runs Patroni that way (the Services with
// selectors own their Endpoints).

// Annotations of the leader ConfigMap. Patroni writes them when it takes
// the lock and on every renewal (each loop_wait), all as strings.
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
