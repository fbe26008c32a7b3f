package traffic

import "net/http"

// roundTripperFunc is a function that is an http.RoundTripper.
type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// wrapped is the transport each shaper's Wrap returns: every request goes
// through roundTrip, which sends it on, or not, through next. The shapers
// (Gate, WriteWindows, Fence) then need no transport type of their own.
func wrapped(next http.RoundTripper, roundTrip func(next http.RoundTripper, req *http.Request) (*http.Response, error)) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) { return roundTrip(next, req) })
}
