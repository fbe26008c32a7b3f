package informers

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/internal/fixtures"
	"github.com/pgloop/pgloop/pkg/patroni"
)

// The objects of one cluster as a watch hands them to an informer: what
// pgloop built, with what the apiserver, its controllers, the kubelet and
// Patroni add (defaults, status, managed fields, Patroni's annotations),
// decoded from JSON so that no string is shared with another object, as
// none is after a watch's decoding. The figures of BenchmarkCacheMemory are
// made of them; TestSlim* check the transform on them.

// apiCluster is one cluster's objects, by informer.
type apiCluster struct {
	pg          *v1.Postgresql
	statefulSet *appsv1.StatefulSet
	pods        []*corev1.Pod
	services    []*corev1.Service
	secrets     []*corev1.Secret
	budget      any // *policyv1.PodDisruptionBudget
	claims      []*corev1.PersistentVolumeClaim
	// configMaps are Patroni's four: leader, config, failover, sync.
	configMaps []*corev1.ConfigMap
}

// newAPICluster returns cluster name of namespace with instances pods,
// the first one Patroni's leader, as they are once it runs.
func newAPICluster(namespace, name string, instances int32) apiCluster {
	pg := fixtures.NewPG(name, instances)
	pg.Namespace = namespace
	pg.UID = types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", len(name), hash(namespace+name)))
	pg.Finalizers = []string{cluster.Finalizer}
	pg.ResourceVersion = "123456"
	pg.Status.Conditions = []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Running", Message: "every pod Ready", LastTransitionTime: fixtures.Ago(time.Hour), ObservedGeneration: 1},
		{Type: "Progressing", Status: metav1.ConditionFalse, Reason: "Running", LastTransitionTime: fixtures.Ago(time.Hour), ObservedGeneration: 1},
	}
	pg.Status.Primary = cluster.PodName(name, 0)
	pg.Status.ObservedGeneration = 1
	pg.ManagedFields = managedFields("pgloop", "kubectl-client-side-apply")
	objs, err := cluster.Build(pg, cluster.Options{}, rand.New(rand.NewSource(int64(hash(namespace+name)))))
	if err != nil {
		panic(err)
	}
	// Applied with kubectl, as most are: it keeps a copy of what was
	// applied.
	applied, err := json.Marshal(map[string]any{"apiVersion": v1.SchemeGroupVersion.String(), "kind": v1.PostgresqlKind,
		"metadata": map[string]string{"name": name, "namespace": namespace}, "spec": pg.Spec})
	if err != nil {
		panic(err)
	}
	pg.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: string(applied)}
	c := apiCluster{pg: pg}
	stamp := func(m *metav1.ObjectMeta, managers ...string) {
		m.UID = types.UID(fmt.Sprintf("%x-%s", hash(m.Namespace+m.Name), m.Name))
		m.ResourceVersion = "123457"
		m.CreationTimestamp = fixtures.Ago(time.Hour)
		m.ManagedFields = managedFields(managers...)
	}

	sts := objs.StatefulSet
	stamp(&sts.ObjectMeta, "pgloop", "kube-controller-manager")
	sts.Generation = 1
	sts.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	sts.Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: instances, ReadyReplicas: instances, CurrentReplicas: instances,
		UpdatedReplicas: instances, AvailableReplicas: instances, CurrentRevision: name + "-7d9f8b6c5d", UpdateRevision: name + "-7d9f8b6c5d", CollisionCount: ptr.To[int32](0)}
	c.statefulSet = sts
	for ord := range instances {
		c.pods = append(c.pods, apiPod(sts, ord, ord == 0))
		c.claims = append(c.claims, apiClaim(pg, sts, ord))
	}
	for _, s := range objs.Services {
		stamp(&s.ObjectMeta, "pgloop")
		s.Spec.ClusterIP = fmt.Sprintf("10.96.%d.%d", hash(s.Name)%250, hash(s.Namespace+s.Name)%250)
		s.Spec.ClusterIPs = []string{s.Spec.ClusterIP}
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
		s.Spec.SessionAffinity = corev1.ServiceAffinityNone
		s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyCluster)
		c.services = append(c.services, s)
	}
	for _, s := range objs.Secrets {
		stamp(&s.ObjectMeta, "pgloop")
		c.secrets = append(c.secrets, s)
	}
	pdb := objs.PodDisruptionBudget
	stamp(&pdb.ObjectMeta, "pgloop", "kube-controller-manager")
	pdb.Status.ObservedGeneration = 1
	pdb.Status.CurrentHealthy, pdb.Status.DesiredHealthy, pdb.Status.ExpectedPods = instances, 1, instances
	pdb.Status.DisruptionsAllowed = instances - 1
	pdb.Status.Conditions = []metav1.Condition{{Type: "DisruptionAllowed", Status: metav1.ConditionTrue, Reason: "SufficientPods", LastTransitionTime: fixtures.Ago(time.Hour), ObservedGeneration: 1}}
	c.budget = pdb

	leader := fixtures.Lock(pg, cluster.PodName(name, 0))
	config := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-config", Labels: cluster.Selector(name),
		Annotations: map[string]string{
			"config":     `{"loop_wait":10,"maximum_lag_on_failover":33554432,"postgresql":{"parameters":{"archive_mode":"on","archive_timeout":"1800s","autovacuum_analyze_scale_factor":0.02,"autovacuum_max_workers":5,"autovacuum_vacuum_scale_factor":0.05,"checkpoint_completion_target":0.9,"hot_standby":"on","log_autovacuum_min_duration":0,"log_checkpoints":"on","log_connections":"on","log_disconnections":"on","log_line_prefix":"%t [%p]: [%l-1] %c %x %d %u %a %h ","log_lock_waits":"on","log_min_duration_statement":500,"log_statement":"ddl","log_temp_files":0,"max_connections":100,"max_replication_slots":10,"max_wal_senders":10,"tcp_keepalives_idle":900,"tcp_keepalives_interval":100,"track_functions":"all","wal_level":"hot_standby","wal_log_hints":"on"},"use_pg_rewind":true,"use_slots":true},"retry_timeout":10,"ttl":30}`,
			"initialize": "7310386283432521812",
			"history":    `[[1,67108960,"no recovery target specified","2030-01-02T02:04:05.000000+00:00","` + cluster.PodName(name, 1) + `"]]`,
		}}}
	failover := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-failover", Labels: cluster.Selector(name)}}
	sync := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-sync", Labels: cluster.Selector(name),
		Annotations: map[string]string{"leader": cluster.PodName(name, 0)}}}
	for _, cm := range []*corev1.ConfigMap{leader, config, failover, sync} {
		stamp(&cm.ObjectMeta, "Patroni")
		c.configMaps = append(c.configMaps, cm)
	}
	return c.decoded()
}

