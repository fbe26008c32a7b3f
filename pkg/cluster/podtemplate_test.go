package cluster

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// podFieldsCluster is the full sample with every pod template field set.
func podFieldsCluster(t *testing.T) *v1.Postgresql {
	pg := loadSample(t, "full")
	pg.Spec.Sidecars = []v1.Sidecar{{Name: "exporter", Image: "exporter:1"}}
	pg.Spec.Env = []corev1.EnvVar{{Name: "ALLOW_NOSSL", Value: "true"}, {Name: "MY_NS", Value: "$(POD_NAMESPACE)"}}
	pg.Spec.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "extra-env"}}}}
	cm := corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "extra"}}}
	pg.Spec.AdditionalVolumes = []v1.AdditionalVolume{
		{Name: "extra", MountPath: "/etc/extra", VolumeSource: cm},
		{Name: "scratch", MountPath: "/scratch", TargetContainers: []string{"all"}, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "one", MountPath: "/etc/one.conf", SubPath: "one.conf", TargetContainers: []string{"exporter"}, VolumeSource: cm},
	}
	pg.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{
		{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule},
		{MaxSkew: 2, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "acid"}}},
	}
	pg.Spec.PodPriorityClassName, pg.Spec.SchedulerName = "db-critical", "my-scheduler"
	pg.Spec.SpiloRunAsUser, pg.Spec.SpiloFSGroup = ptr.To[int64](1000), ptr.To[int64](2000)
	pg.Spec.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/liveness", Port: intstr.FromString("patroni")}}, FailureThreshold: 6}
	q := resource.MustParse("64Mi")
	pg.Spec.Resources = &v1.Resources{Requests: &v1.ResourceDescription{HugePages2Mi: &q}, Limits: &v1.ResourceDescription{HugePages2Mi: &q}}
	pg.Spec.Volume.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "db"}}
	pg.Spec.Volume.SubPath, pg.Spec.Volume.IsSubPathExpr = "$(POD_NAMESPACE)", ptr.To(true)
	if errs := pg.Validate(); len(errs) > 0 {
		t.Fatalf("the cluster is not valid: %v", errs.ToAggregate())
	}
	return pg
}

func TestPodTemplateFields(t *testing.T) {
	pg := podFieldsCluster(t)
	sts := StatefulSet(pg, Options{})
	spec := sts.Spec.Template.Spec
	spilo, exporter := spec.Containers[0], spec.Containers[1]

	// env: pgloop's first, the spec's after them, in its order.
	n := len(spilo.Env)
	if got := spilo.Env[n-2:]; !apiequality.Semantic.DeepEqual(got, pg.Spec.Env) {
		t.Errorf("the last variables are %v, want spec.env %v", got, pg.Spec.Env)
	}
	if spilo.Env[0].Name != "SCOPE" {
		t.Errorf("first variable %s, want pgloop's SCOPE", spilo.Env[0].Name)
	}
	if !apiequality.Semantic.DeepEqual(spilo.EnvFrom, pg.Spec.EnvFrom) {
		t.Errorf("envFrom = %v, want %v", spilo.EnvFrom, pg.Spec.EnvFrom)
	}
	if !apiequality.Semantic.DeepEqual(spilo.LivenessProbe, pg.Spec.LivenessProbe) {
		t.Errorf("livenessProbe = %v, want %v", spilo.LivenessProbe, pg.Spec.LivenessProbe)
	}
	if spilo.ReadinessProbe == nil {
		t.Error("the readiness probe is gone")
	}

	// The data mount's subPathExpr, in both containers; the additional
	// volumes by their targets, after pgloop's mounts.
	want := corev1.VolumeMount{Name: DataVolumeName, MountPath: DataMountPath, SubPathExpr: "$(POD_NAMESPACE)"}
	if !apiequality.Semantic.DeepEqual(spilo.VolumeMounts[0], want) || !apiequality.Semantic.DeepEqual(exporter.VolumeMounts[0], want) {
		t.Errorf("data mounts %v and %v, want %v", spilo.VolumeMounts[0], exporter.VolumeMounts[0], want)
	}
	mountNames := func(c corev1.Container) []string {
		var out []string
		for _, m := range c.VolumeMounts {
			out = append(out, m.Name)
		}
		return out
	}
	if got := mountNames(spilo); !slices.Equal(got[len(got)-2:], []string{"extra", "scratch"}) {
		t.Errorf("postgres mounts %v, want extra and scratch last", got)
	}
	if got := mountNames(exporter); !slices.Equal(got, []string{DataVolumeName, "scratch", "one"}) {
		t.Errorf("exporter mounts %v, want pgdata, scratch, one", got)
	}
	if m := exporter.VolumeMounts[2]; m.SubPath != "one.conf" || m.MountPath != "/etc/one.conf" {
		t.Errorf("exporter's one mount = %+v", m)
	}
	var volumes []string
	for _, v := range spec.Volumes {
		volumes = append(volumes, v.Name)
	}
	if !slices.Equal(volumes[len(volumes)-3:], []string{"extra", "scratch", "one"}) {
		t.Errorf("volumes %v, want the additional ones last", volumes)
	}

	// Pod level.
	sc := spec.SecurityContext
	if *sc.RunAsUser != 1000 || *sc.RunAsGroup != spiloGID || *sc.FSGroup != 2000 || !*sc.RunAsNonRoot {
		t.Errorf("securityContext = %+v: want user 1000, pgloop's group 103, fsGroup 2000, non-root", sc)
	}
	if spec.SchedulerName != "my-scheduler" || spec.PriorityClassName != "db-critical" {
		t.Errorf("schedulerName %q, priorityClassName %q", spec.SchedulerName, spec.PriorityClassName)
	}
	tsc := spec.TopologySpreadConstraints
	if len(tsc) != 2 || !apiequality.Semantic.DeepEqual(tsc[0].LabelSelector.MatchLabels, Selector(pg.Name)) ||
		tsc[1].LabelSelector.MatchLabels["team"] != "acid" {
		t.Errorf("topologySpreadConstraints = %+v: want the cluster's selector filled in the first, the second's kept", tsc)
	}
	if pg.Spec.TopologySpreadConstraints[0].LabelSelector != nil {
		t.Error("the spec's constraint was changed")
	}

	// Huge pages as given, beside the defaults of CPU and memory.
	res := spilo.Resources
	if q := res.Requests[hugePages2Mi]; q.String() != "64Mi" {
		t.Errorf("request hugepages-2Mi = %s", q.String())
	}
	if q := res.Limits[hugePages2Mi]; q.String() != "64Mi" {
		t.Errorf("limit hugepages-2Mi = %s", q.String())
	}
	if _, ok := res.Limits[corev1.ResourceMemory]; !ok {
		t.Error("the memory limit is gone")
	}

	// The claim template selects volumes.
	if sel := sts.Spec.VolumeClaimTemplates[0].Spec.Selector; sel == nil || sel.MatchLabels["tier"] != "db" {
		t.Errorf("claim template selector = %v", sel)
	}
}

