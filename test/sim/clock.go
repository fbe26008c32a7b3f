package sim

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// simClock is the one clock of a run: a FakeClock that also knows when the
// timers made with NewTimer (the loop's wake-up) are due, so the simulator
// jumps straight to the next thing that happens instead of stepping
// through idle seconds. Step deadlines (AfterFunc) are not tracked: the
// simulator knows when a parked call ends.
type simClock struct {
	*testingclock.FakeClock
	mu     sync.Mutex
	timers []*simTimer
}

var _ clock.WithTicker = (*simClock)(nil)

func newSimClock(t time.Time) *simClock { return &simClock{FakeClock: testingclock.NewFakeClock(t)} }

// simTimer is a FakeClock timer whose deadline the clock can read.
type simTimer struct {
	clock.Timer
	c        *simClock
	deadline time.Time
	stopped  bool
}

func (c *simClock) NewTimer(d time.Duration) clock.Timer {
	t := &simTimer{Timer: c.FakeClock.NewTimer(d), c: c, deadline: c.Now().Add(d)}
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	return t
}

func (t *simTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	t.deadline, t.stopped = t.c.Now().Add(d), false
	t.c.mu.Unlock()
	return t.Timer.Reset(d)
}

func (t *simTimer) Stop() bool {
	t.c.mu.Lock()
	t.stopped = true
	t.c.mu.Unlock()
	return t.Timer.Stop()
}

// next returns the earliest deadline after now of a timer not stopped,
// and false when there is none.
func (c *simClock) next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.Now()
	var best time.Time
	for _, t := range c.timers {
		if !t.stopped && t.deadline.After(now) && (best.IsZero() || t.deadline.Before(best)) {
			best = t.deadline
		}
	}
	return best, !best.IsZero()
}
