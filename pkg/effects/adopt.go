package effects

import (
	"context"
	"fmt"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// Reasons of the Events an adoption records on the resource.
const (
	// ReasonAdopted: the zalando cluster's objects are the resource's.
	ReasonAdopted = "Adopted"
	// ReasonAdoptionRefused: they cannot be taken over; nothing was
	// touched.
	ReasonAdoptionRefused = "AdoptionRefused"
)

// adopt takes over the cluster the zalando operator made under the
// resource's name (v1.AnnotationAdopt), before the ensure brings the
// objects in line with the spec. It writes nothing when the StatefulSet is
// the resource's already (the adoption is done) and nothing when the
// objects cannot be adopted (cluster.AdoptionRefusal, or the zalando
// postgresql still exists): the error says why, and an Event. Otherwise,
// in this order, so an adoption cut short is finished by the next ensure:
//
//  1. pgloop's credentials Secrets are created with the usernames and
//     passwords of zalando's (a role without a zalando Secret gets a new
//     password from the ensure, as usual); one pgloop made already (a
//     manifest applied without the annotation first) gets zalando's
//     password: until the adoption, nothing used its own. Zalando's are
//     left as they are: the pods that run read them until they are
//     replaced;
//  2. each pod of the StatefulSet without a pod template hash gets the
//     hash of the template pgloop renders now, so it counts as up to date
//     until the spec changes (a metadata patch: nothing restarts);
//  3. the Services and PodDisruptionBudgets get the resource's controller
//     reference, then the StatefulSet, last: it marks the adoption done.
//
// After writes it returns an error wrapping ErrWaiting: the informers'
// report of them plans the ensure that updates the objects to the spec.
// Without a StatefulSet there is nothing to adopt (nothingToAdopt).
func (r *run) adopt(ctx context.Context, pg *v1.Postgresql) error {
	name := cluster.StatefulSetName(pg.Name)
	if r.cache != nil {
		if sts, ok := r.cache.StatefulSet(r.ns, name); ok && isControlledBy(sts, pg) {
			return nil
		}
	}
	apps, core, policy := r.kube.AppsV1(), r.kube.CoreV1(), r.kube.PolicyV1()
	sts, err := apps.StatefulSets(r.ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return r.nothingToAdopt(ctx, pg)
	case err != nil:
		return fmt.Errorf("adopt: get statefulset %s: %w", name, err)
	case isControlledBy(sts, pg):
		return nil
	}

	// What there is to take over, read from the API: the cache may not
	// have caught up with a zalando operator stopped a moment ago.
	var others []metav1.Object
	var owned []func() error
	for _, svc := range cluster.Services(pg, r.build) {
		s, err := core.Services(r.ns).Get(ctx, svc.Name, metav1.GetOptions{})
		if err := found(err, "service", svc.Name); err != nil {
			return err
		}
		if err == nil {
			others = append(others, s)
			owned = append(owned, func() error {
				return takeOver(ctx, r, pg, s, "service", core.Services(r.ns).Update)
			})
		}
	}
	for _, pdbName := range []string{cluster.PodDisruptionBudgetName(pg.Name), cluster.ZalandoCriticalOpPodDisruptionBudgetName(pg.Name)} {
		p, err := policy.PodDisruptionBudgets(r.ns).Get(ctx, pdbName, metav1.GetOptions{})
		if err := found(err, "poddisruptionbudget", pdbName); err != nil {
			return err
		}
		if err == nil {
			others = append(others, p)
			owned = append(owned, func() error {
				return takeOver(ctx, r, pg, p, "poddisruptionbudget", policy.PodDisruptionBudgets(r.ns).Update)
			})
		}
	}
	var secrets []*corev1.Secret
	var unusable error          // a zalando Secret without a password
	update := map[string]bool{} // pgloop's Secrets that exist already
	for _, user := range cluster.AdoptedSecretUsers(pg) {
		from := cluster.ZalandoSecretName(user, pg.Name)
		s, err := core.Secrets(r.ns).Get(ctx, from, metav1.GetOptions{})
		if err := found(err, "secret", from); err != nil {
			return err
		}
		if err != nil {
			continue
		}
		others = append(others, s)
		out, err := cluster.AdoptedSecret(pg, user, s)
		if err != nil {
			unusable = fmt.Errorf("%w: %w", v1.ErrAdoptionRefused, err)
			continue
		}
		// pgloop's own, when a manifest without the annotation was
		// applied first: made with a new password, which nothing uses.
		ours, err := core.Secrets(r.ns).Get(ctx, out.Name, metav1.GetOptions{})
		if err := found(err, "secret", out.Name); err != nil {
			return err
		}
		if err == nil {
			others = append(others, ours)
			if string(ours.Data[cluster.SecretPasswordKey]) == string(out.Data[cluster.SecretPasswordKey]) {
				continue
			}
			replaced := ours.DeepCopy()
			replaced.Data = out.Data
			out = replaced
			update[out.Name] = true
		}
		secrets = append(secrets, out)
	}
	selector := labels.SelectorFromSet(cluster.Selector(pg.Name)).String()
	claims, err := core.PersistentVolumeClaims(r.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return fmt.Errorf("adopt: list persistentvolumeclaims: %w", err)
	}
	for i := range claims.Items {
		others = append(others, &claims.Items[i])
	}
	// The zalando postgresql first: while it exists, its owner
	// references are only the symptom.
	refusal := r.zalandoResourceGone(ctx, pg.Name)
	if refusal == nil {
		refusal = cluster.AdoptionRefusal(pg, sts, others)
	}
	if refusal == nil {
		refusal = unusable
	}
	if refusal != nil {
		r.log.WithError(refusal).Warn("adoption refused: nothing touched")
		r.recordEvents(ctx, []act.Record{{Warning: true, Reason: ReasonAdoptionRefused, Message: refusal.Error()}})
		return refusal
	}

	// 0: the image the zalando operator ran stays, written into the
	// spec, where the user sees it and moves the cluster to another
	// (pgloop's) by editing it; without it, pgloop's default image would
	// go into the StatefulSet, and the next rollout would move the pods.
	// So does Patroni's store, in its annotation: without it, pgloop
	// would render the pods of an Endpoints cluster for ConfigMaps.
	if err := r.keepAdopted(ctx, pg, sts); err != nil {
		return err
	}

	// 1: the passwords.
	for _, s := range secrets {
		if update[s.Name] {
			if _, err := core.Secrets(r.ns).Update(ctx, s, metav1.UpdateOptions{FieldManager: act.FieldManager}); err != nil {
				return fmt.Errorf("adopt: give secret %s the zalando secret's password: %w", s.Name, err)
			}
			r.log.WithField("secret", s.Name).Info("adopt: secret given the zalando secret's password")
			continue
		}
		_, err := core.Secrets(r.ns).Create(ctx, s, metav1.CreateOptions{FieldManager: act.FieldManager})
		switch {
		case err == nil:
			r.log.WithField("secret", s.Name).Info("adopt: secret created with the zalando secret's password")
		case apierrors.IsAlreadyExists(err):
			// Made since the read: the next ensure compares it.
			return fmt.Errorf("adopt: secret %s made meanwhile (%w)", s.Name, act.ErrWaiting)
		default:
			return fmt.Errorf("adopt: create secret %s: %w", s.Name, err)
		}
	}

	// 2: the pods count as up to date.
	hash := cluster.PodTemplateHash(cluster.StatefulSet(pg, r.build))
	pods, err := core.Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return fmt.Errorf("adopt: list pods: %w", err)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, cluster.AnnotationPodTemplateHash, hash)
	for i := range pods.Items {
		p := &pods.Items[i]
		ref := metav1.GetControllerOf(p)
		if ref == nil || ref.UID != sts.UID || p.DeletionTimestamp != nil || cluster.PodTemplateHash(p) != "" {
			continue
		}
		if _, err := core.Pods(r.ns).Patch(ctx, p.Name, types.MergePatchType, []byte(patch),
			metav1.PatchOptions{FieldManager: act.FieldManager}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("adopt: annotate pod %s with the pod template hash: %w", p.Name, err)
		}
		r.log.WithFields(map[string]any{"pod": p.Name, "hash": hash}).Info("adopt: pod counts as up to date")
	}

	// 3: the owner references, the StatefulSet's last.
	if err := r.together(owned); err != nil {
		return err
	}
	if err := takeOver(ctx, r, pg, sts, "statefulset", apps.StatefulSets(r.ns).Update); err != nil {
		return err
	}
	msg := fmt.Sprintf("took over statefulset %s with %d pods, %d services or budgets and %d passwords of the zalando cluster; no pod restarted",
		sts.Name, len(pods.Items), len(owned), len(secrets))
	r.log.Info("adopt: " + msg)
	r.recordEvents(ctx, []act.Record{{Reason: ReasonAdopted, Message: msg}})
	return fmt.Errorf("adopted the zalando cluster's objects, waiting for the informers to show them (%w)", act.ErrWaiting)
}

