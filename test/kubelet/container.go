package kubelet

// Image containers (image.go): how their process is started, probed and
// given its service account token.

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

const (
	// ReasonImagePull: the image's binary could not be copied into the
	// image store (it does not exist yet, say).
	ReasonImagePull = "ErrImagePull"
	// defaultPath is the PATH of a container whose image sets none
	// (containerd's default).
	defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// HealthAddrEnv is set by the kubelet on an image container that sets
	// neither it nor --health-addr: pgloop's health, readiness and metrics
	// address, on the pod's IP and the port its probes name (see
	// healthAddr).
	HealthAddrEnv = "PGLOOP_HEALTH_ADDR"
)

// imageState is what an image container's instance keeps between starts,
// owned by the instance's goroutine.
type imageState struct {
	binary  string // the mapped binary
	pulled  string // its copy in the image store; empty before the pull
	imageID string
	// volumes are the pod's projected volumes, written at the first start.
	volumes []projectedVolume
	ready   readiness
}

// readiness is the state of the readiness probe of the current process.
type readiness struct {
	next      time.Time // when the probe runs next; zero before the first
	failures  int32
	successes int32
}

// imageSpec returns how to start an image container: the container's init
// (containerinit.go) with the entrypoint, arguments, environment, user and
// mounts a kubelet would give it.
func (in *instance) imageSpec(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (spawnSpec, error) {
	k, p, s := in.k, in.prep, in.image
	if s.pulled == "" {
		path, id, err := pullImage(k.opts.Root, s.binary)
		if err != nil {
			return spawnSpec{}, waiting(ReasonImagePull, "image %s: %w", c.Image, err)
		}
		s.pulled, s.imageID = path, id
		in.state.ImageID = id
		in.log.WithFields(logrus.Fields{"image": c.Image, "imageID": id}).Info("pulled the image's binary")
	}
	env, err := ResolveEnv(pod, c, p.ip.String(), k.lookup)
	if err != nil {
		return spawnSpec{}, waiting(ReasonConfigError, "%w", err)
	}
	host, port, err := apiServerHostPort(k.cfg)
	if err != nil {
		return spawnSpec{}, waiting(ReasonConfigError, "%w", err)
	}
	argv, err := containerArgv(c, env, s.binary, s.pulled)
	if err != nil {
		return spawnSpec{}, waiting(ReasonStartError, "%w", err)
	}
	runtimeEnv := map[string]string{
		"PATH":                          defaultPath,
		"HOSTNAME":                      pod.Name,
		"KUBERNETES_SERVICE_HOST":       host,
		"KUBERNETES_SERVICE_PORT":       port,
		"KUBERNETES_SERVICE_PORT_HTTPS": port,
	}
	for name, v := range env {
		runtimeEnv[name] = v
	}
	if addr, ok := healthAddr(c, env, argv, p.ip.String()); ok {
		runtimeEnv[HealthAddrEnv] = addr
	}
	uid, gid, groups, err := containerUser(pod, c)
	if err != nil {
		return spawnSpec{}, waiting(ReasonConfigError, "%w", err)
	}
	if s.volumes == nil {
		if err := in.writeProjectedVolumes(ctx, pod); err != nil {
			return spawnSpec{}, waiting(ReasonContainerCreating, "%w", err)
		}
	}
	mounts, err := in.containerMounts(pod, c)
	if err != nil {
		return spawnSpec{}, waiting(ReasonConfigError, "%w", err)
	}
	spec := initSpec{
		Hostname:     pod.Name,
		Mounts:       mounts,
		ReadOnlyRoot: c.SecurityContext != nil && c.SecurityContext.ReadOnlyRootFilesystem != nil && *c.SecurityContext.ReadOnlyRootFilesystem,
		UID:          uid, GID: gid, Groups: groups,
		Dir:  c.WorkingDir,
		Argv: argv,
	}
	initArgs, err := initArgv("/proc/self/exe", spec)
	if err != nil {
		return spawnSpec{}, waiting(ReasonStartError, "%w", err)
	}
	if err := writeEnviron(filepath.Join(p.podDir, environFile), runtimeEnv); err != nil {
		return spawnSpec{}, waiting(ReasonStartError, "%w", err)
	}
	in.state.Resources = c.Resources.DeepCopy()
	in.image.ready = readiness{}
	in.log.WithFields(logrus.Fields{"argv": strings.Join(argv, " "), "uid": uid, "limits": formatResources(c.Resources.Limits)}).
		Info("starting the image's binary (resource limits shown in the status, not enforced)")
	return spawnSpec{
		argv:    initArgs,
		env:     environList(runtimeEnv),
		dir:     "/",
		logPath: containerLogPath(p.podDir, c.Name),
		unshare: unix.CLONE_NEWNS | unix.CLONE_NEWUTS,
	}, nil
}

// killed names what a kill ends, for the log.
func (in *instance) killed() string {
	if in.image != nil {
		return in.program()
	}
	return in.program() + " and PostgreSQL"
}

// containerLogPath is where the container's output goes.
func containerLogPath(podDir, container string) string {
	return filepath.Join(podDir, container+".log")
}

// environList renders env as NAME=value, sorted.
func environList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for name, v := range env {
		out = append(out, name+"="+v)
	}
	slices.Sort(out)
	return out
}

