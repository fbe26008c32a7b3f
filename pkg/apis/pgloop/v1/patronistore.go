package v1

import "k8s.io/apimachinery/pkg/util/validation/field"

// AnnotationPatroniStore on a Postgresql names the Kubernetes objects its
// Patroni keeps the cluster's state in (the leader lock, the dynamic
// configuration, failover and sync requests): PatroniStoreConfigMaps
// (unset means it) or PatroniStoreEndpoints. pgloop renders its pods, the
// master Service and what it reads of the leader for that store.
//
// It is an annotation, per cluster, and not an operator setting, because a
// cluster cannot change stores: every member must use the same one, or
// the members restarted on the other store find no leader there and elect
// their own. An operator-wide default (zalando's kubernetes_use_configmaps)
// would move every cluster that does not name one when it is flipped. New
// clusters get ConfigMaps, as before; the adoption of a zalando cluster
// whose Patroni keeps its state in Endpoints (zalando's default) writes
// PatroniStoreEndpoints, as it writes spec.dockerImage, so the choice
// survives an operator restart and shows in `kubectl describe` and
// `pgloop status`. It is not in the spec because the zalando CRD, whose
// spec pgloop's follows, has no such field. A value pgloop does not know
// makes the cluster Invalid, and so does a value that is not the store
// the cluster's StatefulSet runs Patroni on (pkg/facts).
const AnnotationPatroniStore = "pgloop.dev/patroni-store"

// PatroniStore is a value of AnnotationPatroniStore.
type PatroniStore string

const (
	// PatroniStoreConfigMaps keeps Patroni's state in ConfigMaps
	// <cluster>-leader, -config, -failover and -sync (Spilo's
	// KUBERNETES_USE_CONFIGMAPS=true). The master Service selects the
	// pod Patroni labels master.
	PatroniStoreConfigMaps PatroniStore = "configmaps"
	// PatroniStoreEndpoints keeps it in Endpoints: the leader lock in the
	// annotations of <cluster>, the Endpoints of the master Service, which
	// has no selector and to which the leader writes its own address; the
	// rest in <cluster>-config, -failover and -sync.
	PatroniStoreEndpoints PatroniStore = "endpoints"
)

// PatroniStores are the values AnnotationPatroniStore takes.
var PatroniStores = []PatroniStore{PatroniStoreConfigMaps, PatroniStoreEndpoints}

// PatroniStore returns the store AnnotationPatroniStore names,
// PatroniStoreConfigMaps when it is unset. A value Validate refuses is
// returned as it is: the cluster is Invalid, and nothing is built for it.
func (pg *Postgresql) PatroniStore() PatroniStore {
	v, ok := pg.Annotations[AnnotationPatroniStore]
	if !ok {
		return PatroniStoreConfigMaps
	}
	return PatroniStore(v)
}

// validatePatroniStore refuses an AnnotationPatroniStore value pgloop does
// not know: a typo must not start pods on the other store.
func (pg *Postgresql) validatePatroniStore() field.ErrorList {
	v, ok := pg.Annotations[AnnotationPatroniStore]
	if !ok {
		return nil
	}
	for _, s := range PatroniStores {
		if PatroniStore(v) == s {
			return nil
		}
	}
	path := field.NewPath("metadata", "annotations").Key(AnnotationPatroniStore)
	return field.ErrorList{field.NotSupported(path, v, []string{string(PatroniStoreConfigMaps), string(PatroniStoreEndpoints)})}
}
