package operator

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// recordingLock is a resourcelock.Interface that records the calls made
// to it, in order, in a log it shares with the test.
type recordingLock struct {
	id  string
	err error // of Create and Update
	log *[]string
	mu  *sync.Mutex
}

func (l recordingLock) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.log = append(*l.log, s)
}

func (l recordingLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	l.add("get")
	return &resourcelock.LeaderElectionRecord{HolderIdentity: l.id}, nil, nil
}

func (l recordingLock) Create(_ context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.add("create " + ler.HolderIdentity)
	return l.err
}

func (l recordingLock) Update(_ context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.add("update " + ler.HolderIdentity)
	return l.err
}

func (recordingLock) RecordEvent(string) {}
func (l recordingLock) Identity() string { return l.id }
func (recordingLock) Describe() string   { return "test/lease" }

// A release (an Update naming no holder, as client-go's) stops the
// leader's work first; renewals do not, and count as renewals only when
// they succeed.
func TestFencedLockStopsBeforeRelease(t *testing.T) {
	var (
		mu  sync.Mutex
		log []string
	)
	inner := recordingLock{id: "a", log: &log, mu: &mu}
	now := time.Unix(1000, 0)
	lock := newFencedLock(inner, func() { inner.add("stop") })
	lock.now = func() time.Time { return now }
	ctx := context.Background()

	if err := lock.Create(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "a"}); err != nil {
		t.Fatal(err)
	}
	if got := lock.lastRenewed(); !got.Equal(now) {
		t.Errorf("after the create: last renewed %v, want %v", got, now)
	}
	now = now.Add(2 * time.Second)
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "a"}); err != nil {
		t.Fatal(err)
	}
	if got := lock.lastRenewed(); !got.Equal(now) {
		t.Errorf("after a renewal: last renewed %v, want %v", got, now)
	}
	renewed := now
	now = now.Add(2 * time.Second)
	inner.err = errors.New("etcd is away")
	lock.Interface = inner
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "a"}); err == nil {
		t.Fatal("a failed renewal reported no error")
	}
	if got := lock.lastRenewed(); !got.Equal(renewed) {
		t.Errorf("after a failed renewal: last renewed %v, want %v (the last that succeeded)", got, renewed)
	}
	inner.err = nil
	lock.Interface = inner
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"create a", "update a", "update a", "stop", "update "}
	if !slices.Equal(log, want) {
		t.Errorf("calls %q, want %q", log, want)
	}
}

// watchRenewals stops the work once the renew deadline has passed since
// the last renewal, not before, and not at all while renewals go on.
func TestWatchRenewals(t *testing.T) {
	var (
		mu  sync.Mutex
		log []string
	)
	lock := newFencedLock(recordingLock{id: "a", log: &log, mu: &mu}, func() {})
	var clock sync.Mutex
	now := time.Unix(1000, 0)
	lock.now = func() time.Time {
		clock.Lock()
		defer clock.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		clock.Lock()
		defer clock.Unlock()
		now = now.Add(d)
	}
	if err := lock.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "a"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	expired := make(chan time.Time, 1)
	go watchRenewals(ctx, lock, 10*time.Second, time.Millisecond, func() { expired <- lock.now() })

	// Renewals every 2 s for 30 s: never expired.
	for range 15 {
		advance(2 * time.Second)
		if err := lock.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "a"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	select {
	case at := <-expired:
		t.Fatalf("expired at %v while renewals went on", at)
	default:
	}
	// No more renewals: expired once 10 s have passed since the last.
	last := lock.lastRenewed()
	advance(9 * time.Second)
	time.Sleep(20 * time.Millisecond)
	select {
	case at := <-expired:
		t.Fatalf("expired %v after the last renewal, before the deadline", at.Sub(last))
	default:
	}
	advance(time.Second)
	select {
	case at := <-expired:
		if d := at.Sub(last); d < 10*time.Second {
			t.Errorf("expired %v after the last renewal, want at least 10s", d)
		}
	case <-time.After(time.Minute):
		t.Fatal("not expired 10 s after the last renewal (waited a minute)")
	}
}

// The lock is held once renewed, until the renew deadline has passed
// since the last renewal that succeeded, or a release began: what the
// clients' fence (traffic.Fence) asks before each write.
func TestFencedLockHeld(t *testing.T) {
	var (
		mu  sync.Mutex
		log []string
	)
	now := time.Unix(1000, 0)
	lock := newFencedLock(recordingLock{id: "a", log: &log, mu: &mu}, func() {})
	lock.now = func() time.Time { return now }
	renew := func(holder string) {
		t.Helper()
		if err := lock.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: holder}); err != nil {
			t.Fatal(err)
		}
	}
	const deadline = 10 * time.Second
	if lock.held(deadline) {
		t.Error("never renewed (a standby): held")
	}
	renew("a")
	if !lock.held(deadline) {
		t.Error("just renewed: not held")
	}
	now = now.Add(deadline)
	if lock.held(deadline) {
		t.Error("renew deadline passed: held")
	}
	renew("a")
	if !lock.held(deadline) {
		t.Error("renewed again: not held")
	}
	renew("") // a release, as client-go's
	if lock.held(deadline) {
		t.Error("released: held")
	}
}
