package operator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/leaderelection"
)

// phase is where the operator process is, for /readyz.
type phase int32

const (
	// phaseStarting: nothing decided yet (leader election off, caches not
	// listed).
	phaseStarting phase = iota
	// phaseStandby: another replica leads; this one waits for the Lease.
	phaseStandby
	// phaseSyncing: this replica leads and waits for its caches.
	phaseSyncing
	// phaseRunning: caches synced, every cluster enqueued, the loop runs.
	phaseRunning
	// phaseStopping: shutting down.
	phaseStopping
)

// health answers /healthz and /readyz.
//
// Readiness is true while the loop runs, and also while the replica stands
// by as a non-leader. Nothing sends traffic to the operator, so readiness
// only feeds `kubectl rollout status`, PodDisruptionBudgets and the
// Deployment's rolling update: a standby that is never Ready would hold a
// rollout forever and show the Deployment as 1/2 available although it is
// exactly as intended. A leader is not Ready until its caches are synced,
// so a rollout waits until the new leader acts on the clusters.
type health struct {
	phase atomic.Int32
	// watchdog fails /healthz when this replica leads but has not renewed
	// its Lease for longer than the lease (a stuck elector); nil without
	// leader election.
	watchdog *leaderelection.HealthzAdaptor
}

func (h *health) set(p phase) { h.phase.Store(int32(p)) }
func (h *health) get() phase  { return phase(h.phase.Load()) }

func (h *health) healthz(w http.ResponseWriter, r *http.Request) {
	if h.watchdog != nil {
		if err := h.watchdog.Check(r); err != nil {
			http.Error(w, "leader election: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	fmt.Fprintln(w, "ok")
}

func (h *health) readyz(w http.ResponseWriter, _ *http.Request) {
	switch h.get() {
	case phaseRunning:
		fmt.Fprintln(w, "ok")
	case phaseStandby:
		fmt.Fprintln(w, "ok: standby, another replica leads")
	case phaseSyncing:
		http.Error(w, "leading, waiting for the informer caches to sync", http.StatusServiceUnavailable)
	case phaseStopping:
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
	default:
		http.Error(w, "starting", http.StatusServiceUnavailable)
	}
}

// handler routes the health endpoints and /metrics, and with profiling
// Go's profiles under /debug/pprof/.
func (h *health) handler(metrics http.Handler, profiling bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", h.healthz)
	mux.HandleFunc("GET /readyz", h.readyz)
	mux.Handle("GET /metrics", metrics)
	if profiling {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// server is the running health and metrics server.
type server struct {
	srv  *http.Server
	addr string
	errc chan error // Serve's error, if it fails
}

// serve listens on addr and serves handler until shutdown.
func serve(addr string, handler http.Handler) (*server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on health-addr %s: %w", addr, err)
	}
	s := &server{
		srv:  &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second},
		addr: ln.Addr().String(),
		errc: make(chan error, 1),
	}
	go func() {
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.errc <- err
		}
	}()
	return s, nil
}

// shutdown stops the server, letting requests in progress finish for a
// few seconds.
func (s *server) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
}
