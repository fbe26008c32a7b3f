package kubelet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

const (
	// runContainerName is the container run when a pod has one of that name
	// (Spilo's); otherwise the first container runs.
	runContainerName = "postgres"
	// defaultGrace is the grace period of a pod that sets none.
	defaultGrace = 30 * time.Second
	// staleWrite is how long a written status may take to reach the cache
	// before it is written again.
	staleWrite = 5 * time.Second
)

// instance runs the Patroni of one pod (one UID) in a goroutine of its own,
// which owns every field below mu's, or its PgBouncer for a connection-pooler
// pod (pooler.go). The pod's changes arrive through update and poke;
// the process's exit through the reaper.
type instance struct {
	k     *kubelet
	uid   types.UID
	key   string // namespace/name
	log   logrus.FieldLogger
	after []<-chan struct{} // earlier instances of this pod name, to stop first
	done  chan struct{}     // closed once everything of the instance has stopped

	mu     sync.Mutex
	latest *corev1.Pod
	gone   bool
	wake   chan struct{} // capacity 1: a pending look at latest

	// Owned by run.
	state     instanceState
	proc      *process
	frozen    bool         // freeze stopped proc and its PostgreSQL; thaw, kill or a crash ends it
	stopped   map[int]bool // postmasters freeze stopped with all their children, while frozen
	back      backoff
	restartAt time.Time
	timer     *time.Timer
	prep      *prepared
	lastErr   string
	// pooler is set for a connection-pooler pod, whose process is
	// PgBouncer (isPooler).
	pooler    *poolerState
	written   *corev1.PodStatus
	writtenAt time.Time
	// writeUnsure: the last status write failed, and may have landed.
	writeUnsure bool
	// live is the liveness probe's state for the current process.
	live liveness
	// image is set for a container whose image runs a binary of this
	// machine (image.go, container.go).
	image *imageState
}

// prepared is what an instance sets up once, before its first start.
type prepared struct {
	ip         netip.Addr
	mounts     map[string]string // mount path -> host directory
	dataDirs   []string          // host directories of its claims
	podDir     string
	socketDir  string
	kubeconfig string
}

func newInstance(k *kubelet, pod *corev1.Pod, after []<-chan struct{}) *instance {
	key := pod.Namespace + "/" + pod.Name
	in := &instance{
		k: k, uid: pod.UID, key: key, after: after,
		log:    k.log.WithFields(logrus.Fields{"pod": key, "uid": pod.UID}),
		done:   make(chan struct{}),
		latest: pod,
		wake:   make(chan struct{}, 1),
	}
	// A restarted kubelet continues the count and the phase of the pod.
	in.state = instanceState{
		HostIP:      k.opts.NodeIP,
		PodIP:       pod.Status.PodIP,
		EverStarted: pod.Status.Phase == corev1.PodRunning,
		Phase:       containerWaiting,
		Reason:      ReasonContainerCreating,
		ImageID:     "process://" + k.opts.Patroni,
	}
	if c := runContainer(pod); c != nil {
		if bin, ok := imageBinary(k.opts.ImageBinaries, c.Image); ok {
			in.image = &imageState{binary: bin}
			in.state.ImageID = ""
		}
	}
	if in.image == nil && isPooler(pod) {
		in.pooler = &poolerState{}
		in.state.ImageID = "process://" + k.opts.PgBouncer
	}
	if c := runContainer(pod); c != nil {
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == c.Name {
				in.state.RestartCount = cs.RestartCount
			}
		}
	}
	return in
}

// runContainer is the container the kubelet runs: "postgres", else the first.
func runContainer(pod *corev1.Pod) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == runContainerName {
			return &pod.Spec.Containers[i]
		}
	}
	if len(pod.Spec.Containers) == 0 {
		return nil
	}
	return &pod.Spec.Containers[0]
}

// update hands the instance a newer version of its pod.
func (in *instance) update(pod *corev1.Pod) {
	in.mu.Lock()
	in.latest = pod
	in.mu.Unlock()
	in.poke()
}

