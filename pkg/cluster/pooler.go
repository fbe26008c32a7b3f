package cluster

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// The connection pooler of a cluster is zalando's: per role (master,
// replica) a Deployment of PgBouncer pods, a Service and a
// PodDisruptionBudget, all named <cluster>-pooler (<cluster>-pooler-repl
// for the replicas), and one role of its own for both, whose Secret is made
// like the users'. PgBouncer connects to the cluster's master or replica
// Service as that role and looks up the clients' passwords with an auth
// query (pgsql installs the function in every database).
//
// The pooler's objects are labelled application=db-connection-pooler, not
// spilo: Patroni lists its members by application and cluster-name, and
// tools written for zalando tell pooler pods apart the same way.
const (
	// ApplicationPooler is LabelApplication's value on pooler objects.
	ApplicationPooler = "db-connection-pooler"
	// LabelConnectionPooler carries the pooler's name (PoolerName) on its
	// objects and pods; the Deployment, Service and PodDisruptionBudget
	// select on it.
	LabelConnectionPooler = "connection-pooler"
	// PoolerContainerName is the PgBouncer container's name.
	PoolerContainerName = "connection-pooler"
	// PoolerPortName names PgBouncer's container port.
	PoolerPortName = "pgbouncer"
	// PoolerImage is pgloop's PgBouncer image: Debian's pgbouncer,
	// started by pgloop pooler, which reads the environment zalando's
	// image reads (docs/images.md). Its tag is an image revision, as
	// DefaultImage's.
	PoolerImage = "ghcr.io/pgloop/pgbouncer:1"
	// DefaultPoolerImage is the PgBouncer image of clusters without
	// connectionPooler.dockerImage: pgloop's. Zalando's
	// (registry.opensource.zalan.do/acid/pgbouncer) reads the same
	// environment and stays usable, by that field or the operator's flag.
	DefaultPoolerImage = PoolerImage
	// poolerMaxClientConn is PgBouncer's max_client_conn, zalando's.
	poolerMaxClientConn = 10000
)

// PoolerRoles are the roles a pooler may front, in the order pgloop builds
// their objects.
var PoolerRoles = []string{RoleMaster, RoleReplica}

// PoolerName is the name of the Deployment, Service and pods' label of the
// pooler of role (RoleMaster or RoleReplica).
func PoolerName(cluster, role string) string {
	if role == RoleReplica {
		return cluster + "-pooler-repl"
	}
	return cluster + "-pooler"
}

// PoolerPodDisruptionBudgetName is the name of the pooler's
// PodDisruptionBudget.
func PoolerPodDisruptionBudgetName(cluster, role string) string {
	return "postgres-" + PoolerName(cluster, role) + "-pdb"
}

// PoolerSelector returns the labels that select the pooler's pods. It is
// the Deployment's selector, which cannot change.
func PoolerSelector(cluster, role string) map[string]string {
	return map[string]string{
		LabelApplication:      ApplicationPooler,
		LabelConnectionPooler: PoolerName(cluster, role),
	}
}

// poolerLabels are the labels of the pooler's objects and pods: the
// cluster's, with application db-connection-pooler, and the pooler's name.
func poolerLabels(pg *v1.Postgresql, role string) map[string]string {
	l := Labels(pg)
	l[LabelApplication] = ApplicationPooler
	l[LabelConnectionPooler] = PoolerName(pg.Name, role)
	return l
}

func poolerObjectMeta(pg *v1.Postgresql, role, name string) metav1.ObjectMeta {
	meta := objectMeta(pg, name)
	meta.Labels = poolerLabels(pg, role)
	return meta
}

// Pooler is the objects of the pooler of one role.
type Pooler struct {
	Role                string
	Deployment          *appsv1.Deployment
	Service             *corev1.Service
	PodDisruptionBudget *policyv1.PodDisruptionBudget
}

// Poolers returns the objects of the poolers the spec enables, master
// first. The pooler role's Secret is one of Secrets.
func Poolers(pg *v1.Postgresql, opts Options) []Pooler {
	var out []Pooler
	for _, role := range PoolerRoles {
		if pg.Spec.PoolerEnabled(role == RoleReplica) {
			out = append(out, Pooler{
				Role:                role,
				Deployment:          PoolerDeployment(pg, role, opts),
				Service:             PoolerService(pg, role),
				PodDisruptionBudget: PoolerPodDisruptionBudget(pg, role),
			})
		}
	}
	return out
}

// poolerSettings are the pooler's effective settings: the spec's, or the
// defaults.
type poolerSettings struct {
	instances, maxDBConnections int32
	mode, image                 string
}

