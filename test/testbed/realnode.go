package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A real node is a kubelet on Debian's containerd and runc: its pods are
// containers of OCI images, with pod IPs on a bridge of the host, Services
// through kube-proxy and names through CoreDNS (docs/testbed.md, "Real
// node"). It needs root, as the plane does.
const (
	// RealNodeName is the real node's name.
	RealNodeName = "real-node-1"
	// RealNodeLabelValue is the value of NodeLabel on the real node.
	RealNodeLabelValue = "real"
	// RealNodeTaintValue is the value of DataPlaneTaintKey in the real
	// node's taint, when the plane has other nodes: only pods that ask for
	// it (RealNodeToleration) run there.
	RealNodeTaintValue = "real"

	// realNodeSubnet is the pods' subnet (kwok gives its fake pods
	// addresses in 10.244.0.0/16); realNodeIP, the bridge's address, is the
	// node's address, its pods' gateway and cluster DNS server.
	realNodeSubnet = "10.200.0.0/24"
	realNodeIP     = "10.200.0.1"
	realNodePrefix = "/24"
	clusterDomain  = "cluster.local"
	// cniNetwork names the CNI network (and libcni's cache entries).
	cniNetwork = "pgloop"

	binRealKubelet = "kubelet"
	binKubeProxy   = "kube-proxy"
	binCoreDNS     = "coredns"
	binPause       = "pause"
	// The node's other programs are Debian's (make real-node-deps).
	containerdPath = "/usr/bin/containerd"
	ctrPath        = "/usr/bin/ctr"
	runcPath       = "/usr/sbin/runc"
	cniBinDir      = "/usr/lib/cni"

	// DefaultContainerdRoot keeps containerd's images (and its containers
	// while a node runs) across planes: loading the instance image takes
	// seconds once, not on every plane.
	DefaultContainerdRoot = "/var/cache/pgloop/containerd"
	// pauseImage is the pods' sandbox image, made from bin/pause.
	pauseImage = "registry.k8s.io/pause:3.10"
	// realNodeStopGrace is how long the kubelet and containerd may take
	// to stop; containers get containerStopGrace before SIGKILL.
	realNodeStopGrace  = 30 * time.Second
	containerStopGrace = 10 * time.Second
)

// RealNode is the plane's real node.
type RealNode struct {
	Name string
	// IP is its address, on the host's bridge: pods reach the host and
	// their DNS server there, and the apiserver the kubelet.
	IP string
	// PodCIDR is its pods' subnet.
	PodCIDR string
	// Root holds its directories: the kubelet's, containerd's state, its
	// volumes (Root/pv/<pv>) and pod logs.
	Root string
	// Containerd is containerd's socket (ctr --address).
	Containerd string
}

// RealNodeToleration tolerates the real node's taint.
func RealNodeToleration() corev1.Toleration {
	return corev1.Toleration{
		Key:      DataPlaneTaintKey,
		Operator: corev1.TolerationOpEqual,
		Value:    RealNodeTaintValue,
		Effect:   corev1.TaintEffectNoSchedule,
	}
}

// RealNodes lists the plane's real nodes.
func (p *Plane) RealNodes() []RealNode { return p.realNodes }

// realNodePrograms are what a real node needs from Debian's packages.
var realNodePrograms = []string{containerdPath, ctrPath, runcPath, filepath.Join(cniBinDir, "bridge"),
	filepath.Join(cniBinDir, "host-local"), filepath.Join(cniBinDir, "loopback"), "/usr/sbin/iptables"}

// ErrNoRealNode is returned by Start when a real node is asked for but the
// machine cannot run one: not root, no containerd, no bridge netfilter.
var ErrNoRealNode = errors.New(`this machine cannot run a real node`)

// RealNodeUnsupported says why this machine cannot run a real node, or nil.
// make run calls it to fall back to process nodes with the reason.
func RealNodeUnsupported() error {
	var why []string
	if os.Geteuid() != 0 {
		why = append(why, "it needs root")
	}
	for _, path := range realNodePrograms {
		if _, err := os.Stat(path); err != nil {
			why = append(why, path+` is missing (run "make real-node-deps")`)
		}
	}
	if _, err := os.Stat("/proc/sys/net/bridge/bridge-nf-call-iptables"); err != nil {
		why = append(why, "the kernel has no bridge netfilter (br_netfilter)")
	}
	if len(cgroupRoots()) == 0 {
		why = append(why, "no cgroup file system is mounted")
	}
	if len(why) > 0 {
		return fmt.Errorf("%w: %s", ErrNoRealNode, strings.Join(why, "; "))
	}
	return nil
}

