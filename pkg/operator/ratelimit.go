package operator

import (
	"context"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/rest"
)

// The client-side rate limit (--kube-qps, --kube-burst).
//
// Every cluster's effects share one client. A token bucket on it is an
// open-loop guess of what the API server can take: at client-go's 5/s, or
// even 50/s, a few hundred clusters' creates and edits queue behind each
// other for minutes ("Waited 17s due to client-side throttling", the
// complaint of the zalando operator's users), while the API server sits
// idle. An API server with Priority and Fairness (on by default since
// Kubernetes 1.20, GA in 1.29) protects itself: it bounds the requests it
// serves at once per priority level and queues the rest fairly between
// flows. SIG API Machinery's advice is to turn the client-side limit off
// against such a server (kubernetes/kubernetes#111880); controller-runtime
// does so by default, Flux when it detects the server's flow-control
// headers. pgloop's own concurrency is bounded anyway: at most --workers
// steps call the API at once, each under its deadline.
//
// So --kube-qps 0 (the default) asks the API server: when its answer
// carries Priority and Fairness's headers, the client-side limit is off;
// otherwise (an older or a differently configured server, or no answer
// within apfProbeTimeout or --cache-sync-timeout) it is
// DefaultKubeQPS/DefaultKubeBurst. A positive
// --kube-qps sets the limit, -1 turns it off.
const (
	// KubeQPSAuto is --kube-qps's default: decided by asking the server.
	KubeQPSAuto = 0
	// KubeQPSOff turns the client-side rate limit off.
	KubeQPSOff = -1

	apfProbeTimeout = 10 * time.Second
)

// apfHeaders are set by an API server's Priority and Fairness filter on
// the requests it classified.
var apfHeaders = []string{"X-Kubernetes-PF-FlowSchema-UID", "X-Kubernetes-PF-PriorityLevel-UID"}

// rateLimit sets rc's QPS and Burst from cfg, asking the server when
// cfg.KubeQPS is KubeQPSAuto, and says what it chose.
func rateLimit(ctx context.Context, rc *rest.Config, cfg *Config, log logrus.FieldLogger) {
	qps, burst, why := cfg.KubeQPS, cfg.KubeBurst, "--kube-qps"
	if qps == KubeQPSAuto {
		ctx, cancel := context.WithTimeout(ctx, min(apfProbeTimeout, cfg.CacheSyncTimeout))
		defer cancel()
		apf, err := priorityAndFairness(ctx, rc)
		switch {
		case err != nil:
			qps, burst, why = DefaultKubeQPS, max(burst, DefaultKubeBurst), "the API server did not answer whether it has Priority and Fairness: "+err.Error()
		case apf:
			qps, why = KubeQPSOff, "the API server has Priority and Fairness"
		default:
			qps, burst, why = DefaultKubeQPS, max(burst, DefaultKubeBurst), "the API server has no Priority and Fairness"
		}
	}
	rc.QPS, rc.Burst = qps, burst
	entry := log.WithField("reason", why)
	if qps < 0 {
		entry.Info("client-side rate limit off: at most --workers steps call the API at once")
		return
	}
	entry.WithFields(logrus.Fields{"qps": qps, "burst": burst}).Info("client-side rate limit")
}

// priorityAndFairness reports whether the API server classified a request
// with Priority and Fairness: its answer to GET /version carries the
// flow-control headers.
func priorityAndFairness(ctx context.Context, rc *rest.Config) (bool, error) {
	cfg := rest.CopyConfig(rc)
	cfg.QPS, cfg.Burst = KubeQPSOff, 0
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return false, err
	}
	host, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, host.JoinPath("/version").String(), nil)
	if err != nil {
		return false, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	for _, h := range apfHeaders {
		if resp.Header.Get(h) != "" {
			return true, nil
		}
	}
	return false, nil
}