// keepAdopted sets, on the resource and in pg (which the pods' template
// hash is computed from), in one update:
//   - spec.dockerImage, when the resource sets none, to the image of the
//     StatefulSet's postgres container;
//   - the annotation v1.AnnotationPatroniStore, when the resource has
//     none, to the store the StatefulSet runs Patroni on, when that is
//     Endpoints (ConfigMaps is what no annotation means):
//     cluster.AdoptionRefusal refused a resource whose annotation names
//     another store than the StatefulSet's.
func (r *run) keepAdopted(ctx context.Context, pg *v1.Postgresql, sts *appsv1.StatefulSet) error {
	image := ""
	if pg.Spec.DockerImage == "" {
		for _, c := range sts.Spec.Template.Spec.Containers {
			if c.Name == cluster.ContainerName || image == "" {
				image = c.Image
			}
		}
	}
	store := v1.PatroniStore("")
	if _, set := pg.Annotations[v1.AnnotationPatroniStore]; !set {
		if s, ok := cluster.TemplatePatroniStore(sts); ok && s == v1.PatroniStoreEndpoints {
			store = s
		}
	}
	if image == "" && store == "" {
		return nil
	}
	// An update of the copy read: a resource changed meanwhile is a
	// Conflict, and the adoption starts again from what it is.
	edited := pg.DeepCopy()
	if image != "" {
		edited.Spec.DockerImage = image
	}
	if store != "" {
		if edited.Annotations == nil {
			edited.Annotations = map[string]string{}
		}
		edited.Annotations[v1.AnnotationPatroniStore] = string(store)
	}
	if _, err := r.postgresqls().Update(ctx, edited, metav1.UpdateOptions{FieldManager: act.FieldManager}); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("adopt: the resource changed meanwhile (%w)", act.ErrWaiting)
		}
		if store != "" {
			return fmt.Errorf("adopt: keep the zalando cluster's image %q and Patroni's store %s: %w", image, store, err)
		}
		return fmt.Errorf("adopt: keep the zalando cluster's image %s in spec.dockerImage: %w", image, err)
	}
	var records []act.Record
	if image != "" {
		pg.Spec.DockerImage = image
		msg := "spec.dockerImage set to " + image + ", the image the zalando operator ran: the pods keep it; edit spec.dockerImage to move the cluster to another image (a rolling change)"
		r.log.Info("adopt: " + msg)
		records = append(records, act.Record{Reason: ReasonAdopted, Message: msg})
	}
	if store != "" {
		// A new map: pg's may be shared with the copy it was made from.
		pg.Annotations = maps.Clone(pg.Annotations)
		if pg.Annotations == nil {
			pg.Annotations = map[string]string{}
		}
		pg.Annotations[v1.AnnotationPatroniStore] = string(store)
		msg := "annotation " + v1.AnnotationPatroniStore + " set to " + string(store) + ": the zalando cluster's Patroni keeps its state in Endpoints " +
			"(KUBERNETES_USE_CONFIGMAPS unset), and so will the pods pgloop makes; the master Service keeps no selector"
		r.log.Info("adopt: " + msg)
		records = append(records, act.Record{Reason: ReasonAdopted, Message: msg})
	}
	r.recordEvents(ctx, records)
	return nil
}

