package cluster

import (
	"maps"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// InstanceRepository is the repository of pgloop's instance image:
// PostgreSQL, Patroni and pgBackRest from Debian's packages, started by
// pgloop's own start-up program (pgloop instance, docs/images.md). It reads
// the environment Spilo's image reads, so pgloop renders the same pod for
// both.
const InstanceRepository = "ghcr.io/pgloop/postgres"

// DefaultImage is the image of clusters that set no spec.dockerImage when
// Options.Image is empty: pgloop's instance image of PostgreSQL 15. Its tag
// is <major>-<image revision>, raised when the image's packages or its
// start-up program's contract change, not with every pgloop release:
// changing it replaces the pods of every such cluster (their pod template
// hash changes). `make images` builds it under this name.
const DefaultImage = InstanceRepository + ":15-1"

// DefaultTerminationGracePeriodSeconds gives Patroni time to stop PostgreSQL
// cleanly (a checkpoint, and a switchover away from a primary) before the
// kubelet kills it. The zalando operator uses the same five minutes.
const DefaultTerminationGracePeriodSeconds = 300

// Names inside the pod.
const (
	// ContainerName is the name of the Spilo container.
	ContainerName = "postgres"
	// DataVolumeName is the volumeClaimTemplate of the data directory; the
	// claims are pgdata-<cluster>-<ordinal>.
	DataVolumeName = "pgdata"
	// shmVolumeName is a memory-backed /dev/shm: the container runtime's
	// 64 MiB default is too small for PostgreSQL's parallel queries.
	shmVolumeName = "dshm"
	// PostgresPortName and PatroniPortName name the container and Service
	// ports.
	PostgresPortName = "postgresql"
	PatroniPortName  = "patroni"
)

// User and group Spilo runs as in its non-root mode: the image's postgres
// user and the group that owns its directories.
const (
	spiloUID = 101
	spiloGID = 103
)

// Options are the operator-wide settings the StatefulSet depends on. The
// zero value is usable: every empty field takes the documented default.
type Options struct {
	// Image is the Spilo image of clusters without spec.dockerImage.
	// Empty means DefaultImage.
	Image string
	// DefaultRequests and DefaultLimits fill in the CPU and memory values
	// a cluster leaves unset. Nil means DefaultRequests() and
	// DefaultLimits().
	DefaultRequests corev1.ResourceList
	DefaultLimits   corev1.ResourceList
	// TerminationGracePeriodSeconds of the pods. 0 means
	// DefaultTerminationGracePeriodSeconds (0 would kill PostgreSQL
	// without a clean shutdown).
	TerminationGracePeriodSeconds int64
	// PoolerImage is the connection pooler image of clusters without
	// connectionPooler.dockerImage. Empty means DefaultPoolerImage.
	PoolerImage string
	// LogicalBackup configures the logical backup CronJobs (logicalbackup.go).
	LogicalBackup LogicalBackupOptions
	// EnableMasterLoadBalancer and EnableReplicaLoadBalancer make the
	// Services of clusters that set no enableMasterLoadBalancer or
	// enableReplicaLoadBalancer of type LoadBalancer.
	EnableMasterLoadBalancer  bool
	EnableReplicaLoadBalancer bool
	// EnableShmVolume mounts a memory-backed /dev/shm in the pods of
	// clusters that set no enableShmVolume. Nil means true, as in the
	// zalando operator.
	EnableShmVolume *bool
	// Backup is the default pgBackRest repository: every cluster without
	// spec.backup archives to it (pgbackrest.go). Nil means none.
	Backup *v1.BackupS3
	// ArchiveTimeout is archive_timeout of the clusters that archive and
	// set none. 0 means DefaultArchiveTimeout.
	ArchiveTimeout time.Duration
	// ArchivingImages are the images known to carry pgBackRest: only
	// clusters that run one of them archive (ArchiveBlocked). An entry
	// without a tag or digest stands for every tag of its repository. Nil
	// means InstanceRepository alone.
	ArchivingImages []string
	// BackupSchedule is when full backups are taken when the spec sets
	// no spec.backup.schedule ("" means DefaultBackupSchedule, "none"
	// none); BackupRetentionFull how many full backups are kept when
	// it sets no retention (0 means DefaultBackupRetentionFull).
	BackupSchedule      string
	BackupRetentionFull int32
	// BackupScheduleSpread delays each cluster's backups of the
	// operator's schedule by its own offset, less than this (see
	// SpreadSchedule); 0 takes them all at the schedule's times.
	BackupScheduleSpread time.Duration
}

// DefaultRequests are the requests of a cluster that sets none: enough for
// an idle instance, as in the zalando operator.
func DefaultRequests() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("100m"),
		corev1.ResourceMemory: resource.MustParse("100Mi"),
	}
}

