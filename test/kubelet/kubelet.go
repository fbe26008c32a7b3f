// Package kubelet is a test-only kubelet that runs real Patroni and
// PostgreSQL processes behind the pods of the local control plane (package
// testbed; docs/testbed.md). It owns one Node, and for every pod bound to it
// runs one Patroni as the postgres user on a loopback pod IP of its own, with
// the configuration Spilo would build from the pod's environment (spilo.go).
// Patroni then elects a leader, labels the pods and streams WAL as it would
// in a real cluster, so the operator is tested against the real thing. A
// connection-pooler pod (container "connection-pooler") runs PgBouncer
// instead, configured as the pooler image would configure it (pooler.go).
// A container whose image Options.ImageBinaries maps to a binary (pgloop's
// operator) runs that binary as a kubelet runs a container (image.go,
// container.go, containerinit.go).
//
// It does what a kubelet does for such pods and no more: register the node
// and keep its lease, give each pod an IP and its volumes (a directory per
// PersistentVolume, so the data follows the claim), start the container's
// process, restart it after a crash with a back-off, report the status
// (Running, Ready from Patroni's /readiness, restarts), and stop it on
// deletion within the grace period before removing the pod. HoldAnnotation
// kills an instance and keeps it down, for failover tests; FreezeAnnotation
// stops its processes without killing them, for tests of a hung instance.
//
// Run belongs in a process of its own (test/cmd/pgkubelet): it makes the
// whole process a child subreaper, adopting every orphan of its descendants,
// and reaps every child that does not run as root (see reaper).
package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// HoldAnnotation set to "true" on a pod makes the kubelet SIGKILL its Patroni
// and PostgreSQL, as a crash would (no clean shutdown, so the leader key
// stays until its TTL runs out), and keep them down while the annotation is
// there: the container waits with reason Held. Removing the annotation, or
// setting it to anything else, starts the instance again at once.
const HoldAnnotation = "pgloop.dev/test-hold"

// FreezeAnnotation set to "true" on a pod makes the kubelet SIGSTOP its
// Patroni and PostgreSQL, backends included, without killing them: a hung
// instance, not a crashed one. The kernel still accepts connections on the
// pod's ports, but nothing answers them, so the pod turns not ready while
// its container stays Running (a stopped process has not exited). Removing
// the annotation, or setting it to anything else, resumes them (SIGCONT).
// A frozen pod's deletion resumes its processes before SIGTERM, so they
// stop as any others would.
const FreezeAnnotation = "pgloop.dev/test-freeze"

// FreezePostgres as the value of FreezeAnnotation stops PostgreSQL only:
// Patroni keeps running and answering its REST API, GET /readiness from its
// cached state, so the pod stays Ready while no SQL statement is answered.
const FreezePostgres = "postgres"

// Defaults of Options, the paths of Debian's packages.
const (
	DefaultPatroni = "/usr/bin/patroni"
	DefaultPython  = "/usr/bin/python3"
	DefaultPGBin   = "/usr/lib/postgresql/15/bin"
	DefaultNodeIP  = "127.0.0.1"
)

// postgresUser runs Patroni: PostgreSQL refuses to run as root.
const postgresUser = "postgres"

// Options configure the kubelet.
type Options struct {
	// NodeName is the node it registers and serves.
	NodeName string
	// Root holds the data and the per-pod files (see paths.go). Every
	// parent must be traversable by the postgres user.
	Root string
	// PodCIDR is where pod IPs come from, e.g. 127.1.7.0/24.
	PodCIDR string
	// NodeIP is the node's InternalIP and the pods' hostIP; empty means
	// DefaultNodeIP.
	NodeIP string
	// Labels are added to the node's own (hostname, os, arch, type=process).
	Labels map[string]string
	// Taints are set on the node, e.g. pgloop.dev/data-plane=process:NoSchedule
	// to keep other pods off it.
	Taints []corev1.Taint
	// Patroni, Python and PGBin locate the programs; empty means the
	// defaults.
	Patroni, Python, PGBin string
	// PgBouncer runs connection-pooler pods (pooler.go); empty means
	// DefaultPgBouncer. Checked when such a pod comes, not before: a
	// plane without poolers does not need it.
	PgBouncer string
	// Pgloop is the pgloop binary whose start-up programs run the pods,
	// as pgloop's images run them: `pgloop instance` (Patroni) and
	// `pgloop pooler` (PgBouncer). Required.
	Pgloop string
	// ImageBinaries maps image references to binaries of this machine: a
	// container whose image is one of them (an exact reference, else its
	// repository for any tag) runs that binary as the image's entrypoint
	// (image.go).
	ImageBinaries map[string]string
	// Log receives the kubelet's log; nil discards it.
	Log logrus.FieldLogger
}

