package kubelet

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestProbeOnce(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/liveness" {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	ap := netip.MustParseAddrPort(srv.Listener.Addr().String())
	c := &corev1.Container{Name: "postgres", Ports: []corev1.ContainerPort{{Name: "patroni", ContainerPort: int32(ap.Port())}}}
	// A port nothing listens on: one just closed.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := netip.MustParseAddrPort(l.Addr().String()).Port()
	l.Close()

	for _, tc := range []struct {
		name  string
		probe corev1.Probe
		ok    bool
	}{
		{"httpGet by port name, 200", corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/liveness", Port: intstr.FromString("patroni")}}}, true},
		{"httpGet, 503", corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/other", Port: intstr.FromInt32(int32(ap.Port()))}}}, false},
		{"httpGet, unknown port name", corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/liveness", Port: intstr.FromString("metrics")}}}, false},
		{"tcpSocket, listening", corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(ap.Port()))}}}, true},
		{"tcpSocket, refused", corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(closed))}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := probeOnce(tc.probe, c, ap.Addr(), time.Second)
			if (err == nil) != tc.ok {
				t.Errorf("probeOnce = %v, want success %v", err, tc.ok)
			}
		})
	}
}
