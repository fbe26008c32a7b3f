package cluster

import (
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Labels pgloop puts on the objects of a cluster. application, cluster-name
// and spilo-role are the zalando operator's, so tools written for a zalando
// data plane (dashboards, kubectl one-liners, Patroni itself) find pgloop's
// pods the same way.
const (
	// LabelApplication marks every object of every cluster.
	LabelApplication = "application"
	// ApplicationSpilo is the value of LabelApplication.
	ApplicationSpilo = "spilo"
	// LabelClusterName carries the cluster's name. Patroni uses it as its
	// scope label: it lists its members by application + cluster-name.
	LabelClusterName = "cluster-name"
	// LabelTeam carries spec.teamId.
	LabelTeam = "team"
	// LabelRole is set on pods by Patroni, never by pgloop: RoleMaster on
	// the leader, RoleReplica on the others. Services and the
	// PodDisruptionBudget select on it.
	LabelRole = "spilo-role"
	// RoleMaster is LabelRole's value on the leader. pgloop asks Spilo for
	// it explicitly (KUBERNETES_LEADER_LABEL_VALUE) rather than rely on
	// Spilo's default: Patroni's own default became "primary" in Patroni 4.
	RoleMaster = "master"
	// RoleReplica is LabelRole's value on the other members.
	RoleReplica = "replica"
	// LabelManagedBy marks what pgloop created, for informer filters.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByPgloop is the value of LabelManagedBy.
	ManagedByPgloop = "pgloop"
)

// AnnotationPodTemplateHash is set on the StatefulSet's pod template, and so
// on every pod it creates, to a hash of the rest of the template. Two
// templates with the same hash run the same pods; a pod whose hash differs
// from the StatefulSet's must be replaced. The apiserver defaults many
// template fields, so comparing templates field by field would see changes
// that are not there: the hash is computed from what pgloop built, before
// any defaulting.
const AnnotationPodTemplateHash = "pgloop.dev/pod-template-hash"

// AnnotationQuotaSeen is set on a StatefulSet whose pods a ResourceQuota
// refused: the version of the namespace's quotas its controller was last
// nudged for (the nudge step). pgloop compares it with the quotas it
// observes, so it nudges once per change of them.
const AnnotationQuotaSeen = "pgloop.dev/quota-seen"

// Finalizer keeps a Postgresql in the apiserver until pgloop has cleaned up
// what the garbage collector would not: Patroni's ConfigMaps, which carry no
// owner reference, and the cluster's reference on the shared RBAC objects.
// The ensure effect (pkg/effects) adds it; the cleanup effect removes it
// last.
const Finalizer = "pgloop.dev/cleanup"

// Labels returns the labels of every object that belongs to one cluster:
// application, cluster-name, team and managed-by. It returns a new map.
func Labels(pg *v1.Postgresql) map[string]string {
	return map[string]string{
		LabelApplication: ApplicationSpilo,
		LabelClusterName: pg.Name,
		LabelTeam:        pg.Spec.TeamID,
		LabelManagedBy:   ManagedByPgloop,
	}
}

// Selector returns the labels that select the pods of a cluster. It is the
// StatefulSet's selector, which cannot change once created, so it holds only
// labels that never change either (not team, not managed-by).
func Selector(clusterName string) map[string]string {
	return map[string]string{
		LabelApplication: ApplicationSpilo,
		LabelClusterName: clusterName,
	}
}

// RoleSelector returns the labels that select the pods of a cluster that
// Patroni labelled with role (RoleMaster or RoleReplica).
func RoleSelector(clusterName, role string) map[string]string {
	s := Selector(clusterName)
	s[LabelRole] = role
	return s
}

// sharedLabels are the labels of the objects shared by every cluster in a
// namespace (the pods' ServiceAccount, Role and RoleBinding): naming one
// cluster or team there would be wrong as soon as a second cluster uses
// them.
func sharedLabels() map[string]string {
	return map[string]string{
		LabelApplication: ApplicationSpilo,
		LabelManagedBy:   ManagedByPgloop,
	}
}

// OwnerReference returns the controller reference to the cluster that every
// object of the cluster carries: the garbage collector deletes them with the
// cluster, informers map them back to it with metav1.GetControllerOf, and a
// foreground deletion of the cluster waits for them.
func OwnerReference(pg *v1.Postgresql) metav1.OwnerReference {
	return *metav1.NewControllerRef(pg, v1.SchemeGroupVersionKind)
}

// IsClusterOwnerReference tells whether ref names a Postgresql resource.
// pgloop releases before issue 14 ("fewer writes") put one such reference
// per cluster on the objects the clusters of a namespace share; they no
// longer carry any (see rbac.go), and the effects strip the references
// those releases left (WithoutClusterOwnerReferences).
func IsClusterOwnerReference(ref metav1.OwnerReference) bool {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == v1.SchemeGroupVersion.Group && ref.Kind == v1.PostgresqlKind
}

// WithoutClusterOwnerReferences returns refs without the references of
// Postgresql resources (IsClusterOwnerReference), and whether there were
// any. The references of other owners are kept; refs is not modified.
func WithoutClusterOwnerReferences(refs []metav1.OwnerReference) ([]metav1.OwnerReference, bool) {
	if !slices.ContainsFunc(refs, IsClusterOwnerReference) {
		return refs, false
	}
	out := slices.DeleteFunc(slices.Clone(refs), IsClusterOwnerReference)
	if len(out) == 0 {
		out = nil
	}
	return out, true
}

// objectMeta is the metadata of an object that belongs to one cluster.
func objectMeta(pg *v1.Postgresql, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       pg.Namespace,
		Labels:          Labels(pg),
		OwnerReferences: []metav1.OwnerReference{OwnerReference(pg)},
	}
}

// sharedObjectMeta is the metadata of an object shared by the clusters of a
// namespace: it belongs to the namespace, not to a cluster, so it has no
// owner reference (see rbac.go).
func sharedObjectMeta(pg *v1.Postgresql, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:      name,
		Namespace: pg.Namespace,
		Labels:    sharedLabels(),
	}
}

// copyMap returns a copy of m, nil when m is empty, so that built objects
// never share a map with the cluster they were built from.
func copyMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

// containsAll reports whether every key of want is in have with the same
// value. pgloop compares the labels and annotations it sets this way: other
// controllers and users may add their own, and pgloop leaves those alone.
func containsAll(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// mergeInto returns have with every entry of want set, as a new map; keys
// only in have are kept.
func mergeInto(have, want map[string]string) map[string]string {
	if len(have) == 0 && len(want) == 0 {
		return have
	}
	out := make(map[string]string, len(have)+len(want))
	maps.Copy(out, have)
	maps.Copy(out, want)
	return out
}
