package model

import (
	"fmt"
	"time"
)

// Design is one of the modelled worker designs.
type Design int

const (
	// Legacy is W pinned workers with blocking queues.
	Legacy Design = iota
	// GoroutinePerCluster is a queue and a goroutine per cluster.
	GoroutinePerCluster
	// Pgloop is one loop, a non-blocking inbox and a bounded executor.
	Pgloop
)

func (d Design) String() string {
	switch d {
	case Legacy:
		return "legacy"
	case GoroutinePerCluster:
		return "goroutine per cluster"
	case Pgloop:
		return "pgloop"
	}
	return fmt.Sprintf("Design(%d)", int(d))
}

// Params are the designs' settings and the cost of the work.
type Params struct {
	// QPS and Burst are the API client's rate limit, shared by everything
	// the operator does. QPS <= 0 means no limit.
	QPS   float64
	Burst int
	// Calls is the number of API calls a healthy cluster's event (legacy)
	// or plan (pgloop) makes, one after another; CallLatency how long each
	// takes once it has its token.
	Calls       int
	CallLatency time.Duration
	// Service is the rest of a healthy cluster's event or plan (work that
	// is not an API call), spent before the calls.
	Service time.Duration

	// Workers is the legacy operator's number of workers.
	Workers int
	// Timeout is how long a legacy event of a stuck cluster blocks its
	// worker (the pod wait's timeout) and how long pgloop's Creating or
	// Updating lasts before Degraded.
	Timeout time.Duration
	// PollInterval is how often a blocked legacy event polls the API (one
	// call each); 0 means it does not.
	PollInterval time.Duration
	// StuckSyncQuick makes a stuck cluster's legacy SYNC (startup and
	// resync) return like a healthy one's, so that only its create and its
	// edits block. By default every event of a stuck cluster blocks.
	StuckSyncQuick bool

	// LoopCost is pgloop's cost of dispatching one event on its loop.
	LoopCost time.Duration
	// Executors is pgloop's number of executor slots (plans in flight).
	Executors int
	// StepTimeout is pgloop's deadline of an effect step; StuckHang how long
	// a stuck cluster's plan hangs before it fails (bounded by StepTimeout;
	// 0: it fails or succeeds as fast as a healthy one).
	StepTimeout, StuckHang time.Duration
	// RetryBase and RetryMax are pgloop's backoff in Degraded; Resync is
	// its per-cluster resync period in Running.
	RetryBase, RetryMax, Resync time.Duration
}

// DefaultParams are the documented defaults of both operators (legacy:
// 8 workers, 10m waits polled every 3s, QPS 10 and burst 20; pgloop:
// docs/fsm.md, pkg/eventloop and docs/performance.md), with the legacy operator's rate limit (QPS 10,
// burst 20) for every design so that only the design differs. Calls,
// CallLatency and Service are assumptions of the model.
func DefaultParams() Params {
	return Params{
		QPS:          10,
		Burst:        20,
		Calls:        10,
		CallLatency:  20 * time.Millisecond,
		Service:      100 * time.Millisecond,
		Workers:      8,
		Timeout:      10 * time.Minute,
		PollInterval: 3 * time.Second,
		LoopCost:     5 * time.Microsecond,
		Executors:    16,
		StepTimeout:  30 * time.Second,
		RetryBase:    2 * time.Second,
		RetryMax:     5 * time.Minute,
		Resync:       10 * time.Minute,
	}
}

// Run simulates one design on a workload. It is deterministic: the same
// arguments give the same Result.
func Run(d Design, p Params, w *Workload) Result {
	switch d {
	case Legacy:
		return runLegacy(p, w, false)
	case GoroutinePerCluster:
		return runLegacy(p, w, true)
	case Pgloop:
		return runPgloop(p, w)
	}
	panic(fmt.Sprintf("model: unknown design %d", int(d)))
}
