package operator

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/rest"
)

// The client-side rate limit follows what the API server says of Priority
// and Fairness, unless --kube-qps says otherwise.
func TestRateLimit(t *testing.T) {
	apf := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Kubernetes-PF-FlowSchema-UID", "f")
		w.Header().Set("X-Kubernetes-PF-PriorityLevel-UID", "p")
		io.WriteString(w, `{"major":"1","minor":"35"}`)
	}))
	defer apf.Close()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"major":"1","minor":"19"}`)
	}))
	defer plain.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	tests := []struct {
		name      string
		server    string
		qps       float32
		wantQPS   float32
		wantBurst int
	}{
		{"Priority and Fairness: off", apf.URL, KubeQPSAuto, KubeQPSOff, DefaultKubeBurst},
		{"none: the default limit", plain.URL, KubeQPSAuto, DefaultKubeQPS, DefaultKubeBurst},
		{"no answer: the default limit", closed.URL, KubeQPSAuto, DefaultKubeQPS, DefaultKubeBurst},
		{"given", apf.URL, 200, 200, DefaultKubeBurst},
		{"off", plain.URL, KubeQPSOff, KubeQPSOff, DefaultKubeBurst},
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.KubeQPS = tc.qps
			cfg.CacheSyncTimeout = 5 * time.Second
			rc := &rest.Config{Host: tc.server}
			rateLimit(context.Background(), rc, &cfg, log)
			if rc.QPS != tc.wantQPS || rc.Burst != tc.wantBurst {
				t.Errorf("qps %v burst %d, want %v %d", rc.QPS, rc.Burst, tc.wantQPS, tc.wantBurst)
			}
		})
	}
}
