package kubelet

import "time"

// The crash-loop back-off of a real kubelet, shortened for tests: a failover
// test should not wait five minutes for a crashed instance to come back.
const (
	backoffInitial = time.Second
	backoffMax     = 30 * time.Second
	// backoffReset is how long a process must run for its crash to count as
	// the first one again.
	backoffReset = 60 * time.Second
)

// backoff is the delay before restarting a crashed instance. The zero value
// is ready to use.
type backoff struct {
	// last is the delay given for the previous crash; 0 before any.
	last time.Duration
}

// crashed records a crash of a process that ran for ran, and returns how long
// to wait before starting it again: 1 s, 2 s, 4 s... up to backoffMax, back
// to 1 s after a process that ran backoffReset or longer.
func (b *backoff) crashed(ran time.Duration) time.Duration {
	switch {
	case b.last == 0 || ran >= backoffReset:
		b.last = backoffInitial
	case b.last < backoffMax:
		b.last = min(2*b.last, backoffMax)
	}
	return b.last
}
