// Package testbed runs a real Kubernetes control plane on loopback for tests
// and for `make run`: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok, which plays the kubelets of fake nodes so pods
// become Running and Ready without a container runtime. The binaries come
// from test/tools/build.sh (`make testbed`); docs/testbed.md has the details.
package testbed

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	// startAttempts bounds the retries when a probed free port is taken
	// before the process binding it starts.
	startAttempts = 3
	// stopGrace is how long a process may take to exit after SIGTERM.
	stopGrace = 15 * time.Second
	// pollInterval paces health probes; nothing to watch exists before the
	// apiserver serves.
	pollInterval = 100 * time.Millisecond

	// DefaultResizeFSDelay is how long a grown claim stays
	// FileSystemResizePending when Options.ResizeFSDelay is 0: long enough
	// to be seen, as a real kubelet takes a moment too.
	DefaultResizeFSDelay = 500 * time.Millisecond
)

// Options shapes the plane. The zero value is usable.
type Options struct {
	// Nodes is the number of fake nodes kwok plays; 0 means 3, or none when
	// ProcessNodes is set.
	Nodes int
	// ProcessNodes is the number of nodes played by process kubelets
	// (test/cmd/pgkubelet): their pods run real Patroni and PostgreSQL.
	// They need Debian's patroni and postgresql packages.
	ProcessNodes int
	// RealNodes is the number of real nodes: a kubelet and kube-proxy on
	// Debian's containerd and runc, pods as containers of OCI images with
	// pod IPs on a bridge, cluster DNS (CoreDNS). Only 1 is supported (one
	// per machine at a time: planes that ask wait for each other). It
	// needs root, `make real-node-deps` and the images of `make images`
	// (RealNodeUnsupported says what is missing). Its volumes are local
	// volumes the plane provisions on it.
	RealNodes int
	// NodeImages are the OCI archives the real node loads; nil means
	// DefaultNodeImages in the binaries' directory.
	NodeImages []string
	// ImageAliases tags, on the real node, the image of each value (a
	// reference of NodeImages) as its key too: e.g. zalando's Spilo
	// reference for pgloop's instance image, which reads the same
	// environment.
	ImageAliases map[string]string
	// ContainerdRoot is the real node's containerd root, which keeps its
	// images across planes; empty means DefaultContainerdRoot.
	ContainerdRoot string
	// TaintProcessNodes taints process nodes (DataPlaneTaintKey) so that
	// only pods tolerating it run there, the others stay on kwok's nodes.
	TaintProcessNodes bool
	// ImageBinaries maps image references to binaries that process nodes
	// run for containers of those images (pgkubelet --image-binary; a
	// repository stands for any of its tags, an exact reference wins). A
	// binary is read when such a container starts, so it may be built
	// after the plane.
	ImageBinaries map[string]string
	// NodeCapacity is each node's capacity and allocatable; nil means
	// 4 CPUs, 16Gi of memory and 110 pods.
	NodeCapacity corev1.ResourceList
	// ControllerQPS and ControllerBurst, when set, are the client rate
	// limits of kube-controller-manager and kube-scheduler
	// (--kube-api-qps, --kube-api-burst): their defaults, 20/30 and
	// 50/100, bound how fast a burst of thousands of StatefulSets gets
	// its pods.
	ControllerQPS   float32
	ControllerBurst int
	// VolumeWorkers, when above 0, makes the plane's own provisioner
	// (test/provisioner) provision, bind, release and delete the volumes
	// of StorageClassName and FixedStorageClassName with that many workers, in place of kwok's
	// volume stages, which kwok plays one at a time (docs/testbed.md):
	// kwok is then started without them. 0 keeps kwok's stages.
	VolumeWorkers int
	// VolumeQPS and VolumeBurst are the client rate limits of the
	// provisioner and of the resizer (each has a client); 0 means 500 and
	// 1000.
	VolumeQPS   float32
	VolumeBurst int
	// NoResizer leaves the plane without its volume resizer
	// (test/resizer), which otherwise grows the claims of StorageClassName
	// whose request is raised, as the external-resizer and the kubelet
	// would: without it they stay at their old capacity for good.
	NoResizer bool
	// ResizeFSDelay is how long the resizer leaves a grown claim
	// FileSystemResizePending (its volume grown, its own capacity not yet)
	// before it plays the kubelet's file system resize; 0 means
	// DefaultResizeFSDelay.
	ResizeFSDelay time.Duration
	// KwokPodDelete keeps kwok's pod-delete stage, which deletes a pod
	// being deleted by name, with no UID precondition, and so may delete
	// the StatefulSet's new pod of that name when it lags (docs/testbed.md):
	// only to compare. By default kwok runs without it and the plane's
	// pod reaper (test/podreaper) does its work with a UID precondition.
	KwokPodDelete bool
	// ObjectStore starts an S3 object store with the plane (SeaweedFS,
	// HTTPS on 127.0.0.1 with a certificate of the plane's CA, a bucket):
	// Plane.ObjectStore. It needs bin/weed.
	ObjectStore bool
	// Bucket and Region are the object store's, empty for DefaultBucket
	// and DefaultRegion.
	Bucket, Region string
	// NodeLabels are added to every node.
	NodeLabels map[string]string
	// Zones, when set, are spread over the nodes in turn as the
	// topology.kubernetes.io/zone label, for anti-affinity tests.
	Zones []string
	// BinDir holds the binaries; empty means $PGLOOP_BIN, else bin/ at the
	// repository root.
	BinDir string
	// TempDir is where the plane's directory is created; empty means
	// os.TempDir().
	TempDir string
	// KeepDir keeps the plane's directory (data, logs, kubeconfig) after Stop.
	KeepDir bool
	// StartTimeout bounds the start-up; 0 means 2 minutes.
	StartTimeout time.Duration
	// Log receives one line per start-up step; nil discards them.
	Log io.Writer
}