// withDefaults fills in the defaults and checks what can be checked before
// touching the cluster, with messages that say how to fix it.
func (o Options) withDefaults() (Options, error) {
	if o.NodeIP == "" {
		o.NodeIP = DefaultNodeIP
	}
	if o.Patroni == "" {
		o.Patroni = DefaultPatroni
	}
	if o.Python == "" {
		o.Python = DefaultPython
	}
	if o.PGBin == "" {
		o.PGBin = DefaultPGBin
	}
	if o.PgBouncer == "" {
		o.PgBouncer = DefaultPgBouncer
	}
	if o.Log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		o.Log = l
	}
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("a node name is required"))
	}
	if o.Root == "" {
		errs = append(errs, errors.New("a root directory is required"))
	}
	if _, err := netip.ParseAddr(o.NodeIP); err != nil {
		errs = append(errs, fmt.Errorf("node IP: %w", err))
	}
	if !isFile(o.Pgloop) {
		errs = append(errs, fmt.Errorf("pgloop not found at %q: it runs the pods' start-up programs (`make build` makes bin/pgloop)", o.Pgloop))
	}
	if !isFile(o.Patroni) {
		errs = append(errs, fmt.Errorf("patroni not found at %s: run `apt-get install patroni`", o.Patroni))
	}
	if !isFile(o.Python) {
		errs = append(errs, fmt.Errorf("python not found at %s: Debian's patroni needs /usr/bin/python3 (`apt-get install python3`)", o.Python))
	}
	if !isFile(filepath.Join(o.PGBin, "postgres")) || !isFile(filepath.Join(o.PGBin, "initdb")) {
		errs = append(errs, fmt.Errorf("postgres and initdb not found in %s: run `apt-get install postgresql-15`", o.PGBin))
	}
	return o, errors.Join(errs...)
}

