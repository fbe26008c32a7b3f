package fsm

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// output renders the last result and the status fields it changed.
func (r *runner) output() []string {
	res, st := r.res, r.m.Status()
	var out []string
	if res.Ignored != "" {
		out = append(out, "ignored: "+res.Ignored)
	}
	if len(res.Fired) > 0 {
		var fired []string
		for _, f := range res.Fired {
			fired = append(fired, fmt.Sprintf("%s %s->%s", f.Event, f.From, f.To))
		}
		out = append(out, "fired: "+strings.Join(fired, ", "))
	}
	if p := res.Plan; p != nil {
		var parts []string
		for _, part := range []struct {
			on   bool
			name string
		}{{p.Ensure, "ensure"}, {p.KeepPodTemplate, "keep-template"}, {p.Cleanup, "cleanup"}, {p.Status != nil, "status"}} {
			if part.on {
				parts = append(parts, part.name)
			}
		}
		if len(p.ReplacePods) > 0 {
			var pods []string
			for _, pod := range p.ReplacePods {
				pods = append(pods, podString(pod))
			}
			parts = append(parts, "replace "+strings.Join(pods, " "))
		}
		if p.Nudge != "" {
			parts = append(parts, "nudge "+p.Nudge)
		}
		if db := p.InDatabase; db != nil {
			w := "in-database"
			if db.Sync != "" {
				w += " sync=" + db.Sync
			}
			if db.Config != "" {
				w += " config=" + db.Config
			}
			if len(db.RemoveParameters) > 0 {
				w += " remove=" + strings.Join(db.RemoveParameters, ",")
			}
			parts = append(parts, w)
		}
		for _, pod := range p.Restart {
			parts = append(parts, "restart "+podString(pod))
		}
		if sw := p.Switchover; sw != nil {
			parts = append(parts, "switchover "+sw.From+"->"+sw.To)
		}
		if p.ResumePoolers {
			parts = append(parts, "resume-poolers")
		}
		if b := p.StartBackup; b != nil {
			parts = append(parts, "start-"+b.Phase+" "+b.ID)
		}
		if p.Urgent {
			parts = append(parts, "urgent")
		}
		out = append(out, strings.TrimSpace(fmt.Sprintf("plan %d: %s", p.ID, strings.Join(parts, ", "))))
		for _, ev := range p.Records {
			kind := "Normal"
			if ev.Warning {
				kind = "Warning"
			}
			out = append(out, fmt.Sprintf("  event %s %s: %s", kind, ev.Reason, ev.Message))
		}
	}
	if ops := timerOps(res.Timers); ops != "" {
		out = append(out, "timers: "+ops)
	}
	if res.CancelInFlight {
		out = append(out, "cancel in flight")
	}
	if res.Forget {
		out = append(out, "forget")
	}
	if res.Rollout != r.rollout {
		out = append(out, fmt.Sprintf("rollout: %s -> %s", r.rollout, res.Rollout))
	}
	return append(out, statusDiff(&r.before, st)...)
}

func podString(p PodRef) string {
	s := p.Name + "/" + p.UID
	if p.Claim != "" {
		s += "/" + p.Claim + "/" + p.ClaimUID
	}
	return s
}

func timerOps(ops []TimerOp) string {
	var out []string
	for _, op := range ops {
		if op.Cancel {
			out = append(out, "cancel "+op.Name)
		} else {
			out = append(out, "set "+op.Name+"@"+since(op.Deadline))
		}
	}
	return strings.Join(out, ", ")
}

func since(t time.Time) string { return t.Sub(t0).String() }

