// Package faultproxy is a TCP proxy that injects network faults between a
// client and one server, for the chaos runs on the local plane (make chaos):
// the operator's kubeconfig points at the proxy, which forwards to the
// kube-apiserver. It forwards bytes untouched (TLS passes through, so the
// server's certificate must be valid for the proxy's address, 127.0.0.1),
// and its faults are switched at run time:
//
//   - latency: every chunk is delivered that much later in each direction,
//     as on a slow link (a delay line: throughput is not limited);
//   - reset: every live connection is closed with a TCP RST on both sides,
//     new ones are accepted as usual;
//   - blackhole: for a duration nothing is forwarded and no new connection
//     reaches the server; what was sent meanwhile is held, then delivered,
//     as TCP retransmits it once a lost route comes back. Clients whose own
//     timeouts run out close their connections themselves.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// chunkSize is the most one read takes from a connection.
const chunkSize = 32 << 10

// queueChunks bounds the chunks read and not yet written, per direction:
// past it the reader stops reading and TCP's flow control pushes back on
// the sender, as a full network path does.
const queueChunks = 64

// dialTimeout bounds the connection to the server.
const dialTimeout = 5 * time.Second

// Proxy forwards connections accepted on a loopback port to a target
// address. Its methods may be called from any goroutine.
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	links     map[*link]struct{}
	latency   time.Duration
	holdUntil time.Time     // a blackhole lasts until then
	changed   chan struct{} // closed, and replaced, when a fault changes
	closed    bool

	wg sync.WaitGroup
}

// link is one client connection and, once dialled, its server connection.
type link struct {
	client   net.Conn
	mu       sync.Mutex
	server   net.Conn
	done     chan struct{} // closed when the link is torn down
	stopOnce sync.Once
}

// New listens on a free port of 127.0.0.1 and forwards what it accepts to
// target (host:port), with no fault.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("while listening: %w", err)
	}
	p := &Proxy{ln: ln, target: target, links: map[*link]struct{}{}, changed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to, 127.0.0.1:<port>.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// notify wakes everything waiting on the faults; p.mu is held.
func (p *Proxy) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// SetLatency delays every chunk by d in each direction from now on (0:
// none). Chunks already read keep the delay they were read with.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
	p.notify()
}

// Blackhole forwards nothing for d from now: no byte either way, no new
// connection to the server. A later call replaces the end; Pass ends it.
func (p *Proxy) Blackhole(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdUntil = time.Now().Add(d)
	p.notify()
}

// Pass removes the latency and ends a blackhole.
func (p *Proxy) Pass() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = 0
	p.holdUntil = time.Time{}
	p.notify()
}

// Reset closes every live connection with a TCP RST, the client's and the
// server's, and returns how many links it closed. New connections are
// accepted as before.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	clear(p.links)
	p.mu.Unlock()
	for _, l := range links {
		l.abort()
	}
	return len(links)
}

// Live returns the number of connections the proxy holds.
func (p *Proxy) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Close stops accepting, resets every live connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.notify()
	p.mu.Unlock()
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		l := &link{client: c, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.abort()
			return
		}
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(l)
	}
}

// serve dials the server once no blackhole holds the link, then pumps
// both directions until both end.
func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer p.forget(l)
	if !p.gate(l.done) {
		return
	}
	s, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		l.abort()
		return
	}
	l.mu.Lock()
	l.server = s
	l.mu.Unlock()
	select {
	case <-l.done: // reset while dialling, maybe before server was set
		if tc, ok := s.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = s.Close()
		return
	default:
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.pump(l, l.client, s) })
	wg.Go(func() { p.pump(l, s, l.client) })
	wg.Wait()
	l.stop(false)
}

func (p *Proxy) forget(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// faults returns the current latency, the end of a blackhole and the
// channel closed at the next change.
func (p *Proxy) faults() (time.Duration, time.Time, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency, p.holdUntil, p.changed
}

// gate waits until no blackhole holds traffic; false when done closed
// first.
func (p *Proxy) gate(done <-chan struct{}) bool {
	for {
		_, until, changed := p.faults()
		wait := time.Until(until)
		if wait <= 0 {
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-changed:
		case <-done:
			t.Stop()
			return false
		}
		t.Stop()
	}
}

// chunk is bytes read and the time they are due at the other side.
type chunk struct {
	data []byte
	due  time.Time
}

// pump copies src to dst through a delay line: a reader stamps each chunk
// with its due time (read time plus the latency then), a writer delivers it
// then, once no blackhole holds it. At src's end, dst's write side is
// closed; on any error the link is torn down.
func (p *Proxy) pump(l *link, src, dst net.Conn) {
	queue := make(chan chunk, queueChunks)
	go func() {
		defer close(queue)
		for {
			buf := make([]byte, chunkSize)
			n, err := src.Read(buf)
			if n > 0 {
				latency, _, _ := p.faults()
				select {
				case queue <- chunk{data: buf[:n], due: time.Now().Add(latency)}:
				case <-l.done:
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					l.stop(false)
				}
				return
			}
		}
	}()
	for c := range queue {
		if wait := time.Until(c.due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-l.done:
				t.Stop()
				return
			}
		}
		if !p.gate(l.done) {
			return
		}
		if _, err := dst.Write(c.data); err != nil {
			l.stop(false)
			return
		}
	}
	select {
	case <-l.done:
	default:
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
}

// abort tears the link down with an RST on both sides.
func (l *link) abort() { l.stop(true) }

// stop closes both connections once; with rst, SO_LINGER 0 makes the close
// send an RST rather than a FIN.
func (l *link) stop(rst bool) {
	l.stopOnce.Do(func() {
		close(l.done)
		l.mu.Lock()
		s := l.server
		l.mu.Unlock()
		for _, c := range []net.Conn{l.client, s} {
			if c == nil {
				continue
			}
			if tc, ok := c.(*net.TCPConn); ok && rst {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
		}
	})
}
