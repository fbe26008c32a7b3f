package v1

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// logicalBackupScheduleRE is the CRD's pattern on logicalBackupSchedule,
// zalando's: five fields, each a number or *, with an optional /step.
var logicalBackupScheduleRE = regexp.MustCompile(`^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$`)

// cronFields are the fields of a schedule in order, with the values the
// CronJob's parser takes (day of week 0-6, Sunday 0): a number out of
// range passes the CRD's pattern, but the apiserver refuses the CronJob.
var cronFields = []struct {
	name     string
	min, max int
}{
	{"minute", 0, 59},
	{"hour", 0, 23},
	{"day of month", 1, 31},
	{"month", 1, 12},
	{"day of week", 0, 6},
}

// validateLogicalBackup checks logicalBackupSchedule; empty is the
// operator's default.
func (s *PostgresqlSpec) validateLogicalBackup(path *field.Path) field.ErrorList {
	if s.LogicalBackupSchedule == "" {
		return nil
	}
	if err := ValidateLogicalBackupSchedule(s.LogicalBackupSchedule); err != nil {
		return field.ErrorList{field.Invalid(path.Child("logicalBackupSchedule"), s.LogicalBackupSchedule, err.Error())}
	}
	return nil
}

// ValidateLogicalBackupSchedule checks a logical backup schedule as the
// CRD does (its pattern), then what the pattern cannot say and the
// apiserver refuses in a CronJob: each number in its field's range, each
// step positive. The operator's default schedule is checked the same way.
func ValidateLogicalBackupSchedule(sched string) error {
	if !logicalBackupScheduleRE.MatchString(sched) {
		return errors.New("must be five cron fields, each a number or * with an optional /step")
	}
	var errs []string
	for i, f := range strings.Fields(sched) {
		value, step, hasStep := strings.Cut(f, "/")
		if hasStep {
			if n, err := strconv.Atoi(step); err != nil || n < 1 {
				errs = append(errs, fmt.Sprintf("the %s's step must be a positive number", cronFields[i].name))
			}
		}
		if value == "*" {
			continue
		}
		if n, err := strconv.Atoi(value); err != nil || n < cronFields[i].min || n > cronFields[i].max {
			errs = append(errs, fmt.Sprintf("the %s must be between %d and %d", cronFields[i].name, cronFields[i].min, cronFields[i].max))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}
