package fsm

import (
	"testing"
	"time"
)

// TestConfigCheckPeriod: the check of a configuration Patroni applies
// follows loop_wait, within bounds that keep it cheap and prompt.
func TestConfigCheckPeriod(t *testing.T) {
	for _, tt := range []struct{ loopWait, want time.Duration }{
		{time.Second, 250 * time.Millisecond},
		{2 * time.Second, 500 * time.Millisecond},
		{3 * time.Second, 750 * time.Millisecond},
		{10 * time.Second, time.Second},
		{10 * time.Minute, time.Second},
	} {
		if got := configCheckPeriod(tt.loopWait); got != tt.want {
			t.Errorf("loop_wait %v: every %v, want %v", tt.loopWait, got, tt.want)
		}
	}
}
