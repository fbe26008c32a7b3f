package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// echoServer accepts on loopback and echoes every line back until the test
// ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// roundTrip sends a line through c and reads it back within timeout.
func roundTrip(c net.Conn, r *bufio.Reader, line string, timeout time.Duration) (time.Duration, error) {
	began := time.Now()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return 0, err
	}
	_ = c.SetReadDeadline(began.Add(timeout))
	got, err := r.ReadString('\n')
	if err != nil {
		return time.Since(began), err
	}
	if got != line+"\n" {
		return 0, errors.New("echoed " + got)
	}
	return time.Since(began), nil
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestFaults(t *testing.T) {
	const latency = 150 * time.Millisecond
	const hold = 400 * time.Millisecond
	tests := []struct {
		name string
		// fault is applied once the connection has made one round trip.
		fault func(*Proxy)
		// min and max bound the next round trip's time.
		min, max time.Duration
	}{
		{name: "pass", fault: func(*Proxy) {}, min: 0, max: time.Second},
		{name: "latency, both ways", fault: func(p *Proxy) { p.SetLatency(latency) }, min: 2 * latency, max: 2*latency + time.Second},
		{name: "blackhole held then delivered", fault: func(p *Proxy) { p.Blackhole(hold) }, min: hold - 50*time.Millisecond, max: hold + time.Second},
		{name: "pass lifts the faults", fault: func(p *Proxy) { p.SetLatency(time.Hour); p.Blackhole(time.Hour); p.Pass() }, min: 0, max: time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newProxy(t)
			c, r := dial(t, p)
			if _, err := roundTrip(c, r, "before", 5*time.Second); err != nil {
				t.Fatalf("before the fault: %v", err)
			}
			tc.fault(p)
			took, err := roundTrip(c, r, "during", 5*time.Second)
			if err != nil {
				t.Fatalf("after the fault: %v", err)
			}
			if took < tc.min || took > tc.max {
				t.Errorf("round trip took %v, want %v to %v", took, tc.min, tc.max)
			}
		})
	}
}

// A blackhole forwards nothing while it lasts: a read meanwhile times
// out, and a connection made meanwhile reaches the server only after it.
func TestBlackholeForwardsNothing(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, "before", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Blackhole(time.Hour)
	var nerr net.Error
	if _, err := roundTrip(c, r, "held", 200*time.Millisecond); !errors.As(err, &nerr) || !nerr.Timeout() {
		t.Fatalf("read during the blackhole: %v, want a timeout", err)
	}
	fresh, freshR := dial(t, p)
	if _, err := roundTrip(fresh, freshR, "new", 200*time.Millisecond); !errors.As(err, &nerr) || !nerr.Timeout() {
		t.Fatalf("new connection during the blackhole: %v, want a timeout", err)
	}
	p.Pass()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after the blackhole: %q, %v; want what was held", got, err)
	}
	_ = fresh.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := freshR.ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("new connection after the blackhole: %q, %v", got, err)
	}
}

// Reset closes live connections with an RST and keeps accepting.
func TestReset(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, "before", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := p.Reset(); n != 1 {
		t.Errorf("Reset closed %d links, want 1", n)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read after the reset: %v, want ECONNRESET", err)
	}
	fresh, freshR := dial(t, p)
	if _, err := roundTrip(fresh, freshR, "after", 5*time.Second); err != nil {
		t.Fatalf("new connection after the reset: %v", err)
	}
	if n := p.Live(); n != 1 {
		t.Errorf("%d live links, want 1", n)
	}
}

// A client that closes its side gets the server's answer and EOF: the
// write side is closed, not the whole link.
func TestHalfClose(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if _, err := io.WriteString(c, "last\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(r)
	if err != nil || string(got) != "last\n" {
		t.Fatalf("read %q, %v; want the echo then EOF", got, err)
	}
}

// Close ends every goroutine even with connections held by a blackhole.
func TestCloseDuringBlackhole(t *testing.T) {
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := dial(t, p)
	_, _ = io.WriteString(c, "held\n")
	p.Blackhole(time.Hour)
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung")
	}
}
