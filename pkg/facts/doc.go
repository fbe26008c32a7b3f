// Package facts turns a cluster and its objects, as the informers' caches
// hold them, with what pkg/archiving last found on its primary, into the
// fsm.Facts its state machine decides on: who the primary is (Patroni's
// leader record), which pods a rollout replaces next, why the cluster is
// stuck (its pods, claims and Warning Events), whether a ResourceQuota
// changed since the StatefulSet was nudged, whether the owned objects match
// the spec, and what the roles and Patroni's configuration should be
// against what the members' data report (indatabase.go).
//
// The derivation is a function of plain values (an observed.Cluster, what
// the caches hold of one cluster, and "now"): no informer, no API, no clock
// of its own, so it is tested by feeding it objects. What the Deriver
// remembers only saves work, never changes a result: per (UID, generation)
// of a cluster, what its spec alone says (its validation, the desired
// StatefulSet, poolers, logical backup CronJob and Patroni configuration),
// and within that the pods' parsed Patroni member data per pod
// resourceVersion, the StatefulSet's bootstrap configuration per its
// resourceVersion, and the last sync hash per Secret versions and sync
// request.
//
// Observer is the controller's Observer: it reads a cluster's
// observed.Cluster from a Reader and derives its facts. In the operator the
// Reader is pkg/archiving's Checker (pkg/operator wires it): it reads the
// informers' caches, which know nothing of this package, and adds the last
// report of its checks on the primary, of continuous archiving and of the
// running base backup (observed.Cluster's Archiving and Backup). The caches
// alone are a Reader too, without those reports.
//
// The StatefulSet a cluster should have is built with the same
// cluster.Options as the effects build it with: the operator hands one value
// to both, or a difference that is not there would keep ObjectsCurrent false.
package facts