func (o Options) withDefaults() Options {
	if o.Nodes == 0 && o.ProcessNodes == 0 && o.RealNodes == 0 {
		o.Nodes = 3
	}
	if o.NodeCapacity == nil {
		o.NodeCapacity = corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("16Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
	}
	if o.VolumeQPS <= 0 {
		o.VolumeQPS = 500
	}
	if o.VolumeBurst <= 0 {
		o.VolumeBurst = 1000
	}
	if o.ResizeFSDelay <= 0 {
		o.ResizeFSDelay = DefaultResizeFSDelay
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 2 * time.Minute
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o
}

// Process describes one program the plane started.
type Process struct {
	Name string
	PID  int
	// Log is the file holding its stdout and stderr.
	Log string
}

// Plane is a running control plane. Stop it, or its processes die only with
// the program that started it.
type Plane struct {
	// Dir holds etcd's data, certificates, logs and the kubeconfig.
	Dir string
	// Kubeconfig is the path of an admin kubeconfig for the plane.
	Kubeconfig string
	// Config is the admin rest.Config (what Kubeconfig holds).
	Config *rest.Config
	// Client is an admin clientset.
	Client *kubernetes.Clientset
	// StartupTime is how long Start took, for the record.
	StartupTime time.Duration

	opts     Options
	bins     binaries
	launcher *launcher
	procsMu  sync.Mutex
	procs    []*process   // in start order: etcd first; under procsMu
	nodes    atomic.Int32 // created so far, numbering their addresses

	// ObjectStore is the S3 object store when Options.ObjectStore is set,
	// else nil. It stops with the plane.
	ObjectStore *ObjectStore

	processNodes []ProcessNode
	realNodes    []RealNode
	// hostLock and journal are the real node's (hoststate.go).
	hostLock *hostLock
	journal  *hostJournal
	// volumes is the provisioner when Options.VolumeWorkers is set.
	volumes *inProcess
	// resizer is the resizer unless Options.NoResizer.
	resizer *inProcess
	// reaper finalizes the deleted pods of kwok's nodes, unless
	// Options.KwokPodDelete.
	reaper *inProcess

	stopOnce sync.Once
	stopErr  error
}

// ports are the plane's listening ports, all on 127.0.0.1.
type ports struct {
	etcdClient, etcdPeer, apiserver, controllerManager, scheduler, kwok int
}

// Start brings a plane up in a new directory, on free loopback ports, and
// returns once the nodes are Ready, the default StorageClass exists and the
// default namespace has its ServiceAccount. ctx bounds the start-up only: the
// processes run until Stop. On error nothing is left running.
func Start(ctx context.Context, opts Options) (*Plane, error) {
	opts = opts.withDefaults()
	bins, err := findBinaries(opts.BinDir, opts.ProcessNodes > 0, opts.ObjectStore)
	if err != nil {
		return nil, err
	}
	if opts.RealNodes > 1 {
		return nil, fmt.Errorf("%d real nodes asked for: a plane runs 1 at most (docs/testbed.md, Real node)", opts.RealNodes)
	}
	if opts.RealNodes > 0 {
		if err := RealNodeUnsupported(); err != nil {
			return nil, err
		}
		if err := missingBinaries(bins, binRealKubelet, binKubeProxy, binCoreDNS, binPause); err != nil {
			return nil, err
		}
	}
	if opts.ProcessNodes > 0 {
		if err := dataPlaneMissing(); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		p, err := start(ctx, opts, bins)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, errPortInUse) || attempt == startAttempts {
			return nil, err
		}
		fmt.Fprintf(opts.Log, "testbed: port clash, retrying (%v)\n", err)
	}
}

func start(ctx context.Context, opts Options, bins binaries) (_ *Plane, err error) {
	began := time.Now()
	step := func(format string, args ...any) {
		fmt.Fprintf(opts.Log, "testbed: %6.2fs "+format+"\n", append([]any{time.Since(began).Seconds()}, args...)...)
	}
	removeStaleDirs(opts.TempDir, step)
	dir, err := os.MkdirTemp(opts.TempDir, dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("while creating the plane's directory: %w", err)
	}
	p := &Plane{Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), opts: opts, bins: bins, launcher: newLauncher()}
	defer func() {
		if err != nil {
			_ = p.Stop()
		}
	}()
	if err := writeOwner(dir); err != nil {
		return nil, err
	}
	for _, sub := range []string{"etcd", "apiserver", "controller-manager", "scheduler", "home"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, err
		}
	}
	if opts.RealNodes > 0 {
		if err := p.prepareRealNode(ctx, step); err != nil {
			return nil, err
		}
	}
	// The object store needs no other process: it starts first and is
	// waited for last.
	var storeProc *process
	if opts.ObjectStore {
		if storeProc, err = p.launchObjectStore(); err != nil {
			return nil, err
		}
	}
	port, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	pt := ports{port[0], port[1], port[2], port[3], port[4], port[5]}

	etcd, err := p.startEtcd(pt)
	if err != nil {
		return nil, err
	}
	if err := waitHealthy(ctx, etcd, fmt.Sprintf("http://127.0.0.1:%d/health", pt.etcdClient), nil); err != nil {
		return nil, err
	}
	step("etcd healthy (pid %d)", etcd.pid())

	token, err := newToken()
	if err != nil {
		return nil, err
	}
	apiserver, err := p.startAPIServer(pt, token)
	if err != nil {
		return nil, err
	}
	if err := p.connect(ctx, apiserver, pt, token); err != nil {
		return nil, err
	}
	step("kube-apiserver ready (pid %d)", apiserver.pid())

	cm, err := p.startControllerManager(pt)
	if err != nil {
		return nil, err
	}
	sched, err := p.startScheduler(pt)
	if err != nil {
		return nil, err
	}
	kwok, err := p.startKwok(pt)
	if err != nil {
		return nil, err
	}
	// Their serving certificates are self-signed and unknown to us; only
	// /healthz is read, on loopback.
	insecure := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // health probe of a loopback process we started
	for _, c := range []struct {
		proc *process
		url  string
		tls  *tls.Config
	}{
		{cm, fmt.Sprintf("https://127.0.0.1:%d/healthz", pt.controllerManager), insecure},
		{sched, fmt.Sprintf("https://127.0.0.1:%d/healthz", pt.scheduler), insecure},
		{kwok, fmt.Sprintf("http://127.0.0.1:%d/healthz", pt.kwok), nil},
	} {
		if err := waitHealthy(ctx, c.proc, c.url, c.tls); err != nil {
			return nil, err
		}
	}
	step("controller-manager, scheduler and kwok healthy")
	// kwok's volume stages make hostPaths, which a kubelet gives no
	// fsGroup: the real node's volumes are local ones of the provisioner.
	if opts.VolumeWorkers > 0 || opts.RealNodes > 0 {
		if err := p.startVolumes(); err != nil {
			return nil, err
		}
		step("provisioner up (%d workers)", max(opts.VolumeWorkers, realNodeVolumeWorkers))
	}
	if !opts.NoResizer {
		if err := p.startResizer(); err != nil {
			return nil, err
		}
		step("resizer up (file system resize after %v)", opts.ResizeFSDelay)
	}
	if !opts.KwokPodDelete {
		if err := p.startReaper(); err != nil {
			return nil, err
		}
		step("pod reaper up (%d workers)", reaperWorkers)
	}

	if err := p.createStorageClasses(ctx); err != nil {
		return nil, err
	}
	if err := p.createNodes(ctx); err != nil {
		return nil, p.withProcessState(err)
	}
	step("%d nodes Ready", opts.Nodes)
	if err := p.startProcessNodes(ctx); err != nil {
		return nil, err
	}
	if opts.ProcessNodes > 0 {
		step("%d process nodes Ready", opts.ProcessNodes)
	}
	if opts.RealNodes > 0 {
		if err := p.writeAPIServerEndpoints(ctx, pt.apiserver); err != nil {
			return nil, err
		}
		if err := p.startRealNode(ctx, step); err != nil {
			return nil, err
		}
	}
	if _, err := WaitFor(ctx, ServiceAccounts(p.Client, corev1.NamespaceDefault, "default"), func(*corev1.ServiceAccount) (bool, error) { return true, nil }); err != nil {
		return nil, p.withProcessState(fmt.Errorf("while waiting for the default ServiceAccount: %w", err))
	}
	if storeProc != nil {
		if err := p.ObjectStore.waitReady(ctx, storeProc); err != nil {
			return nil, err
		}
		p.ObjectStore.StartupTime = time.Since(began)
		step("object store ready at %s (pid %d), bucket %s", p.ObjectStore.S3.URL(), storeProc.pid(), p.ObjectStore.S3.Bucket)
	}
	p.StartupTime = time.Since(began)
	step("plane up in %v at %s", p.StartupTime.Round(time.Millisecond), p.Config.Host)
	return p, nil
}

