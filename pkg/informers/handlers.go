package informers

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// Handlers only map an object to its cluster and call Notify: no API call,
// no blocking, no work that can be done later on the loop goroutine.

// specHandler notifies SignalSpec for the Postgresql resources: urgent
// for a user's action (created, changed, deleted), plain for the initial
// listing and resyncs.
func (i *Informers) specHandler() cache.ResourceEventHandler {
	notify := func(obj any, urgent bool) {
		pg, ok := obj.(*v1.Postgresql)
		if !ok {
			return
		}
		key := pg.Namespace + "/" + pg.Name
		if urgent {
			i.notifier.NotifyUrgent(key, SignalSpec)
			return
		}
		i.notifier.Notify(key, SignalSpec)
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) { notify(obj, !isInInitialList) },
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*v1.Postgresql)
			cur, ok2 := newObj.(*v1.Postgresql)
			if ok1 && ok2 && !SpecChanged(old, cur) {
				return
			}
			// A resync hands the cached object as both.
			notify(newObj, oldObj != newObj)
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				// The resource's cache key is its cluster key.
				i.notifier.NotifyUrgent(tomb.Key, SignalSpec)
				return
			}
			notify(obj, true)
		},
	}
}

// SpecChanged reports whether an update of a Postgresql is one the state
// machine must see. pgloop's own status writes are not: each would be
// observed, may change the status again (a new message, a new timestamp),
// and the loop would feed itself. So an update that changes only status,
// resourceVersion or managed fields is dropped. A resync (the informer hands
// the cached object itself as both old and new) always notifies: that is
// what a resync period is for. Exported for the simulation (test/sim),
// whose cache notifies by the same rule.
func SpecChanged(old, cur *v1.Postgresql) bool {
	if old == cur {
		return true
	}
	return old.UID != cur.UID ||
		old.Generation != cur.Generation ||
		!old.DeletionTimestamp.Equal(cur.DeletionTimestamp) ||
		!slices.Equal(old.Finalizers, cur.Finalizers) ||
		!maps.Equal(old.Labels, cur.Labels) ||
		!maps.Equal(old.Annotations, cur.Annotations)
}

// ownedHandler notifies signal for objects of a cluster (pods, StatefulSets,
// Services, Secrets, PodDisruptionBudgets, claims), found by their
// cluster-name label.
func (i *Informers) ownedHandler(signal string) cache.ResourceEventHandler {
	notify := func(obj any) {
		obj = untombed(obj)
		key, ok := clusterKey(obj)
		if !ok {
			i.log.Debugf("informers: %T without a %s label, ignored", obj, cluster.LabelClusterName)
			return
		}
		i.notifier.Notify(key, signal)
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: notify,
		UpdateFunc: func(oldObj, newObj any) {
			// A relabelled object leaves one cluster for another: both
			// must look again.
			if oldKey, ok := clusterKey(oldObj); ok {
				if newKey, _ := clusterKey(newObj); newKey != oldKey {
					i.notifier.Notify(oldKey, signal)
				}
			}
			notify(newObj)
		},
		DeleteFunc: notify,
	}
}

// leaderHandler notifies SignalLeader when Patroni's leader record of a
// cluster (named recordName(cluster): cluster.LeaderConfigMapName for the
// ConfigMaps, cluster.LeaderEndpointsName for the Endpoints) appears, goes,
// or names another member. The holder renews the record every loop_wait
// seconds (renewTime, optime; on Endpoints also its address): those
// updates change nothing the facts read, and dropping them here keeps a
// thousand idle clusters from waking the loop every few seconds. Patroni's
// other objects (config, failover, sync) are not read at all, nor are the
// Endpoints the endpoints controller keeps for the replica Service (their
// names are no leader record's) or, on ConfigMaps, for the master Service
// (they carry no leader annotation: only their appearance notifies). The
// handler does not know a cluster's store; the facts read the record of
// its own. A resync (the same object as old and new) notifies, as for the
// other handlers.
func (i *Informers) leaderHandler(recordName func(cluster string) string) cache.ResourceEventHandler {
	notify := func(obj any) {
		obj = untombed(obj)
		if key, ok := leaderKey(obj, recordName); ok {
			i.notifier.Notify(key, SignalLeader)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: notify,
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(metav1.Object)
			cur, ok2 := newObj.(metav1.Object)
			if ok1 && ok2 && oldObj != newObj &&
				old.GetAnnotations()[cluster.AnnotationLeader] == cur.GetAnnotations()[cluster.AnnotationLeader] &&
				old.GetLabels()[cluster.LabelClusterName] == cur.GetLabels()[cluster.LabelClusterName] {
				return
			}
			if oldKey, ok := leaderKey(oldObj, recordName); ok {
				if newKey, _ := leaderKey(newObj, recordName); newKey != oldKey {
					i.notifier.Notify(oldKey, SignalLeader)
				}
			}
			notify(newObj)
		},
		DeleteFunc: notify,
	}
}