// apiPod returns the pod of ordinal ord of sts as the StatefulSet
// controller creates it, the apiserver defaults it, the kubelet runs it and
// Patroni annotates it.
func apiPod(sts *appsv1.StatefulSet, ord int32, leader bool) *corev1.Pod {
	name := fmt.Sprintf("%s-%d", sts.Name, ord)
	t := sts.Spec.Template.DeepCopy()
	p := &corev1.Pod{ObjectMeta: t.ObjectMeta, Spec: t.Spec}
	p.Namespace, p.Name = sts.Namespace, name
	p.UID = types.UID(fmt.Sprintf("%x-pod-%s", hash(sts.Namespace+name), name))
	p.ResourceVersion = "123458"
	p.CreationTimestamp = fixtures.Ago(time.Hour)
	p.GenerateName = sts.Name + "-"
	p.Labels["apps.kubernetes.io/pod-index"] = fmt.Sprint(ord)
	p.Labels["controller-revision-hash"] = sts.Status.UpdateRevision
	p.Labels["statefulset.kubernetes.io/pod-name"] = name
	role := cluster.RoleReplica
	if leader {
		role = cluster.RoleMaster
	}
	p.Labels[cluster.LabelRole] = role
	ip := fmt.Sprintf("10.244.%d.%d", hash(name)%250, ord+2)
	p.Annotations[patroni.StatusAnnotation] = fmt.Sprintf(`{"conn_url":"postgres://%s:5432/postgres","api_url":"http://%s:8008/patroni","state":"running","role":"%s","version":"3.0.2","xlog_location":67108960,"timeline":1}`, ip, ip, role)
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	p.ManagedFields = managedFields("kube-controller-manager", "kubelet", "Patroni", "labeller")
	// The apiserver's defaults, and the service account token's volume.
	s := &p.Spec
	s.Hostname, s.Subdomain = name, sts.Spec.ServiceName
	s.NodeName = fmt.Sprintf("kwok-node-%d", hash(name)%46)
	s.SchedulerName = corev1.DefaultSchedulerName
	s.DNSPolicy, s.RestartPolicy = corev1.DNSClusterFirst, corev1.RestartPolicyAlways
	s.EnableServiceLinks, s.Priority = ptr.To(true), ptr.To[int32](0)
	s.PreemptionPolicy = ptr.To(corev1.PreemptLowerPriority)
	s.TerminationGracePeriodSeconds = ptr.To[int64](300)
	if s.SecurityContext == nil {
		s.SecurityContext = &corev1.PodSecurityContext{}
	}
	s.Tolerations = append(s.Tolerations,
		corev1.Toleration{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		corev1.Toleration{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)})
	token := "kube-api-access-" + fmt.Sprintf("%05x", hash(name)%0xfffff)
	s.Volumes = append(s.Volumes, corev1.Volume{Name: cluster.DataVolumeName, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: cluster.DataVolumeName + "-" + name}}},
		corev1.Volume{Name: token, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: ptr.To[int32](420),
			Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
					Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
					FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
			}}}})
	var statuses []corev1.ContainerStatus
	for i := range s.Containers {
		c := &s.Containers[i]
		c.TerminationMessagePath, c.TerminationMessagePolicy = corev1.TerminationMessagePathDefault, corev1.TerminationMessageReadFile
		if c.ImagePullPolicy == "" {
			c.ImagePullPolicy = corev1.PullIfNotPresent
		}
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: token, ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"})
		statuses = append(statuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: "docker-pullable://" + c.Image + "@sha256:" + strings.Repeat("ab", 32),
			ContainerID: "containerd://" + strings.Repeat(fmt.Sprintf("%08x", hash(name+c.Name)), 8), Ready: true, Started: ptr.To(true),
			State:        corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: fixtures.Ago(time.Hour)}},
			VolumeMounts: []corev1.VolumeMountStatus{{Name: token, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true, RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyDisabled)}}})
	}
	cond := func(typ corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue, LastTransitionTime: fixtures.Ago(time.Hour)}
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{cond("PodReadyToStartContainers"), cond(corev1.PodInitialized), cond(corev1.PodReady),
			cond(corev1.ContainersReady), cond(corev1.PodScheduled)},
		HostIP: "172.18.0.2", HostIPs: []corev1.HostIP{{IP: "172.18.0.2"}}, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		StartTime: ptr.To(fixtures.Ago(time.Hour)), QOSClass: corev1.PodQOSBurstable, ContainerStatuses: statuses}
	return p
}

