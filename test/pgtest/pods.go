// Exec, logs and port-forward through the apiserver, as kubectl does
// them: what a test of a pod on the real node (testbed.Options.RealNodes)
// reads inside it, where a process node's pods have their files and logs
// in the plane's directory.

package pgtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"
)

// Exec runs cmd in a container of a pod, as `kubectl exec` does (WebSocket,
// else SPDY), and returns its stdout and stderr; a command that exits with
// another status than 0 is an error holding its stderr.
func Exec(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns, pod, container string, cmd ...string) (string, string, error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, req.URL().String())
	if err != nil {
		return "", "", err
	}
	sp, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, req.URL())
	if err != nil {
		return "", "", err
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, sp, httpstream.IsUpgradeFailure)
	if err != nil {
		return "", "", err
	}
	var stdout, stderr bytes.Buffer
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return stdout.String(), stderr.String(), fmt.Errorf("exec %s in %s/%s: %w: %s", strings.Join(cmd, " "), ns, pod, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), stderr.String(), nil
}

// Logs returns a container's log, as `kubectl logs` does.
func Logs(ctx context.Context, cs kubernetes.Interface, ns, pod, container string) (string, error) {
	b, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	return string(b), err
}

// PreviousLogs returns the log of a container's previous instance, as
// `kubectl logs --previous` does: an error when it did not restart.
func PreviousLogs(ctx context.Context, cs kubernetes.Interface, ns, pod, container string) (string, error) {
	b, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Previous: true}).DoRaw(ctx)
	return string(b), err
}

// PortForward forwards a free loopback port to port of a pod, as `kubectl
// port-forward` does, and returns it; stop ends the forwarding.
func PortForward(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns, pod string, port int) (local uint16, stop func(), err error) {
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return 0, nil, err
	}
	u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, &url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path})
	stopCh, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stopCh, ready, io.Discard, io.Discard)
	if err != nil {
		return 0, nil, err
	}
	errc := make(chan error, 1)
	go func() { errc <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-errc:
		return 0, nil, fmt.Errorf("port-forward to %s/%s:%d: %w", ns, pod, port, err)
	case <-ctx.Done():
		close(stopCh)
		return 0, nil, ctx.Err()
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		close(stopCh)
		return 0, nil, fmt.Errorf("port-forward to %s/%s:%d: ports %v: %w", ns, pod, port, ports, err)
	}
	return ports[0].Local, func() { close(stopCh) }, nil
}