// markGone tells the instance its pod no longer exists.
func (in *instance) markGone() {
	in.mu.Lock()
	in.gone = true
	in.mu.Unlock()
	in.poke()
}

func (in *instance) poke() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

func (in *instance) current() (*corev1.Pod, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.latest, in.gone
}

// run is the instance's life: start, watch, restart, and stop for good when
// the pod is deleted, gone, or the kubelet shuts down.
func (in *instance) run(ctx context.Context) {
	requeue := true
	defer func() { in.k.forget(in, requeue) }()
	defer close(in.done)
	for _, prev := range in.after {
		select {
		case <-prev:
		case <-ctx.Done():
			requeue = false
			return
		}
	}
	probe := time.NewTicker(probeInterval)
	defer probe.Stop()
	for {
		pod, gone := in.current()
		switch {
		case ctx.Err() != nil:
			requeue = false
			in.shutdown(pod)
			return
		case gone:
			in.log.Info("pod is gone: stopping its instance")
			in.stop(gracePeriod(pod))
			in.release()
			return
		case pod.DeletionTimestamp != nil:
			in.terminate(pod)
			return
		}
		in.reconcile(ctx, pod)
		in.writeStatus(ctx, pod)

		var exits <-chan exitStatus
		if in.proc != nil {
			exits = in.proc.exits
		}
		var timer <-chan time.Time
		if in.timer != nil {
			timer = in.timer.C
		}
		select {
		case <-ctx.Done():
		case <-in.wake:
		case ex := <-exits:
			in.crashed(ex)
		case <-probe.C:
			in.probe()
		case <-timer:
			in.timer = nil
		}
	}
}

// held reports whether HoldAnnotation keeps the pod's instance down.
func held(pod *corev1.Pod) bool { return pod.Annotations[HoldAnnotation] == "true" }

// reconcile brings the process in line with the pod: killed while held,
// stopped while frozen and resumed after, started when it should run and
// does not, unless its back-off runs. A frozen container stays Running: its
// readiness probe fails, which makes it not ready, nothing more.
func (in *instance) reconcile(ctx context.Context, pod *corev1.Pod) {
	now := time.Now()
	switch {
	case held(pod):
		if in.proc != nil {
			in.log.Info("hold annotation: killing " + in.program() + " and PostgreSQL")
			in.kill()
		}
		in.restartAt = time.Time{}
		in.setTimer(0)
		in.setWaiting(ReasonHeld, "the "+HoldAnnotation+" annotation keeps the instance down")
	case in.proc != nil && frozen(pod):
		in.freeze(onlyPostgres(pod))
	case in.proc != nil:
		in.thaw("freeze annotation removed")
		if in.pooler != nil {
			in.followUpstream(ctx, pod)
		}
	case now.Before(in.restartAt):
	default:
		in.tryStart(ctx, pod)
	}
}

// tryStart starts the process, or reports why it waits and retries later.
func (in *instance) tryStart(ctx context.Context, pod *corev1.Pod) {
	err := in.start(ctx, pod)
	if err == nil {
		return
	}
	var re *reasonError
	reason := ReasonStartError
	if errors.As(err, &re) {
		reason = re.reason
	}
	in.setWaiting(reason, err.Error())
	if msg := err.Error(); msg != in.lastErr {
		in.lastErr = msg
		in.log.WithField("reason", reason).Info("not started: " + msg)
	}
	in.setTimer(retryInterval)
}

// program names the instance's process in the log.
func (in *instance) program() string {
	if in.image != nil {
		return "the container"
	}
	if in.pooler != nil {
		return "PgBouncer"
	}
	return "Patroni"
}

func (in *instance) setWaiting(reason, msg string) {
	in.state.Phase, in.state.Reason, in.state.Message, in.state.Ready = containerWaiting, reason, msg, false
}

