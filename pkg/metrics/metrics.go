package metrics

import (
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/version"
)

// Desc documents one metric pgloop exports. The metrics are built from
// these descriptions, and docs/user-guide.md's list is generated from them,
// so the documentation names exactly what /metrics serves.
type Desc struct {
	Name   string
	Type   string // counter, gauge or histogram
	Labels []string
	Help   string
}

// The metrics, in the order the user guide lists them.
var (
	descLag = Desc{"pgloop_loop_lag_seconds", "histogram", []string{"kind"},
		"How long events waited in the loop's inbox before the loop handled them, by event kind (signal, timerFired, planDone, panicked)."}
	descInbox = Desc{"pgloop_loop_inbox_depth", "gauge", nil,
		"Events waiting in the loop's inbox."}
	descLoopClusters = Desc{"pgloop_loop_clusters", "gauge", nil,
		"Clusters the loop keeps state for (an epoch, timers or plans)."}
	descTimers = Desc{"pgloop_loop_timers", "gauge", nil,
		"Timers waiting for their deadline."}
	descPlansRunning = Desc{"pgloop_loop_plans_running", "gauge", nil,
		"Plans of effects in flight in the executor."}
	descPlansWaiting = Desc{"pgloop_loop_plans_waiting", "gauge", nil,
		"Plans waiting for their cluster's running plan or for a free worker."}
	descPlansHung = Desc{"pgloop_loop_plans_hung", "gauge", nil,
		"Plans of effects holding a place of the hung lane (--hung-workers): plans of clusters whose step of the same name failed after --slow-after."}
	descPlansSlow = Desc{"pgloop_loop_plans_slow", "gauge", nil,
		"Plans of effects that held a worker or a place of the hung lane for --slow-after and go on holding neither, until their step ends."}
	descHungClusters = Desc{"pgloop_loop_hung_clusters", "gauge", nil,
		"Clusters with a step that failed after --slow-after (often at its deadline): their plans with that step run in the hung lane, off the workers, until it answers in time."}
	descDetachAfter = Desc{"pgloop_loop_detach_after_seconds", "gauge", nil,
		"How long a plan may hold a worker or a place of the hung lane before it goes on off them: --slow-after, or 4 times the median of the last steps that succeeded when that is longer (an API server slow for every cluster is not a hung cluster)."}
	descPlansDetached = Desc{"pgloop_loop_plans_detached_total", "counter", nil,
		"Plans that held a worker or a place of the hung lane for --slow-after and went on holding neither."}
	descWorkerWaits = Desc{"pgloop_loop_worker_waits_total", "counter", []string{"lane"},
		"Plans that waited for a free worker (lane workers) or a free place of the hung lane (lane hung) before they started."}
	descWorkerWait = Desc{"pgloop_loop_worker_wait_seconds_total", "counter", []string{"lane"},
		"How long the plans counted by pgloop_loop_worker_waits_total waited in all."}
	descDispatched = Desc{"pgloop_loop_events_dispatched_total", "counter", nil,
		"Events handed to the state machines."}
	descEvents = Desc{"pgloop_loop_events_total", "counter", []string{"kind", "name"},
		"Events handed to the state machines, by kind (signal, timerFired, planDone, panicked) and name: the signal's (spec, pods, objects, events, quota, leader) or the timer's (resync, retry, timeout, ...), empty for the others. An idle fleet's only events are its Running clusters' resync timers, one per cluster every --resync-period."}
	descCoalesced = Desc{"pgloop_loop_signals_coalesced_total", "counter", nil,
		"Signals merged into one of the same cluster and name already waiting in the inbox."}
	descStaleTimers = Desc{"pgloop_loop_stale_timers_total", "counter", nil,
		"Timer events dropped because their epoch had passed or the timer was reset or cancelled."}
	descTimersDropped = Desc{"pgloop_loop_timers_dropped_total", "counter", nil,
		"Timers removed before firing by a state change or because the cluster was forgotten."}
	descPlans = Desc{"pgloop_loop_plans_total", "counter", nil,
		"Plans of effects that ran to the end."}
	descPlansFailed = Desc{"pgloop_loop_plans_failed_total", "counter", nil,
		"Plans of effects that ran to the end with an error."}
	descPlansSuperseded = Desc{"pgloop_loop_plans_superseded_total", "counter", nil,
		"Waiting plans replaced by a newer plan of the same cluster before they ran."}
	descPlansCancelled = Desc{"pgloop_loop_plans_cancelled_total", "counter", nil,
		"Plans cancelled while running or dropped while waiting (the cluster was deleted)."}
	descPanics = Desc{"pgloop_loop_panics_total", "counter", nil,
		"Panics recovered in a state machine or an effect; each is recorded on its cluster."}
	descClusters = Desc{"pgloop_clusters", "gauge", []string{"state"},
		"Clusters in each state of the state machine (docs/fsm.md)."}
	descTransitions = Desc{"pgloop_transitions_total", "counter", []string{"from", "to", "event"},
		"State machine events fired, by state left, state entered (the same for a self-transition) and event."}
	descRolloutsActive = Desc{"pgloop_rollouts_active", "gauge", nil,
		"Clusters replacing pods that run PostgreSQL (a rollout), each holding a slot of the rollout budget (--max-rolling-clusters) until it has no outdated pod left."}
	descRolloutsWaiting = Desc{"pgloop_rollouts_waiting", "gauge", nil,
		"Clusters waiting for a slot of the rollout budget before they replace their next pod that runs PostgreSQL (reason RolloutQueued)."}
	descStepDuration = Desc{"pgloop_effect_step_duration_seconds", "histogram", []string{"step"},
		"How long each effect step took, failed or not, by step name (status, ensure, replacePod, nudge, cleanup, events)."}
	descStepFailures = Desc{"pgloop_effect_step_failures_total", "counter", []string{"step"},
		"Effect steps that returned an error or panicked, by step name. Steps cancelled because their cluster was deleted, or the operator is stopping, do not count."}
	descSQL = Desc{"pgloop_sql_statements_total", "counter", []string{"cluster", "outcome"},
		"SQL statements (and failed connection attempts) sent to a cluster's PostgreSQL, by cluster (namespace/name) and outcome (ok, error, timeout). An idle cluster sends none but the archive checks of a cluster with a backup repository (2 statements every --archive-check-period): its roles and databases are synced only when they change."}
	descPatroni = Desc{"pgloop_patroni_calls_total", "counter", []string{"call", "outcome"},
		"Calls of Patroni's REST API, by call (config, patch_config, restart, switchover, status) and outcome (ok, error, timeout)."}
	descArchiveChecks = Desc{"pgloop_archive_checks_total", "counter", []string{"outcome"},
		"Checks of a primary's WAL archiving (every --archive-check-period per cluster with a backup repository), by outcome: ok (archiving), failing (its last attempt failed; the cluster's ContinuousArchiving condition is False) or error (the primary could not be asked)."}
	descLeader = Desc{"pgloop_leader", "gauge", nil,
		"Whether this process is the leader and runs the clusters (1) or stands by (0)."}
	descBuildInfo = Desc{"pgloop_build_info", "gauge", []string{"version", "commit", "goversion"},
		"Always 1; the labels are pgloop's version, the commit it was built from and the Go version it was built with."}
)

