package cluster

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Adoption of a cluster the zalando postgres-operator made (annotation
// v1.AnnotationAdopt). The facts below are from the zalando operator's
// source at commit a7aaad0a0b9517bb46077f2925eb80ae8ebe1a0c (pkg/cluster/
// k8sres.go, util.go, cluster.go; manifests/configmap.yaml), with its
// default configuration:
//
//   - the StatefulSet is named as the cluster, selects its pods by the
//     cluster_labels (application: spilo) plus cluster-name, has one
//     volumeClaimTemplate "pgdata" (claims pgdata-NAME-N), update
//     strategy OnDelete, podManagementPolicy OrderedReady, serviceName the
//     master Service, and serviceAccountName postgres-pod;
//   - the container "postgres" reads PGPASSWORD_SUPERUSER and
//     PGPASSWORD_STANDBY from the Secrets postgres.NAME.credentials.
//     postgresql.acid.zalan.do and standby.NAME...; Patroni's store is
//     Kubernetes (DCS_ENABLE_KUBERNETES_API) on Endpoints unless
//     kubernetes_use_configmaps is on (KUBERNETES_USE_CONFIGMAPS=true),
//     scope NAME, scope label cluster-name, role label spilo-role, labels
//     {"application":"spilo"};
//   - Services NAME and NAME-repl, PodDisruptionBudgets postgres-NAME-pdb
//     and postgres-NAME-critical-op-pdb; on Endpoints the master Service
//     NAME has no selector, the operator creates its Endpoints NAME, which
//     Patroni's leader then keeps, and the headless Service NAME-config
//     keeps Patroni's Endpoints NAME-config from the endpoints controller;
//   - owner references to the postgresql only with enable_owner_references
//     (default false), a finalizer on the postgresql only with
//     enable_finalizers (default false). Deleting the postgresql while the
//     operator runs deletes the StatefulSet, its pods, Services,
//     PodDisruptionBudgets and Patroni's objects (Secrets only with
//     enable_secrets_deletion); the claims stay.
//
// pgloop renders the same names, selector and claim template, so it takes
// the objects over by adding its controller reference and updating what
// it owns; the pods keep running (the StatefulSet is OnDelete) and carry
// the pod template hash pgloop renders at adoption, so they count as up to
// date until the spec changes. The adoption records the store the
// StatefulSet runs Patroni on (v1.AnnotationPatroniStore), so that pgloop
// renders its pods, and the master Service, for the same one.

// zalandoSecretSuffix follows <user>.<cluster> in the name of a zalando
// credentials Secret.
const zalandoSecretSuffix = ".credentials.postgresql.acid.zalan.do"

// ZalandoGroup is the API group of the zalando operator's postgresql: an
// owner reference to it refuses an adoption, and pgloop convert reads its
// manifests.
const ZalandoGroup = "acid.zalan.do"

// ZalandoSecretName returns the name of the zalando operator's credentials
// Secret of a role: like SecretName, under zalando's domain.
func ZalandoSecretName(user, cluster string) string {
	return strings.ReplaceAll(user, "_", "-") + "." + cluster + zalandoSecretSuffix
}

// ZalandoCriticalOpPodDisruptionBudgetName is the second budget the zalando
// operator makes, for the pods Patroni labels during critical operations.
// pgloop makes none; an adopted one is the cluster's (owner reference), so
// it goes with it.
func ZalandoCriticalOpPodDisruptionBudgetName(cluster string) string {
	return "postgres-" + cluster + "-critical-op-pdb"
}

// AdoptedSecretUsers are the roles whose credentials Secret an adoption
// copies from the zalando one: every role pgloop makes a Secret for.
func AdoptedSecretUsers(pg *v1.Postgresql) []string {
	return SecretUsers(pg)
}

// AdoptedSecret returns pgloop's credentials Secret of user with the
// username and password of the zalando Secret from, so the applications
// and PostgreSQL keep the password they use. It fails when from has no
// password.
func AdoptedSecret(pg *v1.Postgresql, user string, from *corev1.Secret) (*corev1.Secret, error) {
	password := from.Data[SecretPasswordKey]
	if len(password) == 0 {
		return nil, fmt.Errorf("secret %s has no %q", from.Name, SecretPasswordKey)
	}
	name := string(from.Data[SecretUsernameKey])
	if name == "" {
		name = user
	}
	return credentialsSecret(pg, SecretName(user, pg.Name), name, string(password)), nil
}

// AdoptionRefusal returns an error wrapping v1.ErrAdoptionRefused when the
// objects found under the cluster's names cannot be taken over, nil when
// they can. sts is the StatefulSet (nil when there is none); others are
// the Services, PodDisruptionBudgets, credentials Secrets and volume
// claims found. The cases, first match wins:
//
//  1. An object has an owner reference to the zalando operator's
//     postgresql: deleting that resource would have the garbage collector
//     delete the object under pgloop.
//  2. An object is controlled by anything but pg: pgloop takes over no
//     object another controller owns (claims are the StatefulSet's
//     business and left out of this).
//  3. The StatefulSet selects its pods by other labels than pgloop's
//     Selector: the selector cannot change, and pgloop's pod template
//     must match it.
//  4. Its Spilo container runs Patroni on a store outside Kubernetes, on
//     another Kubernetes store than pg's v1.AnnotationPatroniStore names
//     (when it names one: unset, the adoption records the StatefulSet's),
//     or with another scope or labels than pgloop's pods: pgloop's pods
//     could not join the members that run, and a member cannot switch
//     stores without all of them being restarted.
func AdoptionRefusal(pg *v1.Postgresql, sts *appsv1.StatefulSet, others []metav1.Object) error {
	all := others
	if sts != nil {
		all = append([]metav1.Object{sts}, others...)
	}
	for _, o := range all {
		kind := objectKind(o)
		for _, ref := range o.GetOwnerReferences() {
			if gv, err := schema.ParseGroupVersion(ref.APIVersion); err == nil && gv.Group == ZalandoGroup {
				return fmt.Errorf("%w: %s %s has an owner reference to the zalando %s %s: "+
					"stop the zalando operator and delete its postgresql with --cascade=orphan first (docs/migrating.md, Adopt in place)",
					v1.ErrAdoptionRefused, kind, o.GetName(), ref.Kind, ref.Name)
			}
		}
		if _, claim := o.(*corev1.PersistentVolumeClaim); claim {
			continue
		}
		if ref := metav1.GetControllerOf(o); ref != nil && ref.UID != pg.UID {
			return fmt.Errorf("%w: %s %s is controlled by %s %s %s: pgloop takes over no object another controller owns",
				v1.ErrAdoptionRefused, kind, o.GetName(), ref.APIVersion, ref.Kind, ref.Name)
		}
	}
	if sts == nil {
		return nil
	}
	sel := sts.Spec.Selector
	if sel == nil || len(sel.MatchExpressions) > 0 || !maps.Equal(sel.MatchLabels, Selector(pg.Name)) {
		return fmt.Errorf("%w: statefulset %s selects its pods by %s, pgloop by %s, and a selector cannot change",
			v1.ErrAdoptionRefused, sts.Name, metav1.FormatLabelSelector(sel), metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: Selector(pg.Name)}))
	}
	return patroniRefusal(pg, sts)
}

