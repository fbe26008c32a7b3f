package traffic

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
)

// ErrFenced is what a write the Fence refused fails with.
var ErrFenced = errors.New("write fenced")

// Fence refuses the writes of the operator's clients (not the elector's)
// once this replica may no longer hold its Lease: a process paused past
// its renew deadline (a long GC, a frozen node) would otherwise send the
// writes it was about to make when it runs again, before its work is
// cancelled. Unarmed (no leader election) it lets everything through.
// What holds the Lease, and until when, is the leader election's to say
// (Arm); the fence only asks it at each write.
type Fence struct {
	held atomic.Pointer[func() bool]
}

// Arm makes f ask held before each write, and refuse the write when held
// reports false. It is called once, before the elector runs; it publishes
// held at once, as the Event recorder's goroutine may already write.
func (f *Fence) Arm(held func() bool) {
	f.held.Store(&held)
}

// Wrap is a rest.Config WrapTransport: the writes sent through the
// transport it returns go through f, then rt.
func (f *Fence) Wrap(rt http.RoundTripper) http.RoundTripper {
	return wrapped(rt, f.roundTrip)
}

func (f *Fence) roundTrip(next http.RoundTripper, req *http.Request) (*http.Response, error) {
	switch {
	case req.Method == http.MethodGet, req.Method == http.MethodHead, req.Method == http.MethodOptions:
	case strings.Contains(req.URL.Path, "/events"):
		// Kubernetes Events change no cluster; the elector's own
		// ("stopped leading") comes after the release.
	default:
		if held := f.held.Load(); held != nil && !(*held)() {
			return nil, fmt.Errorf("%w: %s %s refused, another replica may lead", ErrFenced, req.Method, req.URL.Path)
		}
	}
	return next.RoundTrip(req)
}