// leaderKey returns the key of the cluster whose leader record obj is: a
// ConfigMap or Endpoints named recordName of the cluster its cluster-name
// label names.
func leaderKey(obj any, recordName func(cluster string) string) (string, bool) {
	switch obj.(type) {
	//lint:ignore SA1019 Patroni 3 keeps its state in v1 Endpoints, which EndpointSlices cannot replace
	case *corev1.ConfigMap, *corev1.Endpoints:
	default:
		return "", false
	}
	m := obj.(metav1.Object)
	name := m.GetLabels()[cluster.LabelClusterName]
	if name == "" || m.GetName() != recordName(name) {
		return "", false
	}
	return m.GetNamespace() + "/" + name, true
}

// eventHandler notifies SignalEvents for Warning Events about the
// StatefulSet or a claim of a cluster that scope s knows. The Events
// informers see the Warnings of every StatefulSet and claim in their
// namespaces, pgloop's or not; checking the caches (a map lookup, no I/O)
// keeps the others from waking the loop. The kind and type are checked again although the field selector
// asks for them, because a fake API ignores field selectors. A Normal Event
// (SuccessfulCreate) would need no notice anyway: the pod it announces
// brings its own.
func (i *Informers) eventHandler(s *scope, kind string) cache.ResourceEventHandler {
	notify := func(obj any) {
		obj = untombed(obj)
		ev, ok := obj.(*corev1.Event)
		if !ok || ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Kind != kind {
			return
		}
		key := involvedKey(ev)
		switch kind {
		case "StatefulSet":
			// pgloop names the StatefulSet after the cluster
			// (cluster.StatefulSetName), so the Event's object key is
			// the cluster key.
			if _, ok, _ := s.postgresqls.GetStore().GetByKey(key); !ok {
				return
			}
		case "PersistentVolumeClaim":
			// A claim carries the cluster-name label.
			claim, ok, _ := s.claims.GetStore().GetByKey(key)
			if !ok {
				return
			}
			if key, ok = clusterKey(claim); !ok {
				return
			}
		default:
			return
		}
		i.notifier.Notify(key, SignalEvents)
	}
	return onChange(notify)
}

// quotaHandler notifies SignalQuota to every cluster of the namespace of a
// ResourceQuota that was added, changed (its limits, or what is used) or
// deleted: one of them whose pods the quota refused may fit now. Its facts
// (pkg/facts) say whether it needs its StatefulSet nudged.
func (i *Informers) quotaHandler(s *scope) cache.ResourceEventHandler {
	notify := func(obj any) {
		obj = untombed(obj)
		q, ok := obj.(*corev1.ResourceQuota)
		if !ok {
			return
		}
		keys, _ := s.postgresqls.GetIndexer().IndexKeys(cache.NamespaceIndex, q.Namespace)
		for _, key := range keys {
			i.notifier.Notify(key, SignalQuota)
		}
	}
	return onChange(notify)
}

// classHandler notifies the clusters with a claim of a StorageClass that
// appears, changes or goes: whether it allows volume expansion decides
// whether their claims can grow (an administrator allowing it lets a
// resize that waited go on at once). StorageClasses are few and rarely
// change; the claims of every scope are looked through.
func (i *Informers) classHandler() cache.ResourceEventHandler {
	notify := func(obj any) {
		obj = untombed(obj)
		sc, ok := obj.(*storagev1.StorageClass)
		if !ok {
			return
		}
		seen := map[string]bool{}
		for _, s := range i.scopes {
			for _, obj := range s.claims.GetStore().List() {
				c, ok := obj.(*corev1.PersistentVolumeClaim)
				if !ok || c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != sc.Name {
					continue
				}
				if key, ok := clusterKey(c); ok && !seen[key] {
					seen[key] = true
					i.notifier.Notify(key, SignalObjects)
				}
			}
		}
	}
	return onChange(notify)
}

// onChange is a handler that calls notify for every add, delete and update
// but those a resync hands again with the same version: nothing changed.
func onChange(notify func(any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: notify,
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(metav1.Object)
			n, ok2 := newObj.(metav1.Object)
			if ok1 && ok2 && o.GetResourceVersion() == n.GetResourceVersion() {
				return
			}
			notify(newObj)
		},
		DeleteFunc: notify,
	}
}

// untombed returns the object a delete handler is about: the last state
// known of it when the informer missed its deletion (a tombstone).
func untombed(obj any) any {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return tomb.Obj
	}
	return obj
}
