package v1

import (
	"strings"
	"testing"
	"time"
)

func TestMaintenanceWindowParse(t *testing.T) {
	tests := []struct {
		in   MaintenanceWindow
		want Window
		err  string
	}{
		{in: "01:00-06:00", want: Window{Everyday: true, From: 60, To: 360}},
		{in: " Sat:01:00-06:30 ", want: Window{Weekday: time.Saturday, From: 60, To: 390}},
		{in: "Sun:00:00-Sun:23:59", want: Window{Weekday: time.Sunday, From: 0, To: 1439}},
		{in: "1:05-2:00", want: Window{Everyday: true, From: 65, To: 120}},
		{in: "06:00-01:00", err: "the start must be before the end"},
		{in: "Sat:01:00-Sun:02:00", err: "weekdays of start and end differ"},
		{in: "01:00-Sat:02:00", err: "the end names a weekday"},
		{in: "Sab:01:00-02:00", err: "unknown weekday"},
		{in: "24:00-25:00", err: "not a time"},
		{in: "01:00", err: "not a range"},
	}
	for _, tc := range tests {
		got, err := tc.in.Parse()
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.err == "" && got != tc.want:
			t.Errorf("%q = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestInWindow(t *testing.T) {
	// 2026-12-02 is a Wednesday.
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	tests := []struct {
		windows []MaintenanceWindow
		now     string
		open    bool
		next    string
	}{
		{nil, "2026-12-02T10:00:00Z", true, ""},
		{[]MaintenanceWindow{"01:00-06:00"}, "2026-12-02T01:00:00Z", true, ""},
		{[]MaintenanceWindow{"01:00-06:00"}, "2026-12-02T05:59:59Z", true, ""},
		{[]MaintenanceWindow{"01:00-06:00"}, "2026-12-02T06:00:00Z", false, "2026-12-03T01:00:00Z"},
		{[]MaintenanceWindow{"01:00-06:00"}, "2026-12-02T00:30:00Z", false, "2026-12-02T01:00:00Z"},
		{[]MaintenanceWindow{"Sat:01:00-06:00"}, "2026-12-02T03:00:00Z", false, "2026-12-05T01:00:00Z"},
		{[]MaintenanceWindow{"Wed:01:00-06:00"}, "2026-12-02T07:00:00Z", false, "2026-12-09T01:00:00Z"},
		{[]MaintenanceWindow{"Sat:01:00-06:00", "22:00-23:00"}, "2026-12-02T07:00:00Z", false, "2026-12-02T22:00:00Z"},
		{[]MaintenanceWindow{"Sat:01:00-06:00", "22:00-23:00"}, "2026-12-05T02:00:00Z", true, ""},
		// Another zone is read in UTC.
		{[]MaintenanceWindow{"01:00-06:00"}, "2026-12-02T03:00:00+02:00", true, ""},
	}
	for _, tc := range tests {
		open, next := InWindow(tc.windows, at(tc.now))
		var want time.Time
		if tc.next != "" {
			want = at(tc.next)
		}
		if open != tc.open || !next.Equal(want) {
			t.Errorf("%v at %s: open %v, next %v; want %v, %v", tc.windows, tc.now, open, next, tc.open, want)
		}
	}
}