// Descs returns the description of every metric pgloop exports, besides
// the standard go_* and process_* metrics.
func Descs() []Desc {
	descs := []Desc{descLag, descInbox, descLoopClusters, descTimers, descPlansRunning, descPlansWaiting,
		descPlansHung, descPlansSlow, descHungClusters, descDetachAfter, descPlansDetached, descWorkerWaits, descWorkerWait,
		descDispatched, descEvents, descCoalesced, descStaleTimers, descTimersDropped, descPlans, descPlansFailed,
		descPlansSuperseded, descPlansCancelled, descPanics, descClusters, descTransitions,
		descRolloutsActive, descRolloutsWaiting, descStepDuration, descStepFailures, descSQL, descPatroni, descArchiveChecks, descAPIRequests, descHeld, descHeldSeconds, descWindow, descWriteWindow, descWindowedWrites, descWriteWait, descLeader, descBuildInfo}
	return append(append(descs, backupDescs...), eventDescs...)
}

// Metrics holds pgloop's collectors and the registry they are on.
type Metrics struct {
	// Registry holds every pgloop metric plus the Go runtime and process
	// collectors; Handler serves it.
	Registry *prometheus.Registry

	lag          *prometheus.HistogramVec
	lagByKind    [4]prometheus.Observer // indexed by eventloop.Kind, resolved once: Observe is on the hot path
	loopEvents   *prometheus.CounterVec
	eventsByName map[eventName]prometheus.Counter // resolved on first use, on the loop goroutine only
	clusters     *prometheus.GaugeVec
	transitions  *prometheus.CounterVec
	rolling      prometheus.Gauge
	waiting      prometheus.Gauge
	stepDuration *prometheus.HistogramVec
	stepFailures *prometheus.CounterVec
	sql          *prometheus.CounterVec
	patroni      *prometheus.CounterVec
	archive      *prometheus.CounterVec
	apiRequests  *prometheus.CounterVec
	held         prometheus.Counter
	window       prometheus.Gauge
	writeWindow  *prometheus.GaugeVec
	// windowedWrites and writeWait by kind and priority.
	windowedWrites *prometheus.CounterVec
	writeWait      *prometheus.CounterVec
	heldSeconds    prometheus.Counter
	leader         prometheus.Gauge
	loop           *loopCollector
	backups        *backupCollector
	events         eventCounters

	// states is the last state reported for each cluster, so that the
	// per-state gauge moves a cluster from its old state to its new one
	// whatever the hooks reported in between. Only ClusterState and
	// ForgetCluster touch it, from the controller's hooks, all on the loop
	// goroutine.
	states map[string]string
}