// launchObjectStore prepares the object store in the plane's directory and
// starts its process.
func (p *Plane) launchObjectStore() (*process, error) {
	// PostgreSQL's pgBackRest runs as postgres and reads the CA file
	// in there (see startProcessNodes).
	if err := os.Chmod(p.Dir, 0o711); err != nil {
		return nil, err
	}
	s := &ObjectStore{}
	host := ""
	if p.opts.RealNodes > 0 {
		host = realNodeIP
	}
	err := s.init(filepath.Join(p.Dir, objectStoreDir), p.bins, p.launcher, ObjectStoreOptions{
		Bucket: p.opts.Bucket, Region: p.opts.Region, Host: host, Log: p.opts.Log,
	}.withDefaults())
	if err != nil {
		return nil, err
	}
	p.ObjectStore = s
	return s.launch()
}

// Processes lists what the plane started, in start order, then the object
// store's.
func (p *Plane) Processes() []Process {
	procs := p.processes()
	out := make([]Process, 0, len(procs)+1)
	for _, proc := range procs {
		out = append(out, Process{Name: proc.name, PID: proc.pid(), Log: proc.logPath})
	}
	if p.ObjectStore != nil {
		out = append(out, p.ObjectStore.Process())
	}
	return out
}

// Healthy returns an error naming each process of the plane that has exited,
// with the end of its log; tests call it to tell a broken plane from a bug.
func (p *Plane) Healthy() error {
	var errs []error
	for _, proc := range p.processes() {
		if proc.hasExited() {
			errs = append(errs, proc.failure(errors.New("process is gone")))
		}
	}
	for _, c := range []*inProcess{p.volumes, p.resizer, p.reaper} {
		if err := c.failed(); err != nil {
			errs = append(errs, err)
		}
	}
	if p.ObjectStore != nil {
		errs = append(errs, p.ObjectStore.Healthy())
	}
	return errors.Join(errs...)
}