// prepareRealNode makes the host ready for the real node, before anything
// of the plane starts (the object store binds the bridge's address): it
// takes the host lock, restores what a killed plane left, writes the
// journal, and makes the bridge.
func (p *Plane) prepareRealNode(ctx context.Context, step func(string, ...any)) error {
	lock, err := lockHost(ctx, step)
	if err != nil {
		return err
	}
	p.hostLock = lock
	if err := recoverHost(step); err != nil {
		return err
	}
	n := RealNode{Name: RealNodeName, IP: realNodeIP, PodCIDR: realNodeSubnet, Root: filepath.Join(p.Dir, "realnode")}
	n.Containerd = filepath.Join(n.Root, "containerd.sock")
	croot := p.opts.ContainerdRoot
	if croot == "" {
		croot = DefaultContainerdRoot
	}
	j := &hostJournal{Dir: p.Dir, ContainerdRoot: croot, ContainerdState: filepath.Join(n.Root, "containerd-state"),
		Address: n.Containerd, Sysctls: saveSysctls()}
	j.Owner, _ = processIdentity(os.Getpid())
	if err := writeJournal(j); err != nil {
		return err
	}
	p.journal = j
	// Known to Stop from here on, which removes its containers.
	p.realNodes = append(p.realNodes, n)
	for _, sub := range []string{"kubelet", "pod-logs", "pv", "cni", "cni-ipam", "containerd-state", "dns"} {
		if err := os.MkdirAll(filepath.Join(n.Root, sub), 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(croot, 0o700); err != nil {
		return err
	}
	if err := setupBridge(); err != nil {
		return fmt.Errorf("while setting up the real node's bridge: %w", err)
	}
	step("bridge %s at %s", BridgeName, realNodeIP)
	return nil
}

// startRealNode starts the real node on the host prepareRealNode made
// ready: containerd, the images, CoreDNS, the kubelet and kube-proxy; it
// waits for the node to be Ready and its DNS to answer.
func (p *Plane) startRealNode(ctx context.Context, step func(string, ...any)) (err error) {
	n, j := p.realNodes[0], p.journal

	containerd, err := p.startContainerd(n, j)
	if err != nil {
		return err
	}
	if err := waitContainerd(ctx, containerd, n.Containerd); err != nil {
		return err
	}
	step("containerd up (pid %d, root %s)", containerd.pid(), j.ContainerdRoot)
	if err := removeAllContainers(ctx, n.Containerd, 0); err != nil {
		return fmt.Errorf("while removing the containers a killed plane left in %s: %w", j.ContainerdRoot, err)
	}
	if err := p.loadImages(ctx, n, step); err != nil {
		return err
	}

	dnsHealth, err := p.startCoreDNS(n)
	if err != nil {
		return err
	}
	kubelet, err := p.startKubelet(n)
	if err != nil {
		return err
	}
	proxy, err := p.startKubeProxy(n)
	if err != nil {
		return err
	}
	if _, err := WaitFor(ctx, Nodes(p.Client, n.Name), NodeReady); err != nil {
		return p.withProcessState(fmt.Errorf("while waiting for real node %s to be Ready: %w", n.Name, err))
	}
	step("real node %s Ready (kubelet pid %d, kube-proxy pid %d)", n.Name, kubelet.pid(), proxy.pid())
	if err := waitHealthy(ctx, dnsHealth.proc, dnsHealth.url, nil); err != nil {
		return err
	}
	step("cluster DNS ready at %s:53", realNodeIP)
	return nil
}

// writeAPIServerEndpoints writes the kubernetes Service's endpoints, the
// apiserver on the bridge's address, as its reconciler would: the
// Endpoints (Patroni reads them to bypass the Service) and the
// EndpointSlice (kube-proxy's).
func (p *Plane) writeAPIServerEndpoints(ctx context.Context, port int) error {
	const name, ns = "kubernetes", metav1.NamespaceDefault
	portName, proto := "https", corev1.ProtocolTCP
	//lint:ignore SA1019 Patroni reads v1 Endpoints of the kubernetes Service
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"endpointslice.kubernetes.io/skip-mirror": "true"}},
		//lint:ignore SA1019 as above
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: realNodeIP}},
			Ports: []corev1.EndpointPort{{Name: portName, Port: int32(port), Protocol: proto}}}}}
	if _, err := p.Client.CoreV1().Endpoints(ns).Create(ctx, ep, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("while writing the kubernetes Service's Endpoints: %w", err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "pgloop-testbed"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{realNodeIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: ptr.To(int32(port)), Protocol: &proto}},
	}
	if _, err := p.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("while writing the kubernetes Service's EndpointSlice: %w", err)
	}
	return nil
}

