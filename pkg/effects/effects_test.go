package effects

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// TestBadKey: every effect fails for a key that is not "namespace/name",
// and calls nothing.
func TestBadKey(t *testing.T) {
	h := newHarness(t, nil)
	for name, effect := range effectsOf(h.eff, &v1.PostgresqlStatus{State: "Running"}) {
		for _, key := range []string{"no-namespace", "/no-namespace", "no-name/", "a/b/c"} {
			if err := effect(context.Background(), key); err == nil || !strings.Contains(err.Error(), "cluster key") {
				t.Errorf("%s of %q: err = %v, want a key error", name, key, err)
			}
		}
	}
	if n := len(h.kube.Actions()) + h.pg.count("Get") + h.pg.writes(); n != 0 {
		t.Errorf("%d API calls for bad keys", n)
	}
}

// TestEffectsHonourCancelledContext: with ctx done, an effect calls
// nothing and returns ctx's error; only the Events are still recorded.
func TestEffectsHonourCancelledContext(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		pg := deleting(testCluster(t))
		for _, name := range []string{"status", "ensure", "replacePods", "nudge", "cleanup"} {
			t.Run(name, func(t *testing.T) {
				h := newHarness(t, []*v1.Postgresql{pg})
				start := time.Now()
				err := effectsOf(h.eff, &v1.PostgresqlStatus{State: "Running"})[name](ctx, keyOf(pg))
				if !errors.Is(err, context.Canceled) {
					t.Errorf("err = %v, want context.Canceled", err)
				}
				if d := time.Since(start); d > time.Second {
					t.Errorf("took %v", d)
				}
				if n := len(h.kube.Actions()); n != 0 {
					t.Errorf("%d API calls after cancellation", n)
				}
				if n := h.pg.count("Get") + h.pg.writes(); n != 0 {
					t.Errorf("%d resource calls after cancellation", n)
				}
			})
		}
	})
}
