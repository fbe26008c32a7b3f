package sim

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Variant takes choices of a seed away, to make a failing run smaller
// (Shrink): the seed draws everything as without it, then the variant
// leaves out what it names. The zero Variant changes nothing: the run is
// the seed's, draw for draw.
type Variant struct {
	// Off are fault kinds turned off (Fault* names): a rate set to 0, no
	// lag, no refusal window, no crash, kill or handover, hung clusters
	// that answer.
	Off []string
	// Drop are clusters left out of the workload, by key.
	Drop []string
	// Until ends the user's actions and the faults that long after the
	// start (0: Options.Active); the quiet time follows it.
	Until time.Duration
}

// String is the variant as -variant takes it (ParseVariant), "" for the
// zero Variant.
func (v Variant) String() string {
	var parts []string
	if len(v.Off) > 0 {
		parts = append(parts, "off="+strings.Join(v.Off, ","))
	}
	if len(v.Drop) > 0 {
		parts = append(parts, "drop="+strings.Join(v.Drop, ","))
	}
	if v.Until > 0 {
		parts = append(parts, "until="+v.Until.String())
	}
	return strings.Join(parts, ";")
}

// ParseVariant reads a Variant's String.
func ParseVariant(s string) (Variant, error) {
	var v Variant
	for part := range strings.SplitSeq(s, ";") {
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			return Variant{}, fmt.Errorf("variant %q: %q is not name=value", s, part)
		}
		switch name {
		case "off":
			v.Off = strings.Split(val, ",")
		case "drop":
			v.Drop = strings.Split(val, ",")
		case "until":
			d, err := time.ParseDuration(val)
			if err != nil {
				return Variant{}, fmt.Errorf("variant %q: %w", s, err)
			}
			v.Until = d
		default:
			return Variant{}, fmt.Errorf("variant %q: unknown %q (off, drop, until)", s, name)
		}
	}
	return v, nil
}

func (v Variant) off(kind string) bool { return slices.Contains(v.Off, kind) }

// with returns v with one more change (a copy: v is not modified).
func (v Variant) with(off, drop string, until time.Duration) Variant {
	out := Variant{Off: slices.Clone(v.Off), Drop: slices.Clone(v.Drop), Until: v.Until}
	if off != "" {
		out.Off = append(out.Off, off)
	}
	if drop != "" {
		out.Drop = append(out.Drop, drop)
	}
	if until > 0 {
		out.Until = until
	}
	return out
}

// applyVariant leaves out of the drawn run what the variant names. It
// draws nothing.
func (s *Sim) applyVariant() {
	v := s.opt.Variant
	for k := range s.sw.rates {
		if v.off(k) {
			s.sw.rates[k] = 0
		}
	}
	if v.off(FaultWatchLate) {
		s.sw.watchLag = 0
	}
	if v.off(FaultRefused) {
		s.sw.refuseFrom, s.sw.refuseTo = 0, 0
	}
	if v.off(FaultCrash) {
		s.sw.crashes = nil
	}
	if v.off(FaultPodKilled) {
		s.sw.kills = nil
	}
	if v.off(FaultHandover) {
		s.handovers = nil
	}
	if v.off(FaultHungCluster) {
		for i := range s.plan {
			s.plan[i].hung = false
		}
	}
	s.plan = slices.DeleteFunc(s.plan, func(pc plannedCluster) bool { return slices.Contains(v.Drop, pc.key) })
	s.ops = slices.DeleteFunc(s.ops, func(o op) bool { return slices.Contains(v.Drop, o.key) })
	if v.Until > 0 && v.Until < s.opt.Active {
		s.opt.Active = v.Until
		before := func(d time.Duration) bool { return d >= v.Until }
		s.ops = slices.DeleteFunc(s.ops, func(o op) bool { return o.at >= v.Until })
		s.sw.crashes = slices.DeleteFunc(s.sw.crashes, before)
		s.sw.kills = slices.DeleteFunc(s.sw.kills, before)
		s.handovers = slices.DeleteFunc(s.handovers, func(h handover) bool { return h.at >= v.Until })
		s.sw.refuseTo = min(s.sw.refuseTo, v.Until)
		if s.sw.refuseFrom >= s.sw.refuseTo {
			s.sw.refuseFrom, s.sw.refuseTo = 0, 0
		}
	}
}

