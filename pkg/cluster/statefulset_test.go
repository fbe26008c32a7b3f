package cluster

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

func TestStatefulSetShape(t *testing.T) {
	pg := loadSample(t, "minimal")
	sts := StatefulSet(pg, Options{})
	spec := sts.Spec
	pod := spec.Template.Spec
	c := pod.Containers[0]

	checks := []struct {
		what      string
		got, want any
	}{
		{"name", sts.Name, pg.Name},
		{"replicas", spec.Replicas, ptr.To[int32](2)},
		{"selector", spec.Selector.MatchLabels, map[string]string{"application": "spilo", "cluster-name": pg.Name}},
		{"service name", spec.ServiceName, pg.Name},
		{"pod management", spec.PodManagementPolicy, appsv1.ParallelPodManagement},
		{"update strategy", spec.UpdateStrategy, appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}},
		{"claim retention", *spec.PersistentVolumeClaimRetentionPolicy, appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: "Retain", WhenScaled: "Retain"}},
		{"service account", pod.ServiceAccountName, "pgloop-pod"},
		{"grace period", pod.TerminationGracePeriodSeconds, ptr.To[int64](300)},
		{"run as user", pod.SecurityContext.RunAsUser, ptr.To[int64](101)},
		{"run as group", pod.SecurityContext.RunAsGroup, ptr.To[int64](103)},
		{"fs group", pod.SecurityContext.FSGroup, ptr.To[int64](103)},
		{"non-root", pod.SecurityContext.RunAsNonRoot, ptr.To(true)},
		{"no escalation", c.SecurityContext.AllowPrivilegeEscalation, ptr.To(false)},
		{"unprivileged", c.SecurityContext.Privileged, ptr.To(false)},
		{"tolerations", pod.Tolerations, []corev1.Toleration(nil)},
		{"affinity", pod.Affinity, (*corev1.Affinity)(nil)},
		{"image", c.Image, DefaultImage},
		{"ports", c.Ports, []corev1.ContainerPort{
			{Name: "postgresql", ContainerPort: 5432, Protocol: corev1.ProtocolTCP},
			{Name: "patroni", ContainerPort: 8008, Protocol: corev1.ProtocolTCP},
		}},
		{"readiness path", c.ReadinessProbe.HTTPGet.Path, "/readiness"},
		{"readiness port", c.ReadinessProbe.HTTPGet.Port.IntValue(), 8008},
		{"liveness", c.LivenessProbe, (*corev1.Probe)(nil)},
		{"data mount", c.VolumeMounts[0], corev1.VolumeMount{Name: "pgdata", MountPath: "/home/postgres/pgdata"}},
		{"claim name", spec.VolumeClaimTemplates[0].Name, "pgdata"},
		{"claim size", spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage], resource.MustParse("1Gi")},
		{"claim class", spec.VolumeClaimTemplates[0].Spec.StorageClassName, (*string)(nil)},
		{"pod annotations", len(spec.Template.Annotations), 1},
	}
	for _, c := range checks {
		if !apiequality.Semantic.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	if PodTemplateHash(sts) == "" {
		t.Errorf("pod template has no hash annotation")
	}
}

func TestStatefulSetFromSpec(t *testing.T) {
	pg := loadSample(t, "full")
	sts := StatefulSet(pg, Options{Image: "example.com/spilo:ignored", TerminationGracePeriodSeconds: 60})
	pod := sts.Spec.Template.Spec
	checks := []struct {
		what      string
		got, want any
	}{
		{"spec image wins over Options.Image", pod.Containers[0].Image, pg.Spec.DockerImage},
		{"grace period", pod.TerminationGracePeriodSeconds, ptr.To[int64](60)},
		{"tolerations", pod.Tolerations, pg.Spec.Tolerations},
		{"node affinity", pod.Affinity.NodeAffinity, pg.Spec.NodeAffinity},
		{"pod annotation", sts.Spec.Template.Annotations["prometheus.io/scrape"], "true"},
		{"claim size", sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage], resource.MustParse("10Gi")},
		{"claim class", sts.Spec.VolumeClaimTemplates[0].Spec.StorageClassName, ptr.To("standard")},
		{"statefulset annotations", sts.Annotations, map[string]string(nil)},
	}
	for _, c := range checks {
		if !apiequality.Semantic.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}

	pg.Spec.DockerImage = ""
	if got := StatefulSet(pg, Options{Image: "example.com/spilo:1"}).Spec.Template.Spec.Containers[0].Image; got != "example.com/spilo:1" {
		t.Errorf("without spec.dockerImage the image is %q, want Options.Image", got)
	}
}

