package kubelet

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/pgloop/pgloop/pkg/pooler"
)

// resolveInterval paces the look at a running pooler's Service, for the
// log and for the Service proxy's fallback; each new connection through
// the proxy looks at the Service itself (serviceproxy.go).
const resolveInterval = 2 * time.Second

// poolerState is what a connection-pooler instance keeps between its
// starts, owned by the instance's goroutine.
type poolerState struct {
	// service and port are PGHOST and PGPORT of the latest start.
	service string
	port    int
	// upstream is the address the running PgBouncer was configured
	// with; zero before the first start.
	upstream Upstream
	// probePort is the port of the readiness probe (tcpSocket).
	probePort int
	// checked is when the Service was last resolved.
	checked time.Time
	// proxy is the Service's stand-in PgBouncer connects to, from the
	// first start to the instance's stop.
	proxy *serviceProxy
}

// probe dials the readiness probe's port, as a tcpSocket probe does.
func (s *poolerState) probe(ip netip.Addr) bool {
	conn, err := net.DialTimeout("tcp", netip.AddrPortFrom(ip, uint16(s.probePort)).String(), probeTimeout)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// poolerSpec returns how to start a connection-pooler pod: `pgloop pooler`,
// the pooler image's entrypoint (pkg/pooler), which checks the pod's
// environment, writes PgBouncer's files and runs PgBouncer. The kubelet
// does only what a kubelet and the cluster's network do: it resolves the
// environment, maps spec.tls's paths to the volumes' host directories,
// gives the container a writable directory, and stands in for PGHOST's
// Service, which has no DNS here (the Service proxy). The flags say what
// differs outside a container (docs/pooler-image.md). The pod waits
// (ContainerCreating) until the Service has a ready address; a wrong
// environment is `pgloop pooler`'s to refuse: the container exits and
// crash-loops, its message in pgbouncer.log, as in a cluster.
func (in *instance) poolerSpec(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (spawnSpec, error) {
	k, p := in.k, in.prep
	if !isFile(k.opts.PgBouncer) {
		return spawnSpec{}, waiting(ReasonConfigError, "pgbouncer not found at %s: run `make data-plane-deps`", k.opts.PgBouncer)
	}
	env, err := ResolveEnv(pod, c, p.ip.String(), k.lookup)
	if err != nil {
		return spawnSpec{}, waiting(ReasonConfigError, "%w", err)
	}
	// PGHOST and PGPORT name the Service the kubelet must stand in for.
	service := env[pooler.EnvHost]
	port, err := strconv.Atoi(env[pooler.EnvPort])
	if service == "" || err != nil {
		return spawnSpec{}, waiting(ReasonConfigError, "%s=%q %s=%q: the kubelet cannot stand in for that Service",
			pooler.EnvHost, service, pooler.EnvPort, env[pooler.EnvPort])
	}
	ready, err := in.resolve(ctx, pod.Namespace, service, port)
	if err != nil {
		return spawnSpec{}, waiting(ReasonContainerCreating, "%s=%s: %w", pooler.EnvHost, service, err)
	}
	up, ok := chooseUpstream(in.pooler.upstream, ready)
	if !ok {
		return spawnSpec{}, waiting(ReasonContainerCreating, "%s=%s: Service %s/%s has no ready address yet", pooler.EnvHost, service, pod.Namespace, service)
	}
	// spec.tls's files, as paths of this machine (the volumes).
	for _, name := range pooler.ClientTLSEnv {
		if v := env[name]; v != "" {
			hp, err := hostPath(p.mounts, v)
			if err != nil {
				return spawnSpec{}, waiting(ReasonConfigError, "%s: %w", name, err)
			}
			env[name] = hp
		}
	}
	// The container's writable directory, for PgBouncer's files. Unlike a
	// container's it outlives a restart: `pgloop pooler` then keeps the
	// certificate it made (while valid) and rewrites the rest.
	confDir := filepath.Join(p.podDir, poolerConfigDir)
	if err := mkdirOwned(confDir, 0o700, k.uid, k.gid); err != nil {
		return spawnSpec{}, waiting(ReasonStartError, "%w", err)
	}
	proxy := in.pooler.proxy
	if proxy == nil {
		ns := pod.Namespace
		proxy, err = startServiceProxy(p.ip, port, up, func(ctx context.Context) ([]Upstream, error) {
			return resolveService(ctx, k.kube, ns, service, port)
		}, in.log.WithField("service", service))
		if err != nil {
			return spawnSpec{}, waiting(ReasonStartError, "while starting the Service proxy: %w", err)
		}
	}
	proxy.follow(up)
	listenPort, _ := strconv.Atoi(env[pooler.EnvListenPort])
	*in.pooler = poolerState{
		service: service, port: port, upstream: up,
		probePort: readinessPort(c, listenPort),
		checked:   time.Now(),
		proxy:     proxy,
	}
	procEnv := map[string]string{"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8", "USER": postgresUser,
		"HOSTNAME": pod.Name}
	maps.Copy(procEnv, env)
	environ := make([]string, 0, len(procEnv))
	for _, name := range slices.Sorted(maps.Keys(procEnv)) {
		environ = append(environ, name+"="+procEnv[name])
	}
	in.log.WithFields(logrus.Fields{"service": service, "upstream": up, "proxy": proxy.addr()}).Info("starting pgloop pooler")
	return spawnSpec{
		argv: []string{k.opts.Pgloop, "pooler",
			"--config-dir=" + confDir,
			// Every pooler of the machine listens on the same port.
			"--listen-addr=" + p.ip.String(),
			"--upstream=" + proxy.addr().String(),
			"--pgbouncer=" + k.opts.PgBouncer,
		},
		env:     environ,
		dir:     p.podDir,
		logPath: filepath.Join(p.podDir, poolerLogFile),
		uid:     k.uid, gid: k.gid,
	}, nil
}

// resolve returns the ready addresses of Service namespace/name
// (ServiceUpstreams), read from the API: a pooler looks at its Service
// every resolveInterval, and pooler pods are few, so no informer caches
// every pod and EndpointSlice of the plane for them.
func (in *instance) resolve(ctx context.Context, namespace, name string, port int) ([]Upstream, error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	return resolveService(ctx, in.k.kube, namespace, name, port)
}

func resolveService(ctx context.Context, kube kubernetes.Interface, namespace, name string, port int) ([]Upstream, error) {
	svc, err := kube.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("no Service %s/%s", namespace, name)
	}
	if err != nil {
		return nil, fmt.Errorf("read Service %s/%s: %w", namespace, name, err)
	}
	// ResourceVersion 0: from the apiserver's watch cache.
	list, err := kube.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{
		LabelSelector:   discoveryv1.LabelServiceName + "=" + name,
		ResourceVersion: "0",
	})
	if err != nil {
		return nil, fmt.Errorf("list the EndpointSlices of Service %s/%s: %w", namespace, name, err)
	}
	endpointSlices := make([]*discoveryv1.EndpointSlice, len(list.Items))
	for i := range list.Items {
		endpointSlices[i] = &list.Items[i]
	}
	var pods []*corev1.Pod
	if len(svc.Spec.Selector) > 0 {
		podList, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
			LabelSelector:   labels.SelectorFromSet(svc.Spec.Selector).String(),
			ResourceVersion: "0",
		})
		if err != nil {
			return nil, fmt.Errorf("list the pods of Service %s/%s: %w", namespace, name, err)
		}
		for i := range podList.Items {
			pods = append(pods, &podList.Items[i])
		}
	}
	return ServiceUpstreams(svc, port, endpointSlices, pods)
}

