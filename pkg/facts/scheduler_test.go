package facts

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestSchedulingFailureUnservedScheduler: a pod of a scheduler that never
// wrote PodScheduled is named with its scheduler; a pod of the default
// scheduler without the condition yet, or one bound, is not.
func TestSchedulingFailureUnservedScheduler(t *testing.T) {
	for _, c := range []struct {
		name      string
		scheduler string
		node      string
		want      bool
	}{
		{"another scheduler, unbound", "nobody", "", true},
		{"default scheduler, not tried yet", corev1.DefaultSchedulerName, "", false},
		{"no scheduler name (defaulted by the apiserver)", "", "", false},
		{"another scheduler, bound", "nobody", "node-1", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: corev1.PodSpec{SchedulerName: c.scheduler, NodeName: c.node}}
			msg, ok := schedulingFailure(p)
			if ok != c.want {
				t.Fatalf("schedulingFailure = %q, %v; want %v", msg, ok, c.want)
			}
			if ok && !strings.Contains(msg, `scheduler "nobody" (spec.schedulerName) has not tried to place it`) {
				t.Errorf("message %q does not name the scheduler", msg)
			}
		})
	}
}