// statusFields renders the status, but for its history, as ordered fields.
func statusFields(st *v1.PostgresqlStatus) [][2]string {
	str := func(s string) string {
		if s == "" {
			return `""`
		}
		return s
	}
	stateSince := `""`
	if st.StateSince != nil {
		stateSince = since(st.StateSince.Time)
	}
	var timers, conds []string
	for _, tm := range st.Timers {
		timers = append(timers, tm.Name+"@"+since(tm.Deadline.Time))
	}
	for _, c := range st.Conditions {
		conds = append(conds, c.Type+"="+string(c.Status))
	}
	database, config := `""`, `""`
	if db := st.Database; db != nil {
		database = "hash=" + db.Hash
		if db.SyncedAt != nil {
			database += " synced@" + since(db.SyncedAt.Time)
		}
		for _, r := range db.Roles {
			database += " role:" + r.Name
		}
		for _, d := range db.Databases {
			database += " db:" + d
		}
		if len(db.Retained) > 0 {
			database += " retained:" + strings.Join(db.Retained, ",")
		}
		if db.SyncRequest != "" {
			database += " request:" + db.SyncRequest
		}
	}
	if c := st.Config; c != nil {
		config = "hash=" + c.Hash
		if c.AppliedAt != nil {
			config += " applied@" + since(c.AppliedAt.Time)
		}
		if len(c.Parameters) > 0 {
			config += " params:" + strings.Join(c.Parameters, ",")
		}
		if len(c.PendingRestart) > 0 {
			config += " pending:" + strings.Join(c.PendingRestart, ",")
		}
	}
	for _, typ := range []string{v1.ConditionRolesSynced, v1.ConditionConfigApplied, v1.ConditionContinuousArchiving, v1.ConditionLastBackupSucceeded} {
		if c := meta.FindStatusCondition(st.Conditions, typ); c != nil {
			conds = append(conds, typ+"."+c.Reason+": "+c.Message)
		}
	}
	volumes := `""`
	if v := st.Volumes; v != nil {
		volumes = "size=" + v.Size
		for _, c := range v.Claims {
			volumes += " " + c.Name + ":" + c.Capacity + ":" + c.Phase
		}
	}
	backup := `""`
	if b := st.Backup; b != nil {
		backup = b.Repository
		if a := b.Archiving; a != nil {
			backup += fmt.Sprintf(" failing=%v", a.Failing)
			if a.LastArchivedWAL != "" {
				backup += " last=" + a.LastArchivedWAL
			}
		}
		if r := b.Running; r != nil {
			backup += fmt.Sprintf(" running=%s(%s,deadline+%s)", r.ID, r.Reason, r.Deadline.Sub(t0))
		}
		if n := b.NextScheduled; n != nil {
			backup += fmt.Sprintf(" next=%s@%s", n.Type, n.Time.UTC().Format(time.RFC3339))
		}
		if b.Request != "" {
			backup += " request=" + b.Request
		}
		if len(b.Backups) > 0 {
			labels := make([]string, len(b.Backups))
			for i, x := range b.Backups {
				labels[i] = x.Label
			}
			backup += fmt.Sprintf(" backups=%d:%s", b.BackupCount, strings.Join(labels, ","))
		}
		if l := b.LastFailure; l != nil {
			backup += " failed=" + l.ID
		}
	}
	var requests []string
	for _, r := range st.Requests {
		w := r.Kind + "=" + r.Value + ":" + r.Phase
		if r.Message != "" {
			w += "(" + r.Message + ")"
		}
		requests = append(requests, w)
	}
	return [][2]string{
		{"state", str(st.State)}, {"stateSince", stateSince}, {"epoch", fmt.Sprint(st.Epoch)},
		{"observedGeneration", fmt.Sprint(st.ObservedGeneration)}, {"reason", str(st.Reason)}, {"message", str(st.Message)},
		{"attempt", fmt.Sprint(st.Attempt)}, {"ready", str(st.Ready)}, {"primary", str(st.Primary)},
		{"lastPrimary", str(st.LastPrimary)}, {"timers", str(strings.Join(timers, " "))},
		{"conditions", str(strings.Join(conds, " "))},
		{"requests", str(strings.Join(requests, " "))},
		{"database", database}, {"config", config}, {"volumes", volumes}, {"backup", backup},
	}
}

// statusLines renders a status's fields that are set.
func statusLines(st *v1.PostgresqlStatus) []string {
	var out []string
	for _, f := range statusFields(st) {
		if f[1] != `""` && f[1] != "0" {
			out = append(out, fmt.Sprintf("  %s: %s", f[0], f[1]))
		}
	}
	if len(out) == 0 {
		return nil
	}
	return append([]string{"status:"}, out...)
}