func formatResources(l corev1.ResourceList) string {
	var parts []string
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := l[name]; ok {
			parts = append(parts, string(name)+"="+q.String())
		}
	}
	return strings.Join(parts, ",")
}

// apiServerHostPort is the API server's address as a pod sees it in
// KUBERNETES_SERVICE_HOST and _PORT: here the address the kubelet itself
// reaches (127.0.0.1 and the plane's port; its serving certificate holds
// 127.0.0.1). The kubernetes Service's ClusterIP leads nowhere on this
// plane (no kube-proxy), and its endpoints are not kept
// (--endpoint-reconciler-type=none).
func apiServerHostPort(cfg *rest.Config) (string, string, error) {
	u, err := url.Parse(cfg.Host)
	if err != nil || u.Host == "" {
		return "", "", fmt.Errorf("the API server's address %q: %v", cfg.Host, err)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "443"
	}
	return host, port, nil
}

// containerArgv is the container's command line with $(VAR) references
// expanded: command, else the image's entrypoint (its one binary), then
// args. The entrypoint is the image's path of binary (imageEntrypoint),
// replaced by pulled, the host's copy.
func containerArgv(c *corev1.Container, env map[string]string, binary, pulled string) ([]string, error) {
	entry := imageEntrypoint(binary)
	argv := []string{entry}
	if len(c.Command) > 0 {
		argv = nil
		for _, a := range c.Command {
			argv = append(argv, expandEnvRefs(a, env))
		}
	}
	for _, a := range c.Args {
		argv = append(argv, expandEnvRefs(a, env))
	}
	if argv[0] != entry && argv[0] != strings.TrimPrefix(entry, "/") {
		return nil, fmt.Errorf("exec %q: no such file in the image, which holds only %s", argv[0], entry)
	}
	argv[0] = pulled
	return argv, nil
}

// healthAddr is the address pgloop must serve its probes on, when the
// container does not choose one (HealthAddrEnv or --health-addr): the
// pod's IP and the port of its readiness (else liveness) probe. Every pod
// of this plane shares the host's network namespace, each on an IP of its
// own: two replicas both listening on :8080 would collide, so the kubelet
// points each at its pod IP, as it points Patroni at it.
func healthAddr(c *corev1.Container, env map[string]string, argv []string, podIP string) (string, bool) {
	if _, set := env[HealthAddrEnv]; set {
		return "", false
	}
	for _, a := range argv[1:] {
		if a == "--health-addr" || strings.HasPrefix(a, "--health-addr=") {
			return "", false
		}
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			continue
		}
		port, err := probePort(p.HTTPGet.Port, c)
		if err != nil {
			continue
		}
		return podIP + ":" + strconv.Itoa(int(port)), true
	}
	return "", false
}

// containerUser is the uid, gid and supplementary groups the container
// runs as: runAsUser and runAsGroup of the container, else of the pod, else
// root (the image declares no user here); the pod's fsGroup and
// supplementalGroups. runAsNonRoot with uid 0 is refused, as a kubelet
// refuses it.
func containerUser(pod *corev1.Pod, c *corev1.Container) (uid, gid uint32, groups []uint32, err error) {
	var runAsUser, runAsGroup *int64
	var nonRoot *bool
	if ps := pod.Spec.SecurityContext; ps != nil {
		runAsUser, runAsGroup, nonRoot = ps.RunAsUser, ps.RunAsGroup, ps.RunAsNonRoot
		if ps.FSGroup != nil {
			groups = append(groups, uint32(*ps.FSGroup))
		}
		for _, g := range ps.SupplementalGroups {
			groups = append(groups, uint32(g))
		}
	}
	if cs := c.SecurityContext; cs != nil {
		if cs.RunAsUser != nil {
			runAsUser = cs.RunAsUser
		}
		if cs.RunAsGroup != nil {
			runAsGroup = cs.RunAsGroup
		}
		if cs.RunAsNonRoot != nil {
			nonRoot = cs.RunAsNonRoot
		}
	}
	if runAsUser != nil {
		uid = uint32(*runAsUser)
	}
	if runAsGroup != nil {
		gid = uint32(*runAsGroup)
	}
	if nonRoot != nil && *nonRoot && uid == 0 {
		return 0, 0, nil, fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", pod.Namespace+"/"+pod.Name, c.Name)
	}
	return uid, gid, groups, nil
}