func settings(pg *v1.Postgresql, opts Options) poolerSettings {
	s := poolerSettings{
		instances:        v1.DefaultPoolerInstances,
		maxDBConnections: v1.DefaultPoolerMaxDBConnections,
		mode:             v1.DefaultPoolerMode,
		image:            opts.PoolerImage,
	}
	if s.image == "" {
		s.image = DefaultPoolerImage
	}
	p := pg.Spec.ConnectionPooler
	if p == nil {
		return s
	}
	if p.NumberOfInstances != nil {
		s.instances = *p.NumberOfInstances
	}
	if p.MaxDBConnections != nil {
		s.maxDBConnections = *p.MaxDBConnections
	}
	if p.Mode != "" {
		s.mode = p.Mode
	}
	if p.DockerImage != "" {
		s.image = p.DockerImage
	}
	return s
}

// PoolerInstances is how many pods the poolers of pg run per role.
func PoolerInstances(pg *v1.Postgresql) int32 { return settings(pg, Options{}).instances }

// PoolerDefaultRequests and PoolerDefaultLimits are the PgBouncer
// container's resources where connectionPooler.resources leaves them
// unset: zalando's.
func PoolerDefaultRequests() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("500m"),
		corev1.ResourceMemory: resource.MustParse("100Mi"),
	}
}

// PoolerDefaultLimits are the PgBouncer container's limits where
// connectionPooler.resources leaves them unset: zalando's.
func PoolerDefaultLimits() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("1"),
		corev1.ResourceMemory: resource.MustParse("100Mi"),
	}
}

// PoolerDeployment runs the PgBouncer pods of the pooler of role. Its pods
// connect to the role's Service as the pooler's role; the pool sizes split
// maxDBConnections among the pods as zalando does (each pod's pool is half
// its share, its minimum and reserve a quarter). The pod template carries
// AnnotationPodTemplateHash, and so does the Deployment: a change of the
// spec that changes the pods is seen by comparing hashes, as for the
// StatefulSet. The Deployment controller rolls the pods itself: they hold
// no data.
func PoolerDeployment(pg *v1.Postgresql, role string, opts Options) *appsv1.Deployment {
	s := settings(pg, opts)
	perPod := max(s.maxDBConnections/s.instances, 1)
	defaultSize := max(perPod/2, 1)
	minSize := defaultSize / 2
	host := MasterServiceName(pg.Name)
	if role == RoleReplica {
		host = ReplicaServiceName(pg.Name)
	}
	user := pg.Spec.PoolerUser()
	env := []corev1.EnvVar{
		{Name: "PGHOST", Value: host},
		{Name: "PGPORT", Value: strconv.Itoa(PostgresPort)},
		{Name: "PGUSER", Value: user},
		{Name: "PGSCHEMA", Value: pg.Spec.PoolerSchema()},
		{Name: "PGPASSWORD", ValueFrom: passwordRef(SecretName(user, pg.Name))},
		{Name: "CONNECTION_POOLER_PORT", Value: strconv.Itoa(PostgresPort)},
		{Name: "CONNECTION_POOLER_MODE", Value: s.mode},
		{Name: "CONNECTION_POOLER_DEFAULT_SIZE", Value: strconv.Itoa(int(defaultSize))},
		{Name: "CONNECTION_POOLER_MIN_SIZE", Value: strconv.Itoa(int(minSize))},
		{Name: "CONNECTION_POOLER_RESERVE_SIZE", Value: strconv.Itoa(int(minSize))},
		{Name: "CONNECTION_POOLER_MAX_CLIENT_CONN", Value: strconv.Itoa(poolerMaxClientConn)},
		{Name: "CONNECTION_POOLER_MAX_DB_CONN", Value: strconv.Itoa(int(perPod))},
	}
	// The pooler serves spec.tls's certificate to its clients; its
	// process reads the files as the pod's fsGroup, Spilo's group, as
	// zalando's spilo_fsgroup gives.
	tlsEnv, tlsVolumes, tlsVolumeMounts := tlsMounts(pg, poolerTLSEnv)
	env = append(env, tlsEnv...)
	var res *v1.Resources
	if pg.Spec.ConnectionPooler != nil {
		res = pg.Spec.ConnectionPooler.Resources
	}
	container := corev1.Container{
		Name:            PoolerContainerName,
		Image:           s.image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Ports:           []corev1.ContainerPort{{Name: PoolerPortName, ContainerPort: PostgresPort, Protocol: corev1.ProtocolTCP}},
		Env:             env,
		VolumeMounts:    tlsVolumeMounts,
		Resources:       resources(res, Options{DefaultRequests: PoolerDefaultRequests(), DefaultLimits: PoolerDefaultLimits()}),
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(PoolerPortName)}},
			PeriodSeconds: 10, TimeoutSeconds: 5, SuccessThreshold: 1, FailureThreshold: 3,
		},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	spec := corev1.PodSpec{
		Containers:                    []corev1.Container{container},
		TerminationGracePeriodSeconds: ptr.To[int64](5),
		Volumes:                       tlsVolumes,
	}
	if len(tlsVolumes) > 0 {
		spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To[int64](spiloGID)}
	}
	for i := range pg.Spec.Tolerations {
		spec.Tolerations = append(spec.Tolerations, *pg.Spec.Tolerations[i].DeepCopy())
	}
	if pg.Spec.NodeAffinity != nil {
		spec.Affinity = &corev1.Affinity{NodeAffinity: pg.Spec.NodeAffinity.DeepCopy()}
	}
	template := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: poolerLabels(pg, role), Annotations: map[string]string{}},
		Spec:       spec,
	}
	hash := podTemplateHash(template)
	template.Annotations[AnnotationPodTemplateHash] = hash
	meta := poolerObjectMeta(pg, role, PoolerName(pg.Name, role))
	meta.Annotations = map[string]string{AnnotationPodTemplateHash: hash}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "Deployment"},
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(s.instances),
			Selector: &metav1.LabelSelector{MatchLabels: PoolerSelector(pg.Name, role)},
			Template: template,
		},
	}
}

