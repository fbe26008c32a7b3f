package effects

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// sharedClient is what dropOwner needs of the clients of the shared RBAC
// objects.
type sharedClient[T cluster.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// deleteFunc is a typed client's Delete.
type deleteFunc func(ctx context.Context, name string, opts metav1.DeleteOptions) error

// cleanup deletes what the cluster of a resource being deleted is made of,
// then removes the finalizer (cluster.Finalizer) so the apiserver can
// delete the resource. It may run several times (it is retried while pods
// terminate); each run picks up where the last one stopped, and objects
// already gone are fine.
//
//  1. The StatefulSet (its pods go with it, by the garbage collector),
//     the Services, the PodDisruptionBudget, the connection poolers'
//     objects, the logical backup's CronJob and the credentials Secrets of the superuser, the
//     replication user, the users in the spec and the pooler's role. The
//     Secrets of users removed from the spec earlier carry the cluster's
//     controller reference: the garbage collector deletes them.
//  2. The pods, at once, so that pods never scheduled go without waiting
//     for the garbage collector. While any pod remains the cleanup fails
//     with ErrPodsTerminating: Patroni, as long as it runs, would re-create the
//     ConfigMaps deleted in 3, and a later cluster of the same name would
//     find the old cluster's state there (and never bootstrap).
//  3. Patroni's ConfigMaps, which have no owner reference: every ConfigMap
//     of the namespace labelled application=spilo,cluster-name=<cluster>,
//     at once (deletecollection), as `patronictl remove` deletes them.
//     Their names are Patroni's business (<cluster>-config, -leader,
//     -failover, -sync in Patroni 3); its labels are fixed by pgloop. On a
//     cluster whose Patroni keeps its state in Endpoints
//     (v1.PatroniStoreEndpoints), its Endpoints too, the same way
//     (<cluster>, -config, -failover, -sync; and those the endpoints
//     controller kept for the Services deleted in 1, labelled as them).
//  4. The shared ServiceAccount, Role and RoleBinding, when no other
//     cluster of the namespace needs them (see releaseShared).
//  5. The finalizer.
//
// The data and the passwords that open it go together, as
// spec.volume.retention (or Options.VolumeRetention) says:
//
//   - Retain (the default): the volume claims pgdata-<cluster>-<n> are kept
//     (the StatefulSet retains them too), and so are the credentials
//     Secrets, their owner reference to the resource removed in step 1 so
//     the garbage collector leaves them. Deleting a cluster by mistake loses
//     nothing: a cluster created again with the same name mounts the data
//     and finds the passwords its data directory knows.
//   - Delete: the Secrets are deleted in step 1, and the claims once no pod
//     is left (step 2), each with its UID as precondition.
func (r *run) cleanup(ctx context.Context) error {
	pg, err := r.getCluster(ctx, false)
	if pg == nil {
		return err
	}
	if pg.DeletionTimestamp == nil {
		// Only the state machine's Deleting state asks for a cleanup;
		// deleting a live cluster's Secrets would lose its passwords.
		return fmt.Errorf("cleanup of postgresql %s refused: it is not being deleted", r.key)
	}
	names := cluster.Names(pg)
	core, apps := r.kube.CoreV1(), r.kube.AppsV1()
	background := metav1.DeletePropagationBackground
	if err := r.deleteObject(ctx, "statefulset", names.StatefulSet, apps.StatefulSets(r.ns).Delete,
		metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		return err
	}
	for _, name := range names.Services {
		if err := r.deleteObject(ctx, "service", name, core.Services(r.ns).Delete, metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	if err := r.deleteObject(ctx, "poddisruptionbudget", names.PodDisruptionBudget,
		r.kube.PolicyV1().PodDisruptionBudgets(r.ns).Delete, metav1.DeleteOptions{}); err != nil {
		return err
	}
	for _, role := range cluster.PoolerRoles {
		if err := r.deletePooler(ctx, pg, role); err != nil {
			return err
		}
	}
	backup := cluster.LogicalBackupJobName(pg.Name)
	if err := deleteOwned(ctx, r, pg, "cronjob", backup, r.kube.BatchV1().CronJobs(r.ns), cached(r, backup, Cache.CronJob)); err != nil {
		return err
	}
	retain := r.retention(pg) == v1.RetainVolumes
	if retain {
		if err := r.keepSecrets(ctx, pg); err != nil {
			return err
		}
	} else {
		for _, name := range names.Secrets {
			if err := r.deleteObject(ctx, "secret", name, core.Secrets(r.ns).Delete, metav1.DeleteOptions{}); err != nil {
				return err
			}
		}
	}
	if err := r.deletePods(ctx, pg); err != nil {
		return err
	}
	if !retain {
		if err := r.deleteClaims(ctx, pg); err != nil {
			return err
		}
	}
	if err := r.deletePatroniObjects(ctx, pg); err != nil {
		return err
	}
	if err := r.releaseShared(ctx, pg); err != nil {
		return err
	}
	return r.removeFinalizer(ctx, pg)
}

// retention is what the deletion of pg leaves of its data.
func (r *run) retention(pg *v1.Postgresql) v1.VolumeRetention {
	switch {
	case pg.Spec.Volume.Retention != "":
		return pg.Spec.Volume.Retention
	case r.retain != "":
		return r.retain
	}
	return v1.RetainVolumes
}

// keepSecrets removes the owner reference to pg from its credentials
// Secrets (found by its labels, in the API), so that they outlive it with
// the volumes they open. A Secret without it is left as it is.
func (r *run) keepSecrets(ctx context.Context, pg *v1.Postgresql) error {
	secrets := r.kube.CoreV1().Secrets(r.ns)
	sel := labels.SelectorFromSet(cluster.Selector(pg.Name)).String()
	list, err := secrets.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("list secrets %s of postgresql %s: %w", sel, r.key, err)
	}
	for i := range list.Items {
		s := &list.Items[i]
		refs := slices.DeleteFunc(slices.Clone(s.OwnerReferences), func(ref metav1.OwnerReference) bool { return ref.UID == pg.UID })
		if len(refs) == len(s.OwnerReferences) {
			continue
		}
		s.OwnerReferences = refs
		if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{FieldManager: act.FieldManager}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("keep secret %s of postgresql %s: %w", s.Name, r.key, err)
		}
		r.log.WithFields(logrus.Fields{"kind": "secret", "name": s.Name}).Info("kept (volume retention Retain)")
	}
	return nil
}

// deleteClaims deletes the volume claims of pg, found by its labels in the
// API, each with its UID as precondition; once no pod is left, none is in
// use.
func (r *run) deleteClaims(ctx context.Context, pg *v1.Postgresql) error {
	claims := r.kube.CoreV1().PersistentVolumeClaims(r.ns)
	sel := labels.SelectorFromSet(cluster.Selector(pg.Name)).String()
	list, err := claims.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("list persistentvolumeclaims %s of postgresql %s: %w", sel, r.key, err)
	}
	for i := range list.Items {
		c := &list.Items[i]
		if c.DeletionTimestamp != nil {
			continue
		}
		uid := c.UID
		err := claims.Delete(ctx, c.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		switch {
		case err == nil:
			r.log.WithFields(logrus.Fields{"kind": "persistentvolumeclaim", "name": c.Name}).Info("deleted (volume retention Delete)")
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone, or another claim of that name: not ours to delete.
		default:
			return fmt.Errorf("delete persistentvolumeclaim %s of postgresql %s: %w", c.Name, r.key, err)
		}
	}
	return nil
}

// deleteObject deletes one object; one already gone is fine. With a UID
// as precondition (withUID), so is a Conflict: the name is then another
// object's (a successor's), and the one meant is gone.
func (r *run) deleteObject(ctx context.Context, kind, name string, del deleteFunc, opts metav1.DeleteOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := del(ctx, name, opts)
	log := r.log.WithFields(logrus.Fields{"kind": kind, "name": name})
	switch {
	case err == nil:
		log.Info("deleted")
		return nil
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err) && opts.Preconditions != nil && opts.Preconditions.UID != nil:
		log.Debug("already gone: the name is another object's")
		return nil
	}
	return fmt.Errorf("delete %s %s: %w", kind, name, err)
}