// setTimer arms the instance's one timer; 0 disarms it.
func (in *instance) setTimer(d time.Duration) {
	if in.timer != nil {
		in.timer.Stop()
		in.timer = nil
	}
	if d > 0 {
		in.timer = time.NewTimer(d)
	}
}

// reasonError is a failed start with the waiting reason to report.
type reasonError struct {
	reason string
	err    error
}

func (e *reasonError) Error() string { return e.err.Error() }
func (e *reasonError) Unwrap() error { return e.err }

func waiting(reason string, format string, args ...any) error {
	return &reasonError{reason: reason, err: fmt.Errorf(format, args...)}
}

// start prepares the instance if needed, writes the configuration of its
// program (Patroni's, or PgBouncer's for a pooler) from the pod's current
// environment and starts it.
func (in *instance) start(ctx context.Context, pod *corev1.Pod) error {
	c := runContainer(pod)
	if c == nil {
		return waiting(ReasonConfigError, "the pod has no container")
	}
	if in.prep == nil {
		prep, err := in.prepare(ctx, pod, c)
		if err != nil {
			return err
		}
		in.prep = prep
		in.state.PodIP = prep.ip.String()
	}
	specOf := in.patroniSpec
	switch {
	case in.image != nil:
		specOf = in.imageSpec
	case in.pooler != nil:
		specOf = in.poolerSpec
	}
	spec, err := specOf(ctx, pod, c)
	if err != nil {
		return err
	}
	proc, err := spawn(in.k.launcher, in.k.reaper, spec)
	if err != nil {
		return waiting(ReasonStartError, "%w", err)
	}
	in.proc = proc
	in.live = liveness{}
	in.lastErr = ""
	if in.state.EverStarted {
		in.state.RestartCount++
	}
	in.state.EverStarted = true
	in.state.Phase, in.state.Reason, in.state.Message = containerRunning, "", ""
	in.state.PID, in.state.StartedAt, in.state.Ready = proc.pid, proc.started, false
	in.log.WithFields(logrus.Fields{"pid": proc.pid, "ip": in.prep.ip, "restarts": in.state.RestartCount}).Info("started " + in.program())
	return nil
}

// patroniSpec returns how to start the instance: pgloop's start-up program,
// `pgloop instance`, as pgloop's image runs it (its entrypoint), with the
// container's environment. It writes Patroni's configuration and runs
// Patroni; what differs from a container is given as flags: the volumes'
// directories on this host, the pod IP to listen on (every pod's address is
// this host's), the socket directory, the kubeconfig (there is no
// in-cluster API server address here), a small shared_buffers (many
// instances share the machine), and Patroni's command line, which dumps its
// stacks on stacksSignal (slowstop.go).
func (in *instance) patroniSpec(_ context.Context, pod *corev1.Pod, c *corev1.Container) (spawnSpec, error) {
	p := in.prep
	env, err := ResolveEnv(pod, c, p.ip.String(), in.k.lookup)
	if err != nil {
		return spawnSpec{}, waiting(ReasonConfigError, "%w", err)
	}
	// The container's environment as its first process gets it
	// (/proc/1/environ in a real container), for tests to look at.
	if err := writeEnviron(filepath.Join(p.podDir, environFile), env); err != nil {
		return spawnSpec{}, waiting(ReasonStartError, "%w", err)
	}
	stacksPath := filepath.Join(p.podDir, stacksFile)
	if err := createOwned(stacksPath, in.k.uid, in.k.gid); err != nil {
		return spawnSpec{}, waiting(ReasonStartError, "while creating %s: %w", stacksPath, err)
	}
	// A crashed predecessor may have left a postmaster (it was killed, but
	// make sure before another one starts on the same data).
	in.killPostmasters()
	argv := []string{in.k.opts.Pgloop, "instance",
		"--config=" + filepath.Join(p.podDir, configFile),
		"--listen-pod-ip",
		"--pod-ip=" + p.ip.String(),
		"--name=" + podHostname(pod),
		fmt.Sprintf("--memory-mb=%g", containerMemoryMB(pod)),
		"--socket-dir=" + p.socketDir,
		"--bin-dir=" + in.k.opts.PGBin,
		"--kubeconfig=" + p.kubeconfig,
		"--kube-context=" + podContext,
		"--shared-buffers=" + testSharedBuffers,
		"--volume=" + certsMountPath + "=" + filepath.Join(p.podDir, certsDir),
	}
	for _, mp := range slices.Sorted(maps.Keys(p.mounts)) {
		argv = append(argv, "--volume="+mp+"="+p.mounts[mp])
	}
	argv = append(argv, "--")
	argv = append(argv, patroniArgv(in.k.opts.Python, in.k.opts.Patroni, stacksPath)...)
	// What a container's first process gets besides the pod's
	// environment: the image's PATH, HOME, LC_ALL (pgloop's image sets
	// them) and the user's name.
	processEnv := mergeEnv([]string{
		"HOME=" + filepath.Join(p.podDir, homeDir),
		"PATH=" + in.k.opts.PGBin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LC_ALL=C.UTF-8",
		"USER=" + postgresUser,
	}, environList(env))
	return spawnSpec{
		argv:    argv,
		env:     processEnv,
		dir:     filepath.Join(p.podDir, homeDir),
		logPath: filepath.Join(p.podDir, logFile),
		uid:     in.k.uid, gid: in.k.gid,
		stacks: stacksSignal,
	}, nil
}