// TestPoolerHugePages: connectionPooler.resources' huge pages reach the
// PgBouncer container.
func TestPoolerHugePages(t *testing.T) {
	pg := loadSample(t, "full")
	q := resource.MustParse("2Mi")
	pg.Spec.ConnectionPooler = &v1.ConnectionPooler{Resources: &v1.Resources{Limits: &v1.ResourceDescription{HugePages2Mi: &q}}}
	d := PoolerDeployment(pg, RoleMaster, Options{})
	res := d.Spec.Template.Spec.Containers[0].Resources
	if l := res.Limits[hugePages2Mi]; l.String() != "2Mi" {
		t.Errorf("pooler limit hugepages-2Mi = %s", l.String())
	}
	if _, ok := res.Requests[hugePages2Mi]; ok {
		t.Error("a request was made up: the apiserver takes the limit as the request")
	}
	if c := res.Requests[corev1.ResourceCPU]; c.String() != "500m" {
		t.Errorf("pooler CPU request = %s, want the default 500m", c.String())
	}
}

// TestReservedNames: the names and paths pkg/apis refuses for env and
// additionalVolumes are the ones pgloop uses.
func TestReservedNames(t *testing.T) {
	pg := loadSample(t, "full")
	pg.Spec.TLS = &v1.TLS{SecretName: "cert", CAFile: "ca.crt", CASecretName: "ca"}
	opts := Options{Backup: &v1.BackupS3{Endpoint: "s3.example.com", Bucket: "b", SecretName: "s", CAKey: "ca.pem"}}
	spec := StatefulSet(pg, opts).Spec.Template.Spec
	c := spec.Containers[0]
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "PGBACKREST_") || slices.ContainsFunc(pg.Spec.Env, func(u corev1.EnvVar) bool { return u.Name == e.Name }) {
			continue // refused by prefix; the spec's own
		}
		if !slices.Contains(v1.ReservedEnvNames, e.Name) {
			t.Errorf("pgloop sets %s, which v1.ReservedEnvNames does not list", e.Name)
		}
	}
	for _, v := range spec.Volumes {
		av := v1.AdditionalVolume{Name: v.Name, MountPath: "/free", VolumeSource: v.VolumeSource}
		p := pg.DeepCopy()
		p.Spec.AdditionalVolumes = []v1.AdditionalVolume{av}
		if len(p.Validate()) == 0 {
			t.Errorf("an additional volume named %s, pgloop's, is valid", v.Name)
		}
	}
	for _, m := range c.VolumeMounts {
		av := v1.AdditionalVolume{Name: "free", MountPath: m.MountPath, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
		p := pg.DeepCopy()
		p.Spec.AdditionalVolumes = []v1.AdditionalVolume{av}
		if len(p.Validate()) == 0 {
			t.Errorf("an additional volume at %s, where pgloop mounts one, is valid", m.MountPath)
		}
	}
}

// TestCompareVolumeSelector: a new volume.selector re-creates the
// StatefulSet (its claim template cannot change in place), as zalando's
// operator replaces it; the same selector, read back, is no change.
func TestCompareVolumeSelector(t *testing.T) {
	pg := loadSample(t, "minimal")
	current := asStored(StatefulSet(pg, Options{}))
	pg.Spec.Volume.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "db"}}
	desired := StatefulSet(pg, Options{})
	if got := Compare(current, desired); got != Recreate {
		t.Errorf("Compare with a new selector = %v, want Recreate", got)
	}
	if got := Compare(asStored(desired), desired); got != NoChange {
		t.Errorf("Compare of the re-created StatefulSet = %v, want NoChange", got)
	}
}
