package fsm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// block is one command of a script with the lines before it (comments,
// blank lines) and its expected output.
type block struct {
	before []string
	cmd    string
	line   int
	want   []string
}

// parseScript splits a script into blocks; tail is what follows the last.
func parseScript(text string) (blocks []block, tail []string, err error) {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	var before []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			before = append(before, l)
			continue
		}
		b := block{before: before, cmd: l, line: i + 1}
		before = nil
		if i+1 >= len(lines) || lines[i+1] != "----" {
			return nil, nil, fmt.Errorf("line %d: %q is not followed by ----", i+1, l)
		}
		i += 2
		for ; i < len(lines) && lines[i] != ""; i++ {
			b.want = append(b.want, lines[i])
		}
		i-- // the blank line, if any, belongs to the next block
		blocks = append(blocks, b)
	}
	return blocks, before, nil
}

// splitWords splits a line on spaces, keeping a double-quoted value
// (key="a b") in one word, unquoted.
func splitWords(line string) ([]string, error) {
	var words []string
	for line = strings.TrimSpace(line); line != ""; line = strings.TrimSpace(line) {
		end := strings.IndexByte(line, ' ')
		if end < 0 {
			end = len(line)
		}
		if q := strings.IndexByte(line, '"'); q >= 0 && q < end {
			rest, err := strconv.QuotedPrefix(line[q:])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", line, err)
			}
			s, _ := strconv.Unquote(rest)
			words = append(words, line[:q]+s)
			line = line[q+len(rest):]
			continue
		}
		words = append(words, line[:end])
		line = line[end:]
	}
	if len(words) == 0 {
		return nil, errors.New("empty command")
	}
	return words, nil
}

