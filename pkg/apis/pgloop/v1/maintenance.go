package v1

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Window is a parsed MaintenanceWindow: from From to To (minutes after
// midnight UTC, From < To) on Weekday, or every day when Everyday.
type Window struct {
	Everyday bool
	Weekday  time.Weekday
	From, To int
}

var weekdays = map[string]time.Weekday{
	"Sun": time.Sunday, "Mon": time.Monday, "Tue": time.Tuesday, "Wed": time.Wednesday,
	"Thu": time.Thursday, "Fri": time.Friday, "Sat": time.Saturday,
}

// Parse reads the window; the error says what is wrong with it.
func (w MaintenanceWindow) Parse() (Window, error) {
	from, to, ok := strings.Cut(strings.TrimSpace(string(w)), "-")
	if !ok {
		return Window{}, fmt.Errorf("%q is not a range: want [Ddd:]HH:MM-[Ddd:]HH:MM, e.g. Sat:01:00-06:00", w)
	}
	fromDay, fromMin, err := dayTime(from)
	if err != nil {
		return Window{}, err
	}
	toDay, toMin, err := dayTime(to)
	if err != nil {
		return Window{}, err
	}
	switch {
	case toDay != "" && fromDay == "":
		return Window{}, fmt.Errorf("%q: the end names a weekday, the start does not", w)
	case toDay != "" && toDay != fromDay:
		return Window{}, fmt.Errorf("%q: a window spans one day: the weekdays of start and end differ", w)
	case fromMin >= toMin:
		return Window{}, fmt.Errorf("%q: the start must be before the end (a window does not wrap past midnight: write two)", w)
	}
	out := Window{Everyday: fromDay == "", From: fromMin, To: toMin}
	if fromDay != "" {
		out.Weekday = weekdays[fromDay]
	}
	return out, nil
}

// dayTime reads "[Ddd:]HH:MM" into the weekday ("" for none) and the
// minutes after midnight.
func dayTime(s string) (string, int, error) {
	parts := strings.Split(s, ":")
	day := ""
	if len(parts) == 3 {
		day, parts = parts[0], parts[1:]
		if _, ok := weekdays[day]; !ok {
			return "", 0, fmt.Errorf("%q: unknown weekday %q (Mon, Tue, Wed, Thu, Fri, Sat, Sun)", s, day)
		}
	}
	if len(parts) != 2 {
		return "", 0, fmt.Errorf("%q is not a time: want HH:MM", s)
	}
	h, err1 := strconv.Atoi(parts[0])
	m, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil || h < 0 || h > 23 || m < 0 || m > 59 {
		return "", 0, fmt.Errorf("%q is not a time: want HH:MM, 00:00 to 23:59", s)
	}
	return day, h*60 + m, nil
}

// InWindow tells whether now is inside one of windows, and if not, when
// the next one opens (zero when windows is empty: any time is fine).
// Windows that do not parse are skipped (validation refuses them).
func InWindow(windows []MaintenanceWindow, now time.Time) (bool, time.Time) {
	if len(windows) == 0 {
		return true, time.Time{}
	}
	now = now.UTC()
	midnight := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	var next time.Time
	for _, raw := range windows {
		w, err := raw.Parse()
		if err != nil {
			continue
		}
		// The window's openings today and in the next 7 days.
		for d := 0; d <= 7; d++ {
			day := midnight.AddDate(0, 0, d)
			if !w.Everyday && day.Weekday() != w.Weekday {
				continue
			}
			from := day.Add(time.Duration(w.From) * time.Minute)
			to := day.Add(time.Duration(w.To) * time.Minute)
			if !now.Before(from) && now.Before(to) {
				return true, time.Time{}
			}
			if from.After(now) && (next.IsZero() || from.Before(next)) {
				next = from
			}
		}
	}
	if next.IsZero() {
		// Only windows that do not parse: never block on them.
		return true, time.Time{}
	}
	return false, next
}

func validateWindows(windows []MaintenanceWindow, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, w := range windows {
		if _, err := w.Parse(); err != nil {
			errs = append(errs, field.Invalid(path.Index(i), string(w), err.Error()))
		}
	}
	return errs
}
