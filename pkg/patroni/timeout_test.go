package patroni

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// hungServer accepts connections and never answers, as a Patroni whose
// API thread is stuck would; answer, when set, is written once the
// request's headers are read, and the connection then stalls.
func hungServer(t *testing.T, answer string) (base, addr string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			if answer != "" {
				go func() {
					r := bufio.NewReader(c)
					for {
						line, err := r.ReadString('\n')
						if err != nil {
							return
						}
						if line == "\r\n" {
							break
						}
					}
					c.Write([]byte(answer))
				}()
			}
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + l.Addr().String(), l.Addr().String()
}

// within checks a call that should time out after bound did, in about
// that time.
func within(t *testing.T, bound time.Duration, call func() error) *Error {
	t.Helper()
	start := time.Now()
	err := call()
	took := time.Since(start)
	// Not before the bound; after it by as much as a busy machine's
	// scheduler delays the test (the error's text says which deadline
	// ended the call), but not never: the server never answers.
	if took < bound-10*time.Millisecond || took > bound+30*time.Second {
		t.Errorf("returned after %v, want about %v", took, bound)
	}
	e := wantError(t, err)
	if !e.Timeout() {
		t.Errorf("error %q: Timeout() = false", err)
	}
	return e
}

func TestHungServer(t *testing.T) {
	ctx := context.Background()
	base, addr := hungServer(t, "")
	o := &observed{}
	c := &Client{Timeout: 300 * time.Millisecond, SwitchoverWait: 200 * time.Millisecond, Observe: o.observe}

	for _, tt := range []struct {
		call, request string
		bound         time.Duration
		do            func() error
	}{
		{CallConfig, "GET /config", 300 * time.Millisecond, func() error {
			_, err := c.Config(ctx, base)
			return err
		}},
		{CallPatchConfig, "PATCH /config", 300 * time.Millisecond, func() error {
			_, err := c.PatchConfig(ctx, base, map[string]any{"ttl": 30})
			return err
		}},
		{CallRestart, "POST /restart", 300 * time.Millisecond, func() error {
			return c.Restart(ctx, base, true, 0)
		}},
		// Patroni answers a switchover only once done: its wait adds up.
		{CallSwitchover, "POST /switchover", 500 * time.Millisecond, func() error {
			return c.Switchover(ctx, base, "pg-0", "pg-1")
		}},
		{CallStatus, "GET /patroni", 300 * time.Millisecond, func() error {
			_, err := c.Status(ctx, base)
			return err
		}},
	} {
		t.Run(tt.call, func(t *testing.T) {
			e := within(t, tt.bound, tt.do)
			want := "patroni " + addr + " did not answer " + tt.request + " within " + tt.bound.String()
			if e.Error() != want {
				t.Errorf("error = %q, want %q", e, want)
			}
			if !errors.Is(e, context.DeadlineExceeded) {
				t.Errorf("error %q does not wrap context.DeadlineExceeded", e)
			}
			wantObserved(t, o, tt.call+" "+OutcomeTimeout)
		})
	}

	t.Run("restart's timeout adds to the bound", func(t *testing.T) {
		within(t, 1300*time.Millisecond, func() error { return c.Restart(ctx, base, true, time.Second) })
		wantObserved(t, o, "restart timeout")
	})

	t.Run("ctx's earlier deadline", func(t *testing.T) {
		c := &Client{Timeout: 5 * time.Second, Observe: o.observe}
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		e := within(t, 200*time.Millisecond, func() error {
			_, err := c.Config(ctx, base)
			return err
		})
		// The bound is what was left of ctx's deadline when the call
		// started: 200ms less the setup (more on a busy machine), not
		// the client's 5s.
		if e.Bound > 200*time.Millisecond || e.Bound <= 0 {
			t.Errorf("Bound = %v, want at most 200ms", e.Bound)
		}
		if want := "did not answer GET /config within " + roundBound(e.Bound).String(); !strings.HasSuffix(e.Error(), want) {
			t.Errorf("error = %q, want it to end %q", e, want)
		}
		wantObserved(t, o, "config timeout")
	})

	t.Run("default Timeout", func(t *testing.T) {
		if testing.Short() {
			t.Skip("takes DefaultTimeout")
		}
		c := &Client{}
		e := within(t, DefaultTimeout, func() error {
			_, err := c.Status(ctx, base)
			return err
		})
		if want := "patroni " + addr + " did not answer GET /patroni within 5s"; e.Error() != want {
			t.Errorf("error = %q, want %q", e, want)
		}
	})

	t.Run("HTTP client's own timeout", func(t *testing.T) {
		c := &Client{HTTP: &http.Client{Timeout: 150 * time.Millisecond}, Timeout: 5 * time.Second, Observe: o.observe}
		e := within(t, 150*time.Millisecond, func() error {
			_, err := c.Config(ctx, base)
			return err
		})
		if !strings.HasSuffix(e.Error(), "within 150ms") {
			t.Errorf("error = %q", e)
		}
		wantObserved(t, o, "config timeout")
	})

	t.Run("cancelled is no timeout", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		_, err := c.Config(ctx, base)
		if took := time.Since(start); took > 30*time.Second {
			t.Errorf("returned after %v, want about 100ms", took)
		}
		e := wantError(t, err, "patroni "+addr+": GET /config: context canceled")
		if e.Timeout() || !errors.Is(err, context.Canceled) {
			t.Errorf("error %q: Timeout() = %v", err, e.Timeout())
		}
		wantObserved(t, o, "config error")
	})
}

// TestBodyStalls checks a timeout while reading the answer's body is a
// timeout like any other.
func TestBodyStalls(t *testing.T) {
	base, addr := hungServer(t, "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"ttl\": ")
	o := &observed{}
	c := &Client{Timeout: 300 * time.Millisecond, Observe: o.observe}
	e := within(t, 300*time.Millisecond, func() error {
		_, err := c.Config(context.Background(), base)
		return err
	})
	if want := "patroni " + addr + " did not answer GET /config within 300ms"; e.Error() != want {
		t.Errorf("error = %q, want %q", e, want)
	}
	wantObserved(t, o, "config timeout")
}
