package metrics

import (
	"io"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/version"
)

func TestLag(t *testing.T) {
	m := New()
	m.ObserveLag(eventloop.Signal, "pods", 2*time.Millisecond)
	m.ObserveLag(eventloop.Signal, "spec", 3*time.Millisecond)
	m.ObserveLag(eventloop.PlanDone, "", time.Second)
	m.ObserveLag(eventloop.Kind(9), "", time.Second) // unknown kinds are not lost
	m.ObserveLag(eventloop.TimerFired, "resync", time.Millisecond)
	m.ObserveLag(eventloop.TimerFired, "resync", time.Millisecond)

	if got := testutil.CollectAndCount(m.lag, "pgloop_loop_lag_seconds"); got != 5 {
		t.Errorf("lag series = %d, want 5 (the four kinds listed from the start, plus the unknown one)", got)
	}
	h := histogram(t, m, "pgloop_loop_lag_seconds", "kind", "signal")
	if h.GetSampleCount() != 2 || h.GetSampleSum() < 0.0049 || h.GetSampleSum() > 0.0051 {
		t.Errorf("signal lag: count %d sum %v, want 2 and 0.005", h.GetSampleCount(), h.GetSampleSum())
	}
	if h := histogram(t, m, "pgloop_loop_lag_seconds", "kind", "kind(9)"); h.GetSampleCount() != 1 {
		t.Errorf("unknown kind lag count = %d, want 1", h.GetSampleCount())
	}
	for _, c := range []struct {
		kind, name string
		want       float64
	}{{"signal", "pods", 1}, {"signal", "spec", 1}, {"planDone", "", 1}, {"timerFired", "resync", 2}, {"kind(9)", "", 1}} {
		if got := testutil.ToFloat64(m.loopEvents.WithLabelValues(c.kind, c.name)); got != c.want {
			t.Errorf("pgloop_loop_events_total{kind=%q,name=%q} = %v, want %v", c.kind, c.name, got, c.want)
		}
	}
}

