package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// stuckNS is the namespace of the clusters that are stuck or hung on
// purpose: the clusters of the other namespaces must not wait for them.
const stuckNS = "stuck"

// FaultHungCluster counts the steps of a hung cluster (plannedCluster.hung):
// each blocks until its deadline, as when the cluster's API calls or its
// Patroni never answer.
const FaultHungCluster = "hungCluster"

// maxStuckShare bounds the plan starts of stuckNS's clusters while a plan
// of another cluster waits to start, per start of the other clusters, the
// waiting plan's own included. The executor serves namespaces in turn
// (docs/design.md §3, pkg/eventloop/runq.go): in a lane, the stuck
// namespace is one flow, so it takes at most one start per start of the
// other flows, the waiting one's among them (at most one more than they,
// had its turn come first); and the urgent lane takes at most
// maxUrgentStreak (4) starts in a row before each background start. With
// the waiting plan in the background lane and the stuck clusters' plans in
// both: per start of another namespace, one background start of the stuck
// one and 4 urgent starts before each of the two. Hence 2*4+1. Each start
// holds a worker for at most the executor's SlowAfter (1 s; then the plan
// goes on off the workers), and a hung cluster's plans with a step that
// hung start in the hung lane, off the workers (pkg/eventloop/hung.go),
// so the time stuck clusters add to a wait is at most maxStuckShare *
// (other starts + 1) * SlowAfter: it does not grow with their number
// (plus the plans chosen before the wait began: fair). Served first come,
// first served, a plan waits a step of every stuck cluster ahead of it
// (TestIsolationFailsWhenSerial), and without the hung lane a hung step
// holds its worker until its deadline (TestIsolationRegressions).
const maxStuckShare = 2*4 + 1

// newStuck draws the clusters of stuckNS: in half of the seeds, 1 to 8,
// each hung (every step blocks until its deadline while faults last) or
// with pods never scheduled, created in the first minutes. They use
// their own stream of draws so that the runs of seeds without them are
// the runs of the simulator before them (the regression seeds). A test
// forces n hung clusters (n > 0), in every seed.
func newStuck(seed int64, active time.Duration, n int) ([]plannedCluster, []op) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x57ac))
	if n == 0 && rng.IntN(2) == 0 {
		return nil, nil
	}
	forced := n > 0
	if !forced {
		n = 1 + rng.IntN(8)
	}
	var clusters []plannedCluster
	var ops []op
	for i := range n {
		key := fmt.Sprintf("%s/st%d", stuckNS, i)
		pc := plannedCluster{key: key, valid: true, fate: fate{kind: fateReady, delay: 10 * time.Second}, hung: true}
		if rng.IntN(3) == 0 && !forced {
			pc.fate.kind, pc.hung = fateUnschedulable, false
		}
		clusters = append(clusters, pc)
		instances := int32(1 + rng.IntN(3))
		ops = append(ops, op{at: time.Duration(rng.Int64N(int64(active / 4))), kind: opCreate, key: key,
			desc: fmt.Sprintf("%d instances, pods %s, hung %t", instances, pc.fate.kind, pc.hung),
			edit: func(pg *v1.Postgresql) { pg.Spec.NumberOfInstances = instances }})
	}
	return clusters, ops
}

// isolation measures, for each cluster outside stuckNS, how long its plans
// wait to start once they can: from the plan's making while the cluster
// has none in flight, or from the end of its previous job (a paused plan's
// rest, or the plan that waited behind it), to the job's first step.
// The time its own plan is in flight is not counted: a cluster's own hung
// step delays only itself. Its fields are guarded by Sim.mu.
type isolation struct {
	waits    map[string]*wait
	inflight map[string]int // jobs handed and not ended, by cluster
	// starts counts the jobs started, of stuckNS's clusters ([0]) and of
	// the others ([1]).
	starts [2]int
	// max is the longest wait, maxKey its cluster; maxStuck the most
	// starts of stuck clusters in one wait.
	max      time.Duration
	maxKey   string
	maxStuck int
}

type wait struct {
	since time.Time
	// starts is isolation.starts at since.
	starts [2]int
	// waiting: a plan was made while none was in flight; ended: a job
	// ended at since (what follows it, if anything, waits from then).
	waiting, ended bool
}

func newIsolation() isolation {
	return isolation{waits: map[string]*wait{}, inflight: map[string]int{}}
}

// reset forgets the plans of a stopped incarnation.
func (c *isolation) reset() {
	c.waits, c.inflight = map[string]*wait{}, map[string]int{}
}

func (c *isolation) of(key string) *wait {
	w := c.waits[key]
	if w == nil {
		w = &wait{}
		c.waits[key] = w
	}
	return w
}

// planned notes a plan the machine made at now.
func (c *isolation) planned(key string, now time.Time) {
	if w := c.of(key); c.inflight[key] == 0 && !w.waiting {
		w.since, w.starts, w.waiting, w.ended = now, c.starts, true, false
	}
}

// handed notes a job of key handed to Exec: in flight from then.
func (c *isolation) handed(key string) { c.inflight[key]++ }

// started counts the job of key starting at now and, for a cluster
// outside stuckNS, checks its wait: it returns the wait, the starts of
// stuck and of other clusters during it, and whether it was measured.
func (c *isolation) started(key string, now time.Time) (d time.Duration, stuck, other int, ok bool) {
	if keyNS(key) == stuckNS {
		c.starts[0]++
		return 0, 0, 0, false
	}
	c.starts[1]++
	w := c.of(key)
	if !w.waiting && !w.ended {
		return 0, 0, 0, false
	}
	w.waiting, w.ended = false, false
	d = now.Sub(w.since)
	stuck, other = c.starts[0]-w.starts[0], c.starts[1]-w.starts[1]-1
	if d > c.max {
		c.max, c.maxKey = d, key
	}
	c.maxStuck = max(c.maxStuck, stuck)
	return d, stuck, other, true
}

// fair tells whether the stuck clusters took at most their share of the
// starts while a plan waited (maxStuckShare), with workers the executor's
// size: the run queue chose up to that many plans before the wait began
// that start during it (the simulator starts the plans the loop handed
// in an order of its own; the pool's workers pick theirs as they free).
func fair(stuck, other, workers int) bool { return stuck <= maxStuckShare*(other+1)+workers }

// ended notes a job of key that ended at now.
func (c *isolation) ended(key string, now time.Time) {
	c.inflight[key] = max(0, c.inflight[key]-1)
	w := c.of(key)
	w.since, w.starts, w.waiting, w.ended = now, c.starts, false, true
}