// nothingToAdopt is the adoption of a cluster without a StatefulSet: done
// when the resource's superuser Secret exists (a StatefulSet adopted, then
// deleted, is the ensure's to create again), refused otherwise. The
// zalando operator deletes the StatefulSet, with its pods, when its
// postgresql is deleted while it runs: the claims stay, but a new
// StatefulSet on them is a restart, not an adoption, and its passwords
// would be new ones unless zalando's Secrets were kept.
func (r *run) nothingToAdopt(ctx context.Context, pg *v1.Postgresql) error {
	name := cluster.SecretName(cluster.SuperuserName, pg.Name)
	s, err := r.kube.CoreV1().Secrets(r.ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil && isControlledBy(s, pg):
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("adopt: get secret %s: %w", name, err)
	}
	refusal := fmt.Errorf("%w: there is no statefulset %s to adopt: the zalando cluster is not running (deleted with its postgresql while the zalando operator ran?); "+
		"remove the annotation %s to create a new cluster (on the claims that are left, if any) instead (docs/migrating.md, Adopt in place)",
		v1.ErrAdoptionRefused, cluster.StatefulSetName(pg.Name), v1.AnnotationAdopt)
	r.log.WithError(refusal).Warn("adoption refused: nothing touched")
	r.recordEvents(ctx, []act.Record{{Warning: true, Reason: ReasonAdoptionRefused, Message: refusal.Error()}})
	return refusal
}