func TestLoopStats(t *testing.T) {
	m := New()
	// Before WatchLoop (a standby operator) nothing of the loop is exported.
	if n := testutil.CollectAndCount(m.loop); n != 0 {
		t.Fatalf("loop metrics before WatchLoop: %d, want 0", n)
	}
	calls := 0
	m.WatchLoop(func() eventloop.Stats {
		calls++
		return eventloop.Stats{
			InboxDepth: 3, Clusters: 5, Timers: 7, PlansRunning: 2, PlansWaiting: 1,
			Dispatched: 100, Coalesced: 40, StaleTimers: 6, TimersDropped: 8,
			PlansRun: 30, PlansFailed: 4, PlansSuperseded: 2, PlansCancelled: 1, Panics: 1,
			PlansHung: 3, PlansSlow: 4, HungClusters: 9, DetachAfter: 2500 * time.Millisecond, PlansDetached: 11,
			WorkerWaits: 2, WorkerWait: 1500 * time.Millisecond, HungWaits: 5, HungWait: 20 * time.Second,
		}
	})
	want := `
# HELP pgloop_loop_inbox_depth Events waiting in the loop's inbox.
# TYPE pgloop_loop_inbox_depth gauge
pgloop_loop_inbox_depth 3
# HELP pgloop_loop_clusters Clusters the loop keeps state for (an epoch, timers or plans).
# TYPE pgloop_loop_clusters gauge
pgloop_loop_clusters 5
# HELP pgloop_loop_timers Timers waiting for their deadline.
# TYPE pgloop_loop_timers gauge
pgloop_loop_timers 7
# HELP pgloop_loop_plans_running Plans of effects in flight in the executor.
# TYPE pgloop_loop_plans_running gauge
pgloop_loop_plans_running 2
# HELP pgloop_loop_plans_waiting Plans waiting for their cluster's running plan or for a free worker.
# TYPE pgloop_loop_plans_waiting gauge
pgloop_loop_plans_waiting 1
# HELP pgloop_loop_plans_hung Plans of effects holding a place of the hung lane (--hung-workers): plans of clusters whose step of the same name failed after --slow-after.
# TYPE pgloop_loop_plans_hung gauge
pgloop_loop_plans_hung 3
# HELP pgloop_loop_plans_slow Plans of effects that held a worker or a place of the hung lane for --slow-after and go on holding neither, until their step ends.
# TYPE pgloop_loop_plans_slow gauge
pgloop_loop_plans_slow 4
# HELP pgloop_loop_hung_clusters Clusters with a step that failed after --slow-after (often at its deadline): their plans with that step run in the hung lane, off the workers, until it answers in time.
# TYPE pgloop_loop_hung_clusters gauge
pgloop_loop_hung_clusters 9
# HELP pgloop_loop_detach_after_seconds How long a plan may hold a worker or a place of the hung lane before it goes on off them: --slow-after, or 4 times the median of the last steps that succeeded when that is longer (an API server slow for every cluster is not a hung cluster).
# TYPE pgloop_loop_detach_after_seconds gauge
pgloop_loop_detach_after_seconds 2.5
# HELP pgloop_loop_plans_detached_total Plans that held a worker or a place of the hung lane for --slow-after and went on holding neither.
# TYPE pgloop_loop_plans_detached_total counter
pgloop_loop_plans_detached_total 11
# HELP pgloop_loop_worker_waits_total Plans that waited for a free worker (lane workers) or a free place of the hung lane (lane hung) before they started.
# TYPE pgloop_loop_worker_waits_total counter
pgloop_loop_worker_waits_total{lane="hung"} 5
pgloop_loop_worker_waits_total{lane="workers"} 2
# HELP pgloop_loop_worker_wait_seconds_total How long the plans counted by pgloop_loop_worker_waits_total waited in all.
# TYPE pgloop_loop_worker_wait_seconds_total counter
pgloop_loop_worker_wait_seconds_total{lane="hung"} 20
pgloop_loop_worker_wait_seconds_total{lane="workers"} 1.5
# HELP pgloop_loop_events_dispatched_total Events handed to the state machines.
# TYPE pgloop_loop_events_dispatched_total counter
pgloop_loop_events_dispatched_total 100
# HELP pgloop_loop_signals_coalesced_total Signals merged into one of the same cluster and name already waiting in the inbox.
# TYPE pgloop_loop_signals_coalesced_total counter
pgloop_loop_signals_coalesced_total 40
# HELP pgloop_loop_stale_timers_total Timer events dropped because their epoch had passed or the timer was reset or cancelled.
# TYPE pgloop_loop_stale_timers_total counter
pgloop_loop_stale_timers_total 6
# HELP pgloop_loop_timers_dropped_total Timers removed before firing by a state change or because the cluster was forgotten.
# TYPE pgloop_loop_timers_dropped_total counter
pgloop_loop_timers_dropped_total 8
# HELP pgloop_loop_plans_total Plans of effects that ran to the end.
# TYPE pgloop_loop_plans_total counter
pgloop_loop_plans_total 30
# HELP pgloop_loop_plans_failed_total Plans of effects that ran to the end with an error.
# TYPE pgloop_loop_plans_failed_total counter
pgloop_loop_plans_failed_total 4
# HELP pgloop_loop_plans_superseded_total Waiting plans replaced by a newer plan of the same cluster before they ran.
# TYPE pgloop_loop_plans_superseded_total counter
pgloop_loop_plans_superseded_total 2
# HELP pgloop_loop_plans_cancelled_total Plans cancelled while running or dropped while waiting (the cluster was deleted).
# TYPE pgloop_loop_plans_cancelled_total counter
pgloop_loop_plans_cancelled_total 1
# HELP pgloop_loop_panics_total Panics recovered in a state machine or an effect; each is recorded on its cluster.
# TYPE pgloop_loop_panics_total counter
pgloop_loop_panics_total 1
`
	if err := testutil.CollectAndCompare(m.loop, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if calls != 1 {
		t.Errorf("Stats called %d times for one scrape, want 1 (one snapshot)", calls)
	}
}

func TestClustersAndTransitions(t *testing.T) {
	m := New()
	m.ClusterState("ns/a", fsm.Pending)
	m.ClusterState("ns/b", fsm.Running) // resumed from status
	m.Transition(fsm.Pending, fsm.Creating, fsm.EventCreate)
	m.ClusterState("ns/a", fsm.Creating)
	m.Transition(fsm.Creating, fsm.Creating, fsm.EventEffectsSucceeded)
	m.ClusterState("ns/a", fsm.Creating) // a self-transition: the gauge stays
	m.Transition(fsm.Creating, fsm.Running, fsm.EventPodsReady)
	m.ClusterState("ns/a", fsm.Running)
	m.Transition(fsm.Running, fsm.Deleting, fsm.EventDelete)
	m.Transition(fsm.Deleting, fsm.Deleted, fsm.EventCleanedUp)
	m.ClusterState("ns/b", fsm.Deleted)
	m.ObserveSQL("ns/b", "ok")
	m.ForgetCluster("ns/b")
	m.ForgetCluster("ns/never-seen") // harmless

	wantStates := map[string]float64{fsm.Running: 1}
	for _, s := range fsm.States {
		got := testutil.ToFloat64(m.clusters.WithLabelValues(s))
		if got != wantStates[s] {
			t.Errorf("pgloop_clusters{state=%q} = %v, want %v", s, got, wantStates[s])
		}
	}
	wantTransitions := map[[3]string]float64{
		{fsm.Pending, fsm.Creating, fsm.EventCreate}:            1,
		{fsm.Creating, fsm.Creating, fsm.EventEffectsSucceeded}: 1,
		{fsm.Creating, fsm.Running, fsm.EventPodsReady}:         1,
		{fsm.Running, fsm.Deleting, fsm.EventDelete}:            1,
		{fsm.Deleting, fsm.Deleted, fsm.EventCleanedUp}:         1,
	}
	if n := testutil.CollectAndCount(m.transitions); n != len(wantTransitions) {
		t.Errorf("transition series = %d, want %d", n, len(wantTransitions))
	}
	for l, want := range wantTransitions {
		if got := testutil.ToFloat64(m.transitions.WithLabelValues(l[0], l[1], l[2])); got != want {
			t.Errorf("pgloop_transitions_total%v = %v, want %v", l, got, want)
		}
	}
	if n := testutil.CollectAndCount(m.sql); n != 0 {
		t.Errorf("SQL series of a forgotten cluster = %d, want 0", n)
	}
}

func TestRollouts(t *testing.T) {
	m := New()
	m.Rollouts(2, 3)
	m.Rollouts(1, 0)
	if got := testutil.ToFloat64(m.rolling); got != 1 {
		t.Errorf("pgloop_rollouts_active = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.waiting); got != 0 {
		t.Errorf("pgloop_rollouts_waiting = %v, want 0", got)
	}
}

func TestStepObserver(t *testing.T) {
	m := New()
	writeStatus := m.StepObserver("writeStatus")
	ensureService := m.StepObserver("ensureService")
	m.StepObserver("noop") // built, never run: its series are there, at 0
	writeStatus(2*time.Millisecond, false)
	ensureService(time.Millisecond, true)
	ensureService(3*time.Millisecond, false)

	for name, want := range map[string]float64{"writeStatus": 0, "ensureService": 1, "noop": 0} {
		if got := testutil.ToFloat64(m.stepFailures.WithLabelValues(name)); got != want {
			t.Errorf("failures{step=%s} = %v, want %v", name, got, want)
		}
	}
	if n := testutil.CollectAndCount(m.stepFailures); n != 3 {
		t.Errorf("failure series = %d, want 3", n)
	}
	h := histogram(t, m, "pgloop_effect_step_duration_seconds", "step", "ensureService")
	if h.GetSampleCount() != 2 || h.GetSampleSum() < 0.0039 || h.GetSampleSum() > 0.0041 {
		t.Errorf("ensureService durations: count %d sum %v, want 2 and 0.004", h.GetSampleCount(), h.GetSampleSum())
	}
	for name, want := range map[string]uint64{"writeStatus": 1, "noop": 0} {
		if got := histogram(t, m, "pgloop_effect_step_duration_seconds", "step", name).GetSampleCount(); got != want {
			t.Errorf("%s durations count = %d, want %d", name, got, want)
		}
	}
}

func TestLeader(t *testing.T) {
	m := New()
	if got := testutil.ToFloat64(m.leader); got != 0 {
		t.Errorf("leader = %v before election", got)
	}
	m.SetLeader(true)
	if got := testutil.ToFloat64(m.leader); got != 1 {
		t.Errorf("leader = %v, want 1", got)
	}
	m.SetLeader(false)
	if got := testutil.ToFloat64(m.leader); got != 0 {
		t.Errorf("leader = %v, want 0", got)
	}
}

// TestDescs keeps Descs, which the user guide lists, equal to what the
// registry serves, and the metrics valid by Prometheus' linter.
func TestDescs(t *testing.T) {
	m := New()
	m.WatchLoop(func() eventloop.Stats { return eventloop.Stats{} })
	m.ObserveLag(eventloop.Signal, "spec", time.Millisecond)
	m.ObserveSQL("ns/a", "ok")
	m.ObservePatroni("config", "timeout")
	m.ObserveArchiveCheck("failing")
	m.apiRequests.WithLabelValues("get", "pods", "200").Inc()
	m.WriteWindow("create", "services", "", 4)
	m.ObserveWriteWait("create", "services", "", true, time.Second)
	m.Transition(fsm.Pending, fsm.Creating, fsm.EventCreate)
	m.ClusterState("ns/a", fsm.Creating)
	m.StepObserver("s")(time.Millisecond, true)
	m.WatchBackups(func() []*v1.Postgresql { return []*v1.Postgresql{backingUp()} })

	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]*dto.MetricFamily{}
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "pgloop_") {
			served[f.GetName()] = f
		}
	}
	for _, d := range Descs() {
		f, ok := served[d.Name]
		if !ok {
			t.Errorf("%s is documented but not served", d.Name)
			continue
		}
		delete(served, d.Name)
		if got := strings.ToLower(f.GetType().String()); got != d.Type {
			t.Errorf("%s: type %s, documented %s", d.Name, got, d.Type)
		}
		if f.GetHelp() != d.Help {
			t.Errorf("%s: help %q, documented %q", d.Name, f.GetHelp(), d.Help)
		}
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		slices.Sort(labels)
		want := slices.Sorted(slices.Values(d.Labels))
		if !slices.Equal(labels, want) {
			t.Errorf("%s: labels %v, documented %v", d.Name, labels, want)
		}
	}
	for name := range served {
		t.Errorf("%s is served but not in Descs", name)
	}

	problems, err := testutil.CollectAndLint(m.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "pgloop_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
}