func (p *Plane) withProcessState(err error) error {
	if h := p.Healthy(); h != nil {
		return fmt.Errorf("%w\n%w", err, h)
	}
	return err
}

// Stop terminates exactly the processes the plane started, etcd last since
// the apiserver exits slowly without it, waits until each is reaped, and
// removes the plane's directory unless Options.KeepDir. It is idempotent.
func (p *Plane) Stop() error {
	p.stopOnce.Do(func() { p.stopErr = p.stop() })
	return p.stopErr
}

func (p *Plane) stop() error {
	var etcd *process
	var errs []error
	// The provisioner, the resizer and the reaper first, while the
	// apiserver still answers.
	for _, c := range []*inProcess{p.volumes, p.resizer, p.reaper} {
		if err := c.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	stopAll := func(first bool) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, proc := range p.processes() {
			// Process kubelets go first, while the apiserver still serves
			// their last status writes.
			if proc.name == binEtcd || realNodeProcess(proc.name) || (proc.cleanup != nil) != first {
				continue
			}
			wg.Go(func() {
				if proc.stop() {
					fmt.Fprintf(p.opts.Log, "testbed: %s ignored SIGTERM for %v, killed\n", proc.name, proc.grace)
				}
				if proc.cleanup != nil {
					if err := proc.cleanup(); err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("after %s: %w", proc.name, err))
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
	}
	stopAll(true)
	// The object store once the process kubelets are gone, beside the
	// rest: the pods' PostgreSQL archives its last WAL segments to it when
	// it stops (the archiver's last round after the shutdown checkpoint),
	// and a pgBackRest that finds no store retries until its timeouts, so
	// an instance stopped after the store took the kubelet's whole grace
	// period and was killed (make run's Ctrl-C took over a minute).
	storeDone := make(chan error, 1)
	go func() {
		if p.ObjectStore == nil {
			storeDone <- nil
			return
		}
		storeDone <- p.ObjectStore.Stop()
	}()
	stopAll(false)
	// The real node's containers once its kubelet is gone (nothing
	// restarts them), then containerd, then the host's state.
	if err := p.stopRealNode(); err != nil {
		errs = append(errs, err)
	}
	if err := <-storeDone; err != nil {
		errs = append(errs, fmt.Errorf("object store: %w", err))
	}
	for _, proc := range p.processes() {
		if proc.name == binEtcd {
			etcd = proc
		}
	}
	if etcd != nil {
		etcd.stop()
	}
	// Every child is reaped: the launcher's thread may now exit.
	p.launcher.Close()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if p.opts.KeepDir {
		// Kept on purpose: not for the next Start to collect.
		_ = os.Remove(filepath.Join(p.Dir, ownerFile))
		fmt.Fprintf(p.opts.Log, "testbed: kept %s\n", p.Dir)
		return nil
	}
	if err := os.RemoveAll(p.Dir); err != nil {
		return fmt.Errorf("while removing %s: %w", p.Dir, err)
	}
	return nil
}

// run starts one of the plane's programs with its log in the plane's
// directory, and records it for Stop.
func (p *Plane) run(name string, args ...string) (*process, error) {
	return p.runPath(name, p.bins.path(name), args...)
}

// processes returns the plane's processes, in start order.
func (p *Plane) processes() []*process {
	p.procsMu.Lock()
	defer p.procsMu.Unlock()
	return slices.Clone(p.procs)
}

// env is the environment of the plane's processes: ours, without what would
// make them read someone else's configuration (ETCD_* variables, a
// KUBECONFIG, kwok's ~/.kwok/kwok.yaml).
func (p *Plane) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "ETCD_") || strings.HasPrefix(kv, "KUBECONFIG=") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+filepath.Join(p.Dir, "home"))
}

