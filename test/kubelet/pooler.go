package kubelet

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// PoolerContainer is the name of the container of a connection-pooler pod,
// as the zalando operator and pgloop name it. A pod whose container to run
// (runContainer: "postgres", else the first) has this name runs `pgloop
// pooler` (the pooler image's entrypoint: PgBouncer) instead of Patroni.
const PoolerContainer = "connection-pooler"

// DefaultPgBouncer is Debian's pgbouncer (`make data-plane-deps`).
const DefaultPgBouncer = "/usr/sbin/pgbouncer"

// Files of a pooler pod, in its directory <root>/pods/<uid>/: the log of
// `pgloop pooler` and its PgBouncer, and the directory it writes
// PgBouncer's files into (pkg/pooler), the container's writable home.
const (
	poolerLogFile   = "pgbouncer.log"
	poolerConfigDir = "pgbouncer"
)

// isPooler reports whether the kubelet runs pod's container as a
// connection pooler (PgBouncer) rather than as Spilo (Patroni).
func isPooler(pod *corev1.Pod) bool {
	c := runContainer(pod)
	return c != nil && c.Name == PoolerContainer
}

// Upstream is one address a Service routes to.
type Upstream struct {
	Addr string
	Port int
}

func (u Upstream) String() string { return fmt.Sprintf("%s:%d", u.Addr, u.Port) }

// ServiceUpstreams returns the ready addresses of svc for its port port,
// sorted, as kube-proxy would route to them:
//
//  1. the ready endpoints of its EndpointSlices, when any has one (a plane
//     whose pod IPs are not loopback, or a Service without a selector whose
//     slices someone writes);
//  2. else, for a Service with a selector, the pods of its namespace the
//     selector matches that are Ready, have an IP and are not terminating:
//     what the EndpointSlice controller would publish, which it cannot
//     here (the apiserver refuses loopback addresses in EndpointSlices).
//
// A named targetPort is looked up in the pod's container ports; one that
// is not found leaves the pod out, as the controller does.
func ServiceUpstreams(svc *corev1.Service, port int, endpointSlices []*discoveryv1.EndpointSlice, pods []*corev1.Pod) ([]Upstream, error) {
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if int(svc.Spec.Ports[i].Port) == port {
			sp = &svc.Spec.Ports[i]
		}
	}
	if sp == nil {
		return nil, fmt.Errorf("service %s/%s has no port %d", svc.Namespace, svc.Name, port)
	}
	var out []Upstream
	for _, es := range endpointSlices {
		if es.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		target := 0
		for _, p := range es.Ports {
			if p.Port != nil && ptrOr(p.Name, "") == sp.Name {
				target = int(*p.Port)
			}
		}
		if target == 0 {
			continue
		}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				out = append(out, Upstream{Addr: a, Port: target})
			}
		}
	}
	if len(out) == 0 && len(svc.Spec.Selector) > 0 {
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		for _, pod := range pods {
			if pod.Namespace != svc.Namespace || !sel.Matches(labels.Set(pod.Labels)) ||
				pod.Status.PodIP == "" || pod.DeletionTimestamp != nil ||
				(!podReady(pod) && !svc.Spec.PublishNotReadyAddresses) {
				continue
			}
			if target := targetPort(sp.TargetPort, int(sp.Port), pod); target > 0 {
				out = append(out, Upstream{Addr: pod.Status.PodIP, Port: target})
			}
		}
	}
	slices.SortFunc(out, func(a, b Upstream) int {
		if c := strings.Compare(a.Addr, b.Addr); c != 0 {
			return c
		}
		return a.Port - b.Port
	})
	return slices.Compact(out), nil
}

// targetPort resolves a Service's targetPort for pod: a number, the
// Service port when unset, or a container port's name; 0 when the name is
// not found.
func targetPort(tp intstr.IntOrString, port int, pod *corev1.Pod) int {
	switch {
	case tp.Type == intstr.String:
		for _, c := range pod.Spec.Containers {
			for _, p := range c.Ports {
				if p.Name == tp.StrVal {
					return int(p.ContainerPort)
				}
			}
		}
		return 0
	case tp.IntVal > 0:
		return int(tp.IntVal)
	default:
		return port
	}
}

// podReady reports the pod's Ready condition.
func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// chooseUpstream picks the address PgBouncer connects to: the current one
// while it is still among the ready ones (a replica Service with several
// pods does not make the pooler hop), else the first. ok is false when
// there is none.
func chooseUpstream(current Upstream, ready []Upstream) (Upstream, bool) {
	if len(ready) == 0 {
		return Upstream{}, false
	}
	if slices.Contains(ready, current) {
		return current, true
	}
	return ready[0], true
}

// readinessPort is the port the container's tcpSocket readiness probe
// dials (a number or a container port's name); def when it has none.
func readinessPort(c *corev1.Container, def int) int {
	if c == nil || c.ReadinessProbe == nil || c.ReadinessProbe.TCPSocket == nil {
		return def
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{*c}}}
	if p := targetPort(c.ReadinessProbe.TCPSocket.Port, def, pod); p > 0 {
		return p
	}
	return def
}
