package archiving

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
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
// sound, and its words for people.
func verifyResult(out string) (ok bool, msg string) {
	var problems []string
	var ranges []walRange
	status, exit, context, backups := "", -1, "", 0
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
				backups++
				if m[2] != "valid" {
					problems = append(problems, fmt.Sprintf("backup %s is %s", m[1], m[2]))
				}
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
	return true, fmt.Sprintf("%d backups valid; WAL %s without a gap", backups, strings.Join(spans, ", "))
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
