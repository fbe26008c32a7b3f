package cluster

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// asStored returns obj as the apiserver would hand it back: defaulted
// fields, server metadata and status that pgloop never sets, and a label
// and an annotation added by someone else. None of it is a difference.
func asStored(sts *appsv1.StatefulSet) *appsv1.StatefulSet {
	s := sts.DeepCopy()
	s.ResourceVersion = "42"
	s.Generation = 3
	s.UID = "sts-uid"
	s.Labels["example.com/added-by-someone"] = "x"
	s.Annotations = map[string]string{"example.com/note": "x"}
	s.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	pod := &s.Spec.Template.Spec
	pod.RestartPolicy = corev1.RestartPolicyAlways
	pod.DNSPolicy = corev1.DNSClusterFirst
	pod.SchedulerName = corev1.DefaultSchedulerName
	pod.DeprecatedServiceAccount = pod.ServiceAccountName
	c := &pod.Containers[0]
	c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	s.Spec.VolumeClaimTemplates[0].Spec.VolumeMode = ptr.To(corev1.PersistentVolumeFilesystem)
	s.Status = appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 1, CurrentRevision: "a", UpdateRevision: "b"}
	return s
}

func TestCompare(t *testing.T) {
	cases := []struct {
		name    string
		current func(cur *appsv1.StatefulSet)
		desired func(pg *v1.Postgresql)
		want    Change
	}{
		{name: "as built", want: NoChange},
		{
			name:    "defaults, status and foreign metadata",
			current: func(*appsv1.StatefulSet) {},
			want:    NoChange,
		},
		{
			name:    "hand edit of the template without the hash is not seen",
			current: func(cur *appsv1.StatefulSet) { cur.Spec.Template.Spec.Containers[0].Image = "other" },
			want:    NoChange,
		},
		{
			name:    "larger volume: immutable field, applied to the claims",
			desired: func(pg *v1.Postgresql) { pg.Spec.Volume.Size = resource.MustParse("5Gi") },
			want:    NoChange,
		},
		{
			name:    "more instances",
			desired: func(pg *v1.Postgresql) { pg.Spec.NumberOfInstances = 3 },
			want:    UpdateInPlace,
		},
		{
			name:    "stopped",
			desired: func(pg *v1.Postgresql) { pg.Spec.NumberOfInstances = 0 },
			want:    UpdateInPlace,
		},
		{
			name:    "replicas unset on current means 1",
			current: func(cur *appsv1.StatefulSet) { cur.Spec.Replicas = nil },
			want:    UpdateInPlace,
		},
		{
			name:    "a label of pgloop's removed",
			current: func(cur *appsv1.StatefulSet) { delete(cur.Labels, LabelTeam) },
			want:    UpdateInPlace,
		},
		{
			name:    "a label of pgloop's changed",
			current: func(cur *appsv1.StatefulSet) { cur.Labels[LabelManagedBy] = "helm" },
			want:    UpdateInPlace,
		},
		{
			name: "update strategy changed by hand",
			current: func(cur *appsv1.StatefulSet) {
				cur.Spec.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
			},
			want: UpdateInPlace,
		},
		{
			name: "claims deleted with the cluster",
			current: func(cur *appsv1.StatefulSet) {
				cur.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted = appsv1.DeletePersistentVolumeClaimRetentionPolicyType
			},
			want: UpdateInPlace,
		},
		{
			name:    "claim retention unset means Retain",
			current: func(cur *appsv1.StatefulSet) { cur.Spec.PersistentVolumeClaimRetentionPolicy = nil },
			want:    NoChange,
		},
		{
			name:    "an environment variable",
			desired: func(pg *v1.Postgresql) { pg.Spec.Env = []corev1.EnvVar{{Name: "A", Value: "1"}} },
			want:    ReplacePods,
		},
		{
			name:    "new image",
			desired: func(pg *v1.Postgresql) { pg.Spec.DockerImage = "example.com/spilo:2" },
			want:    ReplacePods,
		},
		{
			name:    "new shared parameter: Patroni applies it, no pod replaced",
			desired: func(pg *v1.Postgresql) { pg.Spec.PostgreSQL.Parameters = map[string]string{"work_mem": "8MB"} },
			want:    NoChange,
		},
		{
			name:    "new local parameter",
			desired: func(pg *v1.Postgresql) { pg.Spec.PostgreSQL.Parameters = map[string]string{"shared_buffers": "1GB"} },
			want:    ReplacePods,
		},
		{
			name:    "new pod annotation",
			desired: func(pg *v1.Postgresql) { pg.Spec.PodAnnotations = map[string]string{"a": "b"} },
			want:    ReplacePods,
		},
		{
			name: "template and replicas: replacing pods wins",
			desired: func(pg *v1.Postgresql) {
				pg.Spec.NumberOfInstances = 3
				pg.Spec.DockerImage = "example.com/spilo:2"
			},
			want: ReplacePods,
		},
		{
			name:    "no hash on current (not made by pgloop)",
			current: func(cur *appsv1.StatefulSet) { delete(cur.Spec.Template.Annotations, AnnotationPodTemplateHash) },
			want:    ReplacePods,
		},
		{
			name:    "another storage class",
			desired: func(pg *v1.Postgresql) { pg.Spec.Volume.StorageClass = "fast" },
			want:    Recreate,
		},
		{
			name: "a volume selector",
			desired: func(pg *v1.Postgresql) {
				pg.Spec.Volume.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "db"}}
			},
			want: Recreate,
		},
		{
			name: "another storage class and image: re-creating wins",
			desired: func(pg *v1.Postgresql) {
				pg.Spec.Volume.StorageClass = "fast"
				pg.Spec.DockerImage = "example.com/spilo:2"
			},
			want: Recreate,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pg := loadSample(t, "minimal")
			current := StatefulSet(pg, Options{})
			if c.current != nil {
				current = asStored(current)
				c.current(current)
			}
			if c.desired != nil {
				c.desired(pg)
			}
			desired := StatefulSet(pg, Options{})
			if got := Compare(current, desired); got != c.want {
				t.Errorf("Compare = %v, want %v", got, c.want)
			}
			// Whatever the change short of re-creating, applying desired
			// to current makes them equal in Compare's eyes.
			if got := Compare(ApplyStatefulSet(current, desired), desired); c.want != Recreate && got != NoChange {
				t.Errorf("after ApplyStatefulSet, Compare = %v, want NoChange", got)
			}
			// The facts keep desired's summary and drop the rest: it says
			// the same, whatever becomes of desired afterwards.
			summary := Summarize(desired)
			clear(desired.Labels)
			clear(desired.Spec.Template.Annotations)
			if sel := claimTemplateSelector(desired); sel != nil {
				clear(sel.MatchLabels)
			}
			desired.Spec = appsv1.StatefulSetSpec{}
			if got := CompareSummary(current, summary); got != c.want {
				t.Errorf("CompareSummary = %v, want %v", got, c.want)
			}
		})
	}
}

