package benchkit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/pgloop/pgloop/test/pgtest"
)

// Operator is a bench's `pgloop operator` process (a pgtest.Operator) and
// the health server's address, which it finds in the operator's log.
type Operator struct {
	*pgtest.Operator

	mu   sync.Mutex
	addr string        // the health server's address, once logged
	up   chan struct{} // closed when addr is known
}

// StartOperator runs bin with args, its output going to logPath. The
// operator must log JSON (--log-format=json) for its address to be found.
func StartOperator(bin string, args []string, logPath string) (*Operator, error) {
	o := &Operator{up: make(chan struct{})}
	p, err := pgtest.StartOperator(bin, args, logPath, o.saw)
	if err != nil {
		return nil, fmt.Errorf("while starting the operator: %w", err)
	}
	o.Operator = p
	return o, nil
}

// saw looks at one line of the operator's output.
func (o *Operator) saw(line string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.addr != "" || !strings.Contains(line, "serving /healthz") {
		return
	}
	var entry struct {
		Addr string `json:"addr"`
	}
	if json.Unmarshal([]byte(line), &entry) == nil && entry.Addr != "" {
		o.addr = entry.Addr
		close(o.up)
	}
}

// WaitReady waits until the operator has logged its health address and
// its /readyz answers OK (its caches synced, the loop running), and
// returns the address. /readyz is polled every 100ms: an HTTP endpoint has
// no watch.
func (o *Operator) WaitReady(ctx context.Context) (string, error) {
	select {
	case <-o.up:
	case <-o.Exited():
		return "", fmt.Errorf("the operator exited (%v) before serving /readyz:\n%s", o.Err(), o.Tail())
	case <-ctx.Done():
		return "", fmt.Errorf("the operator logged no health address: %w\n%s", ctx.Err(), o.Tail())
	}
	o.mu.Lock()
	addr := o.addr
	o.mu.Unlock()
	client := &http.Client{Timeout: 5 * time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr, nil
			}
		}
		select {
		case <-tick.C:
		case <-o.Exited():
			return "", fmt.Errorf("the operator exited (%v) before it was ready:\n%s", o.Err(), o.Tail())
		case <-ctx.Done():
			return "", fmt.Errorf("the operator's /readyz never answered OK: %w\n%s", ctx.Err(), o.Tail())
		}
	}
}

// StopNamed is pgtest.Operator.Stop, its error naming the operator.
func (o *Operator) StopNamed() error {
	if err := o.Stop(); err != nil {
		return fmt.Errorf("the operator %w", err)
	}
	return nil
}
