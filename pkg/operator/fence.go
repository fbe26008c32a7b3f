package operator

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// fencedLock is the Lease lock of a leader that stops its work before the
// Lease can pass to another replica. client-go's elector does not: when it
// cannot renew it gives up, releases the Lease (ReleaseOnCancel), and only
// then cancels the leader's context. The release alone may take up to the
// renew deadline (a Get, then an Update, on an API server slow enough to
// have failed the renewals), so the old leader's plans could go on writing
// statuses and objects while the new one resumes the same clusters from
// the API: the simulation (test/sim, handover) saw an old leader's status,
// written after the new leader had read it, stay for good, and one written
// after a Conflict take status.epoch back.
//
// So the lock (1) runs stop, which cancels the leader's work and waits
// for it to end, before it writes a release, and (2) remembers when this
// replica last renewed, for watchRenewals, which stops the work as soon as
// the renew deadline has passed since: before the Lease, valid for the
// lease duration since that renewal, can expire for the other replicas.
// The clients' fence (traffic.Fence) asks it (held) before each write.
type fencedLock struct {
	resourcelock.Interface
	now  func() time.Time
	stop func() // cancels the leader's work and waits for it; idempotent

	mu       sync.Mutex
	renewed  time.Time   // when the last successful Create or Update of ours was sent
	released atomic.Bool // a release began
}

func newFencedLock(lock resourcelock.Interface, stop func()) *fencedLock {
	return &fencedLock{Interface: lock, now: time.Now, stop: stop}
}

// Create takes the Lease; made with this replica as holder, it counts as
// a renewal.
func (l *fencedLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := l.now()
	err := l.Interface.Create(ctx, ler)
	if err == nil && ler.HolderIdentity == l.Identity() {
		l.mark(sent)
	}
	return err
}

// Update renews the Lease, or releases it (a record naming another holder,
// or none, as client-go's release writes): the leader's work is stopped
// first.
func (l *fencedLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity != l.Identity() {
		l.released.Store(true)
		l.stop()
	}
	sent := l.now()
	err := l.Interface.Update(ctx, ler)
	if err == nil && ler.HolderIdentity == l.Identity() {
		l.mark(sent)
	}
	return err
}

func (l *fencedLock) mark(t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renewed = t
}

// lastRenewed is when the last renewal that succeeded was sent.
func (l *fencedLock) lastRenewed() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewed
}

// watchRenewals calls expired once deadline has passed since the last
// renewal of lock, checking every period, until ctx ends. The leader's
// work runs under ctx: expired cancels it.
func watchRenewals(ctx context.Context, lock *fencedLock, deadline, period time.Duration, expired func()) {
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for {
		if last := lock.lastRenewed(); !last.IsZero() && lock.now().Sub(last) >= deadline {
			expired()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// held reports whether this replica may still act as the leader: it has
// renewed the Lease within deadline and not begun to release it.
func (l *fencedLock) held(deadline time.Duration) bool {
	last := l.lastRenewed()
	return !l.released.Load() && !last.IsZero() && l.now().Sub(last) < deadline
}
