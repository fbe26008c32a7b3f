package benchkit

import (
	"math"
	"slices"
	"time"
)

// Summary is the median and p99 of a sample of durations.
type Summary struct {
	N      int
	Median time.Duration
	// P99 is the nearest-rank 99th percentile: with fewer than 100
	// samples it is the maximum.
	P99      time.Duration
	Min, Max time.Duration
}

// Summarize returns the median (the mean of the two middle values for an
// even count) and the nearest-rank p99 of ds. An empty sample gives zeros.
func Summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	median := s[n/2]
	if n%2 == 0 {
		median = (s[n/2-1] + s[n/2]) / 2
	}
	return Summary{N: n, Median: median, P99: Percentile(s, 99), Min: s[0], Max: s[n-1]}
}

// Percentile returns the nearest-rank p-th percentile of sorted: the
// smallest value with at least p% of the sample at or below it.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Ratio is a/b, or NaN when b is zero.
func Ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}