// DefaultLimits are the limits of a cluster that sets none.
func DefaultLimits() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("1"),
		corev1.ResourceMemory: resource.MustParse("500Mi"),
	}
}

func (o Options) withDefaults() Options {
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.DefaultRequests == nil {
		o.DefaultRequests = DefaultRequests()
	}
	if o.DefaultLimits == nil {
		o.DefaultLimits = DefaultLimits()
	}
	if o.TerminationGracePeriodSeconds == 0 {
		o.TerminationGracePeriodSeconds = DefaultTerminationGracePeriodSeconds
	}
	return o
}

// StatefulSet returns the StatefulSet that runs the cluster's instances:
// one Spilo pod each, Patroni electing the primary through the Kubernetes
// API.
//
//   - Pods are created in parallel: Patroni, not start order, decides who
//     bootstraps the cluster and who replicates.
//   - The update strategy is OnDelete: the StatefulSet controller never
//     replaces a pod by itself, so pgloop replaces those that run
//     PostgreSQL one at a time, replicas first and the primary last, and
//     those that run nothing all at once (see Compare).
//   - The pod template carries AnnotationPodTemplateHash.
//   - Volume claims are retained on scale-down and deletion: numberOfInstances
//     0 stops the cluster and keeps its data.
func StatefulSet(pg *v1.Postgresql, opts Options) *appsv1.StatefulSet {
	opts = opts.withDefaults()
	// The hash leaves the bootstrap configuration out: a change of it
	// reaches a running cluster through Patroni, not new pods
	// (spiloConfiguration).
	template := podTemplate(pg, opts)
	setSpiloConfiguration(&template, spiloConfigurationJSON(pg, opts, false))
	hash := podTemplateHash(template)
	setSpiloConfiguration(&template, spiloConfigurationJSON(pg, opts, true))
	template.Annotations[AnnotationPodTemplateHash] = hash

	return &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "StatefulSet"},
		ObjectMeta: objectMeta(pg, StatefulSetName(pg.Name)),
		Spec: appsv1.StatefulSetSpec{
			Replicas:             ptr.To(pg.Spec.NumberOfInstances),
			Selector:             &metav1.LabelSelector{MatchLabels: Selector(pg.Name)},
			Template:             template,
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{dataVolumeClaim(pg)},
			ServiceName:          MasterServiceName(pg.Name),
			PodManagementPolicy:  appsv1.ParallelPodManagement,
			UpdateStrategy:       appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
		},
	}
}

// podTemplate builds the pod template without its hash annotation.
func podTemplate(pg *v1.Postgresql, opts Options) corev1.PodTemplateSpec {
	annotations := map[string]string{}
	maps.Copy(annotations, pg.Spec.PodAnnotations)

	spec := corev1.PodSpec{
		ServiceAccountName:            PodServiceAccountName,
		TerminationGracePeriodSeconds: ptr.To(opts.TerminationGracePeriodSeconds),
		SecurityContext: &corev1.PodSecurityContext{
			RunAsUser:      ptr.To[int64](spiloUID),
			RunAsGroup:     ptr.To[int64](spiloGID),
			FSGroup:        ptr.To[int64](spiloGID),
			RunAsNonRoot:   ptr.To(true),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: append([]corev1.Container{spiloContainer(pg, opts)}, sidecars(pg, opts)...),
	}
	if v, _ := backupCA(pg, opts); v != nil {
		spec.Volumes = append(spec.Volumes, *v)
	}
	_, tlsVolumes, _ := tlsMounts(pg, spiloTLSEnv)
	spec.Volumes = append(spec.Volumes, tlsVolumes...)
	for i := range pg.Spec.InitContainers {
		spec.InitContainers = append(spec.InitContainers, *pg.Spec.InitContainers[i].DeepCopy())
	}
	if shmVolume(pg, opts) {
		// No sizeLimit, as in the zalando operator: the pages count
		// against the container's memory limit, which bounds them.
		spec.Volumes = append(spec.Volumes, corev1.Volume{
			Name:         shmVolumeName,
			VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}},
		})
	}
	for i := range pg.Spec.Tolerations {
		spec.Tolerations = append(spec.Tolerations, *pg.Spec.Tolerations[i].DeepCopy())
	}
	if pg.Spec.NodeAffinity != nil {
		spec.Affinity = &corev1.Affinity{NodeAffinity: pg.Spec.NodeAffinity.DeepCopy()}
	}
	setPodTemplateFields(pg, &spec)
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: Labels(pg), Annotations: annotations},
		Spec:       spec,
	}
}