func (p *Plane) startEtcd(pt ports) (*process, error) {
	client := fmt.Sprintf("http://127.0.0.1:%d", pt.etcdClient)
	peer := fmt.Sprintf("http://127.0.0.1:%d", pt.etcdPeer)
	return p.run(binEtcd,
		"--name=testbed",
		"--data-dir="+filepath.Join(p.Dir, "etcd"),
		"--listen-client-urls="+client,
		"--advertise-client-urls="+client,
		"--listen-peer-urls="+peer,
		"--initial-advertise-peer-urls="+peer,
		"--initial-cluster=testbed="+peer,
		// Tests only: a crash loses the data, which is thrown away anyway.
		"--unsafe-no-fsync=true",
		// etcd's own default is 2 GiB, which bench-scale's 10,000 clusters
		// (about 130,000 objects, their status writes and Events) come
		// near; the space is only taken as it is written.
		"--quota-backend-bytes=8589934592",
		"--log-level=warn",
	)
}

func (p *Plane) startAPIServer(pt ports, token string) (*process, error) {
	tokens := filepath.Join(p.Dir, "tokens.csv")
	if err := writeTokenFile(tokens, token); err != nil {
		return nil, err
	}
	saKey, saPub := filepath.Join(p.Dir, "sa.key"), filepath.Join(p.Dir, "sa.pub")
	if err := writeServiceAccountKeys(saKey, saPub); err != nil {
		return nil, err
	}
	host := p.apiserverHost()
	return p.run(binAPIServer,
		"--bind-address="+host,
		"--advertise-address="+host,
		// 1.37 refuses a loopback advertise address for the kubernetes
		// Service's endpoints. With a real node the plane writes them
		// (realnode.go): the apiserver's own reconciler held its stop
		// for the whole grace period (15 s) on the way out.
		"--endpoint-reconciler-type=none",
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", pt.etcdClient),
		fmt.Sprintf("--secure-port=%d", pt.apiserver),
		// Where it writes its self-signed serving certificate; the default
		// is /var/run/kubernetes.
		"--cert-dir="+filepath.Join(p.Dir, "apiserver"),
		"--token-auth-file="+tokens,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+saPub,
		"--service-account-signing-key-file="+saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--allow-privileged=true",
		// logs, exec and port-forward dial a real node's kubelet at its
		// address: its name resolves nowhere.
		"--kubelet-preferred-address-types=InternalIP",
	)
}