// kindsOn returns the fault kinds the run draws, which a variant may turn
// off, sorted.
func (s *Sim) kindsOn() []string {
	on := map[string]bool{}
	for k, r := range s.sw.rates {
		on[k] = r > 0
	}
	on[FaultWatchLate] = s.sw.watchLag > 0
	on[FaultRefused] = s.sw.refuseTo > 0
	on[FaultCrash] = len(s.sw.crashes) > 0
	on[FaultPodKilled] = len(s.sw.kills) > 0
	on[FaultHandover] = len(s.handovers) > 0
	on[FaultHungCluster] = slices.ContainsFunc(s.plan, func(pc plannedCluster) bool { return pc.hung })
	var out []string
	for _, k := range slices.Sorted(maps.Keys(on)) {
		if on[k] {
			out = append(out, k)
		}
	}
	return out
}

// Shrunk is what Shrink found: the smallest variant of the seed that
// still fails as the seed does, and its run.
type Shrunk struct {
	Variant Variant
	Result  Result
	// Runs is how many runs shrinking took.
	Runs int
}

// Shrink looks for a smaller run of seed that fails as it does (the same
// first violation, numbers and names aside): it turns off each fault kind,
// leaves out each cluster and halves the active time, one at a time,
// keeping each change after which the run still fails, and passes again
// until nothing more can go or maxRuns runs were made. It returns false
// when the seed does not fail.
func Shrink(seed int64, opt Options, maxRuns int) (Shrunk, bool) {
	opt.Variant = Variant{}
	res := Run(seed, opt)
	if len(res.Violations) == 0 {
		return Shrunk{Result: res, Runs: 1}, false
	}
	want := failure(res.Violations[0])
	best := Shrunk{Result: res, Runs: 1}
	fails := func(v Variant) bool {
		if best.Runs >= maxRuns {
			return false
		}
		o := opt
		o.Variant = v
		r := Run(seed, o)
		best.Runs++
		if !slices.ContainsFunc(r.Violations, func(x string) bool { return failure(x) == want }) {
			return false
		}
		best.Variant, best.Result = v, r
		return true
	}
	active := opt.Active
	if active == 0 {
		active = 20 * time.Minute
	}
	for changed := true; changed && best.Runs < maxRuns; {
		changed = false
		s := newSim(seed, Options{Active: active, Variant: best.Variant, hung: opt.hung})
		for _, k := range s.kindsOn() {
			if fails(best.Variant.with(k, "", 0)) {
				changed = true
			}
		}
		for _, pc := range s.plan {
			if fails(best.Variant.with("", pc.key, 0)) {
				changed = true
			}
		}
		until := best.Variant.Until
		if until == 0 {
			until = active
		}
		if until /= 2; until >= time.Minute && fails(best.Variant.with("", "", until)) {
			changed = true
		}
	}
	return best, true
}

var (
	// numbers are what failure ignores in a violation: times, counts,
	// ordinals of names.
	numbers = regexp.MustCompile(`[0-9]+(\.[0-9]+)?(ms|µs|s|m|h)?`)
	// clusterKeys are the cluster keys in a violation or a trace line.
	clusterKeys = regexp.MustCompile(`\b(ns[0-9]+|stuck)/(pg|st)[0-9]+\b`)
)

// failure is what of a violation tells one failure from another: its
// text without when, numbers or names.
func failure(v string) string {
	if _, rest, ok := strings.Cut(v, ": "); ok && strings.HasPrefix(v, "at ") {
		v = rest
	}
	return numbers.ReplaceAllString(v, "N")
}

// Relevant returns the lines of a trace that tell a failure's story: the
// faults, the operator's incarnations, the user's actions, the watches'
// breaks, the violations, and every line about a cluster the violations
// name.
func Relevant(trace, violations []string) []string {
	keys := map[string]bool{}
	for _, v := range violations {
		for _, k := range clusterKeys.FindAllString(v, -1) {
			keys[k] = true
		}
	}
	var out []string
	for _, line := range trace {
		relevant := false
		for _, w := range []string{" fault ", " operator ", " user ", " relist ", " watch of ", "VIOLATION", " seed "} {
			relevant = relevant || strings.Contains(line, w)
		}
		for _, k := range clusterKeys.FindAllString(line, -1) {
			relevant = relevant || keys[k]
		}
		if relevant {
			out = append(out, line)
		}
	}
	return out
}