// mergeEnv returns base with the variables of extra added, an extra one
// replacing a base one of the same name.
func mergeEnv(base, extra []string) []string {
	out := slices.Clone(base)
	for _, kv := range extra {
		name, _, _ := strings.Cut(kv, "=")
		i := slices.IndexFunc(out, func(b string) bool { return strings.HasPrefix(b, name+"=") })
		if i >= 0 {
			out[i] = kv
		} else {
			out = append(out, kv)
		}
	}
	return out
}

// prepare sets up what outlives restarts: volumes, IP, directories and the
// kubeconfig.
func (in *instance) prepare(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (*prepared, error) {
	k := in.k
	p := &prepared{podDir: podPath(k.opts.Root, pod.UID), socketDir: socketDir(pod.UID)}
	if err := os.MkdirAll(p.podDir, 0o755); err != nil {
		return nil, waiting(ReasonContainerCreating, "%w", err)
	}
	// postgres must traverse it to reach the volumes below (MkdirAll
	// would give it the mode of the first volume made, 0700).
	if err := os.MkdirAll(filepath.Join(p.podDir, volumesDir), 0o755); err != nil {
		return nil, waiting(ReasonContainerCreating, "%w", err)
	}
	if err := os.Chmod(filepath.Join(p.podDir, volumesDir), 0o755); err != nil {
		return nil, waiting(ReasonContainerCreating, "%w", err)
	}
	volumes := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		claim := ""
		switch {
		case v.PersistentVolumeClaim != nil:
			claim = v.PersistentVolumeClaim.ClaimName
		case v.Ephemeral != nil:
			claim = pod.Name + "-" + v.Name
		case v.EmptyDir != nil:
			dir := filepath.Join(p.podDir, volumesDir, v.Name)
			if err := mkdirOwned(dir, 0o700, k.uid, k.gid); err != nil {
				return nil, waiting(ReasonContainerCreating, "volume %s: %w", v.Name, err)
			}
			volumes[v.Name] = dir
			continue
		case isDataVolume(v):
			dir, err := in.dataVolume(pod, v)
			if err != nil {
				return nil, err
			}
			volumes[v.Name] = dir
			continue
		default:
			continue // projected tokens, downward API...: nothing reads them.
		}
		pvc, err := k.pvcs.PersistentVolumeClaims(pod.Namespace).Get(claim)
		if err != nil {
			return nil, waiting(ReasonContainerCreating, "volume %s: claim %s: %w", v.Name, claim, err)
		}
		pv := pvc.Spec.VolumeName
		if pv == "" {
			return nil, waiting(ReasonContainerCreating, "volume %s: claim %s is not bound yet", v.Name, claim)
		}
		if _, err := k.pvs.Get(pv); err != nil {
			return nil, waiting(ReasonContainerCreating, "volume %s: PersistentVolume %s: %w", v.Name, pv, err)
		}
		dir := pvPath(k.opts.Root, pv)
		if err := mkdirOwned(dir, 0o700, k.uid, k.gid); err != nil {
			return nil, waiting(ReasonContainerCreating, "volume %s: %w", v.Name, err)
		}
		volumes[v.Name] = dir
		p.dataDirs = append(p.dataDirs, dir)
	}
	ip, err := k.ips.acquire(pod.UID, pod.Status.PodIP)
	if err != nil {
		return nil, waiting(ReasonContainerCreating, "%w", err)
	}
	p.ip = ip
	if err := in.mountVolumes(pod, c, volumes, p); err != nil {
		return nil, err
	}
	if in.pooler != nil || in.image != nil {
		return p, nil // PgBouncer and images need no home, socket directory or kubeconfig
	}
	if err := mkdirOwned(filepath.Join(p.podDir, homeDir), 0o700, k.uid, k.gid); err != nil {
		return nil, waiting(ReasonContainerCreating, "%w", err)
	}
	// /run/certs of the container, where pgloop instance makes
	// PostgreSQL's certificate when the pod mounts none.
	if err := mkdirOwned(filepath.Join(p.podDir, certsDir), 0o700, k.uid, k.gid); err != nil {
		return nil, waiting(ReasonContainerCreating, "%w", err)
	}
	if err := mkdirOwned(p.socketDir, 0o755, k.uid, k.gid); err != nil {
		return nil, waiting(ReasonContainerCreating, "%w", err)
	}
	tctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	token, err := podToken(tctx, k.kube, pod)
	if err != nil {
		return nil, waiting(ReasonContainerCreating, "%w", err)
	}
	kc, err := podKubeconfig(k.cfg, token)
	if err != nil {
		return nil, waiting(ReasonContainerCreating, "%w", err)
	}
	p.kubeconfig = filepath.Join(p.podDir, kubeconfig)
	if err := writeOwned(p.kubeconfig, kc, k.uid, k.gid); err != nil {
		return nil, waiting(ReasonContainerCreating, "%w", err)
	}
	return p, nil
}

