package cluster

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// The pod template fields of zalando's manifest (pkg/apis/pgloop/v1's
// podtemplate.go), rendered as zalando's operator renders them
// (pkg/cluster/k8sres.go of zalando/postgres-operator at a7aaad0a). Each
// leaves the pod template as it was when the spec does not use it, so
// existing clusters keep their pod template hash.

// Huge page resources of the containers.
const (
	hugePages2Mi = corev1.ResourceName(corev1.ResourceHugePagesPrefix + "2Mi")
	hugePages1Gi = corev1.ResourceName(corev1.ResourceHugePagesPrefix + "1Gi")
)

func hugePages2MiOf(d *v1.ResourceDescription) *resource.Quantity { return d.HugePages2Mi }
func hugePages1GiOf(d *v1.ResourceDescription) *resource.Quantity { return d.HugePages1Gi }

// setPodTemplateFields sets the pod-level fields: the security context's
// user and groups where the spec gives them (pgloop's 101/103 otherwise),
// the scheduler, the priority class, the topology spread constraints and
// the additional volumes, after pgloop's own.
func setPodTemplateFields(pg *v1.Postgresql, spec *corev1.PodSpec) {
	s := &pg.Spec
	if sc := spec.SecurityContext; sc != nil {
		if s.SpiloRunAsUser != nil {
			sc.RunAsUser = ptrCopy(s.SpiloRunAsUser)
		}
		if s.SpiloRunAsGroup != nil {
			sc.RunAsGroup = ptrCopy(s.SpiloRunAsGroup)
		}
		if s.SpiloFSGroup != nil {
			sc.FSGroup = ptrCopy(s.SpiloFSGroup)
		}
	}
	spec.SchedulerName = s.SchedulerName
	spec.PriorityClassName = s.PodPriorityClassName
	for i := range s.TopologySpreadConstraints {
		c := *s.TopologySpreadConstraints[i].DeepCopy()
		// zalando's documented meaning: spread the cluster's pods. Its
		// code means to set the cluster's labels as the selector (and,
		// at a7aaad0a, sets them on a copy: a constraint without one
		// counts no pod there); pgloop sets the cluster's selector where
		// the user gives none.
		if c.LabelSelector == nil {
			c.LabelSelector = &metav1.LabelSelector{MatchLabels: Selector(pg.Name)}
		}
		spec.TopologySpreadConstraints = append(spec.TopologySpreadConstraints, c)
	}
	for _, av := range s.AdditionalVolumes {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: av.Name, VolumeSource: *av.VolumeSource.DeepCopy()})
	}
}

func ptrCopy(p *int64) *int64 {
	v := *p
	return &v
}

// dataMount is the data volume's mount: its root, or volume.subPath (an
// expression with isSubPathExpr).
func dataMount(pg *v1.Postgresql) corev1.VolumeMount {
	m := corev1.VolumeMount{Name: DataVolumeName, MountPath: DataMountPath}
	setSubPath(&m, pg.Spec.Volume.SubPath, pg.Spec.Volume.IsSubPathExpr)
	return m
}

func setSubPath(m *corev1.VolumeMount, subPath string, expr *bool) {
	if expr != nil && *expr {
		m.SubPathExpr = subPath
	} else {
		m.SubPath = subPath
	}
}

// additionalMounts are the mounts of the additional volumes that target
// container name: those without targetContainers in the PostgreSQL
// container, those with "all" in every container.
func additionalMounts(pg *v1.Postgresql, name string) []corev1.VolumeMount {
	var out []corev1.VolumeMount
	for _, av := range pg.Spec.AdditionalVolumes {
		targets := av.TargetContainers
		if len(targets) == 0 {
			targets = []string{ContainerName}
		}
		if !slices.Contains(targets, name) && !slices.Contains(targets, v1.AllContainers) {
			continue
		}
		m := corev1.VolumeMount{Name: av.Name, MountPath: av.MountPath}
		setSubPath(&m, av.SubPath, av.IsSubPathExpr)
		out = append(out, m)
	}
	return out
}

// userEnv is spec.env, after pgloop's variables: zalando's order, so a
// value may refer to them as $(NAME). Validate refuses pgloop's names.
func userEnv(pg *v1.Postgresql) []corev1.EnvVar {
	var out []corev1.EnvVar
	for i := range pg.Spec.Env {
		out = append(out, *pg.Spec.Env[i].DeepCopy())
	}
	return out
}

// userEnvFrom is spec.envFrom. A variable of env, pgloop's included, wins
// over one of envFrom, as in every container.
func userEnvFrom(pg *v1.Postgresql) []corev1.EnvFromSource {
	var out []corev1.EnvFromSource
	for i := range pg.Spec.EnvFrom {
		out = append(out, *pg.Spec.EnvFrom[i].DeepCopy())
	}
	return out
}
