package effects

import (
	"context"
	"slices"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// uidRecorder records the objects events are recorded on.
type uidRecorder struct {
	*record.FakeRecorder
	mu   sync.Mutex
	uids []types.UID
}

func (r *uidRecorder) Event(obj runtime.Object, typ, reason, msg string) {
	r.mu.Lock()
	r.uids = append(r.uids, obj.(metav1.Object).GetUID())
	r.mu.Unlock()
	r.FakeRecorder.Event(obj, typ, reason, msg)
}

func TestEvents(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := testCluster(t)
		events := []act.Record{
			{Reason: "Running", Message: "Creating -> Running on podsReady"},
			{Warning: true, Reason: "Degraded", Message: "Running -> Degraded: 50% of pods lost"},
		}
		want := []string{"Normal Running Creating -> Running on podsReady", "Warning Degraded Running -> Degraded: 50% of pods lost"}
		for _, tt := range []struct {
			name    string
			status  *v1.PostgresqlStatus
			ctx     func() context.Context
			wantUID types.UID
		}{
			{name: "after status", status: &v1.PostgresqlStatus{State: "Degraded"}, wantUID: pg.UID},
			{name: "alone", wantUID: pg.UID},
			{name: "cancelled plan", ctx: func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				h := newHarness(t, []*v1.Postgresql{pg})
				rec := &uidRecorder{FakeRecorder: record.NewFakeRecorder(8)}
				h.eff.rec = rec
				ctx := context.Background()
				if tt.ctx != nil {
					ctx = tt.ctx()
				}
				if tt.status != nil {
					if err := h.eff.WriteStatus(ctx, keyOf(pg), tt.status); err != nil {
						t.Fatalf("status: %v", err)
					}
				}
				if err := h.eff.RecordEvents(ctx, keyOf(pg), events); err != nil {
					t.Fatalf("events failed: %v", err)
				}
				close(rec.Events)
				var got []string
				for e := range rec.Events {
					got = append(got, e)
				}
				if !slices.Equal(got, want) {
					t.Errorf("events:\n got %q\nwant %q", got, want)
				}
				for _, uid := range rec.uids {
					if uid != tt.wantUID {
						t.Errorf("event on UID %q, want %q", uid, tt.wantUID)
					}
				}
			})
		}
	})
}