// mountVolumes maps the container's mount paths to the volumes' host
// directories, as a kubelet mounts them: a subPath (a subPathExpr with the
// container's $(VAR) references expanded) is a directory of the volume,
// made when missing (a kubelet makes it too), owned by the instance's user
// on a volume that is the instance's (a claim or an emptyDir).
func (in *instance) mountVolumes(pod *corev1.Pod, c *corev1.Container, volumes map[string]string, p *prepared) error {
	var env map[string]string
	p.mounts = map[string]string{}
	for _, m := range c.VolumeMounts {
		dir, ok := volumes[m.Name]
		if !ok {
			continue
		}
		sub := m.SubPath
		if m.SubPathExpr != "" {
			if env == nil {
				var err error
				if env, err = ResolveEnv(pod, c, p.ip.String(), in.k.lookup); err != nil {
					return waiting(ReasonConfigError, "%w", err)
				}
			}
			sub = expandEnvRefs(m.SubPathExpr, env)
		}
		if sub != "" {
			if filepath.IsAbs(sub) || slices.Contains(strings.Split(sub, "/"), "..") {
				return waiting(ReasonConfigError, "volume mount %s: subPath %q leaves its volume", m.Name, sub)
			}
			path := filepath.Join(dir, sub)
			if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && (slices.Contains(p.dataDirs, dir) || isEmptyDir(pod, m.Name)) {
				if err := mkdirOwned(path, 0o700, in.k.uid, in.k.gid); err != nil {
					return waiting(ReasonContainerCreating, "volume mount %s: subPath %s: %w", m.Name, sub, err)
				}
			}
		}
		p.mounts[m.MountPath] = filepath.Join(dir, sub)
	}
	return nil
}

