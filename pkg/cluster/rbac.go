package cluster

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// The identity of the Spilo pods. Patroni uses the Kubernetes API as its
// store, so the pods need a ServiceAccount and a Role in their namespace.
// One set serves every cluster of a namespace, as in the zalando operator
// (postgres-pod): a Role could not be narrowed to one cluster's objects
// anyway, since RBAC cannot restrict list, watch and create by name.
//
// They belong to the namespace, not to any cluster: they carry no owner
// reference, only the labels application and managed-by. The first cluster
// of a namespace creates them, the others find them in place and write
// nothing, and the cleanup of the namespace's last cluster deletes them.
// (Releases before issue 14 put one owner reference per cluster on them,
// so that every create and delete of a cluster rewrote all three; the
// effects strip those references, see WithoutClusterOwnerReferences.)
//
// The operator must itself hold every permission of Role to create it
// (RBAC refuses to grant more than the grantor has).
const (
	PodServiceAccountName = "pgloop-pod"
	PodRoleName           = "pgloop-pod"
	PodRoleBindingName    = "pgloop-pod"
)

// ServiceAccount returns the pods' ServiceAccount in the cluster's
// namespace.
func ServiceAccount(pg *v1.Postgresql) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: sharedObjectMeta(pg, PodServiceAccountName),
	}
}

// Role returns what Patroni needs, and nothing more (no wildcards):
//
//  1. configmaps, every verb it uses: its leader lock, config, failover and
//     sync objects (KUBERNETES_USE_CONFIGMAPS);
//  2. endpoints, the same verbs: the store in Endpoints mode, and Patroni
//     also reads and, on the leader, patches its cluster's Endpoints;
//  3. pods get, list, watch to find its members; patch and update to set its
//     role label and status annotation on its own pod;
//  4. services create: Patroni creates <cluster>-config when it is missing.
func Role(pg *v1.Postgresql) *rbacv1.Role {
	storeVerbs := []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	return &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"},
		ObjectMeta: sharedObjectMeta(pg, PodRoleName),
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: storeVerbs},
			{APIGroups: []string{""}, Resources: []string{"endpoints"}, Verbs: storeVerbs},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "patch", "update", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"create"}},
		},
	}
}

// RoleBinding binds Role to the pods' ServiceAccount.
func RoleBinding(pg *v1.Postgresql) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
		ObjectMeta: sharedObjectMeta(pg, PodRoleBindingName),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: PodRoleName},
		Subjects: []rbacv1.Subject{{
			Kind:      rbacv1.ServiceAccountKind,
			Name:      PodServiceAccountName,
			Namespace: pg.Namespace,
		}},
	}
}
