package effects

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

func TestStatus(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		conflict := apierrors.NewConflict(v1.Resource(v1.PostgresqlResource), "x", errors.New("modified"))
		running := v1.PostgresqlStatus{State: "Running", Epoch: 3, StateSince: &metav1.Time{Time: t0}, Ready: "2/2"}
		// The state machine's clock has sub-second precision; the stored copy
		// has whole seconds.
		precise := *running.DeepCopy()
		precise.StateSince = &metav1.Time{Time: t0.Add(300 * time.Millisecond)}
		tests := []struct {
			name       string
			stored     *v1.PostgresqlStatus // nil: the resource is gone
			failSt     func(int) error
			want       v1.PostgresqlStatus
			wantWrites int
			wantErr    func(error) bool
		}{
			{name: "written when different", stored: &v1.PostgresqlStatus{State: "Creating"}, want: running, wantWrites: 1},
			{name: "skipped when equal", stored: &running, want: running},
			{name: "skipped when equal to the second", stored: &running, want: precise},
			{name: "retried on conflict", stored: &v1.PostgresqlStatus{}, want: running, wantWrites: 2,
				failSt: func(n int) error {
					if n == 1 {
						return conflict
					}
					return nil
				}},
			{name: "gives up on persistent conflict", stored: &v1.PostgresqlStatus{}, want: running, wantWrites: maxAttempts,
				failSt: func(int) error { return conflict }, wantErr: apierrors.IsConflict},
			{name: "resource gone", want: running},
			{name: "resource gone while writing", stored: &v1.PostgresqlStatus{}, want: running, wantWrites: 1,
				failSt: func(int) error { return apierrors.NewNotFound(v1.Resource(v1.PostgresqlResource), "x") }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				pg := testCluster(t)
				var pgs []*v1.Postgresql
				if tt.stored != nil {
					pg.Status = *tt.stored
					pgs = append(pgs, pg)
				}
				h := newHarness(t, pgs)
				h.pg.failSt = tt.failSt
				want := tt.want.DeepCopy()
				err := h.eff.WriteStatus(context.Background(), keyOf(pg), want)
				if tt.wantErr != nil {
					if !tt.wantErr(err) {
						t.Fatalf("err = %v", err)
					}
				} else if err != nil {
					t.Fatal(err)
				}
				if n := h.pg.count("UpdateStatus"); n != tt.wantWrites {
					t.Errorf("%d status writes, want %d", n, tt.wantWrites)
				}
				if h.pg.count("Update") != 0 {
					t.Error("the status step wrote the spec")
				}
				if !equality.Semantic.DeepEqual(want, &tt.want) {
					t.Error("the plan's status was modified")
				}
				if got := h.pg.get(pg.Namespace, pg.Name); got != nil && tt.wantErr == nil && tt.failSt == nil {
					if !equality.Semantic.DeepEqual(stored(&got.Status), stored(&tt.want)) {
						t.Errorf("stored status %+v, want %+v", got.Status, tt.want)
					}
				}
			})
		}
	})
}