// isEmptyDir reports whether the pod's volume name is an emptyDir.
func isEmptyDir(pod *corev1.Pod, name string) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Name == name {
			return v.EmptyDir != nil
		}
	}
	return false
}

// dataVolume writes Secret or ConfigMap volume v of pod into the pod's
// volumes directory and returns that directory. The files are the
// kubelet's (root's), as in a real one; the pod's fsGroup, which the
// process's user stands for here as runAsUser does, makes them the group of
// the user Patroni runs as, with group read added: PostgreSQL and its
// archive_command read a key under any mode, as in the container. A pod
// without an fsGroup reads only what the mode lets others read, as a
// non-root container would. Contents are read once, at the pod's first
// start (see writeDataVolume).
func (in *instance) dataVolume(pod *corev1.Pod, v corev1.Volume) (string, error) {
	fsGroup := pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.FSGroup != nil
	files, err := dataVolumeFiles(pod.Namespace, v, fsGroup, in.k.lookup)
	if err != nil {
		return "", waiting(ReasonContainerCreating, "%w", err)
	}
	gid := -1
	if fsGroup {
		gid = int(in.k.gid)
	}
	dir := filepath.Join(podPath(in.k.opts.Root, pod.UID), volumesDir, v.Name)
	if err := writeDataVolume(dir, files, gid); err != nil {
		return "", waiting(ReasonContainerCreating, "volume %s: %w", v.Name, err)
	}
	return dir, nil
}

// crashed handles an exit nobody asked for: PostgreSQL goes too (a
// container's processes die together), and the restart waits for the
// back-off.
func (in *instance) crashed(ex exitStatus) {
	in.exited(ex)
	in.killPostmasters()
	in.frozen, in.stopped = false, nil // SIGKILL ends stopped processes too
	delay := in.back.crashed(ex.at.Sub(in.state.StartedAt))
	in.restartAt = time.Now().Add(delay)
	in.setTimer(delay)
	c := runContainerName
	if pod, _ := in.current(); pod != nil {
		if rc := runContainer(pod); rc != nil {
			c = rc.Name
		}
	}
	in.setWaiting(ReasonCrashLoop, fmt.Sprintf("back-off %v restarting failed container=%s pod=%s", delay, c, in.key))
	in.log.WithFields(logrus.Fields{"exitCode": in.state.Last.ExitCode, "signal": in.state.Last.Signal, "backoff": delay}).
		Warn(in.program() + " exited unexpectedly")
}

// exited records the end of the current process. Its process group may
// outlive it (pg_ctl, pg_basebackup, a stuck archive command): killed now,
// right after the reap, while the group id cannot have been reused yet.
func (in *instance) exited(ex exitStatus) {
	_ = syscall.Kill(-ex.pid, syscall.SIGKILL)
	t := ex.termination(in.proc.started)
	in.state.Previous, in.state.Last = in.state.Last, &t
	in.state.Ready = false
	in.proc = nil
}

// kill SIGKILLs Patroni's process group and PostgreSQL, as a crash of the
// container would, and waits until they are gone.
func (in *instance) kill() {
	if in.proc != nil {
		select {
		case ex := <-in.proc.exits: // already exited: do not signal a reused pid
			in.exited(ex)
		default:
			_ = syscall.Kill(-in.proc.pid, syscall.SIGKILL)
			select {
			case ex := <-in.proc.exits:
				in.exited(ex)
			case <-time.After(goneTimeout):
				in.log.WithField("pid", in.proc.pid).Error(in.program() + " survived SIGKILL; forgetting it")
				in.proc = nil
			}
		}
	}
	in.killPostmasters()
	in.frozen, in.stopped = false, nil // SIGKILL ends stopped processes too
}