// apiserverHost is the address the apiserver listens on and advertises:
// 127.0.0.1, or with a real node its bridge address, which its pods reach
// as well as this host. Then its serving certificate names that address
// and the kubernetes Service's, the plane writes the Service's endpoints
// (writeAPIServerEndpoints), and in-cluster clients reach it through
// kube-proxy as on a cluster (Patroni reads the kubernetes Endpoints and
// dials them).
func (p *Plane) apiserverHost() string {
	if p.opts.RealNodes > 0 {
		return realNodeIP
	}
	return "127.0.0.1"
}

// connect waits for the apiserver's serving certificate, writes the
// kubeconfig trusting its CA, and waits for /readyz and /healthz.
func (p *Plane) connect(ctx context.Context, apiserver *process, pt ports, token string) error {
	certPath := filepath.Join(p.Dir, "apiserver", "apiserver.crt")
	var ca []byte
	err := poll(ctx, apiserver, func() (bool, error) {
		var err error
		ca, err = extractCA(certPath)
		if errors.Is(err, errNoCA) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("while waiting for %s: %w", certPath, err)
	}
	if err := os.WriteFile(filepath.Join(p.Dir, "ca.crt"), ca, 0o644); err != nil {
		return err
	}
	cfg, err := writeKubeconfig(p.Kubeconfig, "https://"+net.JoinHostPort(p.apiserverHost(), strconv.Itoa(pt.apiserver)), ca, token)
	if err != nil {
		return err
	}
	// Tests create objects in bursts; the default 5 QPS would throttle them.
	cfg.QPS, cfg.Burst = 100, 200
	p.Config = cfg
	if p.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	for _, path := range []string{"/readyz", "/healthz"} {
		err := poll(ctx, apiserver, func() (bool, error) {
			body, err := p.Client.Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx)
			return err == nil && string(body) == "ok", nil
		})
		if err != nil {
			return fmt.Errorf("while waiting for the apiserver's %s: %w", path, err)
		}
	}
	return nil
}