// Validate checks the options as Run would before touching the cluster, so
// a command can fail on a bad flag or a missing program first.
func (o Options) Validate() error {
	o, err := o.withDefaults()
	if err != nil {
		return err
	}
	_, err = parsePodCIDR(o.PodCIDR)
	return err
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// Timings of the instances.
const (
	// probeInterval and probeTimeout: Patroni's /readiness, every second.
	probeInterval = time.Second
	probeTimeout  = 500 * time.Millisecond
	// retryInterval paces attempts to start an instance whose preparation
	// failed for a reason no watch event announces (a token request).
	retryInterval = 2 * time.Second
	// apiTimeout bounds each API call of an instance.
	apiTimeout = 10 * time.Second
	// shutdownWriteTimeout bounds the best-effort "not ready" at shutdown.
	shutdownWriteTimeout = 3 * time.Second
)

// kubelet is one running kubelet.
type kubelet struct {
	opts     Options
	cfg      *rest.Config
	kube     kubernetes.Interface
	log      logrus.FieldLogger
	prefix   netip.Prefix
	uid, gid uint32
	started  metav1.Time

	reaper   *reaper
	launcher *launcher
	ips      *ipPool
	probes   *http.Client

	pods   listersv1.PodLister
	pvcs   listersv1.PersistentVolumeClaimLister
	pvs    listersv1.PersistentVolumeLister
	lookup cacheLookup
	queue  workqueue.TypedRateLimitingInterface[string]

	mu        sync.Mutex
	instances map[types.UID]*instance
	running   sync.WaitGroup // instance goroutines
}

// Run serves the node until ctx ends, then stops every instance as a
// deletion would, without deleting the pods (they are marked not ready),
// and returns once nothing it started runs any more. cfg is an admin
// configuration: the kubelet reads every Secret and requests tokens for the
// pods' ServiceAccounts. It must run as root (see the package comment for
// why in a process of its own).
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	k := &kubelet{opts: opts, cfg: cfg, log: opts.Log, instances: map[types.UID]*instance{}, started: metav1.Now()}
	if k.prefix, err = parsePodCIDR(opts.PodCIDR); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("the process kubelet must run as root: it runs Patroni as postgres and hands it its directories")
	}
	if k.uid, k.gid, err = lookupUser(postgresUser); err != nil {
		return err
	}
	if k.opts.Root, err = filepath.Abs(opts.Root); err != nil {
		return err
	}
	unlock, err := k.prepareRoot()
	if err != nil {
		return err
	}
	defer unlock()
	if k.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}

	// An earlier kubelet of this root, killed outright, may have left
	// postmasters behind; they hold the pod IPs and the data.
	if err := Cleanup(k.opts.Root); err != nil {
		return fmt.Errorf("while cleaning up after an earlier kubelet: %w", err)
	}
	// The pods' start-up program, copied where the postgres user can run
	// it, as an image's entrypoint is: a pgloop rebuilt meanwhile does not
	// change what this kubelet's pods run.
	if k.opts.Pgloop, _, err = pullImage(k.opts.Root, k.opts.Pgloop); err != nil {
		return fmt.Errorf("while installing the start-up program: %w", err)
	}
	if err := becomeSubreaper(); err != nil {
		return err
	}
	k.reaper, k.launcher = newReaper(), newLauncher()
	reaperCtx, stopReaper := context.WithCancel(context.Background())
	reaperDone := make(chan struct{})
	go func() {
		defer close(reaperDone)
		k.reaper.run(reaperCtx)
	}()
	defer func() {
		// Last: instances rely on the reaper until they have stopped.
		stopReaper()
		<-reaperDone
		k.launcher.Close()
	}()
	k.probes = &http.Client{
		Timeout:   probeTimeout,
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
	}

	if err := k.registerNode(ctx); err != nil {
		return err
	}
	if err := k.serve(ctx); err != nil {
		return err
	}
	// Whatever an instance failed to stop (it logged why).
	if err := Cleanup(k.opts.Root); err != nil {
		return fmt.Errorf("while sweeping %s after the instances stopped: %w", k.opts.Root, err)
	}
	k.log.Info("stopped")
	return nil
}

// lookupUser returns the uid and gid of name.
func lookupUser(name string) (uint32, uint32, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return 0, 0, fmt.Errorf("user %s, who runs Patroni and PostgreSQL: %w (run `apt-get install postgresql-15`)", name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("user %s has a non-numeric uid or gid", name)
	}
	return uint32(uid), uint32(gid), nil
}