func TestResources(t *testing.T) {
	q := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	list := func(cpu, mem string) corev1.ResourceList {
		l := corev1.ResourceList{}
		if cpu != "" {
			l[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if mem != "" {
			l[corev1.ResourceMemory] = resource.MustParse(mem)
		}
		return l
	}
	cases := []struct {
		name      string
		resources *v1.Resources
		opts      Options
		requests  corev1.ResourceList
		limits    corev1.ResourceList
	}{
		{
			name:     "unset: the defaults",
			requests: list("100m", "100Mi"),
			limits:   list("1", "500Mi"),
		},
		{
			name:      "every value set: the spec's",
			resources: &v1.Resources{Requests: &v1.ResourceDescription{CPU: q("250m"), Memory: q("256Mi")}, Limits: &v1.ResourceDescription{CPU: q("2"), Memory: q("1Gi")}},
			requests:  list("250m", "256Mi"),
			limits:    list("2", "1Gi"),
		},
		{
			name:      "some values set: defaults for the others",
			resources: &v1.Resources{Requests: &v1.ResourceDescription{Memory: q("200Mi")}},
			requests:  list("100m", "200Mi"),
			limits:    list("1", "500Mi"),
		},
		{
			name:      "a request above the default limit raises the limit",
			resources: &v1.Resources{Requests: &v1.ResourceDescription{CPU: q("4"), Memory: q("2Gi")}},
			requests:  list("4", "2Gi"),
			limits:    list("4", "2Gi"),
		},
		{
			name:      "a limit below the default request lowers the request",
			resources: &v1.Resources{Limits: &v1.ResourceDescription{CPU: q("50m"), Memory: q("64Mi")}},
			requests:  list("50m", "64Mi"),
			limits:    list("50m", "64Mi"),
		},
		{
			name:     "operator defaults from Options",
			opts:     Options{DefaultRequests: list("1", ""), DefaultLimits: list("", "4Gi")},
			requests: list("1", ""),
			limits:   list("", "4Gi"),
		},
		{
			name: "no defaults, nothing set: no requests or limits",
			opts: Options{DefaultRequests: corev1.ResourceList{}, DefaultLimits: corev1.ResourceList{}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := resources(c.resources, c.opts.withDefaults())
			if len(c.requests) == 0 {
				c.requests = nil
			}
			if len(c.limits) == 0 {
				c.limits = nil
			}
			if !apiequality.Semantic.DeepEqual(got.Requests, c.requests) || !apiequality.Semantic.DeepEqual(got.Limits, c.limits) {
				t.Errorf("requests %v limits %v, want requests %v limits %v", got.Requests, got.Limits, c.requests, c.limits)
			}
		})
	}
}

// TestPodTemplateHash checks which spec changes change the pods (and so
// need them replaced) and which do not.
func TestPodTemplateHash(t *testing.T) {
	cases := []struct {
		name    string
		edit    func(pg *v1.Postgresql, o *Options)
		changes bool
	}{
		{"nothing", func(*v1.Postgresql, *Options) {}, false},
		{"instances", func(pg *v1.Postgresql, _ *Options) { pg.Spec.NumberOfInstances = 5 }, false},
		{"volume size", func(pg *v1.Postgresql, _ *Options) { pg.Spec.Volume.Size = resource.MustParse("20Gi") }, false},
		{"users", func(pg *v1.Postgresql, _ *Options) { pg.Spec.Users["new_user"] = v1.UserFlags{} }, false},
		{"databases", func(pg *v1.Postgresql, _ *Options) { pg.Spec.Databases["other"] = "app_owner" }, false},
		{"service annotations", func(pg *v1.Postgresql, _ *Options) { pg.Spec.ServiceAnnotations["a"] = "b" }, false},
		{"an unrelated label on the cluster", func(pg *v1.Postgresql, _ *Options) { pg.Labels["x"] = "y" }, false},
		{"image", func(pg *v1.Postgresql, _ *Options) { pg.Spec.DockerImage = "example.com/spilo:2" }, true},
		{"version", func(pg *v1.Postgresql, _ *Options) { pg.Spec.PostgreSQL.Version = "18" }, true},
		// Patroni applies shared parameters and its timings to running
		// members (PATCH /config): no new pods.
		{"a shared parameter", func(pg *v1.Postgresql, _ *Options) { pg.Spec.PostgreSQL.Parameters["work_mem"] = "8MB" }, false},
		{"a restart-only shared parameter", func(pg *v1.Postgresql, _ *Options) { pg.Spec.PostgreSQL.Parameters["max_connections"] = "300" }, false},
		{"patroni ttl", func(pg *v1.Postgresql, _ *Options) { pg.Spec.Patroni.TTL = 40 }, false},
		{"synchronous mode", func(pg *v1.Postgresql, _ *Options) {
			pg.Spec.Patroni.SynchronousMode = !pg.Spec.Patroni.SynchronousMode
		}, false},
		// Spilo sets these per instance: new pods.
		{"a local parameter", func(pg *v1.Postgresql, _ *Options) { pg.Spec.PostgreSQL.Parameters["shared_buffers"] = "512MB" }, true},
		{"pg_hba", func(pg *v1.Postgresql, _ *Options) { pg.Spec.Patroni.PgHba = pg.Spec.Patroni.PgHba[1:] }, true},
		{"resources", func(pg *v1.Postgresql, _ *Options) { pg.Spec.Resources.Limits.CPU = ptr.To(resource.MustParse("3")) }, true},
		{"tolerations", func(pg *v1.Postgresql, _ *Options) { pg.Spec.Tolerations = nil }, true},
		{"node affinity", func(pg *v1.Postgresql, _ *Options) { pg.Spec.NodeAffinity = nil }, true},
		{"pod annotations", func(pg *v1.Postgresql, _ *Options) { pg.Spec.PodAnnotations["a"] = "b" }, true},
		{"default image of the operator, unused", func(_ *v1.Postgresql, o *Options) { o.Image = "example.com/spilo:3" }, false},
		{"grace period of the operator", func(_ *v1.Postgresql, o *Options) { o.TerminationGracePeriodSeconds = 30 }, true},
		{"load balancers", func(pg *v1.Postgresql, o *Options) {
			pg.Spec.EnableMasterLoadBalancer, pg.Spec.AllowedSourceRanges = ptr.To(false), nil
			o.EnableReplicaLoadBalancer = true
		}, false},
		{"shm volume off", func(pg *v1.Postgresql, _ *Options) { pg.Spec.EnableShmVolume = ptr.To(false) }, true},
		{"shm volume off in the operator, on in the cluster", func(_ *v1.Postgresql, o *Options) { o.EnableShmVolume = ptr.To(false) }, false},
		{"an init container", func(pg *v1.Postgresql, _ *Options) { pg.Spec.InitContainers = nil }, true},
		{"a sidecar's image", func(pg *v1.Postgresql, _ *Options) { pg.Spec.Sidecars[0].Image = "example.com/exporter:2" }, true},
	}
	base := PodTemplateHash(StatefulSet(loadSample(t, "full"), Options{}))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pg, opts := loadSample(t, "full"), Options{}
			c.edit(pg, &opts)
			got := PodTemplateHash(StatefulSet(pg, opts))
			if changed := got != base; changed != c.changes {
				t.Errorf("hash changed = %v, want %v", changed, c.changes)
			}
		})
	}

	// The operator's default image matters to clusters that set none.
	pg := loadSample(t, "minimal")
	if PodTemplateHash(StatefulSet(pg, Options{})) == PodTemplateHash(StatefulSet(pg, Options{Image: "example.com/spilo:3"})) {
		t.Errorf("a new default image must change the pods of clusters without spec.dockerImage")
	}
}