// PoolerService routes to the pooler's pods on PostgreSQL's port:
// applications connect to it as they would to the role's Service. Its
// annotations and type follow the role's, as zalando's (ServiceAnnotations,
// PoolerExposure).
func PoolerService(pg *v1.Postgresql, role string) *corev1.Service {
	meta := poolerObjectMeta(pg, role, PoolerName(pg.Name, role))
	meta.Annotations = ServiceAnnotations(pg, role)
	svc := &corev1.Service{
		TypeMeta:   serviceTypeMeta,
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: PoolerSelector(pg.Name, role),
			Ports: []corev1.ServicePort{{
				Name:       PostgresPortName,
				Protocol:   corev1.ProtocolTCP,
				Port:       PostgresPort,
				TargetPort: intstr.FromString(PoolerPortName),
			}},
		},
	}
	expose(svc, pg, PoolerExposure(pg, role))
	return svc
}

// PoolerPodDisruptionBudget keeps one pooler pod through voluntary
// disruptions when there are two or more; a single pod is not held, so a
// node drain never waits on it (the Deployment starts it elsewhere).
func PoolerPodDisruptionBudget(pg *v1.Postgresql, role string) *policyv1.PodDisruptionBudget {
	var minAvailable int32
	if PoolerInstances(pg) > 1 {
		minAvailable = 1
	}
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: policyv1.SchemeGroupVersion.String(), Kind: "PodDisruptionBudget"},
		ObjectMeta: poolerObjectMeta(pg, role, PoolerPodDisruptionBudgetName(pg.Name, role)),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(minAvailable)),
			Selector:     &metav1.LabelSelector{MatchLabels: PoolerSelector(pg.Name, role)},
		},
	}
}

// DeploymentNeedsUpdate reports whether current differs from desired in
// what pgloop owns: replicas, the pod template (by its hash annotation, as
// for the StatefulSet), and pgloop's labels and annotations.
func DeploymentNeedsUpdate(current, desired *appsv1.Deployment) bool {
	return ptr.Deref(current.Spec.Replicas, 1) != ptr.Deref(desired.Spec.Replicas, 1) ||
		current.Spec.Template.Annotations[AnnotationPodTemplateHash] != desired.Spec.Template.Annotations[AnnotationPodTemplateHash] ||
		!containsAll(current.Labels, desired.Labels) ||
		!containsAll(current.Annotations, desired.Annotations)
}

// ApplyDeployment returns a copy of current with what pgloop owns taken
// from desired, ready for an Update; the selector, which cannot change,
// keeps current's value.
func ApplyDeployment(current, desired *appsv1.Deployment) *appsv1.Deployment {
	out := current.DeepCopy()
	out.Labels = mergeInto(out.Labels, desired.Labels)
	out.Annotations = mergeInto(out.Annotations, desired.Annotations)
	d := desired.DeepCopy()
	out.Spec.Replicas = d.Spec.Replicas
	out.Spec.Template = d.Spec.Template
	return out
}

// DeploymentReady says whether the Deployment runs its current template
// on every desired pod, all available, none of an older template left; if
// not, it says how far it is ("1 of 2 pods ready").
func DeploymentReady(d *appsv1.Deployment) (bool, string) {
	want := ptr.Deref(d.Spec.Replicas, 1)
	st := &d.Status
	switch {
	case st.ObservedGeneration < d.Generation:
		return false, "its controller has not seen the latest change"
	case st.UpdatedReplicas < want:
		return false, strconv.Itoa(int(st.UpdatedReplicas)) + " of " + strconv.Itoa(int(want)) + " pods updated"
	case st.Replicas > want:
		return false, strconv.Itoa(int(st.Replicas-want)) + " old pods still running"
	case st.AvailableReplicas < want:
		msg := strconv.Itoa(int(st.AvailableReplicas)) + " of " + strconv.Itoa(int(want)) + " pods ready"
		// The controller's words for pods it cannot create (a quota) or
		// that do not come up in time.
		for _, c := range st.Conditions {
			if c.Status == corev1.ConditionTrue && c.Type == appsv1.DeploymentReplicaFailure ||
				c.Status == corev1.ConditionFalse && c.Type == appsv1.DeploymentProgressing {
				msg += " (" + c.Reason + ": " + c.Message + ")"
				break
			}
		}
		return false, msg
	}
	return true, ""
}
