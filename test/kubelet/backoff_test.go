package kubelet

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	const short = time.Second // a crash soon after start
	for _, tc := range []struct {
		name string
		runs []time.Duration // how long each process ran before crashing
		want []time.Duration // the delay after each crash
	}{
		{name: "first crash", runs: []time.Duration{short}, want: []time.Duration{time.Second}},
		{
			name: "doubles up to the maximum",
			runs: []time.Duration{short, short, short, short, short, short, short},
			want: []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second},
		},
		{
			name: "a healthy minute resets it",
			runs: []time.Duration{short, short, short, time.Minute, short},
			want: []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 1 * time.Second, 2 * time.Second},
		},
		{
			name: "just under a minute does not",
			runs: []time.Duration{short, time.Minute - time.Millisecond},
			want: []time.Duration{1 * time.Second, 2 * time.Second},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b backoff
			for i, ran := range tc.runs {
				if got := b.crashed(ran); got != tc.want[i] {
					t.Errorf("crash %d (ran %v): delay %v, want %v", i+1, ran, got, tc.want[i])
				}
			}
		})
	}
}