// parseFacts reads the facts of an input (see TestScripts).
func parseFacts(words []string) (Facts, error) {
	var f Facts
	for _, w := range words {
		k, v, _ := strings.Cut(w, "=")
		var err error
		num := func() int32 {
			var n int64
			n, err = strconv.ParseInt(v, 10, 32)
			return int32(n)
		}
		switch k {
		case "gen":
			f.Generation, err = strconv.ParseInt(v, 10, 64)
		case "desired":
			f.Desired = num()
		case "ready":
			f.Ready = num()
		case "primary":
			f.Primary = v
		case "no-primary":
			f.NoPrimary = v
		case "current":
			f.ObjectsCurrent = true
		case "outdated":
			f.Outdated = num()
		case "replace":
			for _, p := range strings.Split(v, ",") {
				parts := strings.Split(p, "/")
				if len(parts) != 2 && len(parts) != 4 {
					return f, fmt.Errorf("replace %s: want POD/UID[/CLAIM/CLAIMUID]", p)
				}
				ref := PodRef{Name: parts[0], UID: parts[1]}
				if len(parts) == 4 {
					ref.Claim, ref.ClaimUID = parts[2], parts[3]
				}
				f.Replace = append(f.Replace, ref)
			}
		case "nudge":
			f.Nudge = v
		case "stuck":
			var ok bool
			if f.StuckReason, f.Stuck, ok = strings.Cut(v, ": "); !ok {
				return f, fmt.Errorf("stuck=%q: want \"Reason: message\"", v)
			}
		case "stuck-stale":
			f.StuckStale = true
		case "spec-error":
			f.SpecError = v
		case "sync":
			f.Sync.Hash = v
		case "sync-boot":
			f.Sync.Bootstrap = true
		case "sync-missing":
			f.Sync.Missing = true
		case "config":
			f.Config.Hash = v
		case "config-boot":
			f.Config.Bootstrap = true
		case "params":
			f.ConfigParameters = strings.Split(v, ",")
		case "loop-wait":
			d, derr := time.ParseDuration(v)
			if derr != nil {
				return f, derr
			}
			f.LoopWait = d
		case "users":
			f.Users = strings.Split(v, ",")
		case "databases":
			f.Databases = strings.Split(v, ",")
		case "sync-request":
			f.SyncRequest = v
			f.Requests = append(f.Requests, Request{Kind: v1.RequestSync, Value: v})
		case "standby":
			f.Standby = v
		case "rotate-request":
			// The Secrets that ask for a password rotation.
			f.Requests = append(f.Requests, Request{Kind: v1.RequestRotatePassword, Value: v})
		case "target":
			f.Target = v
		case "no-target":
			f.NoTarget = v
		case "pending":
			f.PendingRestart = strings.Split(v, ",")
		case "restart":
			name, uid, ok := strings.Cut(v, "/")
			if !ok {
				return f, fmt.Errorf("restart %s: want POD/UID", v)
			}
			f.Restart = &PodRef{Name: name, UID: uid}
		case "switchover":
			from, to, ok := strings.Cut(v, ">")
			if !ok {
				return f, fmt.Errorf("switchover %s: want FROM>TO", v)
			}
			f.Switchover = &Switchover{From: from, To: to}
		case "running":
			f.ReplaceRunning = true
		case "started":
			f.RolloutStarted = true
		case "template":
			f.TemplateChanged = true
		case "no-slot":
			f.RolloutWait = v
		case "window":
			// The maintenance windows are closed; the next opens at
			// this time since t0.
			d, derr := time.ParseDuration(v)
			if derr != nil {
				return f, derr
			}
			f.MaintenanceOpens = t0.Add(d)
			f.MaintenanceWait = "outside the maintenance windows: the next opens at " + v
		case "repository":
			f.Repository = v
		case "backup-schedule":
			// A cron schedule of full backups, _ for spaces.
			sched, err := v1.ParseBackupSchedule(strings.ReplaceAll(v, "_", " "))
			if err != nil {
				return f, err
			}
			f.Backup.Full = sched
		case "backup-request":
			// VALUE or VALUE:TYPE.
			r := Request{Kind: v1.RequestBackup}
			r.Value, r.Detail, _ = strings.Cut(v, ":")
			if r.Detail == "" {
				r.Detail = v1.BackupFull
			}
			f.Requests = append(f.Requests, r)
		case "backup-done", "backup-failed":
			// ID:LABEL,LABEL... (the repository's listing) or
			// ID:MESSAGE.
			id, rest, _ := strings.Cut(v, ":")
			r := &v1.BackupReport{ID: id, Done: true, Failed: k == "backup-failed"}
			if r.Failed {
				r.Message = strings.ReplaceAll(rest, "_", " ")
			} else {
				r.Backups = []v1.BackupInfo{}
				for i, label := range strings.Split(rest, ",") {
					r.Backups = append(r.Backups, v1.BackupInfo{Label: label, Type: v1.BackupFull,
						Start: metav1.NewTime(t0.Add(time.Duration(i) * time.Hour)), Stop: metav1.NewTime(t0.Add(time.Duration(i)*time.Hour + time.Minute)),
						Size: 22 << 20, RepoSize: 3 << 20})
				}
			}
			f.Backup.Report = r
		case "backup-running":
			f.Backup.Report = &v1.BackupReport{ID: v}
		case "backup-not-started":
			// ID@checked: the primary shows no trace of run ID, as
			// the archive checks found at checked (a duration since
			// the script's start).
			id, at, _ := strings.Cut(v, "@")
			d, err := time.ParseDuration(at)
			if err != nil {
				return f, fmt.Errorf("backup-not-started=%s: want ID@duration: %w", v, err)
			}
			f.Backup.Report = &v1.BackupReport{ID: id, NotStarted: true, CheckedAt: metav1.NewTime(t0.Add(d))}
		case "backup-drill":
			f.Backup.Drill = v == "true"
		case "backup-checked", "backup-verified", "backup-drilled":
			// Of the report the words before made: when it was
			// checked (a duration since the script's start); its
			// verify, or its restore drill, running, ok or failed.
			r := f.Backup.Report
			if r == nil {
				return f, fmt.Errorf("%s=%s: no backup report before it", k, v)
			}
			switch {
			case k == "backup-checked":
				d, err := time.ParseDuration(v)
				if err != nil {
					return f, fmt.Errorf("backup-checked=%s: %w", v, err)
				}
				r.CheckedAt = metav1.NewTime(t0.Add(d))
			case k == "backup-verified" && v == "running":
				r.VerifyRunning = true
			case k == "backup-verified":
				r.Verification = &v1.BackupVerification{Backup: r.ID, Succeeded: v == "ok", Message: "verify " + v}
			case v == "running":
				r.DrillRunning = true
			default:
				r.Drill = &v1.RestoreDrill{Backup: r.ID, Succeeded: v == "ok", Message: "drill " + v}
			}
		case "archive-blocked":
			f.ArchiveBlocked = v
		case "archiving":
			// ok:WAL, failing:MESSAGE or unchecked:MESSAGE.
			kind, text, _ := strings.Cut(v, ":")
			a := &v1.ArchivingStatus{}
			switch kind {
			case "ok":
				a.LastArchivedWAL = text
			case "failing":
				a.Failing, a.Message = true, text
			case "unchecked":
				a.Message = text
			default:
				return f, fmt.Errorf("archiving=%q: want ok:WAL, failing:MESSAGE or unchecked:MESSAGE", v)
			}
			f.Archiving = a
		case "size":
			f.VolumeSize = v
		case "volume":
			// NAME:CAPACITY:PHASE[:MESSAGE], a claim smaller than size.
			parts := strings.SplitN(v, ":", 4)
			if len(parts) < 3 {
				return f, fmt.Errorf("volume %s: want NAME:CAPACITY:PHASE[:MESSAGE]", v)
			}
			c := v1.ClaimStatus{Name: parts[0], Capacity: parts[1], Phase: parts[2]}
			if len(parts) == 4 {
				c.Message = parts[3]
			}
			f.Volumes = append(f.Volumes, c)
		case "deleting":
			f.Deleting = true
		case "gone":
			f.Gone = true
		default:
			return f, fmt.Errorf("unknown fact %s", w)
		}
		if err != nil {
			return f, fmt.Errorf("%s: %w", w, err)
		}
	}
	return f, nil
}
