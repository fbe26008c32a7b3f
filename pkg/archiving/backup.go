package archiving

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/pgsql"
)

// running is the base backup status.backup.running names, nil when none.
func running(pg *v1.Postgresql) *v1.BackupRun {
	if pg.Status.Backup == nil {
		return nil
	}
	return pg.Status.Backup.Running
}

// baseBackup starts the run status.backup.running names on the primary
// when it has not started there, and reports how it goes.
func (p *Prober) baseBackup(ctx context.Context, pg *v1.Postgresql, run *v1.BackupRun, ep pgsql.Endpoint, sqlOpts pgsql.Options, now time.Time) *v1.BackupReport {
	r := &v1.BackupReport{CheckedAt: metav1.NewTime(now), ID: run.ID}
	fail := func(msg string) *v1.BackupReport {
		r.Done, r.Failed, r.Message = true, true, msg
		return r
	}
	program, err := cluster.BackupProgram(run.ID, cluster.BackupOptions{Retention: cluster.BackupRetention(pg, p.opts.Build),
		Verify: p.opts.Verify, Drill: pg.Spec.Backup != nil && pg.Spec.Backup.RestoreDrill})
	if err != nil {
		return fail(err.Error())
	}
	b, err := pgsql.BaseBackup(ctx, ep, cluster.BackupDir, run.ID, program, sqlOpts)
	if err != nil {
		// The primary could not be asked, or refused to start it:
		// the next check asks again; the run's deadline bounds it.
		r.Message = "could not ask the primary: " + err.Error()
		return r
	}
	if !b.Started {
		r.Message = "started, but the primary shows no trace of it: it may lack setsid or base64 in its image"
		return r
	}
	if b.Exit < 0 {
		return r
	}
	r.Done = true
	if b.Exit != 0 {
		r.Failed = true
		r.Message = backupWords(b.Log)
		if r.Message == "" {
			r.Message = fmt.Sprintf("pgbackrest backup exited with code %d and left no words", b.Exit)
		}
	}
	backups, err := parseInfo(b.Info)
	if err == nil {
		r.Backups = backups
	} else if !r.Failed {
		p.opts.Log.WithField("cluster", pg.Namespace+"/"+pg.Name).Warnf("backup %s: repository listing: %v", run.ID, err)
	}
	if b.Verify != "" {
		labels := make([]string, len(backups))
		for i, x := range backups {
			labels[i] = x.Label
		}
		ok, msg := verifyResult(b.Verify, labels)
		r.Verification = &v1.BackupVerification{At: metav1.NewTime(now), Backup: run.ID, Succeeded: ok, Message: msg}
	}
	if b.Drill != "" {
		r.Drill = drillResult(b.Drill)
		r.Drill.At, r.Drill.Backup = metav1.NewTime(now), run.ID
	}
	return r
}

// backupWords is pgBackRest's errors in a run's log, in one line, its
// warnings too when there is no error (ArchiveStatus's rules: codes in
// brackets, no hints).
func backupWords(log string) string {
	var errs, warns []string
	var cur *[]string
	for _, line := range strings.Split(log, "\n") {
		t := strings.TrimSpace(line)
		// A line may carry a time stamp and process before its level.
		e, w := strings.Index(t, "ERROR: "), strings.Index(t, "WARN: ")
		switch {
		case e >= 0:
			errs, cur = append(errs, t[e+len("ERROR: "):]), &errs
		case w >= 0:
			warns, cur = append(warns, t[w+len("WARN: "):]), &warns
		case t == "", strings.HasPrefix(t, "HINT:"):
			cur = nil
		case cur != nil && len(*cur) > 0 && line != t:
			// A continuation line of the message above.
			(*cur)[len(*cur)-1] += " " + t
		}
	}
	words := errs
	if len(words) == 0 {
		words = warns
	}
	out := strings.Join(words, "; ")
	if len(out) > 1024 {
		out = out[:1024]
	}
	return out
}

// info is what pgloop reads of pgBackRest's info --output=json: one
// stanza.
type info struct {
	Backup []struct {
		Label     string `json:"label"`
		Type      string `json:"type"`
		Error     bool   `json:"error"`
		Timestamp struct {
			Start int64 `json:"start"`
			Stop  int64 `json:"stop"`
		} `json:"timestamp"`
		Archive struct {
			Start string `json:"start"`
			Stop  string `json:"stop"`
		} `json:"archive"`
		Info struct {
			Size       int64 `json:"size"`
			Repository struct {
				Delta int64 `json:"delta"`
			} `json:"repository"`
		} `json:"info"`
	} `json:"backup"`
	Status struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"status"`
}

// parseInfo reads the repository's backups, oldest first, from pgBackRest's
// info --output=json.
func parseInfo(data []byte) ([]v1.BackupInfo, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("no listing")
	}
	var stanzas []info
	if err := json.Unmarshal(data, &stanzas); err != nil {
		return nil, fmt.Errorf("parse pgBackRest's info: %w", err)
	}
	if len(stanzas) != 1 {
		return nil, fmt.Errorf("pgBackRest's info lists %d stanzas, want 1", len(stanzas))
	}
	st := stanzas[0]
	if st.Status.Code != 0 && len(st.Backup) == 0 {
		return nil, fmt.Errorf("pgBackRest's info: %s (code %d)", st.Status.Message, st.Status.Code)
	}
	out := make([]v1.BackupInfo, 0, len(st.Backup))
	for _, b := range st.Backup {
		if b.Error {
			continue // pgBackRest found it damaged: not a backup to count on
		}
		out = append(out, v1.BackupInfo{
			Label: b.Label, Type: b.Type,
			Start:    metav1.NewTime(time.Unix(b.Timestamp.Start, 0).UTC()),
			Stop:     metav1.NewTime(time.Unix(b.Timestamp.Stop, 0).UTC()),
			Size:     b.Info.Size,
			RepoSize: b.Info.Repository.Delta,
			WALStart: b.Archive.Start, WALStop: b.Archive.Stop,
		})
	}
	return out, nil
}

// sameBackupReport says whether two reports tell the same.
func sameBackupReport(a, b *v1.BackupReport) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ID == b.ID && a.Done == b.Done && a.Failed == b.Failed && a.Message == b.Message && len(a.Backups) == len(b.Backups)
}
