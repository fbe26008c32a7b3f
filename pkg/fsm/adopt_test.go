package fsm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// TestAdoptionRefusedReason: a create whose ensure effect refuses the
// adoption stays Creating, retries, and says so with its own reason; any
// other failure keeps EffectsFailed.
func TestAdoptionRefusedReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("step ensure: %w: statefulset c is controlled by apps/v1 Deployment x", v1.ErrAdoptionRefused), ReasonAdoptionRefused},
		{errors.New("step ensure: create statefulset: connection refused"), ReasonEffectsFailed},
	} {
		cfg := writeAtOnce()
		m := NewEngine(cfg).New(nil)
		res := m.Handle(Input{Kind: Signal}, starting(1), t0)
		if res.Plan == nil || !res.Plan.Ensure {
			t.Fatalf("plan %+v, want the ensure effects", res.Plan)
		}
		m.Handle(Input{Kind: PlanDone, PlanID: res.Plan.ID, Err: tc.err}, starting(1), t0.Add(time.Second))
		st := m.Status()
		if st.State != Creating || st.Reason != tc.want || !strings.Contains(st.Message, tc.err.Error()) {
			t.Errorf("%v: state %s, reason %s, message %q; want Creating, %s, the error", tc.err, st.State, st.Reason, st.Message, tc.want)
		}
		if retryDeadline(m).IsZero() {
			t.Errorf("%v: no retry pending", tc.err)
		}
	}
}
