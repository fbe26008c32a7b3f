package indb

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/observed"
	"github.com/pgloop/pgloop/pkg/pgsql"
)

// StartBackup starts phase b.Phase of the base backup run b.ID on the
// cluster's primary, as the plan asks (status.backup.running names the
// run): its program (cluster.BackupProgram with the spec's retention,
// VerifyProgram or DrillProgram) runs detached through COPY ... TO
// PROGRAM, so the step returns at once. A phase that already started there
// is left as it is. The archive checks (pkg/archiving) read how it goes.
// Every error is an act.PartError of act.PartBackup: a phase that could
// not start fails no other work of the plan.
func (a *Actor) StartBackup(ctx context.Context, key string, b act.BackupStart) error {
	r, err := a.run(key)
	if err != nil {
		return err
	}
	return partError(act.PartBackup, r.startBackup(ctx, b))
}

func (r *run) startBackup(ctx context.Context, b act.BackupStart) error {
	pg, err := r.getCluster(ctx, false)
	if pg == nil || err != nil {
		return err
	}
	var program string
	switch b.Phase {
	case act.PhaseBackup:
		program, err = cluster.BackupProgram(b.ID, cluster.BackupOptions{Retention: cluster.BackupRetention(pg, r.build)})
	case act.PhaseVerify:
		program, err = cluster.VerifyProgram(b.ID)
	case act.PhaseDrill:
		program, err = cluster.DrillProgram(b.ID)
	default:
		err = fmt.Errorf("backup %s: no phase %q", b.ID, b.Phase)
	}
	if err != nil {
		return err
	}
	pods, err := r.pods(ctx, pg)
	if err != nil {
		return err
	}
	primary, ep, err := r.reachPrimary(ctx, pg, pods, "")
	if err != nil {
		return err
	}
	files, err := pgsql.BaseBackup(ctx, ep, cluster.BackupDir, b.ID, b.Phase, program, r.sqlOptions())
	if err != nil {
		return fmt.Errorf("could not ask the primary: %w", err)
	}
	if started := map[string]bool{act.PhaseBackup: files.Started, act.PhaseVerify: files.VerifyStarted,
		act.PhaseDrill: files.DrillStarted}[b.Phase]; !started {
		return fmt.Errorf("%s started, but the primary shows no trace of it: it may lack setsid or base64 in its image", b.Phase)
	}
	r.log.WithField("backup", b.ID).WithField("phase", b.Phase).WithField("pod", primary.pod.Name).Info("base backup run on the primary")
	return nil
}

// Archiver reads the archiver's statistics of the cluster's primary as
// the caches show the cluster (objs), and the error files pgBackRest left
// in dirs (relative to the data directory). The error wraps ErrNoPrimary
// when no pod publishes as the primary.
func (a *Actor) Archiver(ctx context.Context, objs observed.Cluster, dirs []string) (*pgsql.Archiver, error) {
	r, ep, err := a.reach(ctx, objs)
	if err != nil {
		return nil, err
	}
	return pgsql.ArchiveStatus(ctx, ep, dirs, r.sqlOptions())
}

// ReadBackup reads how the base backup run goes on the cluster's primary,
// from the files it leaves there (cluster.BackupDir); it starts nothing. A
// run the primary shows no trace of is NotStarted. The error (the primary
// could not be asked) wraps ErrNoPrimary when no pod publishes as the
// primary.
func (a *Actor) ReadBackup(ctx context.Context, objs observed.Cluster, run *v1.BackupRun, now time.Time) (*v1.BackupReport, error) {
	r, ep, err := a.reach(ctx, objs)
	if err != nil {
		return nil, err
	}
	files, err := pgsql.BaseBackup(ctx, ep, cluster.BackupDir, run.ID, "", "", r.sqlOptions())
	if err != nil {
		return nil, err
	}
	rep, err := backupReport(files, run.ID, now)
	if err != nil && !rep.Failed {
		r.log.Warnf("backup %s: repository listing: %v", run.ID, err)
	}
	return rep, nil
}

// Forget drops what the readers remember of cluster key (the superuser's
// passwords): it no longer archives, or is gone.
func (a *Actor) Forget(key string) {
	a.mu.Lock()
	delete(a.passwords, key)
	a.mu.Unlock()
}

// reach is a reader's way to the primary of the cluster the caches show
// (objs): the superuser's Secret is read again only when its version
// there changed.
func (a *Actor) reach(ctx context.Context, objs observed.Cluster) (*run, pgsql.Endpoint, error) {
	pg := objs.Postgresql
	r, err := a.run(pg.Namespace + "/" + pg.Name)
	if err != nil {
		return nil, pgsql.Endpoint{}, err
	}
	name, version := cluster.SecretName(cluster.SuperuserName, pg.Name), ""
	for _, s := range objs.Secrets {
		if s.Name == name {
			version = s.ResourceVersion
		}
	}
	// A Secret not cached (yet) has no version: it is read, and not
	// remembered, as a step reads it.
	_, ep, err := r.reachPrimary(ctx, pg, objs.Pods, version)
	return r, ep, err
}

// backupReport turns what a run left on the primary into a report, and
// says why the repository's listing of a run that ended could not be read.
func backupReport(b *pgsql.BackupFiles, id string, now time.Time) (*v1.BackupReport, error) {
	r := &v1.BackupReport{CheckedAt: metav1.NewTime(now), ID: id}
	if !b.Started {
		r.NotStarted = true
		return r, nil
	}
	if b.Exit < 0 {
		return r, nil
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
	}
	switch {
	case b.VerifyStarted && verifyExitRE.MatchString(lastLine(b.Verify)):
		labels := make([]string, len(backups))
		for i, x := range backups {
			labels[i] = x.Label
		}
		ok, msg := verifyResult(b.Verify, labels)
		r.Verification = &v1.BackupVerification{At: metav1.NewTime(now), Backup: id, Succeeded: ok, Message: msg}
	case b.VerifyStarted:
		r.VerifyRunning = true
	}
	switch {
	case b.DrillStarted && drillRE.MatchString(b.Drill):
		r.Drill = drillResult(b.Drill)
		r.Drill.At, r.Drill.Backup = metav1.NewTime(now), id
	case b.DrillStarted:
		r.DrillRunning = true
	}
	return r, err
}

// lastLine is the last line of out that is not empty.
func lastLine(out string) string {
	out = strings.TrimRight(out, "\n")
	return strings.TrimSpace(out[strings.LastIndex(out, "\n")+1:])
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
