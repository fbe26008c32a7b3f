package main

import (
	"slices"
	"strings"
	"testing"
)

func TestModes(t *testing.T) {
	for _, tc := range []struct {
		name          string
		stuck, frozen string
		set           bool
		wantStuck     []int
		wantFrozen    []int
		wantErr       string
	}{
		{name: "defaults", stuck: "0,10,100", wantStuck: []int{0, 10, 100}},
		{name: "frozen drops the default stuck counts", stuck: "0,10,100", frozen: "0,4,8", wantFrozen: []int{0, 4, 8}},
		{name: "frozen with stuck counts given", stuck: "0,10", frozen: "0,4", set: true, wantStuck: []int{0, 10}, wantFrozen: []int{0, 4}},
		{name: "frozen with --stuck=", stuck: "", frozen: "0,4", set: true, wantFrozen: []int{0, 4}},
		{name: "bad frozen", stuck: "0", frozen: "0,x", wantErr: "--frozen: not a list of counts"},
		{name: "bad stuck", stuck: "0;10", set: true, wantErr: "--stuck: not a list of counts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stuck, frozen, err := modes(tc.stuck, tc.frozen, tc.set)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(stuck, tc.wantStuck) || !slices.Equal(frozen, tc.wantFrozen) {
				t.Errorf("modes = %v, %v, %v; want %v, %v", stuck, frozen, err, tc.wantStuck, tc.wantFrozen)
			}
		})
	}
	if got := counts([]int{0, 4, 8}); got != "0,4,8" {
		t.Errorf("counts = %q", got)
	}
}