// setupBridge makes the bridge with the node's address and turns on
// forwarding and bridge netfilter (pod to Service to pod on one bridge).
func setupBridge() error {
	for _, args := range [][]string{
		{"link", "add", BridgeName, "type", "bridge"},
		{"addr", "add", realNodeIP + realNodePrefix, "dev", BridgeName},
		{"link", "set", BridgeName, "up"},
	} {
		if err := run("ip", args...); err != nil {
			return err
		}
	}
	for k, v := range map[string]string{
		"net/ipv4/ip_forward":                "1",
		"net/bridge/bridge-nf-call-iptables": "1",
	} {
		if err := writeSysctl(k, v); err != nil {
			return err
		}
	}
	return nil
}

// startContainerd writes containerd's configuration and starts it.
func (p *Plane) startContainerd(n RealNode, j *hostJournal) (*process, error) {
	conf := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # This VM's bounding set lacks CAP_SYS_RESOURCE: runc cannot lower
  # oom_score_adj (docs/testbed.md).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, j.ContainerdRoot, j.ContainerdState, n.Containerd, n.Containerd+".ttrpc", filepath.Join(n.Root, "opt"),
		pauseImage, cniBinDir, filepath.Join(n.Root, "cni"))
	path := filepath.Join(n.Root, "containerd.toml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	cni := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, cniNetwork, BridgeName, filepath.Join(n.Root, "cni-ipam"), realNodeSubnet, realNodeIP)
	if err := os.WriteFile(filepath.Join(n.Root, "cni", "10-pgloop.conflist"), []byte(cni), 0o644); err != nil {
		return nil, err
	}
	proc, err := p.runPath("containerd", containerdPath, "--config", path)
	if err != nil {
		return nil, err
	}
	proc.grace = realNodeStopGrace
	return proc, nil
}

// waitContainerd waits until containerd answers on its socket.
func waitContainerd(ctx context.Context, proc *process, socket string) error {
	return poll(ctx, proc, func() (bool, error) {
		return exec.CommandContext(ctx, ctrPath, "--address", socket, "version").Run() == nil, nil
	})
}

