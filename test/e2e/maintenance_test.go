package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// TestMaintenanceWindow edits the pod template of two clusters at once:
// the one without maintenance windows rolls at once, the one given (by
// the same edit) a window that opens in one to two minutes waits for it (reason MaintenanceWindow, its
// maintenanceWindow timer at the opening), then rolls within it. Windows
// are whole minutes of the wall clock, so this waits up to two minutes;
// the state machine's own clock is tested in pkg/fsm
// (testdata/maintenance.txt).
func TestMaintenanceWindow(t *testing.T) {
	t.Parallel() // waits on timers: docs/testbed.md, "Suites run concurrently"
	ns := env.Namespace(t)
	env.StartLabeller(t, ns)
	env.StartOperator(t, "operator", []string{ns})
	ctx := Context(t, 5*time.Minute)

	env.CreateCluster(t, ns, "anytime", 1)
	env.CreateCluster(t, ns, "windowed", 1)
	env.MustState(ctx, t, ns, "anytime", fsm.Running)
	env.MustState(ctx, t, ns, "windowed", fsm.Running)
	before := map[string]string{}
	for _, name := range []string{"anytime", "windowed"} {
		before[name] = string(env.Pod(ctx, t, ns, name+"-0").UID)
	}

	// The window opens at the start of the minute after next, so the
	// edit, which sets it, lands outside it; it lasts two minutes.
	opens := time.Now().UTC().Truncate(time.Minute).Add(2 * time.Minute)
	window := fmt.Sprintf("%s-%s", opens.Format("15:04"), opens.Add(2*time.Minute).Format("15:04"))
	if opens.Add(2*time.Minute).Day() != opens.Day() {
		// A window does not wrap past midnight: the first minutes of the
		// next day take the same test.
		opens = opens.Truncate(24 * time.Hour).Add(24 * time.Hour)
		window = "00:00-00:02"
	}
	edited := time.Now()
	const rolled = `"podAnnotations":{"e2e.pgloop.dev/rolled":"yes"}`
	if _, err := env.MergePatchCluster(ctx, ns, "anytime", `{"spec":{`+rolled+`}}`); err != nil {
		t.Fatal(err)
	}
	if _, err := env.MergePatchCluster(ctx, ns, "windowed", fmt.Sprintf(`{"spec":{"maintenanceWindows":[%q],%s}}`, window, rolled)); err != nil {
		t.Fatal(err)
	}
	replaced := func(name string) func([]*corev1.Pod) bool {
		return func(pods []*corev1.Pod) bool {
			return ReadyPods(1)(pods) && string(pods[0].UID) != before[name] && pods[0].Annotations["e2e.pgloop.dev/rolled"] == "yes"
		}
	}

	pg, err := env.WaitCluster(ctx, ns, "windowed", "waiting for its window", func(pg *v1.Postgresql) bool {
		return pg.Status.Reason == fsm.ReasonMaintenanceWindow && pg.Status.ObservedGeneration >= pg.Generation
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("windowed: %s: %s", pg.Status.Reason, pg.Status.Message)
	timer := false
	for _, tm := range pg.Status.Timers {
		if tm.Name == fsm.TimerMaintenance {
			timer = tm.Deadline.Time.Equal(opens)
		}
		if tm.Name == fsm.TimerTimeout {
			t.Errorf("a timeout runs while the cluster waits for its window: %v", pg.Status.Timers)
		}
	}
	if !timer {
		t.Errorf("timers %v: want %s at %v", pg.Status.Timers, fsm.TimerMaintenance, opens)
	}

	if _, err := env.WaitPods(ctx, ns, "anytime", replaced("anytime")); err != nil {
		t.Fatal(err)
	}
	env.MustState(ctx, t, ns, "anytime", fsm.Running)
	t.Logf("anytime: rolled and Running %v after the edit", time.Since(edited).Round(time.Millisecond))
	if time.Now().Before(opens) {
		if p := env.Pod(ctx, t, ns, "windowed-0"); string(p.UID) != before["windowed"] {
			t.Errorf("windowed-0 replaced before its window opened")
		}
	}

	if _, err := env.WaitPods(ctx, ns, "windowed", replaced("windowed")); err != nil {
		t.Fatal(err)
	}
	done := time.Now()
	if done.Before(opens) {
		t.Errorf("windowed rolled at %v, before its window opened at %v", done, opens)
	}
	env.MustState(ctx, t, ns, "windowed", fsm.Running)
	t.Logf("windowed: rolled %v after its window opened, Running %v after the edit",
		done.Sub(opens).Round(time.Millisecond), time.Since(edited).Round(time.Millisecond))
}
