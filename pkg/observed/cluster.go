package observed

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Cluster is what is known of one cluster: its resource and the objects
// its facts are derived from. They are read from shared caches, so no
// reader modifies them. A nil or empty field means there is none.
type Cluster struct {
	// Postgresql is the cluster's resource; it is never nil.
	Postgresql *v1.Postgresql
	// StatefulSet is the cluster's StatefulSet.
	StatefulSet *appsv1.StatefulSet
	// Poolers are the Deployments named as the cluster's connection
	// poolers (cluster.PoolerName) that exist, enabled or not.
	Poolers []*appsv1.Deployment
	// LogicalBackup is the CronJob named as the cluster's logical backup
	// (cluster.LogicalBackupJobName), enabled or not.
	LogicalBackup *batchv1.CronJob
	// PoolerPods are the pods of the cluster's connection poolers: why
	// one is not ready.
	PoolerPods []*corev1.Pod
	// Pods are the cluster's pods, terminating ones included, in any order.
	Pods []*corev1.Pod
	// Claims are the cluster's PersistentVolumeClaims.
	Claims []*corev1.PersistentVolumeClaim
	// StorageClasses are the StorageClasses of Claims that exist: whether
	// they allow volume expansion.
	StorageClasses []*storagev1.StorageClass
	// Leader is the ConfigMap named as Patroni's leader record of the
	// cluster (cluster.LeaderConfigMapName), whoever labelled it; read
	// only when Patroni keeps its state in ConfigMaps.
	Leader *corev1.ConfigMap
	// LeaderEndpoints is the Endpoints named as Patroni's leader record of
	// the cluster (cluster.LeaderEndpointsName), whoever labelled it; read
	// only when Patroni keeps its state in Endpoints
	// (v1.PatroniStoreEndpoints).
	//lint:ignore SA1019 Patroni 3 keeps its state in v1 Endpoints, which EndpointSlices cannot replace
	LeaderEndpoints *corev1.Endpoints
	// StatefulSetWarnings are the Warning Events about the StatefulSet,
	// including those of a former StatefulSet of the same name.
	StatefulSetWarnings []*corev1.Event
	// ClaimWarnings are the Warning Events about the Pending claims among
	// Claims. Those about other claims are never read, so a reader may
	// leave them out.
	ClaimWarnings []*corev1.Event
	// Quotas are the ResourceQuotas of the cluster's namespace.
	Quotas []*corev1.ResourceQuota
	// Secrets are the credentials Secrets of the cluster's roles
	// (cluster.SecretName) that exist, their data left out: their
	// versions say when a password changed.
	Secrets []*corev1.Secret
	// Archiving is continuous archiving as last checked on the primary
	// (pkg/archiving), nil when it was not or the cluster does not
	// archive.
	Archiving *v1.ArchivingStatus
	// Backup is what the same checks found of the base backup
	// status.backup.running names, nil when none runs or it was not
	// checked yet.
	Backup *v1.BackupReport
	// StatefulSetWarnings, ClaimWarnings and Quotas only explain missing
	// or unready pods: a reader may leave them out when at least the
	// desired number of pods exist, none terminating, all Ready. Claims
	// are read always: their size is part of the spec in effect.
}