func TestHandler(t *testing.T) {
	m := New()
	m.SetLeader(true)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"\npgloop_leader 1\n", `pgloop_clusters{state="Running"} 0`, "pgloop_build_info{commit=", `,goversion="` + runtime.Version() + `",version="` + version.Version + `"} 1`, "go_goroutines"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// histogram returns the histogram of family name whose label has value.
func histogram(t *testing.T, m *Metrics, name, label, value string) *dto.Histogram {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return mt.GetHistogram()
				}
			}
		}
	}
	t.Fatalf("%s{%s=%q} not found", name, label, value)
	return nil
}

// backingUp is a cluster whose status shows every backup series.
func backingUp() *v1.Postgresql {
	at := metav1.NewTime(time.Unix(1764752868, 0))
	pg := &v1.Postgresql{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
	pg.Status.Backup = &v1.BackupStatus{
		Archiving:   &v1.ArchivingStatus{Failing: true, LastArchivedTime: &at, WaitingSegments: 3, WALBytes: 48 << 20},
		LastBackup:  &v1.BackupInfo{Label: "20261203-090743F", Start: metav1.NewTime(at.Add(-5 * time.Second)), Stop: at, Size: 22 << 20},
		LastFailure: &v1.BackupFailure{At: at}, BackupCount: 2, FirstRecoverabilityPoint: &at,
		Running:          &v1.BackupRun{ID: "20261203-091500-full"},
		LastVerification: &v1.BackupVerification{Succeeded: true},
	}
	return pg
}

// TestBackupSeries reads the backups' series of a cluster from its status.
func TestBackupSeries(t *testing.T) {
	m := New()
	m.WatchBackups(func() []*v1.Postgresql {
		return []*v1.Postgresql{backingUp(), {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "none"}}}
	})
	want := `
# HELP pgloop_backup_last_duration_seconds ` + descBackupLastDuration.Help + `
# TYPE pgloop_backup_last_duration_seconds gauge
pgloop_backup_last_duration_seconds{cluster="ns/a"} 5
# HELP pgloop_archive_waiting_segments ` + descArchiveWaiting.Help + `
# TYPE pgloop_archive_waiting_segments gauge
pgloop_archive_waiting_segments{cluster="ns/a"} 3
# HELP pgloop_archive_failing ` + descArchiveFailing.Help + `
# TYPE pgloop_archive_failing gauge
pgloop_archive_failing{cluster="ns/a"} 1
# HELP pgloop_backups ` + descBackups.Help + `
# TYPE pgloop_backups gauge
pgloop_backups{cluster="ns/a"} 2
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "pgloop_backup_last_duration_seconds",
		"pgloop_archive_waiting_segments", "pgloop_archive_failing", "pgloop_backups"); err != nil {
		t.Error(err)
	}
}

// ObserveWriteWait counts each windowed write by kind and priority and
// sums its wait.
func TestObserveWriteWait(t *testing.T) {
	m := New()
	m.ObserveWriteWait("create", "services", "", true, 0)
	m.ObserveWriteWait("create", "services", "", true, 1500*time.Millisecond)
	m.ObserveWriteWait("update", "postgresqls/status", "", false, 250*time.Millisecond)
	for _, c := range []struct {
		labels      []string
		n, waitSecs float64
	}{
		{[]string{"create", "services", "", "urgent"}, 2, 1.5},
		{[]string{"update", "postgresqls/status", "", "background"}, 1, 0.25},
	} {
		if n := testutil.ToFloat64(m.windowedWrites.WithLabelValues(c.labels...)); n != c.n {
			t.Errorf("%v: %v writes, want %v", c.labels, n, c.n)
		}
		if s := testutil.ToFloat64(m.writeWait.WithLabelValues(c.labels...)); s != c.waitSecs {
			t.Errorf("%v: %v s waited, want %v", c.labels, s, c.waitSecs)
		}
	}
}
