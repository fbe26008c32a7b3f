package v1

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestValidatePodTemplate(t *testing.T) {
	cm := func(name string) corev1.VolumeSource {
		return corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
	}
	tests := []struct {
		name   string
		mutate func(p *Postgresql)
		want   []string
	}{
		{name: "every field, valid", mutate: func(p *Postgresql) {
			p.Spec.Sidecars = []Sidecar{{Name: "exporter", Image: "exporter:1"}}
			p.Spec.Env = []corev1.EnvVar{{Name: "ALLOW_NOSSL", Value: "true"}, {Name: "wal_s3_bucket", Value: "b"},
				{Name: "FROM_SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}}}
			p.Spec.EnvFrom = []corev1.EnvFromSource{{Prefix: "X_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}}
			p.Spec.AdditionalVolumes = []AdditionalVolume{
				{Name: "extra", MountPath: "/etc/extra", VolumeSource: cm("c")},
				{Name: "scratch", MountPath: "/scratch", TargetContainers: []string{"all"}, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "one", MountPath: "/etc/one.conf", SubPath: "one.conf", TargetContainers: []string{"postgres", "exporter"}, VolumeSource: cm("c")},
			}
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule}}
			p.Spec.PodPriorityClassName, p.Spec.SchedulerName = "db-critical", "my-scheduler"
			p.Spec.SpiloRunAsUser, p.Spec.SpiloRunAsGroup, p.Spec.SpiloFSGroup = ptr.To[int64](1000), ptr.To[int64](0), ptr.To[int64](2000)
			p.Spec.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/liveness", Port: intstr.FromString("patroni")}}}
			p.Spec.Resources = &Resources{Requests: &ResourceDescription{HugePages2Mi: quantity("64Mi")}, Limits: &ResourceDescription{HugePages2Mi: quantity("64Mi"), HugePages1Gi: quantity("2Gi")}}
			p.Spec.Volume.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "db"}}
			p.Spec.Volume.SubPath, p.Spec.Volume.IsSubPathExpr = "$(POD_NAMESPACE)/data", ptr.To(true)
		}},
		{
			name: "env of pgloop's",
			mutate: func(p *Postgresql) {
				p.Spec.Env = []corev1.EnvVar{{Name: "PGVERSION", Value: "16"}, {Name: "PGBACKREST_REPO1_PATH", Value: "/x"}}
			},
			want: []string{"spec.env[0].name: Forbidden: PGVERSION is set by pgloop in the PostgreSQL container and cannot be overridden",
				"spec.env[1].name: Forbidden: PGBACKREST_ variables are set by pgloop"},
		},
		{
			name: "env twice, a bad name, value and valueFrom",
			mutate: func(p *Postgresql) {
				p.Spec.Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "A", Value: "2"}, {Name: "1B"},
					{Name: "C", Value: "x", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
			},
			want: []string{`spec.env[1].name: Duplicate value: "A"`, `spec.env[2].name: Invalid value: "1B"`, "spec.env[3].valueFrom: Invalid value: \"\": may not be given with value"},
		},
		{
			name: "envFrom with both kinds",
			mutate: func(p *Postgresql) {
				p.Spec.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{}, SecretRef: &corev1.SecretEnvSource{}}}
			},
			want: []string{"spec.envFrom[0]: Invalid value: \"\": must have exactly one of configMapRef or secretRef"},
		},
		{
			name: "additional volumes that clash",
			mutate: func(p *Postgresql) {
				p.Spec.AdditionalVolumes = []AdditionalVolume{
					{Name: "pgdata", MountPath: "/a", VolumeSource: cm("c")},
					{Name: "b", MountPath: "/home/postgres/pgdata/", VolumeSource: cm("c")},
					{Name: "c", MountPath: "/a", VolumeSource: cm("c")},
					{Name: "c", MountPath: "relative", VolumeSource: corev1.VolumeSource{}},
					{Name: "e", MountPath: "/e", SubPath: "../up", TargetContainers: []string{"all", "postgres"}, VolumeSource: cm("c")},
					{Name: "f", MountPath: "/f", TargetContainers: []string{"nosuch"}, VolumeSource: cm("c")},
				}
			},
			want: []string{
				`spec.additionalVolumes[0].name: Invalid value: "pgdata": is a volume of pgloop's`,
				`spec.additionalVolumes[1].mountPath: Invalid value: "/home/postgres/pgdata/": pgloop mounts a volume there`,
				`spec.additionalVolumes[2].mountPath: Duplicate value: "/a"`,
				`spec.additionalVolumes[3].name: Duplicate value: "c"`,
				`spec.additionalVolumes[3].mountPath: Invalid value: "relative": must be an absolute path`,
				`spec.additionalVolumes[3].volumeSource: Invalid value: 0: must have exactly one kind of volume`,
				`spec.additionalVolumes[4].subPath: Invalid value: "../up": must not contain '..'`,
				`spec.additionalVolumes[4].targetContainers[0]: Invalid value: "all": "all" must be the only target container`,
				`spec.additionalVolumes[5].targetContainers[0]: Unsupported value: "nosuch": supported values: "all", "postgres"`,
			},
		},
		{
			name: "topology spread constraints the apiserver refuses",
			mutate: func(p *Postgresql) {
				p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{
					{MaxSkew: 0, TopologyKey: "zone", WhenUnsatisfiable: "Maybe"},
					{MaxSkew: 1, TopologyKey: "a", WhenUnsatisfiable: corev1.ScheduleAnyway, MinDomains: ptr.To[int32](2)},
					{MaxSkew: 1, TopologyKey: "a", WhenUnsatisfiable: corev1.ScheduleAnyway},
				}
			},
			want: []string{
				"spec.topologySpreadConstraints[0].maxSkew: Invalid value: 0: must be greater than zero",
				`spec.topologySpreadConstraints[0].whenUnsatisfiable: Unsupported value: "Maybe"`,
				"spec.topologySpreadConstraints[1].minDomains: Invalid value: 2: can only be set with whenUnsatisfiable DoNotSchedule",
				"spec.topologySpreadConstraints[2]: Duplicate value",
			},
		},
		{
			name: "names, root, probe",
			mutate: func(p *Postgresql) {
				p.Spec.PodPriorityClassName, p.Spec.SchedulerName = "High_Priority", "Sched"
				p.Spec.SpiloRunAsUser = ptr.To[int64](0)
				p.Spec.LivenessProbe = &corev1.Probe{SuccessThreshold: 2, ProbeHandler: corev1.ProbeHandler{
					HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("metrics")}, TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(5432)}}}
			},
			want: []string{
				`spec.podPriorityClassName: Invalid value: "High_Priority"`, `spec.schedulerName: Invalid value: "Sched"`,
				"spec.spiloRunAsUser: Invalid value: 0: must be between 1 and 2147483647: pgloop's pods run as non-root",
				`spec.livenessProbe.httpGet.port: Unsupported value: "metrics": supported values: "postgresql", "patroni"`,
				"spec.livenessProbe: Invalid value: 2: must have exactly one of httpGet, tcpSocket, exec or grpc",
				"spec.livenessProbe.successThreshold: Invalid value: 2: must be 1 for a liveness probe",
			},
		},
		{
			name: "huge pages",
			mutate: func(p *Postgresql) {
				p.Spec.Resources = &Resources{Requests: &ResourceDescription{HugePages2Mi: quantity("64Mi"), HugePages1Gi: quantity("1Gi")},
					Limits: &ResourceDescription{HugePages1Gi: quantity("2Gi")}}
				p.Spec.ConnectionPooler = &ConnectionPooler{Resources: &Resources{Limits: &ResourceDescription{HugePages2Mi: quantity("3Mi")}}}
			},
			want: []string{
				"spec.resources.limits.hugepages-2Mi: Required value: huge pages are not overcommitted: set limits.hugepages-2Mi equal to requests.hugepages-2Mi (64Mi)",
				`spec.resources.requests.hugepages-1Gi: Invalid value: "1Gi": must equal limits.hugepages-1Gi (2Gi)`,
				`spec.connectionPooler.resources.limits.hugepages-2Mi: Invalid value: "3Mi": must be a whole number of 2Mi pages`,
			},
		},
		{
			name: "volume selector and subPath",
			mutate: func(p *Postgresql) {
				p.Spec.Volume.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Near"}}}
				p.Spec.Volume.SubPath = "/abs"
			},
			want: []string{`spec.volume.selector.matchExpressions[0].operator: Invalid value: "Near"`, `spec.volume.subPath: Invalid value: "/abs": must be a relative path`},
		},
		{
			name:   "subPath expression without a subPath",
			mutate: func(p *Postgresql) { p.Spec.Volume.IsSubPathExpr = ptr.To(true) },
			want:   []string{"spec.volume.subPath: Required value: isSubPathExpr needs a subPath expression"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkValidate(t, tt.mutate, tt.want) })
	}
}