func TestApplyStatefulSet(t *testing.T) {
	pg := loadSample(t, "minimal")
	current := asStored(StatefulSet(pg, Options{}))
	before := current.DeepCopy()
	pg.Spec.NumberOfInstances = 4
	pg.Spec.DockerImage = "example.com/spilo:2"
	pg.Spec.Volume.Size = resource.MustParse("8Gi")
	desired := StatefulSet(pg, Options{})

	got := ApplyStatefulSet(current, desired)
	if !apiequality.Semantic.DeepEqual(current, before) {
		t.Errorf("ApplyStatefulSet modified current")
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"replicas", got.Spec.Replicas, ptr.To[int32](4)},
		{"template", got.Spec.Template, desired.Spec.Template},
		{"volume claims stay (immutable)", got.Spec.VolumeClaimTemplates, before.Spec.VolumeClaimTemplates},
		{"selector stays", got.Spec.Selector, before.Spec.Selector},
		{"resource version stays", got.ResourceVersion, "42"},
		{"status stays", got.Status, before.Status},
		{"revision history stays", got.Spec.RevisionHistoryLimit, ptr.To[int32](10)},
		{"foreign label stays", got.Labels["example.com/added-by-someone"], "x"},
		{"foreign annotation stays", got.Annotations["example.com/note"], "x"},
	}
	for _, c := range checks {
		if !apiequality.Semantic.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
		}
	}
	// The result shares nothing with desired.
	got.Spec.Template.Annotations["x"] = "y"
	if _, ok := desired.Spec.Template.Annotations["x"]; ok {
		t.Errorf("ApplyStatefulSet result aliases desired")
	}
}

func TestChangeString(t *testing.T) {
	for c, want := range map[Change]string{NoChange: "NoChange", UpdateInPlace: "UpdateInPlace", ReplacePods: "ReplacePods", Change(9): "Change(?)"} {
		if got := c.String(); got != want {
			t.Errorf("Change(%d).String() = %q, want %q", int(c), got, want)
		}
	}
}