// ctr runs Debian's ctr on the node's containerd, in the CRI's namespace.
func ctr(ctx context.Context, socket string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, ctrPath, append([]string{"--address", socket, "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// removeAllContainers stops and removes every container of the CRI's
// namespace: those of a killed plane before a node starts, and the node's
// own when it stops. Each task gets SIGTERM and grace to exit (0: none)
// before SIGKILL.
func removeAllContainers(ctx context.Context, socket string, grace time.Duration) error {
	out, err := ctr(ctx, socket, "tasks", "list", "-q")
	if err != nil {
		return err
	}
	tasks := strings.Fields(out)
	if grace > 0 {
		for _, id := range tasks {
			_, _ = ctr(ctx, socket, "tasks", "kill", "--all", "-s", "SIGTERM", id)
		}
		deadline := time.Now().Add(grace)
		for time.Now().Before(deadline) {
			if out, err := ctr(ctx, socket, "tasks", "list"); err != nil || !strings.Contains(out, "RUNNING") {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// A pod's containers share its sandbox's shim: once the last task of a
	// shim is deleted the shim exits, and a delete that raced with that exit
	// answers "ttrpc: closed" though its task is gone with the shim. So a
	// delete's error counts only if the task is still listed after a few
	// rounds.
	var errs []error
	for round := 0; len(tasks) > 0; round++ {
		errs = errs[:0]
		for _, id := range tasks {
			_, _ = ctr(ctx, socket, "tasks", "kill", "--all", "-s", "SIGKILL", id)
			if _, err := ctr(ctx, socket, "tasks", "delete", "--force", id); err != nil && !strings.Contains(err.Error(), "not found") {
				errs = append(errs, err)
			}
		}
		if out, err = ctr(ctx, socket, "tasks", "list", "-q"); err != nil {
			return errors.Join(append(errs, err)...)
		}
		tasks = strings.Fields(out)
		if len(tasks) > 0 && round == 3 {
			return fmt.Errorf("tasks %s left after 4 rounds of deleting: %w", strings.Join(tasks, " "), errors.Join(errs...))
		}
		if len(tasks) > 0 {
			time.Sleep(200 * time.Millisecond)
		}
	}
	errs = errs[:0]
	out, err = ctr(ctx, socket, "containers", "list", "-q")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, id := range strings.Fields(out) {
		if _, err := ctr(ctx, socket, "containers", "delete", id); err != nil && !strings.Contains(err.Error(), "not found") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// healthURL is a process and the URL that says it is ready.
type healthURL struct {
	proc *process
	url  string
}

// startCoreDNS starts the cluster DNS on the node's address, port 53, with
// the kubernetes plugin on the admin kubeconfig. /ready answers once its
// caches are synced.
func (p *Plane) startCoreDNS(n RealNode) (healthURL, error) {
	port, err := freePorts(2)
	if err != nil {
		return healthURL{}, err
	}
	corefile := fmt.Sprintf(`.:53 {
    bind %s
    ready 127.0.0.1:%d
    health 127.0.0.1:%d
    errors
    cache 5
    kubernetes %s in-addr.arpa ip6.arpa {
        kubeconfig %s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
}
`, realNodeIP, port[0], port[1], clusterDomain, p.Kubeconfig)
	path := filepath.Join(n.Root, "dns", "Corefile")
	if err := os.WriteFile(path, []byte(corefile), 0o644); err != nil {
		return healthURL{}, err
	}
	proc, err := p.run(binCoreDNS, "-conf", path)
	if err != nil {
		return healthURL{}, err
	}
	return healthURL{proc, fmt.Sprintf("http://127.0.0.1:%d/ready", port[0])}, nil
}

// startKubelet writes the kubelet's configuration and starts it.
func (p *Plane) startKubelet(n RealNode) (*process, error) {
	port, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	// No search domains or servers of the host's: pods see only the
	// cluster's DNS.
	taints := ""
	if !p.onlyRealNodes() {
		t := RealNodeToleration()
		taints = fmt.Sprintf("registerWithTaints:\n- {key: %q, value: %q, effect: %s}\n", t.Key, t.Value, t.Effect)
	}
	resolv := filepath.Join(n.Root, "resolv.conf")
	if err := os.WriteFile(resolv, nil, 0o644); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
clusterDNS: [%s]
clusterDomain: %s
resolvConf: %s
podLogsDir: %s
podCIDR: %s
maxPods: 110
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
protectKernelDefaults: false
%s`, realNodeIP, port[0], port[1], n.Containerd, realNodeIP, clusterDomain, resolv,
		filepath.Join(n.Root, "pod-logs"), realNodeSubnet, taints)
	path := filepath.Join(n.Root, "kubelet.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	proc, err := p.run(binRealKubelet,
		"--config="+path,
		"--kubeconfig="+p.Kubeconfig,
		"--root-dir="+filepath.Join(n.Root, "kubelet"),
		"--cert-dir="+filepath.Join(n.Root, "kubelet", "pki"),
		"--hostname-override="+n.Name,
		"--node-ip="+n.IP,
		"--node-labels="+NodeLabel+"="+RealNodeLabelValue,
		"--v=1",
	)
	if err != nil {
		return nil, err
	}
	proc.grace = realNodeStopGrace
	return proc, nil
}

// startKubeProxy writes kube-proxy's configuration (iptables mode, node
// ports on the node's address only, conntrack left alone) and starts it.
func (p *Plane) startKubeProxy(n RealNode) (*process, error) {
	port, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
mode: iptables
hostnameOverride: %s
clusterCIDR: %s
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
nodePortAddresses: [%s/32]
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
  syncPeriod: 30s
  minSyncPeriod: 0s
`, p.Kubeconfig, n.Name, realNodeSubnet, port[0], port[1], realNodeIP)
	path := filepath.Join(n.Root, "kube-proxy.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return p.run(binKubeProxy, "--config="+path)
}

// runPath is run for a program at path, in bin/ or not (containerd is
// Debian's).
func (p *Plane) runPath(name, path string, args ...string) (*process, error) {
	proc, err := p.launcher.start(name, path, filepath.Join(p.Dir, name+".log"), args, p.env())
	if err != nil {
		return nil, err
	}
	p.procsMu.Lock()
	p.procs = append(p.procs, proc)
	p.procsMu.Unlock()
	return proc, nil
}

// stopRealNode stops the node's containers, then containerd (the kubelet
// and kube-proxy are stopped before, with the plane's other processes),
// and restores the host. The kubelet is gone, so nothing restarts them.
func (p *Plane) stopRealNode() error {
	if p.journal == nil {
		p.hostLock.release()
		return nil
	}
	var errs []error
	for _, proc := range p.processes() {
		if !realNodeProcess(proc.name) {
			continue
		}
		if !proc.hasExited() {
			for _, n := range p.realNodes {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				if err := removeAllContainers(ctx, n.Containerd, containerStopGrace); err != nil {
					errs = append(errs, fmt.Errorf("while stopping the real node's containers: %w", err))
				}
				cancel()
			}
		}
		proc.stop()
	}
	errs = append(errs, restoreHost(p.journal, func(format string, args ...any) {
		fmt.Fprintf(p.opts.Log, "testbed: "+format+"\n", args...)
	}))
	p.hostLock.release()
	return errors.Join(errs...)
}

// realNodeProcess tells the processes stopped with the real node, after
// its containers: containerd.
func realNodeProcess(name string) bool { return name == "containerd" }
