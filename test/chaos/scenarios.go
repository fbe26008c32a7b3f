package chaos

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// killSpread is the mean time from an operator's start to its kill: it
// starts, syncs its caches and works part of the time.
const (
	killMin    = 200 * time.Millisecond
	killSpread = 3800 * time.Millisecond
)

// updatingWait bounds how long the leader scenario waits for a cluster to
// be Updating before it kills the leader anyway.
const updatingWait = 30 * time.Second

func scenarios() []Scenario {
	return []Scenario{
		{Name: "kill", Inject: injectKills, Pace: func(cfg Config) time.Duration {
			// The workload lasts about as long as the kills: some 50 actions
			// at the pace.
			return max(cfg.Workload.Pace, time.Duration(cfg.Kills)*(killMin+killSpread/2)/50)
		}},
		{Name: "proxy", Inject: injectProxy},
		{Name: "apiserver", Inject: injectRestarts},
		{Name: "leader", LeaderElection: true, Inject: injectHandovers},
	}
}

// injectKills SIGKILLs the operator cfg.Kills times, each at a random
// point 0.2-4 s after it started (during its start-up or its work), and
// starts a new one at once.
func injectKills(ctx context.Context, r *run) error {
	for range r.cfg.Kills {
		d := killMin + time.Duration(r.faults.Int64N(int64(killSpread)))
		if err := pause(ctx, d); err != nil {
			return err
		}
		r.mu.Lock()
		current := r.operators[len(r.operators)-1]
		r.mu.Unlock()
		current.Kill()
		if _, err := r.startOperator(); err != nil {
			return err
		}
		r.fault("SIGKILL", time.Now())
	}
	return nil
}

// event is one step of a fault timeline.
type event struct {
	at time.Duration
	do func()
}

// injectProxy plays a timeline over the workload's span: cfg.Resets resets
// of every connection at random times, cfg.LatencyWindows periods of
// 50-800 ms of latency, 2-8 s each, one per slice of the span, and one
// blackhole of cfg.Blackhole starting in the middle fifth to three fifths.
func injectProxy(ctx context.Context, r *run) error {
	span := r.span
	var timeline []event
	for range r.cfg.Resets {
		timeline = append(timeline, event{at: r.randDuration(0, span), do: func() {
			n := r.proxy.Reset()
			r.log("proxy: reset %d connections", n)
			r.fault("reset", time.Now())
		}})
	}
	if n := r.cfg.LatencyWindows; n > 0 {
		slot := span / time.Duration(n)
		for k := range n {
			start := time.Duration(k)*slot + r.randDuration(0, slot/2)
			length := r.randDuration(2*time.Second, max(2*time.Second, min(8*time.Second, slot/2)))
			latency := r.randDuration(50*time.Millisecond, 800*time.Millisecond)
			timeline = append(timeline,
				event{at: start, do: func() {
					r.proxy.SetLatency(latency)
					r.log("proxy: latency %v for %v", latency.Round(time.Millisecond), length.Round(time.Millisecond))
				}},
				event{at: start + length, do: func() {
					r.proxy.SetLatency(0)
					r.fault("latency", time.Now())
				}})
		}
	}
	if d := r.cfg.Blackhole; d > 0 {
		start := r.randDuration(span/5, 3*span/5)
		timeline = append(timeline,
			event{at: start, do: func() {
				r.proxy.Blackhole(d)
				r.log("proxy: blackhole for %v", d)
			}},
			event{at: start + d, do: func() { r.fault(fmt.Sprintf("blackhole %v", d), time.Now()) }})
	}
	slices.SortStableFunc(timeline, func(a, b event) int { return int(a.at - b.at) })
	began := time.Now()
	for _, e := range timeline {
		if err := pause(ctx, time.Until(began.Add(e.at))); err != nil {
			return err
		}
		e.do()
	}
	r.proxy.Pass()
	return nil
}

// randDuration is uniform in [lo, hi).
func (r *run) randDuration(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.faults.Int64N(int64(hi-lo)))
}

// targets returns n action counts after which to inject, in order: the
// last in the middle half of the rollout of every cluster, the first (when
// creates and n > 1) in the middle half of the creates, the others
// anywhere in the mixed phase.
func (r *run) targets(n int, creates bool) []int {
	if n <= 0 {
		return nil
	}
	nCreate, mixed, rollout := r.phaseCounts[PhaseCreate], r.phaseCounts[PhaseMixed], r.phaseCounts[PhaseRollout]
	mid := func(from, count int) int { return from + count/4 + r.faults.IntN(count/2+1) }
	out := []int{mid(nCreate+mixed, rollout)}
	if creates && n > 1 {
		out = append(out, mid(0, nCreate))
	}
	for len(out) < n {
		out = append(out, nCreate+r.faults.IntN(mixed+1))
	}
	slices.Sort(out)
	return out
}

// injectRestarts crashes the kube-apiserver (SIGKILL) and starts it again
// cfg.Restarts times: during the creates, during the rollout of every
// cluster, and the others during the mixed phase (targets).
func injectRestarts(ctx context.Context, r *run) error {
	for _, target := range r.targets(r.cfg.Restarts, true) {
		if err := r.waitProgress(ctx, func(_ Phase, done int) bool { return done >= target }); err != nil {
			return err
		}
		r.planeMu.Lock()
		down, err := r.plane.RestartAPIServer(ctx, true)
		r.planeMu.Unlock()
		if err != nil {
			return err
		}
		r.log("apiserver restarted after action %d: %v without it", target, down.Round(time.Millisecond))
		r.fault("apiserver restart", time.Now())
	}
	return nil
}

// injectHandovers runs two replicas with leader election and kills the
// leader cfg.Handovers times while clusters roll their pods (targets in the
// mixed phase, whose edits roll pods too, and the last during the rollout
// of every cluster; each once a cluster is Updating), starting a new
// standby each time. A handover ends when
// another replica leads.
func injectHandovers(ctx context.Context, r *run) error {
	if _, err := r.startOperator(); err != nil {
		return err
	}
	if _, err := r.waitLeader(ctx, nil); err != nil {
		return err
	}
	if _, err := r.startOperator(); err != nil {
		return err
	}
	for _, target := range r.targets(r.cfg.Handovers, false) {
		if err := r.waitProgress(ctx, func(_ Phase, done int) bool { return done >= target }); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, updatingWait)
		err := r.waitClusters(wctx, func(pgs []*v1.Postgresql) bool {
			return slices.ContainsFunc(pgs, func(pg *v1.Postgresql) bool { return pg.Status.State == fsm.Updating })
		})
		cancel()
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		rolling := err == nil
		leader, err := r.waitLeader(ctx, nil)
		if err != nil {
			return err
		}
		leader.Kill()
		killed := time.Now()
		if _, err := r.startOperator(); err != nil {
			return err
		}
		next, err := r.waitLeader(ctx, leader)
		if err != nil {
			return err
		}
		r.log("leader %s killed after action %d (a cluster Updating: %v); %s leads %v later",
			leader.name, target, rolling, next.name, time.Since(killed).Round(time.Millisecond))
		r.fault("leader killed", time.Now())
	}
	return nil
}