func TestServiceNeedsUpdate(t *testing.T) {
	master := func(pg *v1.Postgresql) *corev1.Service { return MasterService(pg, Options{}) }
	replica := func(pg *v1.Postgresql) *corev1.Service { return ReplicaService(pg, Options{}) }
	lbOn := func(pg *v1.Postgresql) { pg.Spec.EnableMasterLoadBalancer = ptr.To(true) }
	cases := []struct {
		name    string
		service func(pg *v1.Postgresql) *corev1.Service
		current func(cur *corev1.Service)
		desired func(pg *v1.Postgresql)
		want    bool
	}{
		{name: "master as stored", service: master, want: false},
		{name: "replica as stored", service: replica, want: false},
		{name: "config as stored", service: ConfigService, want: false},
		{
			name:    "protocol left for the apiserver to default",
			service: master,
			current: func(cur *corev1.Service) { cur.Spec.Ports[0].Protocol = "" },
			want:    false,
		},
		{
			name:    "foreign annotation (a cloud controller's)",
			service: master,
			current: func(cur *corev1.Service) { cur.Annotations = map[string]string{"cloud.example.com/status": "x"} },
			want:    false,
		},
		{
			name:    "service annotation added to the spec",
			service: master,
			desired: func(pg *v1.Postgresql) { pg.Spec.ServiceAnnotations = map[string]string{"a": "b"} },
			want:    true,
		},
		{
			name:    "service annotation changed by hand",
			service: replica,
			current: func(cur *corev1.Service) { cur.Annotations = map[string]string{"a": "c"} },
			desired: func(pg *v1.Postgresql) { pg.Spec.ServiceAnnotations = map[string]string{"a": "b"} },
			want:    true,
		},
		{
			name:    "selector changed by hand",
			service: master,
			current: func(cur *corev1.Service) { cur.Spec.Selector[LabelRole] = RoleReplica },
			want:    true,
		},
		{
			name:    "selector added to the config service",
			service: ConfigService,
			current: func(cur *corev1.Service) { cur.Spec.Selector = map[string]string{"a": "b"} },
			want:    true,
		},
		{
			name:    "port changed",
			service: replica,
			current: func(cur *corev1.Service) { cur.Spec.Ports[0].Port = 5433 },
			want:    true,
		},
		{
			name:    "target port changed",
			service: replica,
			current: func(cur *corev1.Service) { cur.Spec.Ports[0].TargetPort = intstr.FromString("postgresql") },
			want:    true,
		},
		{
			name:    "extra port",
			service: master,
			current: func(cur *corev1.Service) {
				cur.Spec.Ports = append(cur.Spec.Ports, corev1.ServicePort{Name: "x", Port: 1})
			},
			want: true,
		},
		{
			name:    "type changed",
			service: master,
			current: func(cur *corev1.Service) { cur.Spec.Type = corev1.ServiceTypeNodePort },
			want:    true,
		},
		{
			name:    "master load balancer enabled",
			service: master,
			desired: lbOn,
			want:    true,
		},
		{
			name:    "load balancer as stored",
			service: master,
			current: func(cur *corev1.Service) { storeLoadBalancer(cur) },
			desired: lbOn,
			want:    false,
		},
		{
			name:    "source ranges changed",
			service: master,
			current: func(cur *corev1.Service) { storeLoadBalancer(cur) },
			desired: func(pg *v1.Postgresql) { lbOn(pg); pg.Spec.AllowedSourceRanges = []string{"10.0.0.0/8"} },
			want:    true,
		},
		{
			name:    "load balancer turned off",
			service: master,
			current: func(cur *corev1.Service) { storeLoadBalancer(cur) },
			want:    true,
		},
		{
			name:    "label of pgloop's removed",
			service: ConfigService,
			current: func(cur *corev1.Service) { delete(cur.Labels, LabelClusterName) },
			want:    true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pg := loadSample(t, "minimal")
			current := storedService(c.service(pg))
			if c.current != nil {
				c.current(current)
			}
			if c.desired != nil {
				c.desired(pg)
			}
			desired := c.service(pg)
			if got := ServiceNeedsUpdate(current, desired); got != c.want {
				t.Errorf("ServiceNeedsUpdate = %v, want %v", got, c.want)
			}
			applied := ApplyService(current, desired)
			if ServiceNeedsUpdate(applied, desired) {
				t.Errorf("after ApplyService it still needs an update")
			}
			if applied.Spec.ClusterIP != current.Spec.ClusterIP || applied.ResourceVersion != current.ResourceVersion {
				t.Errorf("ApplyService lost the cluster IP or resource version")
			}
			switch {
			case applied.Spec.Type == corev1.ServiceTypeClusterIP:
				// The apiserver refuses a ClusterIP Service with any of these.
				for _, p := range applied.Spec.Ports {
					if p.NodePort != 0 {
						t.Errorf("ClusterIP Service keeps node port %d", p.NodePort)
					}
				}
				if applied.Spec.ExternalTrafficPolicy != "" || applied.Spec.AllocateLoadBalancerNodePorts != nil || len(applied.Spec.LoadBalancerSourceRanges) != 0 {
					t.Errorf("ClusterIP Service keeps load balancer fields: %+v", applied.Spec)
				}
			case current.Spec.Type == corev1.ServiceTypeLoadBalancer:
				if applied.Spec.Ports[0].NodePort != current.Spec.Ports[0].NodePort {
					t.Errorf("node port %d, want %d kept", applied.Spec.Ports[0].NodePort, current.Spec.Ports[0].NodePort)
				}
			}
		})
	}
}

