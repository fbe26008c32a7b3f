package effects

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/reqclass"
)

// objectClient is what the ensure effect needs of a typed client-go client
// (ServiceInterface, StatefulSetInterface, ...).
type objectClient[T cluster.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// reconcileFunc returns the object to write to bring current in line with
// the desired one, and whether there is anything to write at all. current
// may be the cache's object: it must not be modified.
type reconcileFunc[T cluster.Object] func(current T) (out T, write bool, err error)

// lookupFunc reads an object from the cache: the cache's own object, and
// whether the cache has it.
type lookupFunc[T cluster.Object] func() (T, bool)

// cached returns the lookup of the object name of the run's namespace in
// the cache through get (Cache.Service, ...), nil when there is no cache.
func cached[T cluster.Object](r *run, name string, get func(Cache, string, string) (T, bool)) lookupFunc[T] {
	if r.cache == nil {
		return nil
	}
	c := r.cache
	return func() (T, bool) { return get(c, r.ns, name) }
}

// ensure adds the cleanup's finalizer to the resource, creates every
// object of the cluster that is missing and updates those that differ from
// the spec: the cluster's own objects beside the finalizer and the
// namespace's shared objects (the StatefulSet once all of those are in
// place), then the connection poolers and the logical backup (deleting
// those the spec no longer enables), then grows the volumes. It reads the
// resource afresh (from the cache, which is at least as recent as what
// the plan was made from), so it acts on the current spec. A resource
// that is gone or being deleted is left to the cleanup.
func (r *run) ensure(ctx context.Context) error {
	pg, err := r.getCluster(ctx, false)
	if pg == nil {
		return err
	}
	if pg.DeletionTimestamp != nil {
		r.log.Debug("being deleted: nothing to ensure")
		return nil
	}
	if pg.AdoptRequested() {
		if err := r.adopt(ctx, pg); err != nil {
			return err
		}
	}
	if r.serial {
		// The finalizer first (the simulator's seeds were found with
		// this order of calls).
		if pg, err = r.addFinalizer(ctx, pg); pg == nil {
			return err
		}
	}
	// The StatefulSet is built apart, only when it is to be written
	// (ensureStatefulSet).
	objs, err := cluster.BuildAllButStatefulSet(pg, r.build, r.random)
	if err != nil {
		return fmt.Errorf("build objects of postgresql %s: %w", r.key, err)
	}
	if r.serial {
		if err := r.ensureShared(ctx, objs); err != nil {
			return err
		}
	}
	// The Secrets, Services and PodDisruptionBudget depend on nothing but
	// the resource: they are written at once (round trips fewer than one
	// after another on an API server under load), and the StatefulSet as
	// soon as the Secrets and the namespace's shared objects are, since
	// its pods read them. The Services do not hold it back: an API server
	// allocates their cluster IPs one after another, 50-60 ms each when
	// busy, and Patroni needs none of them to start: on ConfigMaps it
	// reads none; on Endpoints (v1.PatroniStoreEndpoints) the Endpoints
	// it writes before their Service exists stay, since the endpoints
	// controller deletes those without a Service only when it starts.
	//
	// The finalizer goes beside them, not before (one round trip less
	// on a create): the StatefulSet alone waits for it, since its claims
	// outlive the resource unless the cleanup deletes them. The others
	// are the resource's (owner references): if it turns out gone or
	// being deleted, the garbage collector deletes them.
	core := r.kube.CoreV1()
	secrets := make([]func() error, 0, len(objs.Secrets))
	for _, s := range objs.Secrets {
		// Created when missing, never updated: the password in an
		// existing Secret is the one PostgreSQL and the applications use.
		// Its data is not looked at, nor logged, nor even read: one that
		// exists (AlreadyExists included) is left as it is.
		secrets = append(secrets, func() error {
			if err := r.secretOfEarlier(pg, s.Name); err != nil {
				return err
			}
			return ensureObject(ctx, r, core.Secrets(r.ns), "secret", s, cached(r, s.Name, Cache.Secret), nil)
		})
	}
	var others []func() error
	for _, s := range objs.Services {
		others = append(others, func() error { return r.ensureService(ctx, pg, s) })
	}
	others = append(others, func() error { return r.ensurePodDisruptionBudget(ctx, pg, objs.PodDisruptionBudget) })
	sts := func() error { return r.ensureStatefulSet(ctx, pg) }
	if r.serial {
		// One after another (the simulator), the StatefulSet last: the
		// order the simulator's seeds were found with.
		if err := r.together(slices.Concat(secrets, others, []func() error{sts})); err != nil {
			return err
		}
	} else {
		var finalized *v1.Postgresql
		done := make(chan struct{})
		finalizer := func() (err error) {
			defer close(done)
			finalized, err = r.addFinalizer(ctx, pg)
			return err
		}
		statefulSet := func() error {
			if err := r.ensureShared(ctx, objs); err != nil {
				return err
			}
			if err := r.together(secrets); err != nil {
				return err
			}
			<-done
			switch {
			case finalized == nil:
				// Gone, being deleted, or the finalizer failed:
				// its own error says so.
				return nil
			case finalized.Generation == pg.Generation:
				return sts()
			}
			// The API had a newer spec than the cache: the
			// StatefulSet, the costliest object to get wrong (its
			// claim templates cannot change), is built from it. The
			// rest follow at the ensure the newer spec's event plans.
			return r.ensureStatefulSet(ctx, finalized)
		}
		// The finalizer's error first: it explains the rest.
		if err := r.together(slices.Concat([]func() error{finalizer}, others, []func() error{statefulSet})); err != nil {
			return err
		}
		if finalized == nil {
			// Gone or being deleted: the cleanup's, or nobody's.
			r.log.Debug("gone or being deleted: the rest is left")
			return nil
		}
		pg = finalized
	}
	if err := r.ensurePoolers(ctx, pg, objs); err != nil {
		return err
	}
	if err := r.ensureLogicalBackup(ctx, pg, objs); err != nil {
		return err
	}
	return r.growVolumes(ctx, pg)
}

// secretOfEarlier returns an error wrapping ErrWaiting when the cache
// shows the Secret name controlled by an earlier resource of the same
// name, deleted before its cleanup could keep the Secret (a resource
// deleted while its first ensure ran, whose finalizer was refused, or one
// whose finalizer was removed by hand): the garbage collector is about to
// delete it, so the new cluster waits for that and creates its own, and
// never starts with a password that is then replaced. A Secret kept for a
// new cluster of the same name (volume.retention Retain) has no owner.
func (r *run) secretOfEarlier(pg *v1.Postgresql, name string) error {
	if r.cache == nil {
		return nil
	}
	cur, ok := r.cache.Secret(r.ns, name)
	if !ok {
		return nil
	}
	ref := metav1.GetControllerOf(cur)
	if ref == nil || ref.Kind != v1.PostgresqlKind || ref.Name != pg.Name || ref.UID == pg.UID {
		return nil
	}
	return fmt.Errorf("secret %s belongs to an earlier postgresql %s (uid %s), deleted: waiting for the garbage collector (%w)",
		name, r.key, ref.UID, act.ErrWaiting)
}

// ensureStatefulSet creates the StatefulSet of pg, or updates it. The
// update strategy is OnDelete: updating the pod template restarts no pod;
// the state machine replaces them. It builds the StatefulSet only when the
// cache does not show it current already (statefulSetCurrent).
func (r *run) ensureStatefulSet(ctx context.Context, pg *v1.Postgresql) error {
	if r.statefulSetCurrent(pg) {
		return nil
	}
	sts := cluster.StatefulSet(pg, r.build)
	return ensureObject(ctx, r, r.kube.AppsV1().StatefulSets(r.ns), "statefulset", sts,
		cached(r, sts.Name, Cache.StatefulSet),
		func(cur *appsv1.StatefulSet) (*appsv1.StatefulSet, bool, error) {
			if err := controlled(cur, pg, "statefulset"); err != nil {
				return nil, false, err
			}
			if cur.DeletionTimestamp != nil {
				return nil, false, fmt.Errorf("statefulset %s is being re-created (%w)", cur.Name, act.ErrWaiting)
			}
			want := sts
			change := cluster.Compare(cur, want)
			if change == cluster.Recreate {
				return nil, false, r.recreateStatefulSet(ctx, cur, cluster.ClaimTemplateClass(sts))
			}
			if change == cluster.ReplacePods && r.keepTemplate && cluster.PodTemplateHash(cur) != "" {
				// The cluster waits for a rollout slot: the new
				// template is written when the slot is its.
				kept, err := r.keptTemplate(ctx, cur, sts)
				if err != nil {
					return nil, false, err
				}
				want, change = kept, cluster.Compare(cur, kept)
				r.log.WithField("change", change.String()).Debug("pod template kept until a rollout slot is the cluster's")
			}
			if change == cluster.NoChange {
				return nil, false, nil
			}
			r.log.WithField("change", change.String()).Debug("statefulset differs")
			return cluster.ApplyStatefulSet(cur, want), true, nil
		})
}

// statefulSetCurrent reports whether the cache's StatefulSet of pg is
// known, without building one, to be what ensureStatefulSet would leave as
// it is: controlled by pg, not being deleted, and matching the summary of
// the desired one that r.desired knows for pg's generation. False sends
// the ensure the long way, which builds the StatefulSet and tells why.
func (r *run) statefulSetCurrent(pg *v1.Postgresql) bool {
	if r.cache == nil || r.desired == nil {
		return false
	}
	want, ok := r.desired.KnownStatefulSet(pg)
	if !ok {
		return false
	}
	cur, ok := r.cache.StatefulSet(r.ns, cluster.StatefulSetName(pg.Name))
	return ok && cur.DeletionTimestamp == nil && controlled(cur, pg, "statefulset") == nil &&
		cluster.CompareSummary(cur, want) == cluster.NoChange
}

// keptTemplate returns sts with the pod template of cur, the StatefulSet
// in place: what the ensure writes while the cluster waits for a rollout
// slot. Compare reads a template by its hash alone, which a cached cur
// keeps; when something else differs (replicas, labels), the template is
// written back, so it is read from the API: the informers' cache keeps
// none (pkg/informers, slimStatefulSet). The update that follows carries
// cur's resourceVersion, so a StatefulSet changed since cur was read fails
// it with a conflict, and the ensure reads it again.
func (r *run) keptTemplate(ctx context.Context, cur, sts *appsv1.StatefulSet) (*appsv1.StatefulSet, error) {
	kept := sts.DeepCopy()
	kept.Spec.Template = *cur.Spec.Template.DeepCopy()
	if cluster.Compare(cur, kept) == cluster.NoChange {
		return kept, nil
	}
	live, err := r.kube.AppsV1().StatefulSets(r.ns).Get(ctx, cur.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get statefulset %s for the pod template it keeps: %w", cur.Name, err)
	}
	kept.Spec.Template = live.Spec.Template
	return kept, nil
}

// ensureService creates the Service s of pg, or brings what pgloop owns of
// it in line (cluster.ServiceNeedsUpdate). A headless Service's writes
// are marked as a class of their own: they allocate no ClusterIP.
func (r *run) ensureService(ctx context.Context, pg *v1.Postgresql, s *corev1.Service) error {
	return ensureObject(serviceContext(ctx, s), r, r.kube.CoreV1().Services(r.ns), "service", s, cached(r, s.Name, Cache.Service),
		func(cur *corev1.Service) (*corev1.Service, bool, error) {
			if err := controlled(cur, pg, "service"); err != nil {
				return nil, false, err
			}
			if !cluster.ServiceNeedsUpdate(cur, s) {
				return nil, false, nil
			}
			return cluster.ApplyService(cur, s), true, nil
		})
}

// serviceContext is ctx for the writes of Service s: marked with
// HeadlessClass when s has no ClusterIP.
func serviceContext(ctx context.Context, s *corev1.Service) context.Context {
	if s.Spec.ClusterIP == corev1.ClusterIPNone {
		return reqclass.WithWriteClass(ctx, HeadlessClass)
	}
	return ctx
}

// ensurePodDisruptionBudget creates the PodDisruptionBudget pdb of pg, or
// brings what pgloop owns of it in line.
func (r *run) ensurePodDisruptionBudget(ctx context.Context, pg *v1.Postgresql, pdb *policyv1.PodDisruptionBudget) error {
	return ensureObject(ctx, r, r.kube.PolicyV1().PodDisruptionBudgets(r.ns), "poddisruptionbudget", pdb,
		cached(r, pdb.Name, Cache.PodDisruptionBudget),
		func(cur *policyv1.PodDisruptionBudget) (*policyv1.PodDisruptionBudget, bool, error) {
			if err := controlled(cur, pg, "poddisruptionbudget"); err != nil {
				return nil, false, err
			}
			if !cluster.PodDisruptionBudgetNeedsUpdate(cur, pdb) {
				return nil, false, nil
			}
			return cluster.ApplyPodDisruptionBudget(cur, pdb), true, nil
		})
}

// together runs writes at once, each on a goroutine of its own, and
// returns the error of the first (in their order) that failed, so the
// message a status shows does not depend on which finished first. With
// Options.Serial they run one after another, stopping at the first error.
func (r *run) together(writes []func() error) error {
	if r.serial {
		for _, w := range writes {
			if err := w(); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make([]error, len(writes))
	var wg sync.WaitGroup
	for i, w := range writes {
		wg.Go(func() { errs[i] = w() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// recreateStatefulSet deletes the StatefulSet cur, leaving its pods and
// claims (orphan propagation), for the next ensure to create it with the
// volume claim template of class: a StatefulSet's volumeClaimTemplates
// cannot change in place. The new one adopts the orphaned pods. It returns
// an error wrapping ErrWaiting: the state machine plans the ensure
// again once the informers report the StatefulSet gone.
func (r *run) recreateStatefulSet(ctx context.Context, cur *appsv1.StatefulSet, class string) error {
	orphan := metav1.DeletePropagationOrphan
	uid := cur.UID
	err := r.kube.AppsV1().StatefulSets(r.ns).Delete(ctx, cur.Name, metav1.DeleteOptions{
		PropagationPolicy: &orphan, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete statefulset %s to change its volume claim template: %w", cur.Name, err)
	}
	if class == "" {
		class = "the default class"
	}
	r.log.WithFields(logrus.Fields{"statefulset": cur.Name, "storageClass": class}).
		Info("deleted the statefulset, its pods orphaned, to re-create it with a new volume claim template")
	return fmt.Errorf("statefulset %s is being re-created for its volume claim template (storage class %s) (%w)", cur.Name, class, act.ErrWaiting)
}

// ensureShared ensures the ServiceAccount, Role and RoleBinding that the
// pods of every cluster of the namespace share. They belong to the
// namespace (no owner reference): the first cluster's ensure creates them,
// the cleanup of the last cluster deletes them (see releaseShared).
//
// Without a cache, each is read, then created or updated, as the other
// objects are. With one (the informers cache the three: they are labelled
// application=spilo), nothing is read from the API:
//
//  1. when the memo (sharedMemo) or the cache shows all three in place,
//     nothing is written: the second cluster of a namespace writes none
//     of them, and a restarted operator finds every namespace's in place
//     without a call;
//  2. one the cache does not show is created (a new namespace needs only
//     the creates); one that exists after all (AlreadyExists: the cache
//     lags) is read from the API, for 3 and 4;
//  3. the Role is updated when its rules differ (an upgrade of pgloop);
//  4. an object that still carries owner references of clusters, put by
//     a release before issue 14, is updated without them, once per
//     namespace: the garbage collector would delete it once those clusters
//     are gone, under the clusters that use it and own none of it;
//  5. after a cleanup of this process deleted them, the cache is not asked
//     (it may still show them): they are created, as in 2.
//
// Once they are in place, the memo trusts that for sharedRecheck, so the
// ensures that follow before the cache has caught up write nothing either.
func (r *run) ensureShared(ctx context.Context, objs *cluster.Objects) error {
	var deleted bool
	var gen uint64
	if r.cache != nil {
		var inPlace bool
		now := r.now()
		if inPlace, deleted, gen = r.shared.state(r.ns, now); inPlace {
			return nil
		}
		if !deleted && r.sharedCached(objs) {
			r.shared.record(r.ns, gen, now)
			return nil
		}
	}
	core, rbac := r.kube.CoreV1(), r.kube.RbacV1()
	sa, role, binding := objs.ServiceAccount, objs.Role, objs.RoleBinding
	if err := ensureObject(ctx, r, core.ServiceAccounts(r.ns), "serviceaccount", sa,
		sharedLookup(r, sa.Name, deleted, Cache.ServiceAccount), withoutClusterOwners[*corev1.ServiceAccount]); err != nil {
		return err
	}
	if err := ensureObject(ctx, r, rbac.Roles(r.ns), "role", role, sharedLookup(r, role.Name, deleted, Cache.Role),
		func(cur *rbacv1.Role) (*rbacv1.Role, bool, error) {
			out, write, _ := withoutClusterOwners(cur)
			if cluster.RoleNeedsUpdate(out, role) {
				out, write = cluster.ApplyRole(out, role), true
			}
			return out, write, nil
		}); err != nil {
		return err
	}
	if err := ensureObject(ctx, r, rbac.RoleBindings(r.ns), "rolebinding", binding,
		sharedLookup(r, binding.Name, deleted, Cache.RoleBinding), withoutClusterOwners[*rbacv1.RoleBinding]); err != nil {
		return err
	}
	if r.cache != nil {
		r.shared.record(r.ns, gen, r.now())
	}
	return nil
}

// sharedCached reports whether the cache shows the three shared objects in
// place: all there, none with an owner reference of a cluster, the Role
// with its rules.
func (r *run) sharedCached(objs *cluster.Objects) bool {
	sa, ok0 := r.cache.ServiceAccount(r.ns, objs.ServiceAccount.Name)
	role, ok1 := r.cache.Role(r.ns, objs.Role.Name)
	binding, ok2 := r.cache.RoleBinding(r.ns, objs.RoleBinding.Name)
	if !ok0 || !ok1 || !ok2 {
		return false
	}
	for _, o := range []metav1.Object{sa, role, binding} {
		if slices.ContainsFunc(o.GetOwnerReferences(), cluster.IsClusterOwnerReference) {
			return false
		}
	}
	return !cluster.RoleNeedsUpdate(role, objs.Role)
}

// sharedLookup is the cache lookup of a shared object (see cached), or one
// that finds nothing when a cleanup of this process deleted the shared
// objects (the cache may still show them).
func sharedLookup[T cluster.Object](r *run, name string, deleted bool, get func(Cache, string, string) (T, bool)) lookupFunc[T] {
	if deleted {
		return func() (T, bool) {
			var none T
			return none, false
		}
	}
	return cached(r, name, get)
}

// withoutClusterOwners is the reconcileFunc of a shared object: a copy of
// cur without the owner references of clusters (put by a release before
// issue 14), if it has any. cur is not modified.
func withoutClusterOwners[T cluster.Object](cur T) (T, bool, error) {
	refs, changed := cluster.WithoutClusterOwnerReferences(cur.GetOwnerReferences())
	if !changed {
		return cur, false, nil
	}
	out := cur.DeepCopyObject().(T)
	out.SetOwnerReferences(refs)
	return out, true, nil
}

// ensureObject brings one object in line: it reads it, creates desired when
// it is missing, and otherwise writes what reconcile returns, if anything.
// The first read is lookup's (the cache) when there is one, and the API's
// otherwise; after a create that finds the object already there
// (AlreadyExists), or an update that meets a newer version (Conflict) or a
// deleted object (NotFound), it starts over from a read of the API: the
// cache was behind. With a nil reconcile an object that exists is left as
// it is, and AlreadyExists is success.
func ensureObject[T cluster.Object](ctx context.Context, r *run, c objectClient[T], kind string, desired T,
	lookup lookupFunc[T], reconcile reconcileFunc[T]) error {
	name := desired.GetName()
	log := r.log.WithFields(logrus.Fields{"kind": kind, "name": name})
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		cur, found, err := current(ctx, attempt, c.Get, kind, name, lookup)
		if err != nil {
			return err
		}
		if !found {
			_, err := c.Create(ctx, desired, metav1.CreateOptions{FieldManager: act.FieldManager})
			switch {
			case err == nil:
				log.Info("created")
				return nil
			case apierrors.IsAlreadyExists(err) && reconcile == nil:
				log.Debug("exists already")
				return nil
			case apierrors.IsAlreadyExists(err) && attempt < maxAttempts:
				continue
			}
			return fmt.Errorf("create %s %s: %w", kind, name, err)
		}
		if reconcile == nil {
			return nil
		}
		out, write, err := reconcile(cur)
		if err != nil || !write {
			return err
		}
		_, err = c.Update(ctx, out, metav1.UpdateOptions{FieldManager: act.FieldManager})
		if err == nil {
			log.Info("updated")
			return nil
		}
		if (apierrors.IsConflict(err) || apierrors.IsNotFound(err)) && attempt < maxAttempts {
			continue
		}
		return fmt.Errorf("update %s %s: %w", kind, name, err)
	}
}

// current reads the object name: on the first attempt from lookup (the
// cache) when there is one, else, and after a conflict, from the API
// through get. found is false when it does not exist.
func current[T cluster.Object](ctx context.Context, attempt int, get func(context.Context, string, metav1.GetOptions) (T, error),
	kind, name string, lookup lookupFunc[T]) (cur T, found bool, err error) {
	if attempt == 1 && lookup != nil {
		cur, found = lookup()
		return cur, found, nil
	}
	cur, err = get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return cur, true, nil
	case apierrors.IsNotFound(err):
		return cur, false, nil
	}
	return cur, false, fmt.Errorf("get %s %s: %w", kind, name, err)
}

// controlled fails with ErrNotControlled unless obj's controller is pg.
func controlled(obj metav1.Object, pg *v1.Postgresql, kind string) error {
	if ref := metav1.GetControllerOf(obj); ref != nil && ref.UID == pg.UID {
		return nil
	}
	return fmt.Errorf("%s %s: %w %s/%s", kind, obj.GetName(), ErrNotControlled, pg.Namespace, pg.Name)
}

// addFinalizer adds the finalizer (cluster.Finalizer) to the resource
// unless it has it, and returns the resource as written. It returns nil
// when the resource is gone or being deleted (no finalizer may be added
// then), and nothing is to be ensured.
//
// The write is a JSON patch (finalizerPatch) that tests that the
// finalizers are those read, then sets them with ours added. It carries no
// resourceVersion, so the status writes of the same moments do not make it
// conflict, as an update with the cached resourceVersion would; the test
// makes sure it neither drops a finalizer another controller added since
// the read nor adds ours twice. A failed test (or another refusal: a
// resource being deleted takes no new finalizer) reads the resource from
// the API and starts over.
func (r *run) addFinalizer(ctx context.Context, pg *v1.Postgresql) (*v1.Postgresql, error) {
	for attempt := 1; ; attempt++ {
		if slices.Contains(pg.Finalizers, cluster.Finalizer) {
			return pg, nil
		}
		if pg.DeletionTimestamp != nil {
			return nil, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		patch, err := finalizerPatch(pg.Finalizers)
		if err != nil {
			return nil, fmt.Errorf("add finalizer to postgresql %s: %w", r.key, err)
		}
		out, err := r.postgresqls().Patch(ctx, r.name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: act.FieldManager})
		switch {
		case err == nil:
			r.log.Info("finalizer added")
			return out, nil
		case apierrors.IsNotFound(err):
			return nil, nil
		case apierrors.IsInvalid(err) && attempt < maxAttempts:
			// The finalizers changed since the read: read the API.
			if pg, err = r.getCluster(ctx, true); pg == nil {
				return nil, err
			}
			continue
		}
		return nil, fmt.Errorf("add finalizer to postgresql %s: %w", r.key, err)
	}
}

// finalizerPatch is the JSON patch (RFC 6902) that adds cluster.Finalizer
// to a resource whose finalizers are have: a test that they still are
// (null when there are none: the field is then absent, and a test of an
// absent field for null passes), then an add of the whole list, which
// replaces the field or creates it.
func finalizerPatch(have []string) ([]byte, error) {
	var was any
	if len(have) > 0 {
		was = have
	}
	want := append(slices.Clone(have), cluster.Finalizer)
	return json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/finalizers", "value": was},
		{"op": "add", "path": "/metadata/finalizers", "value": want},
	})
}

// growVolumes raises the storage request of the cluster's data volume
// claims that are smaller than spec.volume.size; the StorageClass's
// provisioner expands the volumes (the StatefulSet's volumeClaimTemplates
// cannot change). Claims are found by label, so those kept from a
// scale-down grow too and a later scale-up finds them large enough.
//
// Only bound claims are patched: the apiserver refuses to resize any other.
// A claim bound later is grown by the next ensure (resync). A claim whose
// StorageClass, in the cache, does not allow expansion is left as it is:
// the facts name the cause (VolumeNotExpandable), and the class's change
// notifies the cluster. Any other refusal is the ensure's error: the
// cluster shows it.
func (r *run) growVolumes(ctx context.Context, pg *v1.Postgresql) error {
	want := pg.Spec.Volume.Size
	if want.IsZero() {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	claims := r.kube.CoreV1().PersistentVolumeClaims(r.ns)
	var list []*corev1.PersistentVolumeClaim
	if r.cache != nil {
		list = r.cache.PersistentVolumeClaims(r.key)
	} else {
		l, err := claims.List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(cluster.Selector(pg.Name)).String()})
		if err != nil {
			return fmt.Errorf("list persistentvolumeclaims of postgresql %s: %w", r.key, err)
		}
		for i := range l.Items {
			list = append(list, &l.Items[i])
		}
	}
	prefix := cluster.DataVolumeName + "-" + cluster.StatefulSetName(pg.Name) + "-"
	for _, pvc := range list {
		ordinal, ok := strings.CutPrefix(pvc.Name, prefix)
		if !ok || pvc.DeletionTimestamp != nil {
			continue
		}
		if _, err := strconv.ParseUint(ordinal, 10, 31); err != nil {
			continue
		}
		have := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		if have.Cmp(want) >= 0 {
			continue
		}
		log := r.log.WithFields(logrus.Fields{"claim": pvc.Name, "from": have.String(), "to": want.String()})
		if pvc.Status.Phase != corev1.ClaimBound {
			log.Debug("claim not bound yet: resized once it is")
			continue
		}
		if class := pvc.Spec.StorageClassName; class != nil && r.cache != nil {
			if sc, ok := r.cache.StorageClass(*class); ok && (sc.AllowVolumeExpansion == nil || !*sc.AllowVolumeExpansion) {
				log.WithField("storageClass", *class).Debug("StorageClass does not allow volume expansion: claim left as it is")
				continue
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		patch := fmt.Sprintf(`{"spec":{"resources":{"requests":{%q:%q}}}}`, corev1.ResourceStorage, want.String())
		_, err := claims.Patch(ctx, pvc.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: act.FieldManager})
		if err != nil {
			return fmt.Errorf("resize persistentvolumeclaim %s from %s to %s: %w", pvc.Name, have.String(), want.String(), err)
		}
		log.Info("volume claim resized")
	}
	return nil
}
