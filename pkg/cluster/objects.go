package cluster

import (
	"io"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Object is a Kubernetes object with metadata, as every object built here is.
type Object interface {
	metav1.Object
	runtime.Object
}

// Objects is everything pgloop creates for one cluster.
type Objects struct {
	// ServiceAccount, Role and RoleBinding are shared by every cluster of
	// the namespace; see ServiceAccount.
	ServiceAccount *corev1.ServiceAccount
	Role           *rbacv1.Role
	RoleBinding    *rbacv1.RoleBinding
	// Secrets are the superuser's, the replication user's, then one per
	// manifest user in name order; see Secrets.
	Secrets []*corev1.Secret
	// Services are master, replica and Patroni config, in that order.
	Services            []*corev1.Service
	PodDisruptionBudget *policyv1.PodDisruptionBudget
	StatefulSet         *appsv1.StatefulSet
	// Poolers are the objects of the connection poolers the spec
	// enables, master first; see Poolers.
	Poolers []Pooler
	// LogicalBackup is the logical backup CronJob, nil when the spec
	// does not enable it; see LogicalBackupCronJob.
	LogicalBackup *batchv1.CronJob
}

// Build returns every object of the cluster. Secrets get fresh passwords
// from random (crypto/rand when nil) on every call: the effect creates a
// Secret only when it is missing and never overwrites one, so the passwords
// of a Secret that exists are simply dropped.
func Build(pg *v1.Postgresql, opts Options, random io.Reader) (*Objects, error) {
	objs, err := BuildAllButStatefulSet(pg, opts, random)
	if err != nil {
		return nil, err
	}
	objs.StatefulSet = StatefulSet(pg, opts)
	return objs, nil
}

// BuildAllButStatefulSet is Build without the StatefulSet (nil): its pod
// template makes it two thirds of Build's cost, and a caller that knows
// what it should be (a StatefulSetSummary) builds it only to write it.
func BuildAllButStatefulSet(pg *v1.Postgresql, opts Options, random io.Reader) (*Objects, error) {
	secrets, err := Secrets(pg, random)
	if err != nil {
		return nil, err
	}
	return &Objects{
		ServiceAccount:      ServiceAccount(pg),
		Role:                Role(pg),
		RoleBinding:         RoleBinding(pg),
		Secrets:             secrets,
		Services:            Services(pg, opts),
		PodDisruptionBudget: PodDisruptionBudget(pg),
		Poolers:             Poolers(pg, opts),
		LogicalBackup:       LogicalBackupCronJob(pg, opts),
	}, nil
}

// All returns the objects in the order to create them: the RBAC and the
// Secrets the pods need before the StatefulSet that starts them.
func (o *Objects) All() []Object {
	all := []Object{o.ServiceAccount, o.Role, o.RoleBinding}
	for _, s := range o.Secrets {
		all = append(all, s)
	}
	for _, s := range o.Services {
		all = append(all, s)
	}
	all = append(all, o.PodDisruptionBudget, o.StatefulSet)
	for _, p := range o.Poolers {
		all = append(all, p.Deployment, p.Service, p.PodDisruptionBudget)
	}
	if o.LogicalBackup != nil {
		all = append(all, o.LogicalBackup)
	}
	return all
}

// Names of the objects of a cluster, derived from its name alone so that
// cleanup and `pgloop status` need no other state.

// StatefulSetName is the name of the cluster's StatefulSet: the cluster's.
func StatefulSetName(cluster string) string { return cluster }

// MasterServiceName is the Service that routes to the primary. It is also
// the StatefulSet's governing service, as in the zalando operator.
func MasterServiceName(cluster string) string { return cluster }

// ReplicaServiceName is the Service that routes to the replicas.
func ReplicaServiceName(cluster string) string { return cluster + "-repl" }

// ConfigServiceName is the headless Service named after Patroni's config
// object.
func ConfigServiceName(cluster string) string { return cluster + "-config" }

// PodDisruptionBudgetName is the name of the cluster's PodDisruptionBudget.
func PodDisruptionBudgetName(cluster string) string { return "postgres-" + cluster + "-pdb" }

// PersistentVolumeClaimName is the claim the StatefulSet controller creates
// for the pod of the given ordinal. Claims outlive scale-downs and the
// cluster itself (they are not owned by the cluster), so cleanup finds them
// by label rather than by counting instances.
func PersistentVolumeClaimName(cluster string, ordinal int32) string {
	return DataVolumeName + "-" + StatefulSetName(cluster) + "-" + strconv.Itoa(int(ordinal))
}

// PodName is the name of the pod of the given ordinal; Patroni uses it as
// the member name.
func PodName(cluster string, ordinal int32) string {
	return StatefulSetName(cluster) + "-" + strconv.Itoa(int(ordinal))
}

// ObjectNames are the names of a cluster's objects, for cleanup and for the
// status command.
type ObjectNames struct {
	StatefulSet         string
	Services            []string
	Secrets             []string
	PodDisruptionBudget string
	// ServiceAccount, Role and RoleBinding are shared with the other
	// clusters of the namespace: cleanup of one cluster must not delete
	// them (the cleanup of the namespace's last cluster does).
	ServiceAccount string
	Role           string
	RoleBinding    string
}

// Names returns the names of the objects Build creates for the cluster, in
// the same order. Patroni's ConfigMaps are found by their labels (see
// patroni.go).
func Names(pg *v1.Postgresql) ObjectNames {
	n := pg.Name
	secrets := []string{SecretName(SuperuserName, n), SecretName(ReplicationUserName, n)}
	for _, user := range SecretUsers(pg)[2:] {
		secrets = append(secrets, SecretName(user, n))
	}
	return ObjectNames{
		StatefulSet:         StatefulSetName(n),
		Services:            []string{MasterServiceName(n), ReplicaServiceName(n), ConfigServiceName(n)},
		Secrets:             secrets,
		PodDisruptionBudget: PodDisruptionBudgetName(n),
		ServiceAccount:      PodServiceAccountName,
		Role:                PodRoleName,
		RoleBinding:         PodRoleBindingName,
	}
}
