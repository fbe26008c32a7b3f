package kubelet

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// proxyPortOffset is added to PGPORT for the port of a pooler pod's
// Service proxy, on the pod's own IP (every pod IP is its own loopback
// address, so the ports of two pods never collide).
const proxyPortOffset = 10000

// dialResolveTimeout bounds the look at the Service for one new connection;
// past it the proxy uses the address it last knew.
const dialResolveTimeout = time.Second

// proxyDialTimeout bounds a connection to the Service's address.
const proxyDialTimeout = 2 * time.Second

// serviceProxy plays kube-proxy for one pooler pod's PGHOST Service on a
// plane that has none (no ClusterIP, no endpoints for loopback pod IPs):
// PgBouncer connects to the proxy, which connects each new connection to
// the Service's ready address as read from the API at that moment
// (ServiceUpstreams), or the last one known when the read fails. As with
// kube-proxy, a connection stays with the address it was made to until
// either end closes it; a Service that moves takes new connections
// elsewhere, and PgBouncer, its clients and its PAUSE state are not
// touched (the kubelet used to restart PgBouncer for that, which dropped
// its clients). Unlike kube-proxy it has no propagation delay: the API's
// latest pods are what it routes to.
type serviceProxy struct {
	ln      net.Listener
	resolve func(ctx context.Context) ([]Upstream, error)
	log     logrus.FieldLogger

	mu      sync.Mutex
	current Upstream
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// startServiceProxy listens on ip at port+proxyPortOffset and serves until
// close.
func startServiceProxy(ip netip.Addr, port int, current Upstream, resolve func(context.Context) ([]Upstream, error), log logrus.FieldLogger) (*serviceProxy, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(port+proxyPortOffset)))
	if err != nil {
		return nil, err
	}
	p := &serviceProxy{ln: ln, resolve: resolve, log: log, current: current, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// addr is where PgBouncer connects to reach the Service.
func (p *serviceProxy) addr() Upstream {
	a := p.ln.Addr().(*net.TCPAddr)
	return Upstream{Addr: a.IP.String(), Port: a.Port}
}

// follow records the address the Service routes to now, for new
// connections whose own look at the Service fails.
func (p *serviceProxy) follow(up Upstream) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.current = up
}

// route returns the address a new connection goes to: the Service's ready
// address as read now (the current one while it stays ready, else the
// lowest, chooseUpstream), else the last known.
func (p *serviceProxy) route() Upstream {
	ctx, cancel := context.WithTimeout(context.Background(), dialResolveTimeout)
	defer cancel()
	ready, err := p.resolve(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.log.WithError(err).Debug("Service proxy: resolving for a new connection; using the last address")
		return p.current
	}
	if up, ok := chooseUpstream(p.current, ready); ok {
		if up != p.current {
			p.log.WithFields(logrus.Fields{"from": p.current, "to": up}).Info("Service proxy: the Service routes elsewhere")
		}
		p.current = up
	}
	return p.current
}

func (p *serviceProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c, true) {
			_ = c.Close()
			return
		}
		p.wg.Add(1)
		go p.pipe(c)
	}
}

// track adds or removes c from the open connections; false once closed.
func (p *serviceProxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		if p.closed {
			return false
		}
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

// pipe connects client to the Service's address and copies both ways
// until either side ends.
func (p *serviceProxy) pipe(client net.Conn) {
	defer p.wg.Done()
	defer p.track(client, false)
	defer client.Close()
	up := p.route()
	server, err := net.DialTimeout("tcp", up.String(), proxyDialTimeout)
	if err != nil {
		p.log.WithError(err).WithField("upstream", up).Debug("Service proxy: dial")
		return
	}
	if !p.track(server, true) {
		_ = server.Close()
		return
	}
	defer p.track(server, false)
	defer server.Close()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(server, client)
	go cp(client, server)
	<-done
	<-done
}

// close stops listening and ends every connection.
func (p *serviceProxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}