// apiClaim returns the data volume claim of ordinal ord, Bound.
func apiClaim(pg *v1.Postgresql, sts *appsv1.StatefulSet, ord int32) *corev1.PersistentVolumeClaim {
	c := fixtures.Claim(pg, ord, corev1.ClaimBound, fixtures.WithClass("standard"))
	c.Labels = sts.Spec.VolumeClaimTemplates[0].Labels
	c.UID = types.UID(fmt.Sprintf("%x-pvc-%s", hash(c.Namespace+c.Name), c.Name))
	c.ResourceVersion = "123459"
	c.Annotations = map[string]string{"pv.kubernetes.io/bind-completed": "yes", "pv.kubernetes.io/bound-by-controller": "yes",
		"volume.beta.kubernetes.io/storage-provisioner": "rancher.io/local-path", "volume.kubernetes.io/storage-provisioner": "rancher.io/local-path",
		"volume.kubernetes.io/selected-node": "kwok-node-1"}
	c.Finalizers = []string{"kubernetes.io/pvc-protection"}
	c.ManagedFields = managedFields("kube-controller-manager", "kube-scheduler")
	c.Spec.VolumeName = "pvc-" + string(c.UID)
	c.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeFilesystem)
	c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	c.Status.AccessModes = c.Spec.AccessModes
	c.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}
	return c
}

// managedFields returns an entry per manager, each about the size the
// apiserver writes for an object of pgloop's (its field set is not the
// object's: only its size matters here).
func managedFields(managers ...string) []metav1.ManagedFieldsEntry {
	var out []metav1.ManagedFieldsEntry
	for _, m := range managers {
		var b strings.Builder
		b.WriteString(`{"f:metadata":{"f:labels":{`)
		for i := range 40 {
			fmt.Fprintf(&b, `"f:field-%s-%d":{},`, m, i)
		}
		b.WriteString(`"f:last":{}}}}`)
		out = append(out, metav1.ManagedFieldsEntry{Manager: m, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
			Time: ptr.To(fixtures.Ago(time.Hour)), FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(b.String())})
	}
	return out
}

// decoded returns c's objects each through JSON and back, as a watch
// decodes them: no string nor map is shared between two objects.
func (c apiCluster) decoded() apiCluster {
	out := apiCluster{pg: roundTrip(c.pg), statefulSet: roundTrip(c.statefulSet), budget: roundTrip(c.budget)}
	for _, p := range c.pods {
		out.pods = append(out.pods, roundTrip(p))
	}
	for _, s := range c.services {
		out.services = append(out.services, roundTrip(s))
	}
	for _, s := range c.secrets {
		out.secrets = append(out.secrets, roundTrip(s))
	}
	for _, cl := range c.claims {
		out.claims = append(out.claims, roundTrip(cl))
	}
	for _, cm := range c.configMaps {
		out.configMaps = append(out.configMaps, roundTrip(cm))
	}
	return out
}

// roundTrip returns obj encoded to JSON and decoded into a new value of
// its type.
func roundTrip[T any](obj T) T {
	b, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	v := reflect.New(reflect.TypeOf(obj).Elem())
	if err := json.Unmarshal(b, v.Interface()); err != nil {
		panic(err)
	}
	return v.Interface().(T)
}

// hash is a small deterministic hash of s, for names and addresses.
func hash(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}
