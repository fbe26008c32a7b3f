package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Kind is what a notification tells the operator about a cluster.
type Kind int

const (
	// Sync is the startup list: the operator sees every existing cluster
	// once, at time 0.
	Sync Kind = iota
	// Add is a new cluster.
	Add
	// Update is a user's spec edit (of a stuck cluster: someone trying to
	// fix it).
	Update
	// Resync is the informer's periodic resync of every cluster (legacy
	// designs); for pgloop, a cluster's own resync timer.
	Resync
)

func (k Kind) String() string {
	switch k {
	case Sync:
		return "sync"
	case Add:
		return "add"
	case Update:
		return "update"
	case Resync:
		return "resync"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Notification is one watch event as the operator's informer hands it over.
type Notification struct {
	At      time.Duration
	Cluster int
	Kind    Kind
}

// Workload is what happens to the clusters, the same for every design.
// Clusters are numbered in the order the operator first sees them.
type Workload struct {
	// Stuck tells, by cluster, whether its pods never become ready.
	Stuck []bool
	// Events are sorted by At; equal times keep their order.
	Events []Notification
	// Duration is when notifications stop; the designs then drain.
	Duration time.Duration
}

// WorkloadConfig are the knobs of a generated workload.
type WorkloadConfig struct {
	// Clusters exist at time 0.
	Clusters int
	// StuckFraction of the clusters at time 0 are stuck (rounded to whole
	// clusters, placed at random); a new cluster is stuck with this
	// probability.
	StuckFraction float64
	// Duration of the simulated run.
	Duration time.Duration
	// Seed of the random generator: the same seed, the same workload.
	Seed uint64
	// EditsPerHour is the rate of spec edits of each healthy cluster;
	// StuckEditsPerHour of each stuck one (users editing or deleting it to
	// fix it); NewClustersPerHour the rate of new clusters. All Poisson.
	EditsPerHour, StuckEditsPerHour, NewClustersPerHour float64
	// ResyncPeriod of the informers (the legacy operator's resync_period);
	// 0 means none. pgloop ignores these notifications: it has its own
	// per-cluster resync timers.
	ResyncPeriod time.Duration
}

// Generate draws a workload. Everything random comes from one generator
// seeded with cfg.Seed, drawn in a fixed order.
func Generate(cfg WorkloadConfig) *Workload {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))
	w := &Workload{Stuck: make([]bool, cfg.Clusters), Duration: cfg.Duration}
	stuck := int(math.Round(float64(cfg.Clusters) * cfg.StuckFraction))
	for _, c := range rng.Perm(cfg.Clusters)[:stuck] {
		w.Stuck[c] = true
	}
	born := make([]time.Duration, cfg.Clusters)
	for c := range cfg.Clusters {
		w.Events = append(w.Events, Notification{At: 0, Cluster: c, Kind: Sync})
	}
	// next returns the time of the next event of a Poisson process.
	next := func(t time.Duration, perHour float64) time.Duration {
		if perHour <= 0 {
			return math.MaxInt64
		}
		return t + time.Duration(rng.ExpFloat64()/perHour*float64(time.Hour))
	}
	for t := next(0, cfg.NewClustersPerHour); t < cfg.Duration; t = next(t, cfg.NewClustersPerHour) {
		c := len(w.Stuck)
		w.Stuck = append(w.Stuck, rng.Float64() < cfg.StuckFraction)
		born = append(born, t)
		w.Events = append(w.Events, Notification{At: t, Cluster: c, Kind: Add})
	}
	for c, b := range born {
		rate := cfg.EditsPerHour
		if w.Stuck[c] {
			rate = cfg.StuckEditsPerHour
		}
		for t := next(b, rate); t < cfg.Duration; t = next(t, rate) {
			w.Events = append(w.Events, Notification{At: t, Cluster: c, Kind: Update})
		}
	}
	if cfg.ResyncPeriod > 0 {
		for t := cfg.ResyncPeriod; t < cfg.Duration; t += cfg.ResyncPeriod {
			for c, b := range born {
				if b < t {
					w.Events = append(w.Events, Notification{At: t, Cluster: c, Kind: Resync})
				}
			}
		}
	}
	slices.SortStableFunc(w.Events, func(a, b Notification) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})
	return w
}

// StuckCount is the number of stuck clusters.
func (w *Workload) StuckCount() int {
	n := 0
	for _, s := range w.Stuck {
		if s {
			n++
		}
	}
	return n
}

// healthyWaits returns a Wait for each notification of a healthy cluster
// that the design receives, and for each notification the index of its
// Wait (-1 for the others).
func (w *Workload) healthyWaits(receives func(Notification) bool) ([]Wait, []int) {
	waits := make([]Wait, 0, len(w.Events))
	idx := make([]int, len(w.Events))
	for i, n := range w.Events {
		if w.Stuck[n.Cluster] || !receives(n) {
			idx[i] = -1
			continue
		}
		idx[i] = len(waits)
		waits = append(waits, Wait{Cluster: n.Cluster, Kind: n.Kind, At: n.At})
	}
	return waits, idx
}
