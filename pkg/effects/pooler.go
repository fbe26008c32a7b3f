package effects

import (
	"context"
	"fmt"
	"slices"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// ensurePoolers brings the connection poolers in line with the spec: the
// Deployment, Service and PodDisruptionBudget of each enabled pooler are
// created or updated, all at once; those of a pooler the spec no longer
// enables are deleted, and so is the pooler role's Secret once neither is
// enabled, unless a user of the spec has the same Secret. The role and its
// lookup function stay in the database (they grant nothing to anyone
// else), as with zalando. The Secret was created with the others, before:
// the pooler's pods read it.
func (r *run) ensurePoolers(ctx context.Context, pg *v1.Postgresql, objs *cluster.Objects) error {
	core, apps := r.kube.CoreV1(), r.kube.AppsV1()
	enabled := map[string]bool{}
	var writes []func() error
	for _, p := range objs.Poolers {
		enabled[p.Role] = true
		d, svc, pdb := p.Deployment, p.Service, p.PodDisruptionBudget
		writes = append(writes,
			func() error {
				return ensureObject(ctx, r, apps.Deployments(r.ns), "deployment", d, cached(r, d.Name, Cache.Deployment),
					func(cur *appsv1.Deployment) (*appsv1.Deployment, bool, error) {
						if err := controlled(cur, pg, "deployment"); err != nil {
							return nil, false, err
						}
						if !cluster.DeploymentNeedsUpdate(cur, d) {
							return nil, false, nil
						}
						return cluster.ApplyDeployment(cur, d), true, nil
					})
			},
			func() error { return r.ensureService(ctx, pg, svc) },
			func() error { return r.ensurePodDisruptionBudget(ctx, pg, pdb) })
	}
	for _, role := range cluster.PoolerRoles {
		if !enabled[role] {
			writes = append(writes, func() error { return r.deletePooler(ctx, pg, role) })
		}
	}
	// The Secret of that name is a user's when spec.users has the
	// pooler's role (valid while no pooler is enabled): it is kept.
	name := cluster.SecretName(pg.Spec.PoolerUser(), pg.Name)
	if len(objs.Poolers) == 0 && !slices.ContainsFunc(objs.Secrets, func(s *corev1.Secret) bool { return s.Name == name }) {
		writes = append(writes, func() error {
			return deleteOwned(ctx, r, pg, "secret", name, core.Secrets(r.ns), cached(r, name, Cache.Secret))
		})
	}
	return r.together(writes)
}

// deletePooler deletes the objects of the pooler of role that are pg's:
// its Service and PodDisruptionBudget, then its Deployment. The facts see
// the Deployment only, so it goes last: once it is gone, so are the others.
func (r *run) deletePooler(ctx context.Context, pg *v1.Postgresql, role string) error {
	name := cluster.PoolerName(pg.Name, role)
	if err := deleteOwned(ctx, r, pg, "service", name, r.kube.CoreV1().Services(r.ns), cached(r, name, Cache.Service)); err != nil {
		return err
	}
	pdb := cluster.PoolerPodDisruptionBudgetName(pg.Name, role)
	if err := deleteOwned(ctx, r, pg, "poddisruptionbudget", pdb, r.kube.PolicyV1().PodDisruptionBudgets(r.ns),
		cached(r, pdb, Cache.PodDisruptionBudget)); err != nil {
		return err
	}
	return deleteOwned(ctx, r, pg, "deployment", name, r.kube.AppsV1().Deployments(r.ns), cached(r, name, Cache.Deployment))
}

// ownedClient is what deleteOwned needs of a typed client.
type ownedClient[T cluster.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// deleteOwned deletes the object name when pg controls it, with its UID as
// precondition: a pooler's names may be those of another cluster's objects
// (the master Service of a cluster named <cluster>-pooler), which are left
// alone. It reads the object from lookup (the cache) when there is one,
// else from the API; one that is missing, already going, or replaced
// meanwhile (a conflict on the UID) is fine.
func deleteOwned[T cluster.Object](ctx context.Context, r *run, pg *v1.Postgresql, kind, name string, c ownedClient[T], lookup lookupFunc[T]) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cur, found, err := current(ctx, 1, c.Get, kind, name, lookup)
	if err != nil || !found || cur.GetDeletionTimestamp() != nil {
		return err
	}
	if ref := metav1.GetControllerOf(cur); ref == nil || ref.UID != pg.UID {
		return nil
	}
	uid := cur.GetUID()
	err = c.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case err == nil:
		r.log.WithFields(logrus.Fields{"kind": kind, "name": name}).Info("deleted (no longer in the spec)")
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil
	}
	return fmt.Errorf("delete %s %s: %w", kind, name, err)
}