// statusDiff renders the fields that changed from a to b, and the history
// entries b added.
func statusDiff(a, b *v1.PostgresqlStatus) []string {
	var out []string
	fa, fb := statusFields(a), statusFields(b)
	for i := range fa {
		if fa[i][1] != fb[i][1] {
			out = append(out, fmt.Sprintf("  %s: %s -> %s", fa[i][0], fa[i][1], fb[i][1]))
		}
	}
	for _, h := range added(a.History, b.History) {
		s := fmt.Sprintf("  history: + %s %s->%s", h.Event, h.From, h.To)
		if h.Reason != "" {
			s += " " + h.Reason
		}
		if h.Message != "" {
			s += ": " + h.Message
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil
	}
	return append([]string{"status:"}, out...)
}

// added returns the entries of the history b added to a: those after a's
// last entry (the oldest may have been dropped).
func added(a, b []v1.Transition) []v1.Transition {
	if len(a) == 0 {
		return b
	}
	last := a[len(a)-1]
	for i := len(b) - 1; i >= 0; i-- {
		if equality.Semantic.DeepEqual(b[i], last) {
			return b[i+1:]
		}
	}
	return b
}

// check returns what does not hold after the last input that always
// must.
func (r *runner) check() []string {
	var bad []string
	m, res := r.m, r.res
	st := m.Status()
	for _, f := range res.Fired {
		if want := transitionTo(f.Event, f.From); f.To != want {
			bad = append(bad, fmt.Sprintf("%s from %s went to %s, the table says %s", f.Event, f.From, f.To, want))
		}
	}
	if res.From != r.before.State || res.To != st.State || res.Epoch != st.Epoch {
		bad = append(bad, fmt.Sprintf("result %s -> %s epoch %d, status %s -> %s epoch %d", res.From, res.To, res.Epoch, r.before.State, st.State, st.Epoch))
	}
	loop := map[string]time.Time{}
	for _, tm := range m.soft {
		loop[tm.Name] = tm.Deadline.Time
		if tm.Epoch != st.Epoch {
			bad = append(bad, fmt.Sprintf("soft timer %s has epoch %d, the status %d", tm.Name, tm.Epoch, st.Epoch))
		}
	}
	for _, tm := range st.Timers {
		loop[tm.Name] = tm.Deadline.Time
		if tm.Epoch != st.Epoch {
			bad = append(bad, fmt.Sprintf("timer %s has epoch %d, the status %d", tm.Name, tm.Epoch, st.Epoch))
		}
		if tm.Name == TimerLossGrace && st.State != Running {
			bad = append(bad, "lossGrace pending in "+st.State)
		}
	}
	if !maps.EqualFunc(loop, r.loop, time.Time.Equal) {
		bad = append(bad, fmt.Sprintf("the loop holds timers %v, the status %v", r.loop, loop))
	}
	// The ready count shown is the one status counts.
	if st.Ready != "" && st.Ready != fmt.Sprintf("%d/%d", st.ReadyInstances, st.DesiredInstances) {
		bad = append(bad, fmt.Sprintf("ready %s, readyInstances %d of %d", st.Ready, st.ReadyInstances, st.DesiredInstances))
	}
	// A history entry, a state's or a primary's change, has the input's time.
	for _, h := range added(r.before.History, st.History) {
		if !h.Time.Time.Equal(t0.Add(r.at)) {
			bad = append(bad, fmt.Sprintf("history entry %s at %s, the input at %s", h.Event, since(h.Time.Time), r.at))
		}
	}
	if p := res.Plan; p != nil && p.Status != nil && !equality.Semantic.DeepEqual(p.Status, st) {
		bad = append(bad, "the plan's snapshot is not the status")
	}
	if err := checkOutbox(&m.out); err != nil {
		bad = append(bad, err.Error())
	}
	if err := checkRollout(m); err != nil {
		bad = append(bad, err.Error())
	}
	if w := m.out.want; w == cleanupWork && st.State != Deleting || w == ensureWork && st.State == Deleting {
		bad = append(bad, fmt.Sprintf("effects %d wanted in %s", w, st.State))
	}
	if r.handled && st.State != Deleted {
		reason := st.Reason
		if reason == "" {
			reason = st.State
		}
		for _, typ := range []string{v1.ConditionReady, v1.ConditionProgressing, v1.ConditionDegraded} {
			c := meta.FindStatusCondition(st.Conditions, typ)
			if c == nil || c.Reason != reason || c.Message != st.Message || c.ObservedGeneration != st.ObservedGeneration {
				bad = append(bad, fmt.Sprintf("condition %s %+v does not follow the status", typ, c))
			}
		}
	}
	return bad
}

// transitionTo follows Table for one fired event.
func transitionTo(event, from string) string {
	for _, t := range Table {
		if t.Event == event && slices.Contains(t.From, from) {
			if t.To == "" {
				return from
			}
			return t.To
		}
	}
	return from
}