// found returns nil when err is nil or NotFound, and the wrapped error
// otherwise.
func found(err error, kind, name string) error {
	if err == nil || apierrors.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("adopt: get %s %s: %w", kind, name, err)
}

// isControlledBy reports whether pg is obj's controller.
func isControlledBy(obj metav1.Object, pg *v1.Postgresql) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == pg.UID
}

// takeOver adds pg's controller reference to obj, read from the API just
// before (its resourceVersion makes a concurrent change a Conflict, which
// the next ensure starts over from).
func takeOver[T cluster.Object](ctx context.Context, r *run, pg *v1.Postgresql, obj T, kind string,
	update func(context.Context, T, metav1.UpdateOptions) (T, error)) error {
	refs, missing := cluster.WithControllerReference(obj.GetOwnerReferences(), pg)
	if !missing {
		return nil
	}
	out := obj.DeepCopyObject().(T)
	out.SetOwnerReferences(refs)
	if _, err := update(ctx, out, metav1.UpdateOptions{FieldManager: act.FieldManager}); err != nil {
		return fmt.Errorf("adopt: take over %s %s: %w", kind, obj.GetName(), err)
	}
	r.log.WithFields(map[string]any{"kind": kind, "name": obj.GetName()}).Info("adopt: taken over")
	return nil
}

// zalandoResourceGone refuses the adoption while the zalando operator's
// postgresql of the same name exists: its operator, once running, would
// undo pgloop's changes, and its deletion delete the objects. A cluster
// whose API has no acid.zalan.do group (NotFound) has none.
func (r *run) zalandoResourceGone(ctx context.Context, name string) error {
	rc := r.kube.Discovery().RESTClient()
	if rc == nil {
		// A fake clientset's discovery has no REST client.
		return nil
	}
	err := rc.Get().AbsPath("/apis/acid.zalan.do/v1/namespaces", r.ns, "postgresqls", name).Do(ctx).Error()
	switch {
	case err == nil:
		return fmt.Errorf("%w: the zalando postgresql %s/%s still exists: stop the zalando operator, then delete it with --cascade=orphan (docs/migrating.md, Adopt in place)",
			v1.ErrAdoptionRefused, r.ns, name)
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%w: cannot tell whether the zalando postgresql %s/%s still exists: pgloop may not get postgresqls.acid.zalan.do (manifests/operator/clusterrole.yaml)",
			v1.ErrAdoptionRefused, r.ns, name)
	}
	return fmt.Errorf("adopt: get the zalando postgresql %s/%s: %w", r.ns, name, err)
}
