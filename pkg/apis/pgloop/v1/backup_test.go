package v1

import (
	"strings"
	"testing"
)

func TestValidateLogicalBackupSchedule(t *testing.T) {
	tests := []struct {
		schedule string
		// want is a substring of the error; empty means valid.
		want string
	}{
		{"", ""},
		{"30 00 * * *", ""},
		{"*/15 * * * *", ""},
		{"0 3\t* * 0", ""},
		{"5/10 0 1 12 6", ""},
		{"59 23 31 12 6", ""},
		{"@daily", "five cron fields"},
		{"0 0 * *", "five cron fields"},
		{"0 0 * * 1-5", "five cron fields"},
		{"0,30 * * * *", "five cron fields"},
		{"60 * * * *", "the minute must be between 0 and 59"},
		{"0 24 * * *", "the hour must be between 0 and 23"},
		{"0 0 0 * *", "the day of month must be between 1 and 31"},
		{"0 0 * 13 *", "the month must be between 1 and 12"},
		{"0 0 * * 7", "the day of week must be between 0 and 6"},
		{"*/0 * * * *", "the minute's step must be a positive number"},
	}
	for _, tt := range tests {
		t.Run(tt.schedule, func(t *testing.T) {
			p := validCluster()
			p.Spec.EnableLogicalBackup = true
			p.Spec.LogicalBackupSchedule = tt.schedule
			errs := p.Spec.Validate()
			switch {
			case tt.want == "" && len(errs) > 0:
				t.Errorf("invalid: %v", errs.ToAggregate())
			case tt.want != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tt.want) ||
				!strings.HasPrefix(errs[0].Error(), "spec.logicalBackupSchedule")):
				t.Errorf("errors %v, want one at spec.logicalBackupSchedule containing %q", errs, tt.want)
			}
			if tt.schedule != "" && ValidateLogicalBackupSchedule(tt.schedule) == nil != (tt.want == "") {
				t.Errorf("ValidateLogicalBackupSchedule disagrees with Validate")
			}
		})
	}
}