// TestCRDPodTemplateFields: the apiserver admits every pod template field
// and keeps it through its pruning, volumeSource (whose schema is open)
// included, so the object decodes back as it was sent.
func TestCRDPodTemplateFields(t *testing.T) {
	h := newCRDHarness(t)
	p := decodeSample(t, "minimal.yaml")
	q := resource.MustParse("2Mi")
	p.Spec.Env = []corev1.EnvVar{{Name: "A", Value: "1"}}
	p.Spec.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}}}
	p.Spec.AdditionalVolumes = []AdditionalVolume{{Name: "extra", MountPath: "/etc/extra", SubPath: "a", TargetContainers: []string{"all"},
		VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"},
			Items: []corev1.KeyToPath{{Key: "k", Path: "p"}}}}}}
	p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: corev1.DoNotSchedule}}
	p.Spec.PodPriorityClassName, p.Spec.SchedulerName = "high", "mine"
	p.Spec.SpiloRunAsUser, p.Spec.SpiloRunAsGroup, p.Spec.SpiloFSGroup = ptr.To[int64](1000), ptr.To[int64](0), ptr.To[int64](2000)
	p.Spec.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("postgresql")}}}
	p.Spec.Resources = &Resources{Requests: &ResourceDescription{HugePages2Mi: &q}, Limits: &ResourceDescription{HugePages2Mi: &q}}
	p.Spec.Volume.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "db"}}
	p.Spec.Volume.SubPath, p.Spec.Volume.IsSubPathExpr = "$(POD_NAMESPACE)", ptr.To(true)

	obj := toUnstructured(t, p)
	h.decode(obj)
	if errs := h.admit(obj, nil); len(errs) != 0 {
		t.Fatalf("refused: %v", errs.ToAggregate())
	}
	var back Postgresql
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &back); err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(back.Spec.AdditionalVolumes, p.Spec.AdditionalVolumes) ||
		!apiequality.Semantic.DeepEqual(back.Spec.LivenessProbe, p.Spec.LivenessProbe) ||
		!apiequality.Semantic.DeepEqual(back.Spec.Volume, p.Spec.Volume) ||
		!apiequality.Semantic.DeepEqual(back.Spec.Resources, p.Spec.Resources) {
		t.Errorf("the stored spec differs from the one sent:\n%+v\nwant\n%+v", back.Spec, p.Spec)
	}
}