// withUID are the options of a delete of the object with uid only (none
// when uid is empty).
func withUID(uid string) metav1.DeleteOptions {
	if uid == "" {
		return metav1.DeleteOptions{}
	}
	u := types.UID(uid)
	return metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &u}}
}

// deletePatroniObjects deletes the ConfigMaps, and on Endpoints the
// Endpoints, Patroni keeps the cluster's state in, found by the labels
// Patroni gives them (cluster/patroni.go). The API, not the cache,
// decides which: one written just before the last pod went may not be
// cached yet.
func (r *run) deletePatroniObjects(ctx context.Context, pg *v1.Postgresql) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sel := labels.SelectorFromSet(cluster.Selector(pg.Name)).String()
	opts := metav1.ListOptions{LabelSelector: sel}
	err := r.kube.CoreV1().ConfigMaps(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, opts)
	if err != nil {
		return fmt.Errorf("delete Patroni's configmaps %s of postgresql %s: %w", sel, r.key, err)
	}
	r.log.WithFields(logrus.Fields{"kind": "configmap", "selector": sel}).Info("deleted")
	if pg.PatroniStore() != v1.PatroniStoreEndpoints {
		return nil
	}
	if err := r.kube.CoreV1().Endpoints(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, opts); err != nil {
		return fmt.Errorf("delete Patroni's endpoints %s of postgresql %s: %w", sel, r.key, err)
	}
	r.log.WithFields(logrus.Fields{"kind": "endpoints", "selector": sel}).Info("deleted")
	return nil
}