// rateFlags are the client rate flags of the controller-manager and the
// scheduler, from Options.
func (p *Plane) rateFlags() []string {
	var out []string
	if p.opts.ControllerQPS > 0 {
		out = append(out, fmt.Sprintf("--kube-api-qps=%g", p.opts.ControllerQPS))
	}
	if p.opts.ControllerBurst > 0 {
		out = append(out, fmt.Sprintf("--kube-api-burst=%d", p.opts.ControllerBurst))
	}
	return out
}

func (p *Plane) startControllerManager(pt ports) (*process, error) {
	return p.run(binControllerManager, append([]string{
		// No --authentication-kubeconfig: it needs the
		// extension-apiserver-authentication ConfigMap, which this apiserver
		// (no client CA) never writes, and /healthz is served anonymously.
		"--kubeconfig=" + p.Kubeconfig,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", pt.controllerManager),
		"--cert-dir=" + filepath.Join(p.Dir, "controller-manager"),
		"--leader-elect=false",
		"--service-account-private-key-file=" + filepath.Join(p.Dir, "sa.key"),
		// Without it the controller-manager logs ClusterTrustBundle errors
		// forever.
		"--root-ca-file=" + filepath.Join(p.Dir, "ca.crt"),
		"--use-service-account-credentials=false",
		"--controllers=*",
	}, p.rateFlags()...)...)
}

func (p *Plane) startScheduler(pt ports) (*process, error) {
	return p.run(binScheduler, append([]string{
		"--kubeconfig=" + p.Kubeconfig,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", pt.scheduler),
		"--cert-dir=" + filepath.Join(p.Dir, "scheduler"),
		"--leader-elect=false",
	}, p.rateFlags()...)...)
}

func (p *Plane) startKwok(pt ports) (*process, error) {
	args := []string{
		"--kubeconfig=" + p.Kubeconfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + kwokNodeAnnotation + "=" + kwokNodeValue,
		// A test patches the status of such a pod itself (e.g. to
		// CrashLoopBackOff) and kwok leaves it alone.
		"--disregard-status-with-annotation-selector=" + StatusAnnotation + "=" + StatusCustom,
		"--node-lease-duration-seconds=40",
		"--node-ip=10.0.0.1",
		"--cidr=10.244.0.0/16",
		fmt.Sprintf("--server-address=127.0.0.1:%d", pt.kwok),
	}
	for _, stage := range p.bins.stages {
		if volumeStages[filepath.Base(stage)] {
			if p.opts.VolumeWorkers > 0 {
				continue // the provisioner's
			}
			var err error
			if stage, err = p.kwokVolumeStage(stage); err != nil {
				return nil, err
			}
		}
		if !p.opts.KwokPodDelete && filepath.Base(stage) == podDeleteStage {
			continue // the reaper's
		}
		args = append(args, "--config="+stage)
	}
	return p.run(binKwok, args...)
}

// freePorts returns n distinct ports that were free on 127.0.0.1. They are
// all held open until all are chosen, so they differ from one another.
func freePorts(n int) ([]int, error) {
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("while finding a free port: %w", err)
		}
		defer l.Close()
		_, port, _ := net.SplitHostPort(l.Addr().String())
		n, _ := strconv.Atoi(port)
		out = append(out, n)
	}
	return out, nil
}

// poll calls check until it reports done, fails, proc exits, or ctx ends.
func poll(ctx context.Context, proc *process, check func() (bool, error)) error {
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		done, err := check()
		if err != nil {
			return proc.failure(err)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return proc.failure(ctx.Err())
		case <-proc.exited:
			return proc.failure(errors.New("exited during start-up"))
		case <-ticker.C:
		}
	}
}

