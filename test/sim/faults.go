package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Fault kinds, as counted in Result.Faults.
const (
	FaultConflict  = "conflict"  // a write answered 409 Conflict
	FaultThrottle  = "throttle"  // a call answered 429 TooManyRequests
	FaultServer    = "server"    // a call answered 500
	FaultLostReply = "lostReply" // a write that landed, answered with a timeout
	FaultRefused   = "refused"   // a write answered 503 inside the refusal window
	FaultSlow      = "slow"      // a step that waited before its calls
	FaultHang      = "hang"      // a step that hung until its deadline
	FaultWatchLate = "watchLate" // a change delivered to the cache late
	FaultWatchDrop = "watchDrop" // a watch that broke, then relisted
	FaultCrash     = "crash"     // the operator crashed and restarted
	// FaultHandover: the leader lost its Lease and a new one took over
	// while the old one's plans went on for a while (handover.go).
	FaultHandover  = "handover"
	FaultPodKilled = "podKilled" // a pod deleted under a cluster (its node lost)
	// FaultUndone: Patroni accepted a switchover, and the primary stayed
	// (the candidate failed to promote, the old primary kept the lock).
	FaultUndone = "switchoverUndone"
)

// swarm is what one seed turns on, and how often: each fault kind is on
// or off by the seed, so that rare combinations get their runs.
type swarm struct {
	// rates of the per-call and per-step faults, by kind (0: off).
	rates map[string]float64
	// watchLag bounds how late a change reaches the cache.
	watchLag time.Duration
	// refuseFrom, refuseTo: every write is refused in between.
	refuseFrom, refuseTo time.Duration
	// crashes are when the operator crashes, from the start; kills when
	// a pod is deleted under its cluster (the primary's, often: Patroni
	// fails over).
	crashes, kills []time.Duration
	// workers is the executor's size (Options.Workers).
	workers int
}

// newSwarm draws the seed's faults for a run whose faults last active.
func newSwarm(rng *rand.Rand, active time.Duration) swarm {
	levels := []float64{0, 0, 0.01, 0.05, 0.2}
	sw := swarm{rates: map[string]float64{}, workers: 1 + rng.IntN(4)}
	for _, k := range []string{FaultConflict, FaultThrottle, FaultServer, FaultLostReply, FaultSlow, FaultHang, FaultWatchDrop, FaultUndone} {
		sw.rates[k] = levels[rng.IntN(len(levels))]
	}
	if rng.IntN(2) == 0 {
		sw.watchLag = time.Duration(rng.Int64N(int64(5 * time.Second)))
	}
	if rng.IntN(3) == 0 {
		sw.refuseFrom = time.Duration(rng.Int64N(int64(active)))
		sw.refuseTo = min(active, sw.refuseFrom+time.Duration(1+rng.IntN(5))*time.Minute)
	}
	for range rng.IntN(3) {
		sw.crashes = append(sw.crashes, time.Duration(rng.Int64N(int64(active))))
	}
	slices.Sort(sw.crashes)
	for range rng.IntN(4) {
		sw.kills = append(sw.kills, time.Duration(rng.Int64N(int64(active))))
	}
	slices.Sort(sw.kills)
	return sw
}

// String is the swarm in one line, for the trace.
func (sw swarm) String() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(sw.rates)) {
		if r := sw.rates[k]; r > 0 {
			fmt.Fprintf(&b, "%s=%g ", k, r)
		}
	}
	if sw.watchLag > 0 {
		fmt.Fprintf(&b, "watchLag=%v ", sw.watchLag.Round(time.Millisecond))
	}
	if sw.refuseTo > 0 {
		fmt.Fprintf(&b, "refuse=%v..%v ", sw.refuseFrom.Round(time.Second), sw.refuseTo.Round(time.Second))
	}
	fmt.Fprintf(&b, "crashes=%v kills=%v workers=%d", sw.crashes, sw.kills, sw.workers)
	return b.String()
}

// errCrashed answers the calls of a plan whose operator crashed: the
// process is gone, nothing it sends arrives.
var errCrashed = errors.New("simulated operator crashed")

// errFenced answers a write of an incarnation that lost its Lease: the
// real operator stops its work before the Lease can pass (pkg/operator's
// fencedLock), so none of its writes may land after the new leader
// started; its reads, harmless, still do.
var errFenced = errors.New("simulated operator lost its Lease: write refused")

// isWrite tells the verbs that change the API.
func isWrite(verb string) bool {
	v, _, _ := strings.Cut(verb, "/")
	switch v {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// callFault draws the fault of one call of a plan, at now since the
// start: the error to answer and whether the write lands anyway.
func (s *Sim) callFault(verb string, key objKey, since time.Duration) (error, bool) {
	gr := schema.GroupResource{Resource: key.res}
	write := isWrite(verb)
	if write && s.sw.refuseTo > 0 && since >= s.sw.refuseFrom && since < s.sw.refuseTo {
		s.count(FaultRefused)
		return apierrors.NewServiceUnavailable("simulated: the API refuses writes"), false
	}
	hit := func(kind string) bool {
		if r := s.sw.rates[kind]; r > 0 && s.rng.Float64() < r {
			s.count(kind)
			return true
		}
		return false
	}
	v, _, _ := strings.Cut(verb, "/")
	switch {
	case (v == "update" || v == "patch") && hit(FaultConflict):
		return apierrors.NewConflict(gr, key.name, errors.New("simulated: the object has been modified")), false
	case hit(FaultThrottle):
		return apierrors.NewTooManyRequests("simulated: too many requests", 1), false
	case hit(FaultServer):
		return apierrors.NewInternalError(errors.New("simulated: internal error")), false
	case write && hit(FaultLostReply):
		return apierrors.NewServerTimeout(gr, v, 1), true
	}
	return nil, false
}

// stepFault draws the fault of one step: how long it waits before its
// calls, and whether it hangs until its deadline.
func (s *Sim) stepFault(ctx context.Context) (wait time.Duration, hang bool) {
	if s.since() >= s.opt.Active {
		return 0, false
	}
	deadline, ok := ctx.Deadline()
	if ok && s.sw.rates[FaultHang] > 0 && s.rng.Float64() < s.sw.rates[FaultHang] {
		s.count(FaultHang)
		return deadline.Sub(s.clock.Now()), true
	}
	if s.sw.rates[FaultSlow] > 0 && s.rng.Float64() < s.sw.rates[FaultSlow] {
		s.count(FaultSlow)
		return time.Duration(100+s.rng.IntN(10_000)) * time.Millisecond, false
	}
	return 0, false
}