// deletePods deletes the cluster's pods that are not terminating yet and
// fails with ErrPodsTerminating while any remains. Pods are found by the
// StatefulSet's selector (in the cache, by the cluster-name label).
//
// With a cache, pods are first looked up there: while it shows only
// terminating pods, the step waits for them (their deletion is an event
// that plans the cleanup again) without an API call, unless one of them has
// been terminating for longer than terminatingTrust: then a cache that
// missed its deletion would hold the cluster forever, so the API is asked.
// Before it goes on to the ConfigMaps, though, the apiserver, not a cache
// that may lag, must say that no pod is left: the pods are then listed from
// the API, as they are right after a deletion (pods never scheduled are
// gone at once).
func (r *run) deletePods(ctx context.Context, pg *v1.Postgresql) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	pods := r.kube.CoreV1().Pods(r.ns)
	sel := metav1.ListOptions{LabelSelector: labels.SelectorFromSet(cluster.Selector(pg.Name)).String()}
	list := func() ([]*corev1.Pod, error) {
		l, err := pods.List(ctx, sel)
		if err != nil {
			return nil, fmt.Errorf("list pods of postgresql %s: %w", r.key, err)
		}
		out := make([]*corev1.Pod, len(l.Items))
		for i := range l.Items {
			out[i] = &l.Items[i]
		}
		return out, nil
	}
	deleteRunning := func(found []*corev1.Pod) (bool, error) {
		deleted := false
		for _, p := range found {
			if p.DeletionTimestamp != nil {
				continue
			}
			if err := r.deleteObject(ctx, "pod", p.Name, pods.Delete, metav1.DeleteOptions{}); err != nil {
				return deleted, err
			}
			deleted = true
		}
		return deleted, nil
	}

	var found []*corev1.Pod
	var err error
	if r.cache != nil {
		found = r.cache.Pods(r.key)
	} else if found, err = list(); err != nil {
		return err
	}
	deleted, err := deleteRunning(found)
	if err != nil {
		return err
	}
	switch {
	case r.cache != nil && len(found) > 0 && !deleted && !terminatingLong(found, r.now()):
		// All terminating, as far as the cache knows, and lately.
	case r.cache != nil || deleted:
		if found, err = list(); err != nil {
			return err
		}
		if r.cache != nil {
			// Those the cache did not show yet.
			if _, err := deleteRunning(found); err != nil {
				return err
			}
		}
	}
	if n := len(found); n > 0 {
		return fmt.Errorf("%w: %d of postgresql %s", ErrPodsTerminating, n, r.key)
	}
	return nil
}