// patroniRefusal is case 4 of AdoptionRefusal.
func patroniRefusal(pg *v1.Postgresql, sts *appsv1.StatefulSet) error {
	i := slices.IndexFunc(sts.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == ContainerName })
	if i < 0 {
		return fmt.Errorf("%w: statefulset %s has no container %q running Spilo", v1.ErrAdoptionRefused, sts.Name, ContainerName)
	}
	env := map[string]string{}
	for _, e := range sts.Spec.Template.Spec.Containers[i].Env {
		env[e.Name] = e.Value
	}
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: statefulset %s: %s", v1.ErrAdoptionRefused, sts.Name, fmt.Sprintf(format, args...))
	}
	store, onKubernetes := TemplatePatroniStore(sts)
	named, set := pg.Annotations[v1.AnnotationPatroniStore]
	switch {
	case !onKubernetes:
		return refuse("Patroni keeps its state outside Kubernetes (DCS_ENABLE_KUBERNETES_API unset); pgloop runs Patroni on Kubernetes ConfigMaps or Endpoints only: move the data instead (docs/migrating.md)")
	case set && v1.PatroniStore(named) != store:
		return refuse("Patroni keeps its state in %s (KUBERNETES_USE_CONFIGMAPS %q), the annotation %s says %s: "+
			"a running cluster cannot change stores without restarting every pod; remove the annotation and the adoption records %s",
			store, env[envUseConfigMaps], v1.AnnotationPatroniStore, named, store)
	case env["SCOPE"] != pg.Name:
		return refuse("Patroni's scope is %q, pgloop's would be %q", env["SCOPE"], pg.Name)
	case env["KUBERNETES_SCOPE_LABEL"] != LabelClusterName, env["KUBERNETES_ROLE_LABEL"] != LabelRole:
		return refuse("Patroni's scope and role labels are %q and %q, pgloop's %q and %q",
			env["KUBERNETES_SCOPE_LABEL"], env["KUBERNETES_ROLE_LABEL"], LabelClusterName, LabelRole)
	}
	var labels map[string]string
	if err := json.Unmarshal([]byte(env["KUBERNETES_LABELS"]), &labels); err != nil ||
		!maps.Equal(labels, map[string]string{LabelApplication: ApplicationSpilo}) {
		return refuse("Patroni's member labels are %s, pgloop's {%q:%q}", env["KUBERNETES_LABELS"], LabelApplication, ApplicationSpilo)
	}
	return nil
}

// objectKind names the kind of an object in messages.
func objectKind(o metav1.Object) string {
	switch o.(type) {
	case *appsv1.StatefulSet:
		return "statefulset"
	case *corev1.Service:
		return "service"
	case *corev1.Secret:
		return "secret"
	case *corev1.PersistentVolumeClaim:
		return "persistentvolumeclaim"
	case *policyv1.PodDisruptionBudget:
		return "poddisruptionbudget"
	}
	return "object"
}

// WithControllerReference returns the owner references of an adopted
// object with pg's controller reference added, and whether it was missing.
// refs is not modified.
func WithControllerReference(refs []metav1.OwnerReference, pg *v1.Postgresql) ([]metav1.OwnerReference, bool) {
	if slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == pg.UID }) {
		return refs, false
	}
	return append(slices.Clone(refs), OwnerReference(pg)), true
}
