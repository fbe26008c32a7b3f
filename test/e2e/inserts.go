package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// insertLoop tries one insert every 10 ms until stopped and records when
// each committed and what failed: the writers of the switchover, pooler
// and adoption tests differ only in how they connect and what a failure
// is (their step).
type insertLoop struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	at     []time.Time
	failed int
	errs   map[string]int
}

// insertResult is what an insert loop saw: the commits, the failures
// (counted, and by message), and the longest time between two commits.
type insertResult struct {
	inserts, failed int
	gap             time.Duration
	errs            map[string]int
}

// errors lists the failures' messages with their counts.
func (r insertResult) errors() string {
	var out []string
	for msg, n := range r.errs {
		out = append(out, fmt.Sprintf("%dx %s", n, msg))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// startInserts runs step every 10 ms until the loop is stopped (or ctx
// ends), then cleanup. step reports a commit (true), nothing tried or a
// failure its writer does not count (false, nil), or a failure (an
// error, counted unless the loop is stopping).
func startInserts(ctx context.Context, step func(context.Context) (bool, error), cleanup func()) *insertLoop {
	lctx, cancel := context.WithCancel(ctx)
	l := &insertLoop{cancel: cancel, done: make(chan struct{}), errs: map[string]int{}}
	go func() {
		defer close(l.done)
		defer cleanup()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-tick.C:
			}
			ok, err := step(lctx)
			l.mu.Lock()
			switch {
			case ok:
				l.at = append(l.at, time.Now())
			case err != nil && lctx.Err() == nil:
				l.failed++
				l.errs[err.Error()]++
			}
			l.mu.Unlock()
		}
	}()
	return l
}

// count is how many inserts committed so far.
func (l *insertLoop) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.at)
}

// waitMore waits until more than n inserts committed.
func (l *insertLoop) waitMore(ctx context.Context, t *testing.T, what string, n int) {
	t.Helper()
	if err := Eventually(ctx, what, func(context.Context) (bool, error) { return l.count() > n, nil }); err != nil {
		t.Fatal(err)
	}
}

// stop waits for one more insert (which closes the last gap), stops the
// loop and returns what it saw.
func (l *insertLoop) stop(ctx context.Context, t *testing.T, what string) insertResult {
	t.Helper()
	l.waitMore(ctx, t, what, l.count())
	l.cancel()
	<-l.done
	r := insertResult{inserts: len(l.at), failed: l.failed, errs: l.errs}
	for i := 1; i < len(l.at); i++ {
		r.gap = max(r.gap, l.at[i].Sub(l.at[i-1]))
	}
	return r
}