// terminatingTrust is how long the cache is trusted to show a pod still
// terminating: a kubelet usually stops one in seconds, and a retry of the
// cleanup (every 16 s at most while it waits) then asks the API.
const terminatingTrust = 30 * time.Second

// terminatingLong reports whether the deletion of a pod of pods was asked
// for more than terminatingTrust before now: its deletionTimestamp is the
// time of the request plus its grace period.
func terminatingLong(pods []*corev1.Pod, now time.Time) bool {
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			continue
		}
		asked := p.DeletionTimestamp.Time
		if p.DeletionGracePeriodSeconds != nil {
			asked = asked.Add(-time.Duration(*p.DeletionGracePeriodSeconds) * time.Second)
		}
		if now.Sub(asked) > terminatingTrust {
			return true
		}
	}
	return false
}

// releaseShared deletes the ServiceAccount, Role and RoleBinding the
// clusters of the namespace share (see ensureShared) when pg is the last
// cluster of the namespace: no other resource of the namespace, but those
// being deleted themselves, is in the cache (or, without one, the API).
// Otherwise it writes nothing, unless a shared object still carries pg's
// owner reference, put by a release before issue 14: the object is then
// updated without the references of clusters (as ensureShared would), so
// the garbage collector does not delete it under the other clusters once
// pg's resource is gone.
//
// A cluster created while the last one is cleaned up may find the objects
// in place, write nothing, and see them deleted by this cleanup (the cache
// of resources did not show it yet). Its pods then cannot be created (no
// ServiceAccount) until its next ensure re-creates them: the memo
// (sharedMemo) notes the deletion, so that ensure creates them even if
// the cache still shows them; it comes with the cluster's retry once the
// Creating timeout made it Degraded, or with the resync of a Running one.
func (r *run) releaseShared(ctx context.Context, pg *v1.Postgresql) error {
	last, err := r.lastCluster(ctx, pg)
	if err != nil {
		return err
	}
	names := cluster.Names(pg)
	core, rbac := r.kube.CoreV1(), r.kube.RbacV1()
	if last {
		r.log.Debug("the namespace's last cluster: the shared objects go")
		defer r.shared.deleteAll(r.ns)
		if err := r.deleteObject(ctx, "serviceaccount", names.ServiceAccount, core.ServiceAccounts(r.ns).Delete, metav1.DeleteOptions{}); err != nil {
			return err
		}
		if err := r.deleteObject(ctx, "role", names.Role, rbac.Roles(r.ns).Delete, metav1.DeleteOptions{}); err != nil {
			return err
		}
		return r.deleteObject(ctx, "rolebinding", names.RoleBinding, rbac.RoleBindings(r.ns).Delete, metav1.DeleteOptions{})
	}
	if err := dropOwner(ctx, r, core.ServiceAccounts(r.ns), "serviceaccount", names.ServiceAccount, pg.UID,
		cached(r, names.ServiceAccount, Cache.ServiceAccount)); err != nil {
		return err
	}
	if err := dropOwner(ctx, r, rbac.Roles(r.ns), "role", names.Role, pg.UID, cached(r, names.Role, Cache.Role)); err != nil {
		return err
	}
	return dropOwner(ctx, r, rbac.RoleBindings(r.ns), "rolebinding", names.RoleBinding, pg.UID,
		cached(r, names.RoleBinding, Cache.RoleBinding))
}

