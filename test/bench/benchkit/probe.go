package benchkit

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/fsm"
	pgclient "github.com/pgloop/pgloop/pkg/generated/clientset/versioned"
)

// Env is what a bench measures with: the plane's clients, its watches and
// the operator's /metrics.
type Env struct {
	Kube    kubernetes.Interface
	PG      pgclient.Interface
	Tracker *Tracker
	Metrics *Scraper
	// Began is what Probe.Start is measured from.
	Began time.Time
}

// Probe is the measurement of one cluster created and followed to
// Running.
type Probe struct {
	Name string
	// Start is when its Create returned, from Env.Began.
	Start time.Duration
	// ToRunning is from the Create call returning to the watch seeing
	// status.state Running.
	ToRunning time.Duration
	// ReadyToRunning is from the pod watch seeing the last pod Ready to
	// the cluster watch seeing Running: the operator-added latency.
	// LabelledToRunning is from the pod watch seeing, besides, the master
	// role label (the labeller's patch) to Running.
	ReadyToRunning, LabelledToRunning time.Duration
	// Segments split ToRunning at what the watches saw first: the
	// StatefulSet, a pod, the last pod Ready, the master label, and
	// Running (see SegmentNames).
	Segments [5]time.Duration
	// Via is the path the cluster took ("Creating→Running" unless it
	// passed through Degraded).
	Via string
	// Steps is what the operator's metrics counted from just before the
	// Create to Running.
	Steps Samples
}

// SegmentNames name Probe.Segments, with who spends the time.
var SegmentNames = [5]string{
	"create → StatefulSet (pgloop: observe, plan, ensure's writes)",
	"→ first pod (kube-controller-manager)",
	"→ last pod Ready (scheduler, kwok)",
	"→ master label (labeller)",
	"→ Running (pgloop: observe, plan, status write)",
}

// Own is pgloop's share of the probe's time: until its StatefulSet exists,
// and from its master label to Running.
func (p Probe) Own() time.Duration { return p.Segments[0] + p.Segments[4] }

// Probe creates pg, waits at most timeout for it to be Running and
// measures it.
func (e *Env) Probe(ctx context.Context, pg *v1.Postgresql, timeout time.Duration) (Probe, error) {
	h := Probe{Name: pg.Name}
	key := pg.Namespace + "/" + pg.Name
	instances := int(pg.Spec.NumberOfInstances)
	e.Tracker.Expect(key, instances)
	before, err := e.Metrics.Scrape(ctx)
	if err != nil {
		return h, err
	}
	if _, err := e.PG.PgloopV1().Postgresqls(pg.Namespace).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		return h, fmt.Errorf("while creating cluster %s: %w", key, err)
	}
	created := time.Now()
	h.Start = created.Sub(e.Began)
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	degraded := false
	err = e.Tracker.Wait(wctx, func(m map[string]*Seen) bool {
		s := m[key]
		if s == nil {
			return false
		}
		degraded = degraded || s.State == fsm.Degraded
		return !s.Running.IsZero()
	})
	s := e.Tracker.Snapshot(key)
	if err != nil {
		return h, fmt.Errorf("cluster %s never Running: %w (state %q, message %q, %d of %d pods Ready)",
			key, context.Cause(wctx), s.State, s.Message, len(s.Ready), instances)
	}
	h.ToRunning = s.Running.Sub(created)
	h.Via = "Creating→Running"
	if degraded {
		h.Via = "Creating→Degraded→Running"
	}
	if !s.AllReady.IsZero() {
		h.ReadyToRunning = s.Running.Sub(s.AllReady)
	}
	if !s.Labelled.IsZero() {
		h.LabelledToRunning = s.Running.Sub(s.Labelled)
	}
	marks := []time.Time{created, s.StatefulSet, s.Pod, s.AllReady, s.Labelled, s.Running}
	for i := range h.Segments {
		if !marks[i].IsZero() && !marks[i+1].IsZero() {
			h.Segments[i] = marks[i+1].Sub(marks[i])
		}
	}
	after, err := e.Metrics.Scrape(ctx)
	if err != nil {
		return h, err
	}
	h.Steps = Delta(before, after)
	return h, nil
}

// SegmentsText renders a probe's segments, in milliseconds.
func SegmentsText(h Probe) string {
	parts := make([]string, len(h.Segments))
	for i, d := range h.Segments {
		parts[i] = fmt.Sprint(d.Milliseconds())
	}
	return strings.Join(parts, "+") + "ms"
}

// StepCounts renders how many effect steps of each kind ran, from a delta
// of the operator's metrics.
func StepCounts(d Samples) string {
	var parts []string
	for _, step := range d.LabelValues("pgloop_effect_step_duration_seconds_count", "step") {
		n := d.Sum("pgloop_effect_step_duration_seconds_count", `step="`+step+`"`)
		if n == 0 {
			continue
		}
		sum := d.Sum("pgloop_effect_step_duration_seconds_sum", `step="`+step+`"`)
		parts = append(parts, fmt.Sprintf("%.0f %s (mean %v)", n, step, Ms(time.Duration(sum/n*float64(time.Second)))))
	}
	if len(parts) == 0 {
		return "no effect step"
	}
	return strings.Join(parts, ", ")
}

// WaitQuiet waits until the operator is quiet: its inbox empty, no plan
// running or waiting, and for a second no API request and no event
// dispatched but Running clusters' resyncs. A resync (the timer "resync",
// every --resync-period per Running cluster) re-plans the cluster's ensure
// from the caches and writes nothing when nothing drifted; a fleet of
// thousands has several a second, so a criterion that counted them would
// never see the operator quiet. Their plans' results (planDone) are let
// through for the same reason: any other plan's follows a signal or another
// timer, or writes. /metrics has no watch: it is read every 250ms. It
// returns how long that took, and false if timeout passed first.
func WaitQuiet(ctx context.Context, m *Scraper, timeout time.Duration) (time.Duration, bool, error) {
	began := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var prev Samples
	var quietSince time.Time
	for {
		s, err := m.Scrape(ctx)
		if err != nil {
			return 0, false, err
		}
		idle := s.Get("pgloop_loop_inbox_depth") == 0 && s.Get("pgloop_loop_plans_running") == 0 &&
			s.Get("pgloop_loop_plans_waiting") == 0 && prev != nil &&
			BusyEvents(s) == BusyEvents(prev) &&
			s.Sum("pgloop_api_requests_total") == prev.Sum("pgloop_api_requests_total")
		switch {
		case !idle:
			quietSince = time.Time{}
		case quietSince.IsZero():
			quietSince = time.Now()
		case time.Since(quietSince) >= time.Second:
			return time.Since(began), true, nil
		}
		prev = s
		select {
		case <-tick.C:
		case <-deadline.C:
			return time.Since(began), false, nil
		case <-ctx.Done():
			return 0, false, context.Cause(ctx)
		}
	}
}

// BusyEvents is how many events the loop dispatched, Running clusters'
// resyncs and plans' results apart (WaitQuiet). An operator older than
// pgloop_loop_events_total counts every event as busy.
func BusyEvents(s Samples) float64 {
	return s.Get("pgloop_loop_events_dispatched_total") -
		s.Sum("pgloop_loop_events_total", `kind="timerFired"`, `name="resync"`) -
		s.Sum("pgloop_loop_events_total", `kind="planDone"`)
}