func TestPodUpToDate(t *testing.T) {
	sts := StatefulSet(loadSample(t, "minimal"), Options{})
	pod := func(annotations map[string]string) *corev1.Pod {
		p := &corev1.Pod{}
		p.Annotations = annotations
		return p
	}
	cases := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"created from the template", pod(sts.Spec.Template.Annotations), true},
		{"older template", pod(map[string]string{AnnotationPodTemplateHash: "0123456789abcdef"}), false},
		{"no hash", pod(nil), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := PodUpToDate(c.pod, sts); got != c.want {
				t.Errorf("PodUpToDate = %v, want %v", got, c.want)
			}
		})
	}
}

func TestShmVolume(t *testing.T) {
	cases := []struct {
		name          string
		cluster, opts *bool
		want          bool
	}{
		{"default", nil, nil, true},
		{"operator off", nil, ptr.To(false), false},
		{"operator off, cluster on", ptr.To(true), ptr.To(false), true},
		{"cluster off", ptr.To(false), ptr.To(true), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pg := loadSample(t, "minimal")
			pg.Spec.EnableShmVolume = c.cluster
			pod := StatefulSet(pg, Options{EnableShmVolume: c.opts}).Spec.Template.Spec
			var volume, mount bool
			for _, v := range pod.Volumes {
				if v.Name == shmVolumeName {
					volume = v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory && v.EmptyDir.SizeLimit == nil
				}
			}
			for _, m := range pod.Containers[0].VolumeMounts {
				if m.Name == shmVolumeName {
					mount = m.MountPath == "/dev/shm"
				}
			}
			if volume != c.want || mount != c.want {
				t.Errorf("shm volume %v, mount %v, want %v", volume, mount, c.want)
			}
		})
	}
}