// followUpstream looks at the running pooler's Service every
// resolveInterval and tells the Service proxy where it routes (the
// address new connections use when their own look fails). PgBouncer is
// not touched: as with kube-proxy, its connections to the old address stay
// until either end closes them (the old primary's shutdown does), and new
// ones go to the new address. While the Service has no ready address the
// proxy keeps the old one.
func (in *instance) followUpstream(ctx context.Context, pod *corev1.Pod) {
	s := in.pooler
	if time.Since(s.checked) < resolveInterval || s.proxy == nil {
		return
	}
	s.checked = time.Now()
	ready, err := in.resolve(ctx, pod.Namespace, s.service, s.port)
	if err != nil {
		in.log.WithError(err).Debug("resolving the pooler's Service")
		return
	}
	up, ok := chooseUpstream(s.upstream, ready)
	if !ok || up == s.upstream {
		return
	}
	in.log.WithFields(logrus.Fields{"service": s.service, "from": s.upstream, "to": up}).Info("the Service routes elsewhere")
	s.upstream = up
	s.proxy.follow(up)
}

// stopProxy closes the pooler's Service proxy, when it has one.
func (in *instance) stopProxy() {
	if in.pooler != nil && in.pooler.proxy != nil {
		in.pooler.proxy.close()
		in.pooler.proxy = nil
	}
}