// lastCluster tells whether pg is the last cluster of its namespace that
// needs the shared objects, by the cache (the API without one): no other
// cluster but those being deleted whose pods are gone. The pods of a
// cluster deleted at the same time still use the ServiceAccount while they
// terminate: Patroni gives up its leader key through the API as it stops,
// and without a token it cannot, and its pod can stay until its grace
// period ends. The cleanup of the last of them to lose its pods deletes
// the objects; two that finish together both do (NotFound is success).
// Two whose caches each still show the other's pods both leave them: they
// stay in the namespace until a cluster there is deleted again, and the
// ensure of a new cluster finds them in place.
func (r *run) lastCluster(ctx context.Context, pg *v1.Postgresql) (bool, error) {
	var all []*v1.Postgresql
	if r.cache != nil {
		all = r.cache.Postgresqls(r.ns)
	} else {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		list, err := r.postgresqls().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, fmt.Errorf("list postgresqls of namespace %s: %w", r.ns, err)
		}
		for i := range list.Items {
			all = append(all, &list.Items[i])
		}
	}
	for _, other := range all {
		if other.UID == pg.UID {
			continue
		}
		if other.DeletionTimestamp == nil {
			return false, nil
		}
		running, err := r.hasPods(ctx, other)
		if err != nil || running {
			return false, err
		}
	}
	return true, nil
}

// hasPods tells whether a pod of cluster pg exists, by the cache (the
// API without one).
func (r *run) hasPods(ctx context.Context, pg *v1.Postgresql) (bool, error) {
	if r.cache != nil {
		return len(r.cache.Pods(pg.Namespace+"/"+pg.Name)) > 0, nil
	}
	l, err := r.kube.CoreV1().Pods(pg.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(cluster.Selector(pg.Name)).String(), Limit: 1})
	if err != nil {
		return false, fmt.Errorf("list pods of postgresql %s/%s: %w", pg.Namespace, pg.Name, err)
	}
	return len(l.Items) > 0, nil
}

// dropOwner updates a shared object that carries the owner reference of
// uid without the references of clusters (withoutClusterOwners). It is
// read from lookup (the cache) first, when there is one, and from the API
// after a conflict; one that is gone, or without uid's reference, is left
// as it is.
func dropOwner[T cluster.Object](ctx context.Context, r *run, c sharedClient[T], kind, name string, uid types.UID, lookup lookupFunc[T]) error {
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		cur, found, err := current(ctx, attempt, c.Get, kind, name, lookup)
		if err != nil {
			return err
		}
		if !found || !slices.ContainsFunc(cur.GetOwnerReferences(), func(ref metav1.OwnerReference) bool { return ref.UID == uid }) {
			return nil
		}
		out, _, _ := withoutClusterOwners(cur)
		_, err = c.Update(ctx, out, metav1.UpdateOptions{FieldManager: act.FieldManager})
		switch {
		case err == nil:
			r.log.WithFields(logrus.Fields{"kind": kind, "name": name}).Info("owner references of clusters removed")
			return nil
		case apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err) && attempt < maxAttempts:
			continue
		}
		return fmt.Errorf("update %s %s: %w", kind, name, err)
	}
}

// removeFinalizer removes the finalizer from the resource, re-reading it on
// a conflict. A resource already gone is fine.
func (r *run) removeFinalizer(ctx context.Context, pg *v1.Postgresql) error {
	for attempt := 1; ; attempt++ {
		if !slices.Contains(pg.Finalizers, cluster.Finalizer) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		upd := pg.DeepCopy()
		upd.Finalizers = slices.DeleteFunc(upd.Finalizers, func(f string) bool { return f == cluster.Finalizer })
		_, err := r.postgresqls().Update(ctx, upd, metav1.UpdateOptions{FieldManager: act.FieldManager})
		switch {
		case err == nil:
			r.log.Info("finalizer removed")
			r.statuses.remember(r.key, "", nil)
			return nil
		case apierrors.IsNotFound(err):
			r.statuses.remember(r.key, "", nil)
			return nil
		case apierrors.IsConflict(err) && attempt < maxAttempts:
			var gerr error
			// The cache is behind: read the API.
			if pg, gerr = r.getCluster(ctx, true); pg == nil {
				return gerr
			}
			continue
		}
		return fmt.Errorf("remove finalizer from postgresql %s: %w", r.key, err)
	}
}