// killPostmasters kills the PostgreSQL servers running on the instance's
// claims.
func (in *instance) killPostmasters() {
	if in.prep == nil {
		return
	}
	for _, vol := range in.prep.dataDirs {
		for _, dir := range postmasterDirs(vol, dataDirDepth) {
			killed, err := killPostmaster(dir)
			if err != nil {
				in.log.WithError(err).Error("stopping PostgreSQL")
			} else if killed {
				in.log.WithField("dataDir", dir).Info("killed PostgreSQL")
			}
		}
	}
}

// stop ends the instance gracefully: SIGCONT if frozen, SIGTERM to Patroni,
// which stops PostgreSQL (a leader hands over or releases its key), then
// SIGKILL for whatever is left after grace.
func (in *instance) stop(grace time.Duration) {
	began := time.Now()
	if in.proc != nil {
		select {
		case ex := <-in.proc.exits:
			in.exited(ex)
		default:
			// A stopped process keeps SIGTERM pending until SIGCONT (a
			// handled one: Patroni's and PostgreSQL's are): a frozen
			// instance is resumed first, to stop as any other does.
			in.thaw("stopping a frozen instance")
			_ = syscall.Kill(in.proc.pid, syscall.SIGTERM)
			timer := time.NewTimer(grace)
			var slow <-chan time.Time
			if grace > slowStop {
				t := time.NewTimer(slowStop)
				defer t.Stop()
				slow = t.C
			}
		wait:
			for {
				select {
				case ex := <-in.proc.exits:
					in.exited(ex)
					break wait
				case <-slow:
					in.reportSlowStop(time.Since(began))
					slow = nil
				case <-timer.C:
					in.log.WithField("grace", grace).Warn(in.program() + " did not stop within the grace period: killing it")
					break wait
				}
			}
			timer.Stop()
		}
	}
	in.kill()
	in.stopProxy()
	in.setTimer(0)
	if err := os.RemoveAll(socketDir(in.uid)); err != nil {
		in.log.WithError(err).Warn("removing the socket directory")
	}
	in.log.WithField("took", time.Since(began).Round(time.Millisecond)).Info("stopped")
}

// release gives back what a deleted pod held: its IP, its emptyDirs and
// its token. The log and configuration stay, for post-mortems.
func (in *instance) release() {
	in.k.ips.release(in.uid)
	dir := podPath(in.k.opts.Root, in.uid)
	_ = os.RemoveAll(filepath.Join(dir, volumesDir))
	_ = os.Remove(filepath.Join(dir, kubeconfig))
}

// terminate stops a pod being deleted and finishes its deletion: no other
// kubelet (kwok ignores this node's pods) will.
func (in *instance) terminate(pod *corev1.Pod) {
	grace := gracePeriod(pod)
	in.log.WithField("grace", grace).Info("pod is terminating: stopping its instance")
	in.stop(grace)
	in.release()
	if in.state.Last != nil && in.proc == nil {
		// What a kubelet reports before the pod goes: the container ended.
		in.state.Phase, in.state.Ready = containerTerminated, false
		ctx, cancel := context.WithTimeout(context.Background(), shutdownWriteTimeout)
		in.writeStatus(ctx, pod)
		cancel()
	}
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
		err := in.k.kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      &metav1.Preconditions{UID: ptr.To(pod.UID)},
		})
		cancel()
		switch {
		case err == nil:
			in.log.Info("deleted the pod")
			return
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			return // gone, or another pod of that name
		case attempt == 3:
			in.log.WithError(err).Error("deleting the pod; retried when it changes")
			return
		}
		time.Sleep(time.Duration(attempt) * time.Second)
	}
}

// shutdown stops the instance as the kubelet exits: the pod stays, marked
// not ready.
func (in *instance) shutdown(pod *corev1.Pod) {
	if in.state.Ready || in.proc != nil {
		in.state.Ready = false
		ctx, cancel := context.WithTimeout(context.Background(), shutdownWriteTimeout)
		in.writeStatus(ctx, pod)
		cancel()
	}
	in.stop(gracePeriod(pod))
}

