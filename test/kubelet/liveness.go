package kubelet

// The container's livenessProbe, run as a kubelet runs it (pkg/kubelet/prober):
// after initialDelaySeconds from the start, every periodSeconds, with
// timeoutSeconds; failureThreshold failures in a row kill the container,
// which restarts under the crash back-off (restartPolicy Always). httpGet
// (success: a status from 200 to 399) and tcpSocket (a connection) are run
// against the pod IP; exec and grpc are not run here (there is no container
// to exec in), which the log says once.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// liveness is the state of the liveness probe of the current process.
type liveness struct {
	next     time.Time // when the probe runs next; zero before the first
	failures int32     // failures in a row
	skipped  bool      // an exec or grpc probe was logged as not run
}

// probeDefaults fills a probe's unset values with the API's defaults.
func probeDefaults(p corev1.Probe) corev1.Probe {
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
	return p
}

// checkLiveness runs the liveness probe of container c when it is due, and
// kills the process once it has failed failureThreshold times in a row.
func (in *instance) checkLiveness(c *corev1.Container, now time.Time) {
	if c == nil || c.LivenessProbe == nil || in.proc == nil || in.prep == nil {
		return
	}
	p := probeDefaults(*c.LivenessProbe)
	if p.Exec != nil || p.GRPC != nil {
		if !in.live.skipped {
			in.live.skipped = true
			in.log.Info("liveness probe not run: exec and grpc probes need a container")
		}
		return
	}
	if in.live.next.IsZero() {
		in.live.next = in.state.StartedAt.Add(time.Duration(p.InitialDelaySeconds) * time.Second)
	}
	if now.Before(in.live.next) {
		return
	}
	in.live.next = now.Add(time.Duration(p.PeriodSeconds) * time.Second)
	err := probeOnce(p, c, in.prep.ip, time.Duration(p.TimeoutSeconds)*time.Second)
	if err == nil {
		in.live.failures = 0
		return
	}
	in.live.failures++
	in.log.WithError(err).WithField("failures", in.live.failures).Info("liveness probe failed")
	if in.live.failures < p.FailureThreshold {
		return
	}
	in.log.Warnf("liveness probe failed %d times in a row: killing %s, to restart", in.live.failures, in.killed())
	started := in.state.StartedAt
	in.kill()
	delay := in.back.crashed(now.Sub(started))
	in.restartAt = now.Add(delay)
	in.setTimer(delay)
	in.setWaiting(ReasonCrashLoop, fmt.Sprintf("back-off %v restarting failed container=%s pod=%s (liveness probe failed: %v)", delay, c.Name, in.key, err))
}

// probeOnce runs an httpGet or tcpSocket probe against ip.
func probeOnce(p corev1.Probe, c *corev1.Container, ip netip.Addr, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	switch {
	case p.HTTPGet != nil:
		port, err := probePort(p.HTTPGet.Port, c)
		if err != nil {
			return err
		}
		scheme := "http"
		if p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
			return fmt.Errorf("https probes are not run here: no TLS")
		}
		url := fmt.Sprintf("%s://%s%s", scheme, netip.AddrPortFrom(ip, port), p.HTTPGet.Path)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	case p.TCPSocket != nil:
		port, err := probePort(p.TCPSocket.Port, c)
		if err != nil {
			return err
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(ip, port).String())
		if err != nil {
			return err
		}
		return conn.Close()
	}
	return fmt.Errorf("the probe has no handler")
}

// probePort resolves a probe's port: a number, or the name of one of the
// container's ports.
func probePort(port intstr.IntOrString, c *corev1.Container) (uint16, error) {
	if port.Type == intstr.Int {
		if port.IntVal < 1 || port.IntVal > 65535 {
			return 0, fmt.Errorf("port %d out of range", port.IntVal)
		}
		return uint16(port.IntVal), nil
	}
	if n, err := strconv.Atoi(port.StrVal); err == nil && n > 0 && n < 65536 {
		return uint16(n), nil
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return uint16(p.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("container %s has no port named %q", c.Name, port.StrVal)
}
