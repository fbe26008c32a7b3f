package cluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// objectClient is what the ensure effect needs of a typed client-go client
// (ServiceInterface, StatefulSetInterface, ...).
type objectClient[T Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// reconcileFunc returns the object to write to bring current in line with
// the desired one, and whether there is anything to write at all.
type reconcileFunc[T Object] func(current T) (out T, write bool, err error)

// ensure creates every object of the cluster that is missing and updates
// those that differ from the spec, in the order of Objects.All, then grows
// the volumes. It reads the resource afresh, so it acts on the current
// spec, not on the one the plan was made from. A resource that is gone or
// being deleted is left to the cleanup.
func (r *run) ensure(ctx context.Context) error {
	pg, err := r.getCluster(ctx)
	if pg == nil {
		return err
	}
	if pg.DeletionTimestamp != nil {
		r.log.Debug("being deleted: nothing to ensure")
		return nil
	}
	if pg, err = r.addFinalizer(ctx, pg); pg == nil {
		return err
	}
	objs, err := Build(pg, r.build, r.random)
	if err != nil {
		return fmt.Errorf("build objects of postgresql %s: %w", r.key, err)
	}

	core, rbac := r.kube.CoreV1(), r.kube.RbacV1()
	if err := ensureObject(ctx, r, core.ServiceAccounts(r.ns), "serviceaccount", objs.ServiceAccount,
		func(cur *corev1.ServiceAccount) (*corev1.ServiceAccount, bool, error) {
			out := cur.DeepCopy()
			return out, addOwner(out, objs.ServiceAccount), nil
		}); err != nil {
		return err
	}
	if err := ensureObject(ctx, r, rbac.Roles(r.ns), "role", objs.Role,
		func(cur *rbacv1.Role) (*rbacv1.Role, bool, error) {
			out := cur.DeepCopy()
			write := addOwner(out, objs.Role)
			if RoleNeedsUpdate(cur, objs.Role) {
				out.Labels = mergeInto(out.Labels, objs.Role.Labels)
				out.Rules = objs.Role.DeepCopy().Rules
				write = true
			}
			return out, write, nil
		}); err != nil {
		return err
	}
	if err := ensureObject(ctx, r, rbac.RoleBindings(r.ns), "rolebinding", objs.RoleBinding,
		func(cur *rbacv1.RoleBinding) (*rbacv1.RoleBinding, bool, error) {
			out := cur.DeepCopy()
			return out, addOwner(out, objs.RoleBinding), nil
		}); err != nil {
		return err
	}
	for _, s := range objs.Secrets {
		// Created when missing, never updated: the password in an
		// existing Secret is the one PostgreSQL and the applications use.
		// Its data is not looked at, nor logged.
		if err := ensureObject(ctx, r, core.Secrets(r.ns), "secret", s,
			func(cur *corev1.Secret) (*corev1.Secret, bool, error) { return cur, false, nil }); err != nil {
			return err
		}
	}
	for _, s := range objs.Services {
		if err := ensureObject(ctx, r, core.Services(r.ns), "service", s,
			func(cur *corev1.Service) (*corev1.Service, bool, error) {
				if err := controlled(cur, pg, "service"); err != nil {
					return nil, false, err
				}
				if !ServiceNeedsUpdate(cur, s) {
					return nil, false, nil
				}
				return ApplyService(cur, s), true, nil
			}); err != nil {
			return err
		}
	}
	pdb := objs.PodDisruptionBudget
	if err := ensureObject(ctx, r, r.kube.PolicyV1().PodDisruptionBudgets(r.ns), "poddisruptionbudget", pdb,
		func(cur *policyv1.PodDisruptionBudget) (*policyv1.PodDisruptionBudget, bool, error) {
			if err := controlled(cur, pg, "poddisruptionbudget"); err != nil {
				return nil, false, err
			}
			if !PodDisruptionBudgetNeedsUpdate(cur, pdb) {
				return nil, false, nil
			}
			return ApplyPodDisruptionBudget(cur, pdb), true, nil
		}); err != nil {
		return err
	}
	sts := objs.StatefulSet
	// The update strategy is OnDelete: updating the pod template restarts
	// no pod; the state machine replaces them one at a time.
	if err := ensureObject(ctx, r, r.kube.AppsV1().StatefulSets(r.ns), "statefulset", sts,
		func(cur *appsv1.StatefulSet) (*appsv1.StatefulSet, bool, error) {
			if err := controlled(cur, pg, "statefulset"); err != nil {
				return nil, false, err
			}
			change := Compare(cur, sts)
			if change == NoChange {
				return nil, false, nil
			}
			r.log.WithField("change", change.String()).Debug("statefulset differs")
			return ApplyStatefulSet(cur, sts), true, nil
		}); err != nil {
		return err
	}
	return r.growVolumes(ctx, pg)
}

// ensureObject brings one object in line: it reads it, creates desired when
// it is missing, and otherwise writes what reconcile returns, if anything.
// A create that finds the object already there (AlreadyExists) and an update
// that meets a newer version (Conflict) or a deleted object (NotFound) start
// over from a fresh read.
func ensureObject[T Object](ctx context.Context, r *run, c objectClient[T], kind string, desired T, reconcile reconcileFunc[T]) error {
	name := desired.GetName()
	log := r.log.WithFields(logrus.Fields{"kind": kind, "name": name})
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		cur, err := c.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = c.Create(ctx, desired, metav1.CreateOptions{})
			if err == nil {
				log.Info("created")
				return nil
			}
			if apierrors.IsAlreadyExists(err) && attempt < maxAttempts {
				continue
			}
			return fmt.Errorf("create %s %s: %w", kind, name, err)
		}
		if err != nil {
			return fmt.Errorf("get %s %s: %w", kind, name, err)
		}
		out, write, err := reconcile(cur)
		if err != nil || !write {
			return err
		}
		_, err = c.Update(ctx, out, metav1.UpdateOptions{})
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

// addOwner merges the cluster's owner reference, the one on desired, into
// obj's (a shared object's references of the other clusters are kept), and
// reports whether it was missing.
func addOwner(obj, desired Object) bool {
	refs, added := AddOwnerReference(obj.GetOwnerReferences(), desired.GetOwnerReferences()[0])
	if added {
		obj.SetOwnerReferences(refs)
	}
	return added
}

// controlled fails with ErrNotControlled unless obj's controller is pg.
func controlled(obj metav1.Object, pg *v1.Postgresql, kind string) error {
	if ref := metav1.GetControllerOf(obj); ref != nil && ref.UID == pg.UID {
		return nil
	}
	return fmt.Errorf("%s %s: %w %s/%s", kind, obj.GetName(), ErrNotControlled, pg.Namespace, pg.Name)
}

// addFinalizer adds Finalizer to the resource unless it has it, and returns
// the resource as written. It returns nil when the resource is gone or
// being deleted (no finalizer may be added then), and nothing is to be
// ensured.
func (r *run) addFinalizer(ctx context.Context, pg *v1.Postgresql) (*v1.Postgresql, error) {
	for attempt := 1; ; attempt++ {
		if slices.Contains(pg.Finalizers, Finalizer) {
			return pg, nil
		}
		if pg.DeletionTimestamp != nil {
			return nil, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		upd := pg.DeepCopy()
		upd.Finalizers = append(upd.Finalizers, Finalizer)
		out, err := r.pg.Update(ctx, upd)
		switch {
		case err == nil:
			r.log.Info("finalizer added")
			return out, nil
		case apierrors.IsNotFound(err):
			return nil, nil
		case apierrors.IsConflict(err) && attempt < maxAttempts:
			if pg, err = r.getCluster(ctx); pg == nil {
				return nil, err
			}
			continue
		}
		return nil, fmt.Errorf("add finalizer to postgresql %s: %w", r.key, err)
	}
}

// growVolumes raises the storage request of the cluster's data volume
// claims that are smaller than spec.volume.size; the StorageClass's
// provisioner expands the volumes (the StatefulSet's volumeClaimTemplates
// cannot change). Claims are found by label, so those kept from a
// scale-down grow too and a later scale-up finds them large enough.
//
// Only bound claims are patched: the apiserver refuses to resize any other.
// A claim bound later is grown by the next ensure (resync). A refusal, for
// example of a StorageClass that does not allow expansion, is the step's
// error: the cluster shows Degraded with that cause.
func (r *run) growVolumes(ctx context.Context, pg *v1.Postgresql) error {
	want := pg.Spec.Volume.Size
	if want.IsZero() {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	claims := r.kube.CoreV1().PersistentVolumeClaims(r.ns)
	list, err := claims.List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(Selector(pg.Name)).String()})
	if err != nil {
		return fmt.Errorf("list persistentvolumeclaims of postgresql %s: %w", r.key, err)
	}
	prefix := DataVolumeName + "-" + StatefulSetName(pg.Name) + "-"
	for i := range list.Items {
		pvc := &list.Items[i]
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
		if err := ctx.Err(); err != nil {
			return err
		}
		patch := fmt.Sprintf(`{"spec":{"resources":{"requests":{%q:%q}}}}`, corev1.ResourceStorage, want.String())
		if _, err := claims.Patch(ctx, pvc.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("resize persistentvolumeclaim %s from %s to %s: %w", pvc.Name, have.String(), want.String(), err)
		}
		log.Info("volume claim resized")
	}
	return nil
}