// writeProjectedVolumes writes the pod's projected volumes into its
// volumes directory.
func (in *instance) writeProjectedVolumes(ctx context.Context, pod *corev1.Pod) error {
	var vols []projectedVolume
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		pv := projectedVolume{name: v.Name, dir: filepath.Join(in.prep.podDir, volumesDir, v.Name)}
		if err := in.writeProjected(ctx, pod, v.Projected, &pv); err != nil {
			return err
		}
		vols = append(vols, pv)
	}
	in.image.volumes = vols
	if vols == nil {
		in.image.volumes = []projectedVolume{}
	}
	return nil
}

// writeProjected (re)writes one projected volume and sets when its token
// is due again.
func (in *instance) writeProjected(ctx context.Context, pod *corev1.Pod, src *corev1.ProjectedVolumeSource, pv *projectedVolume) error {
	tctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	files, refreshAt, err := projectedFiles(tctx, pod, in.prep.ip.String(), src, in.k.lookup, podTokenRequester(in.k.kube, pod))
	if err != nil {
		return fmt.Errorf("volume %s: %w", pv.name, err)
	}
	if err := writeProjected(pv.dir, files); err != nil {
		return fmt.Errorf("volume %s: %w", pv.name, err)
	}
	pv.refreshAt = refreshAt
	if !refreshAt.IsZero() {
		in.log.WithFields(logrus.Fields{"volume": pv.name, "refreshAt": refreshAt.Format(time.RFC3339)}).Info("wrote a service account token")
	}
	return nil
}

// refreshTokens requests again the tokens that are due.
func (in *instance) refreshTokens(ctx context.Context, now time.Time) {
	pod, _ := in.current()
	if pod == nil {
		return
	}
	for i := range in.image.volumes {
		pv := &in.image.volumes[i]
		if pv.refreshAt.IsZero() || now.Before(pv.refreshAt) {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name == pv.name && v.Projected != nil {
				if err := in.writeProjected(ctx, pod, v.Projected, pv); err != nil {
					in.log.WithError(err).Warn("renewing a service account token; retried in a minute")
					pv.refreshAt = now.Add(time.Minute)
				}
			}
		}
	}
}

// containerMounts are the container's volume mounts on the host: its
// projected volumes (always read-only, as a kubelet mounts them) and the
// volumes prepare mapped (Secrets, ConfigMaps, emptyDirs, claims).
func (in *instance) containerMounts(pod *corev1.Pod, c *corev1.Container) ([]initMount, error) {
	var out []initMount
	for _, m := range c.VolumeMounts {
		if i := slices.IndexFunc(in.image.volumes, func(pv projectedVolume) bool { return pv.name == m.Name }); i >= 0 {
			if m.SubPath != "" || m.SubPathExpr != "" {
				return nil, fmt.Errorf("volume mount %s: subPath of a projected volume is not supported here", m.Name)
			}
			out = append(out, initMount{Source: in.image.volumes[i].dir, Target: m.MountPath, ReadOnly: true})
			continue
		}
		dir, ok := in.prep.mounts[m.MountPath]
		if !ok {
			return nil, fmt.Errorf("volume mount %s: a volume of a kind not supported here", m.Name)
		}
		// prepare makes emptyDirs postgres's, for Patroni; a kubelet makes
		// them 0777, for any user the container runs as.
		if isEmptyDir(pod, m.Name) && m.SubPath == "" && m.SubPathExpr == "" {
			if err := os.Chmod(dir, 0o777); err != nil {
				return nil, fmt.Errorf("volume mount %s: %w", m.Name, err)
			}
		}
		out = append(out, initMount{Source: dir, Target: m.MountPath, ReadOnly: m.ReadOnly})
	}
	return out, nil
}

// probeImage runs the image container's readiness probe when due (ready
// while running when it has none, as a kubelet does), and renews the
// tokens that are due.
func (in *instance) probeImage(c *corev1.Container, now time.Time) bool {
	in.refreshTokens(context.Background(), now)
	if c == nil || c.ReadinessProbe == nil {
		return true
	}
	p := probeDefaults(*c.ReadinessProbe)
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	r := &in.image.ready
	if r.next.IsZero() {
		r.next = in.state.StartedAt.Add(time.Duration(p.InitialDelaySeconds) * time.Second)
	}
	if now.Before(r.next) {
		return in.state.Ready
	}
	r.next = now.Add(time.Duration(p.PeriodSeconds) * time.Second)
	if p.Exec != nil || p.GRPC != nil {
		return true // not run here (liveness.go); counted as passing
	}
	if err := probeOnce(p, c, in.prep.ip, time.Duration(p.TimeoutSeconds)*time.Second); err != nil {
		r.successes = 0
		r.failures++
		if r.failures >= p.FailureThreshold {
			return false
		}
		return in.state.Ready
	}
	r.failures = 0
	r.successes++
	if r.successes >= p.SuccessThreshold {
		return true
	}
	return in.state.Ready
}