// gracePeriod is how long the pod's processes may take to stop.
func gracePeriod(pod *corev1.Pod) time.Duration {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	default:
		return defaultGrace
	}
}

// probe asks Patroni's /readiness, as the pod's readiness probe would, or
// for a pooler dials its tcpSocket probe's port.
func (in *instance) probe() {
	if in.proc == nil || in.prep == nil {
		return
	}
	ready := false
	switch {
	case in.image != nil:
		pod, _ := in.current()
		var c *corev1.Container
		if pod != nil {
			c = runContainer(pod)
		}
		ready = in.probeImage(c, time.Now())
	case in.pooler != nil:
		ready = in.pooler.probe(in.prep.ip)
	default:
		url := fmt.Sprintf("http://%s/readiness", netip.AddrPortFrom(in.prep.ip, patroniPort))
		if resp, err := in.k.probes.Get(url); err == nil {
			ready = resp.StatusCode == http.StatusOK
			resp.Body.Close()
		}
	}
	if ready != in.state.Ready {
		in.log.WithField("ready", ready).Info("readiness changed")
		in.state.Ready = ready
	}
	if pod, _ := in.current(); pod != nil && in.pooler == nil {
		in.checkLiveness(runContainer(pod), time.Now())
	}
}

// writeStatus writes the pod's status when it differs from what the pod
// has, or from what was last written while the cache catches up.
func (in *instance) writeStatus(ctx context.Context, pod *corev1.Pod) {
	base := pod.Status
	if in.written != nil {
		base = *in.written
	}
	run := ""
	if c := runContainer(pod); c != nil {
		run = c.Name
	}
	desired := buildStatus(pod, base, run, in.state, time.Now())
	// The cache may lag behind the last write: a cached status equal to
	// the desired one is what the API has only when the last write says
	// so too (seen: a pod Ready again after a crash, then the kubelet
	// stopped, its not-ready status never written because the cache still
	// showed the crash).
	if !in.writeUnsure && sameStatus(desired, pod.Status) && (in.written == nil || sameStatus(desired, *in.written)) {
		in.written = &desired
		return
	}
	if !in.writeUnsure && in.written != nil && sameStatus(desired, *in.written) && time.Since(in.writtenAt) < staleWrite {
		return
	}
	body, err := json.Marshal(map[string]any{
		// The UID makes the write fail, rather than land on a re-created
		// pod of the same name.
		"metadata": map[string]any{"uid": pod.UID},
		"status":   managed(desired),
	})
	if err != nil {
		in.log.WithError(err).Error("encoding the pod status")
		return
	}
	wctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	_, err = in.k.kube.CoreV1().Pods(pod.Namespace).Patch(wctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
	if err != nil {
		// The write may have landed all the same (the answer was lost,
		// or its context ended after the request went out): neither the
		// cache nor the last write say what the API has now, so the next
		// write is made whatever they say (seen: a pod's Ready written
		// as the kubelet stopped, its answer cancelled, then the
		// not-ready status at the stop skipped as already there).
		in.writeUnsure = true
		if ctx.Err() == nil {
			in.log.WithError(err).Warn("writing the pod status")
		}
		if in.timer == nil {
			in.setTimer(time.Second)
		}
		return
	}
	in.written, in.writtenAt, in.writeUnsure = &desired, time.Now(), false
	in.log.WithFields(logrus.Fields{"phase": desired.Phase, "state": describe(in.state)}).Debug("wrote the pod status")
}

// describe summarises the container's state for the log.
func describe(s instanceState) string {
	switch s.Phase {
	case containerRunning:
		return fmt.Sprintf("running pid %d ready=%v", s.PID, s.Ready)
	case containerTerminated:
		return "terminated"
	default:
		return strings.TrimSpace("waiting " + s.Reason)
	}
}

// writeEnviron writes env to path, one NAME=value per line, sorted by name,
// 0600: it holds the passwords of the container's environment.
func writeEnviron(path string, env map[string]string) error {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(env)) {
		b.WriteString(name + "=" + env[name] + "\n")
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