// shmVolume reports whether the pods get a memory-backed /dev/shm: the
// cluster's enableShmVolume, else the operator's.
func shmVolume(pg *v1.Postgresql, opts Options) bool {
	if pg.Spec.EnableShmVolume != nil {
		return *pg.Spec.EnableShmVolume
	}
	return opts.EnableShmVolume == nil || *opts.EnableShmVolume
}

// sidecars returns the cluster's sidecar containers as the zalando
// operator builds them: POD_NAME, POD_NAMESPACE, POSTGRES_USER and
// POSTGRES_PASSWORD first (a variable of the manifest with one of these
// names is dropped), the data volume mounted where Spilo has it, and the
// operator's default resources where the sidecar sets none.
func sidecars(pg *v1.Postgresql, opts Options) []corev1.Container {
	var out []corev1.Container
	for _, sc := range pg.Spec.Sidecars {
		env := []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
			{Name: "POSTGRES_USER", Value: SuperuserName},
			{Name: "POSTGRES_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: SecretName(SuperuserName, pg.Name)},
				Key:                  SecretPasswordKey,
			}}},
		}
		set := map[string]bool{}
		for _, e := range env {
			set[e.Name] = true
		}
		for i := range sc.Env {
			if !set[sc.Env[i].Name] {
				env = append(env, *sc.Env[i].DeepCopy())
			}
		}
		out = append(out, corev1.Container{
			Name:            sc.Name,
			Image:           sc.Image,
			ImagePullPolicy: corev1.PullIfNotPresent,
			Command:         slices.Clone(sc.Command),
			Ports:           slices.Clone(sc.Ports),
			Env:             env,
			Resources:       resources(sc.Resources, opts),
			VolumeMounts:    append([]corev1.VolumeMount{dataMount(pg)}, additionalMounts(pg, sc.Name)...),
		})
	}
	return out
}

func spiloContainer(pg *v1.Postgresql, opts Options) corev1.Container {
	image := pg.Spec.DockerImage
	if image == "" {
		image = opts.Image
	}
	mounts := []corev1.VolumeMount{dataMount(pg)}
	if shmVolume(pg, opts) {
		mounts = append(mounts, corev1.VolumeMount{Name: shmVolumeName, MountPath: "/dev/shm"})
	}
	if _, m := backupCA(pg, opts); m != nil {
		mounts = append(mounts, *m)
	}
	tlsEnv, _, tlsVolumeMounts := tlsMounts(pg, spiloTLSEnv)
	mounts = append(mounts, tlsVolumeMounts...)
	mounts = append(mounts, additionalMounts(pg, ContainerName)...)
	return corev1.Container{
		Name:            ContainerName,
		Image:           image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Ports: []corev1.ContainerPort{
			{Name: PostgresPortName, ContainerPort: PostgresPort, Protocol: corev1.ProtocolTCP},
			{Name: PatroniPortName, ContainerPort: PatroniPort, Protocol: corev1.ProtocolTCP},
		},
		Env:          append(append(append(spiloEnv(pg), pgbackrestEnv(pg, opts)...), tlsEnv...), userEnv(pg)...),
		EnvFrom:      userEnvFrom(pg),
		Resources:    resources(pg.Spec.Resources, opts),
		VolumeMounts: mounts,
		// zalando's livenessProbe, as given; none by default.
		LivenessProbe: pg.Spec.LivenessProbe.DeepCopy(),
		// Patroni answers 200 on /readiness once its PostgreSQL runs and
		// follows the leader (or is the leader): a pod that is Ready can
		// serve. There is no liveness probe: Patroni restarts PostgreSQL
		// itself, and killing a container for a slow answer could turn a
		// busy primary into a failover.
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path:   "/readiness",
				Port:   intstr.FromInt32(PatroniPort),
				Scheme: corev1.URISchemeHTTP,
			}},
			InitialDelaySeconds: 6,
			PeriodSeconds:       10,
			TimeoutSeconds:      5,
			SuccessThreshold:    1,
			FailureThreshold:    3,
		},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Privileged:               ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
}