func TestSidecarsAndInitContainers(t *testing.T) {
	pg := loadSample(t, "full")
	pg.Spec.Sidecars = append(pg.Spec.Sidecars, v1.Sidecar{Name: "bare", Image: "example.com/bare:1",
		Env: []corev1.EnvVar{{Name: "POSTGRES_USER", Value: "dropped"}, {Name: "KEPT", Value: "1"}}})
	pod := StatefulSet(pg, Options{}).Spec.Template.Spec
	if len(pod.InitContainers) != 1 || !apiequality.Semantic.DeepEqual(pod.InitContainers[0], pg.Spec.InitContainers[0]) {
		t.Errorf("init containers %+v, want the spec's %+v", pod.InitContainers, pg.Spec.InitContainers)
	}
	if len(pod.Containers) != 3 || pod.Containers[0].Name != ContainerName {
		t.Fatalf("containers %d, want postgres and two sidecars", len(pod.Containers))
	}
	full, bare := pod.Containers[1], pod.Containers[2]
	sc := pg.Spec.Sidecars[0]
	var envNames []string
	for _, e := range bare.Env {
		envNames = append(envNames, e.Name)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"name", full.Name, sc.Name},
		{"image", full.Image, sc.Image},
		{"command", full.Command, sc.Command},
		{"ports", full.Ports, sc.Ports},
		{"user env after pgloop's", full.Env[4:], sc.Env},
		{"password from the superuser's Secret", full.Env[3].ValueFrom.SecretKeyRef.Name, SecretName(SuperuserName, pg.Name)},
		{"resources", full.Resources, resources(sc.Resources, Options{}.withDefaults())},
		{"data mount", full.VolumeMounts, []corev1.VolumeMount{{Name: DataVolumeName, MountPath: DataMountPath}}},
		{"env of a sidecar that overrides pgloop's", envNames, []string{"POD_NAME", "POD_NAMESPACE", "POSTGRES_USER", "POSTGRES_PASSWORD", "KEPT"}},
		{"POSTGRES_USER kept", bare.Env[2].Value, SuperuserName},
		{"default resources", bare.Resources, resources(nil, Options{}.withDefaults())},
	}
	for _, c := range checks {
		if !apiequality.Semantic.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

// BenchmarkStatefulSet is what building a cluster's desired StatefulSet
// costs: the facts build it once per generation of each cluster, so a
// restarted operator pays it once per cluster (docs/scale.md).
func BenchmarkStatefulSet(b *testing.B) {
	pg := loadSample(b, "minimal")
	b.ReportAllocs()
	for b.Loop() {
		StatefulSet(pg, Options{})
	}
}