// storedService is svc as the apiserver returns it, with a cluster IP
// allocated (a different one than pgloop could ever ask for).
// storeLoadBalancer makes cur a load balancer Service as the apiserver
// stores it: a node port allocated and the external fields defaulted, the
// source ranges pgloop's default.
func storeLoadBalancer(cur *corev1.Service) {
	cur.Spec.Type = corev1.ServiceTypeLoadBalancer
	cur.Spec.Ports[0].NodePort = 31234
	cur.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	cur.Spec.AllocateLoadBalancerNodePorts = ptr.To(true)
	cur.Spec.LoadBalancerSourceRanges = []string{DefaultSourceRange}
}

func storedService(svc *corev1.Service) *corev1.Service {
	s := svc.DeepCopy()
	s.ResourceVersion = "7"
	if s.Spec.ClusterIP == "" {
		s.Spec.ClusterIP = "10.96.0.12"
		s.Spec.ClusterIPs = []string{"10.96.0.12"}
	} else {
		s.Spec.ClusterIPs = []string{s.Spec.ClusterIP}
	}
	s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	s.Spec.SessionAffinity = corev1.ServiceAffinityNone
	s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyCluster)
	return s
}

func TestPodDisruptionBudgetNeedsUpdate(t *testing.T) {
	cases := []struct {
		name    string
		current func(cur *policyv1.PodDisruptionBudget)
		desired func(pg *v1.Postgresql)
		want    bool
	}{
		{name: "as built", want: false},
		{
			name:    "status and foreign labels",
			current: func(cur *policyv1.PodDisruptionBudget) { cur.Status.CurrentHealthy = 1; cur.Labels["x"] = "y" },
			want:    false,
		},
		{
			name:    "stopped cluster: minAvailable 0",
			desired: func(pg *v1.Postgresql) { pg.Spec.NumberOfInstances = 0 },
			want:    true,
		},
		{
			name:    "more instances: still 1",
			desired: func(pg *v1.Postgresql) { pg.Spec.NumberOfInstances = 5 },
			want:    false,
		},
		{
			name:    "minAvailable as a percentage by hand",
			current: func(cur *policyv1.PodDisruptionBudget) { cur.Spec.MinAvailable = ptr.To(intstr.FromString("100%")) },
			want:    true,
		},
		{
			name: "maxUnavailable set by hand",
			current: func(cur *policyv1.PodDisruptionBudget) {
				cur.Spec.MinAvailable = nil
				cur.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(0))
			},
			want: true,
		},
		{
			name:    "selector changed",
			current: func(cur *policyv1.PodDisruptionBudget) { cur.Spec.Selector = &metav1.LabelSelector{} },
			want:    true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pg := loadSample(t, "minimal")
			current := PodDisruptionBudget(pg)
			current.ResourceVersion = "9"
			if c.current != nil {
				c.current(current)
			}
			if c.desired != nil {
				c.desired(pg)
			}
			desired := PodDisruptionBudget(pg)
			if got := PodDisruptionBudgetNeedsUpdate(current, desired); got != c.want {
				t.Errorf("PodDisruptionBudgetNeedsUpdate = %v, want %v", got, c.want)
			}
			applied := ApplyPodDisruptionBudget(current, desired)
			if PodDisruptionBudgetNeedsUpdate(applied, desired) || applied.ResourceVersion != "9" {
				t.Errorf("ApplyPodDisruptionBudget did not converge or lost the resource version")
			}
		})
	}
}

func TestRoleNeedsUpdate(t *testing.T) {
	pg := loadSample(t, "minimal")
	desired := Role(pg)
	if RoleNeedsUpdate(Role(pg), desired) {
		t.Errorf("an identical Role needs an update")
	}
	fewer := Role(pg)
	fewer.Rules = fewer.Rules[:2]
	if !RoleNeedsUpdate(fewer, desired) {
		t.Errorf("a Role missing rules does not need an update")
	}
	more := Role(pg)
	more.Rules = append(more.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}})
	if !RoleNeedsUpdate(more, desired) {
		t.Errorf("a Role granting more does not need an update")
	}
	more.OwnerReferences = append(more.OwnerReferences, metav1.OwnerReference{UID: "other"})
	applied := ApplyRole(more, desired)
	if RoleNeedsUpdate(applied, desired) {
		t.Errorf("after ApplyRole it still needs an update")
	}
	if len(applied.OwnerReferences) != len(more.OwnerReferences) || len(more.Rules) == len(applied.Rules) {
		t.Errorf("ApplyRole lost an owner reference or changed current")
	}
}