// resources returns the container's requests and limits: the cluster's
// values, with Options' defaults for those it leaves unset. A default is
// never allowed to contradict a value the user gave: a default limit below
// the user's request is raised to it, and a default request above the
// user's limit is lowered to it. The user's own values are taken as they
// are (Validate checks that requests do not exceed limits).
func resources(r *v1.Resources, opts Options) corev1.ResourceRequirements {
	var reqCPU, reqMem, limCPU, limMem *resource.Quantity
	if r != nil && r.Requests != nil {
		reqCPU, reqMem = r.Requests.CPU, r.Requests.Memory
	}
	if r != nil && r.Limits != nil {
		limCPU, limMem = r.Limits.CPU, r.Limits.Memory
	}
	out := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	for _, res := range []struct {
		name           corev1.ResourceName
		request, limit *resource.Quantity
	}{
		{corev1.ResourceCPU, reqCPU, limCPU},
		{corev1.ResourceMemory, reqMem, limMem},
	} {
		request, requestSet := pick(res.request, opts.DefaultRequests, res.name)
		limit, limitSet := pick(res.limit, opts.DefaultLimits, res.name)
		switch {
		case request == nil || limit == nil || request.Cmp(*limit) <= 0:
		case requestSet && !limitSet:
			limit = ptr.To(request.DeepCopy())
		case limitSet && !requestSet:
			request = ptr.To(limit.DeepCopy())
		}
		if request != nil {
			out.Requests[res.name] = *request
		}
		if limit != nil {
			out.Limits[res.name] = *limit
		}
	}
	// Huge pages as given: no defaults, and no adjusting (Validate asks
	// for a request equal to its limit, as the apiserver does).
	for _, hp := range []struct {
		name           corev1.ResourceName
		request, limit func(*v1.ResourceDescription) *resource.Quantity
	}{
		{hugePages2Mi, hugePages2MiOf, hugePages2MiOf},
		{hugePages1Gi, hugePages1GiOf, hugePages1GiOf},
	} {
		if r == nil {
			break
		}
		if r.Requests != nil && hp.request(r.Requests) != nil {
			out.Requests[hp.name] = hp.request(r.Requests).DeepCopy()
		}
		if r.Limits != nil && hp.limit(r.Limits) != nil {
			out.Limits[hp.name] = hp.limit(r.Limits).DeepCopy()
		}
	}
	if len(out.Requests) == 0 {
		out.Requests = nil
	}
	if len(out.Limits) == 0 {
		out.Limits = nil
	}
	return out
}

// pick returns a copy of the user's value when set (and true), else a copy
// of the default for name, or nil when there is none.
func pick(user *resource.Quantity, defaults corev1.ResourceList, name corev1.ResourceName) (*resource.Quantity, bool) {
	if user != nil {
		return ptr.To(user.DeepCopy()), true
	}
	if q, ok := defaults[name]; ok {
		return ptr.To(q.DeepCopy()), false
	}
	return nil, false
}

func dataVolumeClaim(pg *v1.Postgresql) corev1.PersistentVolumeClaim {
	pvc := corev1.PersistentVolumeClaim{
		// The StatefulSet controller copies these labels onto each claim,
		// so claims are found by label after the StatefulSet is gone.
		ObjectMeta: metav1.ObjectMeta{Name: DataVolumeName, Labels: Labels(pg)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: pg.Spec.Volume.Size.DeepCopy()},
			},
		},
	}
	if pg.Spec.Volume.StorageClass != "" {
		pvc.Spec.StorageClassName = ptr.To(pg.Spec.Volume.StorageClass)
	}
	pvc.Spec.Selector = pg.Spec.Volume.Selector.DeepCopy()
	return pvc
}

// setSpiloConfiguration sets the SPILO_CONFIGURATION of t's containers.
func setSpiloConfiguration(t *corev1.PodTemplateSpec, value string) {
	for i := range t.Spec.Containers {
		for j := range t.Spec.Containers[i].Env {
			if e := &t.Spec.Containers[i].Env[j]; e.Name == SpiloConfigurationVar {
				e.Value = value
			}
		}
	}
}

// podTemplateHash hashes the template as pgloop built it. JSON encoding of
// the API types is deterministic (struct fields in order, map keys sorted),
// so equal templates always give equal hashes.
func podTemplateHash(t corev1.PodTemplateSpec) string { return jsonHash(t) }

// PodTemplateHash returns the pod template hash an object carries: the
// desired one on a StatefulSet built here, the one a pod was created with
// on a pod. It is empty when the object has none.
func PodTemplateHash(obj metav1.Object) string {
	if sts, ok := obj.(*appsv1.StatefulSet); ok {
		return sts.Spec.Template.Annotations[AnnotationPodTemplateHash]
	}
	return obj.GetAnnotations()[AnnotationPodTemplateHash]
}

// PodUpToDate reports whether the pod runs the StatefulSet's current pod
// template. A pod that is not must be deleted for the StatefulSet
// controller to re-create it (the update strategy is OnDelete). A pod
// without a hash (created before pgloop managed it) is never up to date.
func PodUpToDate(pod *corev1.Pod, sts *appsv1.StatefulSet) bool {
	h := PodTemplateHash(pod)
	return h != "" && h == PodTemplateHash(sts)
}