// New returns Metrics with every collector registered on a new Registry.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: descLag.Name, Help: descLag.Help,
			// 100µs to ~100s: an idle loop handles an event in microseconds;
			// seconds mean the loop cannot keep up.
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 11),
		}, descLag.Labels),
		clusters:    prometheus.NewGaugeVec(opts(descClusters), descClusters.Labels),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts(opts(descTransitions)), descTransitions.Labels),
		rolling:     prometheus.NewGauge(opts(descRolloutsActive)),
		waiting:     prometheus.NewGauge(opts(descRolloutsWaiting)),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: descStepDuration.Name, Help: descStepDuration.Help,
			// 1ms to ~65s: one API call takes milliseconds; step timeouts
			// are tens of seconds.
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}, descStepDuration.Labels),
		stepFailures:   prometheus.NewCounterVec(prometheus.CounterOpts(opts(descStepFailures)), descStepFailures.Labels),
		sql:            prometheus.NewCounterVec(prometheus.CounterOpts(opts(descSQL)), descSQL.Labels),
		patroni:        prometheus.NewCounterVec(prometheus.CounterOpts(opts(descPatroni)), descPatroni.Labels),
		archive:        prometheus.NewCounterVec(prometheus.CounterOpts(opts(descArchiveChecks)), descArchiveChecks.Labels),
		apiRequests:    prometheus.NewCounterVec(prometheus.CounterOpts(opts(descAPIRequests)), descAPIRequests.Labels),
		held:           prometheus.NewCounter(prometheus.CounterOpts(opts(descHeld))),
		window:         prometheus.NewGauge(opts(descWindow)),
		writeWindow:    prometheus.NewGaugeVec(opts(descWriteWindow), descWriteWindow.Labels),
		windowedWrites: prometheus.NewCounterVec(prometheus.CounterOpts(opts(descWindowedWrites)), descWindowedWrites.Labels),
		writeWait:      prometheus.NewCounterVec(prometheus.CounterOpts(opts(descWriteWait)), descWriteWait.Labels),
		heldSeconds:    prometheus.NewCounter(prometheus.CounterOpts(opts(descHeldSeconds))),
		leader:         prometheus.NewGauge(opts(descLeader)),
		loopEvents:     prometheus.NewCounterVec(prometheus.CounterOpts(opts(descEvents)), descEvents.Labels),
		eventsByName:   map[eventName]prometheus.Counter{},
		loop:           &loopCollector{},
		backups:        newBackupCollector(),
		events:         newEventCounters(),
		states:         map[string]string{},
	}
	for k := range m.lagByKind {
		m.lagByKind[k] = m.lag.WithLabelValues(eventloop.Kind(k).String())
	}
	// Every state is listed from the start, so a dashboard shows 0 rather
	// than no data for a state no cluster is in.
	for _, s := range fsm.States {
		m.clusters.WithLabelValues(s)
	}
	buildInfo := prometheus.NewGaugeVec(opts(descBuildInfo), descBuildInfo.Labels)
	buildInfo.WithLabelValues(version.Version, version.Revision(), runtime.Version()).Set(1)
	m.Registry.MustRegister(m.lag, m.clusters, m.transitions, m.rolling, m.waiting, m.stepDuration, m.stepFailures,
		m.sql, m.patroni, m.archive, m.apiRequests, m.held, m.heldSeconds, m.window, m.writeWindow, m.windowedWrites, m.writeWait, m.leader, m.loopEvents, buildInfo, m.loop, m.backups,
		m.events.dropped, m.events.written,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func opts(d Desc) prometheus.GaugeOpts { return prometheus.GaugeOpts{Name: d.Name, Help: d.Help} }

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// eventName is a label pair of pgloop_loop_events_total.
type eventName struct {
	kind eventloop.Kind
	name string
}

// ObserveLag records how long an event waited for the loop, and counts it
// by kind and name. It is the loop's Options.Observe, called on the loop
// goroutine only: the counters of a kind and name are resolved once, so an
// event costs a map lookup, not the vector's label hashing. The names are
// few (the signals and the timers of pkg/fsm).
func (m *Metrics) ObserveLag(kind eventloop.Kind, name string, lag time.Duration) {
	k := eventName{kind, name}
	c, ok := m.eventsByName[k]
	if !ok {
		c = m.loopEvents.WithLabelValues(kind.String(), name)
		m.eventsByName[k] = c
	}
	c.Inc()
	if int(kind) < len(m.lagByKind) {
		m.lagByKind[kind].Observe(lag.Seconds())
		return
	}
	m.lag.WithLabelValues(kind.String()).Observe(lag.Seconds())
}

// ObserveSQL counts one SQL statement of cluster key with its outcome. It
// is the effects' Options.ObserveSQL.
func (m *Metrics) ObserveSQL(key, outcome string) { m.sql.WithLabelValues(key, outcome).Inc() }

// ObservePatroni counts one call of Patroni's REST API with its outcome.
// It is the Patroni client's Observe.
func (m *Metrics) ObservePatroni(call, outcome string) {
	m.patroni.WithLabelValues(call, outcome).Inc()
}

// ObserveArchiveCheck counts one check of a primary's archiving with its
// outcome. It is the archive checks' Options.Observe.
func (m *Metrics) ObserveArchiveCheck(outcome string) { m.archive.WithLabelValues(outcome).Inc() }

// forgetSQL drops the SQL series of a cluster that is gone.
func (m *Metrics) forgetSQL(key string) { m.sql.DeletePartialMatch(prometheus.Labels{"cluster": key}) }

// SetLeader records whether this process leads.
func (m *Metrics) SetLeader(leading bool) {
	if leading {
		m.leader.Set(1)
	} else {
		m.leader.Set(0)
	}
}

// WatchLoop makes the loop gauges and counters read stats (a Loop's Stats)
// at every scrape, once per scrape so the values are one snapshot. Until it
// is called (a standby operator has no loop) they are not exported.
func (m *Metrics) WatchLoop(stats func() eventloop.Stats) {
	m.loop.stats.Store(&stats)
}

// Rollouts sets pgloop_rollouts_active and pgloop_rollouts_waiting: the
// clusters rolling pods that run PostgreSQL, and those waiting for a slot
// of the rollout budget to. It is the controller's OnRollouts.
func (m *Metrics) Rollouts(rolling, waiting int) {
	m.rolling.Set(float64(rolling))
	m.waiting.Set(float64(waiting))
}

// ClusterState counts the cluster key in state in pgloop_clusters, and no
// longer in the state it was in, whatever was reported in between. It is
// the controller's OnNew, and ends its OnTransition with the state entered.
func (m *Metrics) ClusterState(key, state string) {
	old, ok := m.states[key]
	if ok && old == state {
		return
	}
	if ok {
		m.clusters.WithLabelValues(old).Dec()
	}
	m.clusters.WithLabelValues(state).Inc()
	m.states[key] = state
}

// Transition counts one event the state machine fired in
// pgloop_transitions_total, by state left, state entered (the same for a
// self-transition) and event. The controller's OnTransition calls it once
// per event fired.
func (m *Metrics) Transition(from, to, event string) {
	m.transitions.WithLabelValues(from, to, event).Inc()
}

// ForgetCluster drops a cluster the controller forgot: it leaves
// pgloop_clusters and its series of pgloop_sql_statements_total go. A key
// never seen is harmless. It is the controller's OnForget.
func (m *Metrics) ForgetCluster(key string) {
	m.forgetSQL(key)
	if old, ok := m.states[key]; ok {
		m.clusters.WithLabelValues(old).Dec()
		delete(m.states, key)
	}
}

// StepObserver returns what records the runs of the effect step name: how
// long each took in pgloop_effect_step_duration_seconds and, when it
// failed, one more of pgloop_effect_step_failures_total. Both series exist
// from this call on, so a step that never failed shows 0 failures rather
// than no data. Step names must therefore be a small fixed set (what the
// step does, never which object). What counts as a failure is the caller's
// to say: pkg/operator wraps every step and counts an error or a panic,
// but not the cancellation of the step's plan.
func (m *Metrics) StepObserver(name string) func(took time.Duration, failed bool) {
	duration := m.stepDuration.WithLabelValues(name)
	failures := m.stepFailures.WithLabelValues(name)
	return func(took time.Duration, failed bool) {
		duration.Observe(took.Seconds())
		if failed {
			failures.Inc()
		}
	}
}

// loopCollector exports a Loop's Stats, read once per scrape.
type loopCollector struct {
	stats atomic.Pointer[func() eventloop.Stats]
}

var loopDescs = func() map[string]*prometheus.Desc {
	out := map[string]*prometheus.Desc{}
	for _, d := range []Desc{descInbox, descLoopClusters, descTimers, descPlansRunning, descPlansWaiting,
		descPlansHung, descPlansSlow, descHungClusters, descDetachAfter, descPlansDetached, descWorkerWaits, descWorkerWait,
		descDispatched, descCoalesced, descStaleTimers, descTimersDropped, descPlans, descPlansFailed,
		descPlansSuperseded, descPlansCancelled, descPanics} {
		out[d.Name] = prometheus.NewDesc(d.Name, d.Help, d.Labels, nil)
	}
	return out
}()

func (c *loopCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range loopDescs {
		ch <- d
	}
}

func (c *loopCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.stats.Load()
	if f == nil {
		return
	}
	s := (*f)()
	gauge := func(d Desc, v int) {
		ch <- prometheus.MustNewConstMetric(loopDescs[d.Name], prometheus.GaugeValue, float64(v))
	}
	counter := func(d Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(loopDescs[d.Name], prometheus.CounterValue, float64(v))
	}
	gauge(descInbox, s.InboxDepth)
	gauge(descLoopClusters, s.Clusters)
	gauge(descTimers, s.Timers)
	gauge(descPlansRunning, s.PlansRunning)
	gauge(descPlansWaiting, s.PlansWaiting)
	gauge(descPlansHung, s.PlansHung)
	gauge(descPlansSlow, s.PlansSlow)
	gauge(descHungClusters, s.HungClusters)
	ch <- prometheus.MustNewConstMetric(loopDescs[descDetachAfter.Name], prometheus.GaugeValue, s.DetachAfter.Seconds())
	counter(descPlansDetached, s.PlansDetached)
	for _, w := range []struct {
		lane string
		n    uint64
		d    time.Duration
	}{{"workers", s.WorkerWaits, s.WorkerWait}, {"hung", s.HungWaits, s.HungWait}} {
		ch <- prometheus.MustNewConstMetric(loopDescs[descWorkerWaits.Name], prometheus.CounterValue, float64(w.n), w.lane)
		ch <- prometheus.MustNewConstMetric(loopDescs[descWorkerWait.Name], prometheus.CounterValue, w.d.Seconds(), w.lane)
	}
	counter(descDispatched, s.Dispatched)
	counter(descCoalesced, s.Coalesced)
	counter(descStaleTimers, s.StaleTimers)
	counter(descTimersDropped, s.TimersDropped)
	counter(descPlans, s.PlansRun)
	counter(descPlansFailed, s.PlansFailed)
	counter(descPlansSuperseded, s.PlansSuperseded)
	counter(descPlansCancelled, s.PlansCancelled)
	counter(descPanics, s.Panics)
}