// waitHealthy waits until url answers 200 OK.
func waitHealthy(ctx context.Context, proc *process, url string, tlsConfig *tls.Config) error {
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: tlsConfig, Proxy: nil},
	}
	defer client.CloseIdleConnections()
	err := poll(ctx, proc, func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("while waiting for %s at %s: %w", proc.name, url, err)
	}
	return nil
}

// Wait blocks until ctx ends, returning nil, or until a process of the plane
// exits, returning which and the end of its log: a foreground plane should
// not outlive a dead apiserver.
func (p *Plane) Wait(ctx context.Context) error {
	procs := p.processes()
	if p.ObjectStore != nil {
		p.ObjectStore.mu.Lock()
		procs = append(procs, p.ObjectStore.proc)
		p.ObjectStore.mu.Unlock()
	}
	exited := make(chan *process, len(procs))
	for _, proc := range procs {
		go func() {
			select {
			case <-proc.exited:
				exited <- proc
			case <-ctx.Done():
			}
		}()
	}
	select {
	case <-ctx.Done():
		return nil
	case proc := <-exited:
		return proc.failure(errors.New("process is gone"))
	}
}

// RestartAPIServer stops the kube-apiserver, with SIGKILL when kill (a
// crash), else SIGTERM and its grace, and starts it again with the same
// flags: the same port, etcd (which keeps the data) and serving certificate
// (kept in its --cert-dir, which it reuses), so every kubeconfig and client
// of the plane stays valid. It returns once /readyz answers ok again, with
// how long the apiserver did not serve. The other processes of the plane
// reconnect by themselves.
func (p *Plane) RestartAPIServer(ctx context.Context, kill bool) (time.Duration, error) {
	return p.RestartProcess(ctx, binAPIServer, kill)
}

// Dead returns the names of the plane's processes that have exited.
func (p *Plane) Dead() []string {
	var out []string
	for _, proc := range p.processes() {
		if proc.hasExited() {
			out = append(out, proc.name)
		}
	}
	return out
}

// RestartProcess stops the plane's process name (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kwok) if it still runs, as
// RestartAPIServer does, and starts it again with the same flags, as a
// kubelet restarts a static pod; for the apiserver it waits until /readyz
// answers ok. It returns how long the process was stopped or starting.
// Process kubelets are not restarted this way.
func (p *Plane) RestartProcess(ctx context.Context, name string, kill bool) (time.Duration, error) {
	p.procsMu.Lock()
	i := slices.IndexFunc(p.procs, func(proc *process) bool { return proc.name == name })
	var old *process
	if i >= 0 {
		old = p.procs[i]
	}
	p.procsMu.Unlock()
	if old == nil || old.cleanup != nil {
		return 0, fmt.Errorf("the plane has no process %s to restart", name)
	}
	began := time.Now()
	if kill {
		old.kill()
	} else if old.stop() {
		fmt.Fprintf(p.opts.Log, "testbed: %s ignored SIGTERM for %v, killed\n", old.name, old.grace)
	}
	for attempt := 1; ; attempt++ {
		proc, err := p.launcher.start(old.name, old.cmd.Path, old.logPath, old.cmd.Args[1:], old.cmd.Env)
		if err != nil {
			return 0, err
		}
		p.procsMu.Lock()
		p.procs[i] = proc
		p.procsMu.Unlock()
		if name != binAPIServer {
			return time.Since(began), nil
		}
		err = poll(ctx, proc, func() (bool, error) {
			body, err := p.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err == nil && string(body) == "ok", nil
		})
		if err == nil {
			return time.Since(began), nil
		}
		// The port may linger a moment after a crash.
		if !errors.Is(err, errPortInUse) || attempt == startAttempts {
			return 0, fmt.Errorf("while restarting %s: %w", name, err)
		}
		fmt.Fprintf(p.opts.Log, "testbed: %s's port still in use, retrying\n", name)
	}
}
