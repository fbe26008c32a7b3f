package indb

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// What pgBackRest 2.45's verify writes with --output=text --verbose and
// --log-level-console=detail (docs/backups.md): a result per archive and
// per backup, each followed by its counts of bad files, and, as DETAIL log
// lines, each continuous range of WAL it found. 2.45 does not count a gap
// between two ranges of one timeline as an error: pgloop does.
var (
	verifyStatusRE = regexp.MustCompile(`^status: (\S+)`)
	verifyCountsRE = regexp.MustCompile(`missing: (\d+), checksum invalid: (\d+), size invalid: (\d+), other: (\d+)`)
	verifyRangeRE  = regexp.MustCompile(`DETAIL: archiveId: (\S+), wal start: ([0-9A-F]{24}), wal stop: ([0-9A-F]{24})`)
	verifyBackupRE = regexp.MustCompile(`^backup: ([^,]+), status: ([^,]+)`)
	verifyExitRE   = regexp.MustCompile(`^exit (\d+)$`)
)

// walRange is one continuous range of WAL segments on one timeline.
type walRange struct{ archive, start, stop string }

// verifyResult reads verify's output: whether it found the repository
// sound, and its words for people. current are the backups the
// repository's info lists: a backup directory verify finds without a
// manifest that info does not list is what an expired backup leaves in a
// store that keeps empty directories (SeaweedFS does), not a backup.
func verifyResult(out string, current []string) (ok bool, msg string) {
	var problems []string
	var ranges []walRange
	status, exit, context := "", -1, ""
	backups := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		t := strings.TrimSpace(line)
		if m := verifyRangeRE.FindStringSubmatch(t); m != nil {
			ranges = append(ranges, walRange{m[1], m[2], m[3]})
			continue
		}
		if i := strings.Index(t, "ERROR: "); i >= 0 {
			problems = append(problems, t[i+len("ERROR: "):])
			continue
		}
		switch {
		case verifyStatusRE.MatchString(t):
			status = verifyStatusRE.FindStringSubmatch(t)[1]
		case verifyExitRE.MatchString(t):
			exit, _ = strconv.Atoi(verifyExitRE.FindStringSubmatch(t)[1])
		case strings.HasPrefix(t, "archiveId: "), strings.HasPrefix(t, "backup: "):
			context = strings.SplitN(t, ",", 2)[0]
			if m := verifyBackupRE.FindStringSubmatch(t); m != nil {
				switch {
				case m[2] == "manifest missing" && !slices.Contains(current, m[1]):
					continue // an expired backup's leftover directory
				case m[2] != "valid":
					problems = append(problems, fmt.Sprintf("backup %s is %s", m[1], m[2]))
				}
				backups[m[1]] = true
			}
		case verifyCountsRE.MatchString(t):
			if m := verifyCountsRE.FindStringSubmatch(t); m[1] != "0" || m[2] != "0" || m[3] != "0" || m[4] != "0" {
				problems = append(problems, context+": "+t)
			}
		}
	}
	problems = append(problems, walGaps(ranges)...)
	switch {
	case exit != 0 && exit != -1:
		problems = append([]string{fmt.Sprintf("verify exited with code %d", exit)}, problems...)
	case exit == -1:
		problems = append(problems, "verify did not finish")
	case status != "ok" && len(problems) == 0:
		problems = append(problems, "verify's status is "+strconv.Quote(status))
	}
	if len(problems) > 0 {
		// --verbose lists a backup more than once.
		seen := map[string]bool{}
		problems = slices.DeleteFunc(problems, func(p string) bool {
			dup := seen[p]
			seen[p] = true
			return dup
		})
		msg = strings.Join(problems, "; ")
		if len(msg) > 1024 {
			msg = msg[:1024]
		}
		return false, msg
	}
	var spans []string
	for _, r := range ranges {
		spans = append(spans, r.start+"-"+r.stop)
	}
	return true, fmt.Sprintf("%d backups valid; WAL %s without a gap", len(backups), strings.Join(spans, ", "))
}

// walGaps names the gaps between the ranges of one timeline of one
// archive: a point in time past a gap cannot be restored.
func walGaps(ranges []walRange) []string {
	sort.Slice(ranges, func(i, j int) bool {
		if ranges[i].archive != ranges[j].archive {
			return ranges[i].archive < ranges[j].archive
		}
		return ranges[i].start < ranges[j].start
	})
	var gaps []string
	for i := 1; i < len(ranges); i++ {
		prev, r := ranges[i-1], ranges[i]
		if prev.archive == r.archive && prev.stop[:8] == r.start[:8] {
			gaps = append(gaps, fmt.Sprintf("WAL gap in %s after %s, up to %s: no point in time past %s can be restored",
				r.archive, prev.stop, r.start, prev.stop))
		}
	}
	return gaps
}

// drillRE is the restore drill's last line (cluster.BackupProgram).
var drillRE = regexp.MustCompile(`(?m)^drill (ok|failed)(?: restore (\d+))?(?: start (\d+))?$`)

// drillResult reads what a restore drill wrote.
func drillResult(out string) *v1.RestoreDrill {
	d := &v1.RestoreDrill{}
	m := drillRE.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		d.Message = "the restore drill did not finish"
		return d
	}
	last := m[len(m)-1]
	d.RestoreSeconds, _ = strconv.ParseInt(last[2], 10, 64)
	d.StartSeconds, _ = strconv.ParseInt(last[3], 10, 64)
	if last[1] == "ok" {
		d.Succeeded = true
		d.Message = fmt.Sprintf("the newest backup restored in %d s into a scratch directory; PostgreSQL consistent and accepting connections %d s later", d.RestoreSeconds, d.StartSeconds)
		return d
	}
	var words []string
	for _, line := range strings.Split(out, "\n") {
		t := strings.Join(strings.Fields(line), " ")
		if i := strings.Index(t, "ERROR: "); i >= 0 {
			words = append(words, t[i+len("ERROR: "):])
		} else if len(words) > 0 && t != "" && !drillRE.MatchString(t) && !strings.HasPrefix(t, "HINT:") {
			words = append(words, t)
		}
	}
	d.Message = "the restore drill failed: " + strings.Join(words, " ")
	if len(d.Message) > 1024 {
		d.Message = d.Message[:1024]
	}
	return d
}