// prepareRoot creates the root and its subdirectories, checks that postgres
// can reach them, and locks the root against a second kubelet. It returns
// the unlock.
func (k *kubelet) prepareRoot() (func(), error) {
	root := k.opts.Root
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	if err := checkTraversable(root, k.uid, k.gid); err != nil {
		return nil, err
	}
	for _, d := range []string{root, filepath.Join(root, pvDir), filepath.Join(root, podsDir)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		if err := os.Chmod(d, 0o755); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(filepath.Join(root, lockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another process kubelet serves %s: %w", root, err)
	}
	return func() { f.Close() }, nil
}

// serve runs the informers and the instances until ctx ends, then waits for
// every instance to stop.
func (k *kubelet) serve(ctx context.Context) error {
	podFactory := informers.NewSharedInformerFactoryWithOptions(k.kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", k.opts.NodeName).String()
		}))
	factory := informers.NewSharedInformerFactory(k.kube, 0)
	k.pods = podFactory.Core().V1().Pods().Lister()
	k.pvcs = factory.Core().V1().PersistentVolumeClaims().Lister()
	k.pvs = factory.Core().V1().PersistentVolumes().Lister()
	k.lookup = cacheLookup{secrets: factory.Core().V1().Secrets().Lister(), configMaps: factory.Core().V1().ConfigMaps().Lister()}
	k.ips = newIPPool(k.prefix, k.ipHeldByOtherPod)
	k.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "pgkubelet"})

	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			k.queue.Add(key)
		}
	}
	if _, err := podFactory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	// What a waiting instance may be waiting for: a claim bound, a Secret
	// created. There are few instances: wake them all.
	wakeAll := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { k.wakeAll() },
		UpdateFunc: func(any, any) { k.wakeAll() },
	}
	for _, inf := range []cache.SharedIndexInformer{
		factory.Core().V1().PersistentVolumeClaims().Informer(),
		factory.Core().V1().PersistentVolumes().Informer(),
		factory.Core().V1().Secrets().Informer(),
		factory.Core().V1().ConfigMaps().Informer(),
	} {
		if _, err := inf.AddEventHandler(wakeAll); err != nil {
			return err
		}
	}

	informerCtx, stopInformers := context.WithCancel(context.Background())
	defer stopInformers()
	podFactory.Start(informerCtx.Done())
	factory.Start(informerCtx.Done())
	synced := podFactory.WaitForCacheSync(ctx.Done())
	maps.Copy(synced, factory.WaitForCacheSync(ctx.Done()))
	for typ, ok := range synced {
		if !ok {
			return fmt.Errorf("while syncing the %v cache: %w", typ, ctx.Err())
		}
	}
	k.log.WithFields(logrus.Fields{"node": k.opts.NodeName, "root": k.opts.Root, "podCIDR": k.prefix}).Info("serving")

	var wg sync.WaitGroup
	wg.Go(func() { k.heartbeat(ctx) })
	wg.Go(func() {
		for k.processNext(ctx) {
		}
	})
	<-ctx.Done()
	k.log.Info("shutting down: stopping every instance")
	k.queue.ShutDown()
	wg.Wait()
	// No instance is created any more; each sees ctx and stops.
	k.running.Wait()
	return nil
}

func (k *kubelet) processNext(ctx context.Context) bool {
	key, quit := k.queue.Get()
	if quit {
		return false
	}
	defer k.queue.Done(key)
	k.sync(ctx, key)
	k.queue.Forget(key)
	return true
}

// sync matches the instances of pod ns/name to the pod in the cache: an
// instance of another UID (the pod was deleted, perhaps re-created by its
// StatefulSet) is told its pod is gone, and the current pod gets an
// instance that starts once the old ones have stopped (they share the data
// directory).
func (k *kubelet) sync(ctx context.Context, key string) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return
	}
	pod, err := k.pods.Pods(ns).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		k.log.WithError(err).WithField("pod", key).Warn("reading the pod from the cache")
		return
	}
	if pod != nil && pod.Spec.NodeName != k.opts.NodeName {
		pod = nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	var current *instance
	var previous []<-chan struct{}
	for _, in := range k.instances {
		if in.key != key {
			continue
		}
		if pod != nil && in.uid == pod.UID {
			current = in
			continue
		}
		in.markGone()
		previous = append(previous, in.done)
	}
	switch {
	case current != nil:
		current.update(pod)
	case pod != nil:
		in := newInstance(k, pod, previous)
		k.instances[pod.UID] = in
		k.running.Go(func() { in.run(ctx) })
	}
}

// forget drops a stopped instance; the pod's key is looked at again in case
// the pod is still there (a delete that failed is then retried).
func (k *kubelet) forget(in *instance, requeue bool) {
	k.mu.Lock()
	delete(k.instances, in.uid)
	k.mu.Unlock()
	if requeue {
		k.queue.AddAfter(in.key, time.Second)
	}
}

func (k *kubelet) wakeAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, in := range k.instances {
		in.poke()
	}
}

// ipHeldByOtherPod reports whether a pod of this node other than uid has
// addr as its IP.
func (k *kubelet) ipHeldByOtherPod(uid types.UID, addr netip.Addr) bool {
	pods, err := k.pods.List(labels.Everything())
	if err != nil {
		return true
	}
	for _, p := range pods {
		if p.UID != uid && p.Status.PodIP == addr.String() {
			return true
		}
	}
	return false
}
