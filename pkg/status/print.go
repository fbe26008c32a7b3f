package status

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// PrintOptions are how the list and detail views are printed.
type PrintOptions struct {
	// AllNamespaces adds the NAMESPACE column, as kubectl does under -A.
	AllNamespaces bool
	// Wide adds EPOCH, PRIMARY and the full MESSAGE (-o wide).
	Wide bool
	// Color paints states; callers set it from UseColor.
	Color bool
	// Now is the clock ages and timers are measured against; absolute
	// times are printed in its location.
	Now time.Time
}

// shortMessage bounds the message in the REASON column of the list.
const shortMessage = 48

// PrintTable prints the list view: one aligned line per row, in the order
// given (List sorts them). It prints nothing, not even the header, for no
// rows: the caller says so on stderr, as kubectl does.
func PrintTable(w io.Writer, rows []Row, o PrintOptions) error {
	if len(rows) == 0 {
		return nil
	}
	var t table
	head := []string{"NAME", "STATE", "SINCE", "READY", "NEXT", "REASON"}
	if o.AllNamespaces {
		head = append([]string{"NAMESPACE"}, head...)
	}
	if o.Wide {
		head = append(head, "EPOCH", "PRIMARY", "MESSAGE")
	}
	t.add(head...)
	for _, r := range rows {
		reason := dash(r.Reason)
		if !o.Wide {
			reason = dash(join(r.Reason, truncate(firstLine(r.Message), shortMessage)))
		}
		cells := []string{r.Name, paint(r.State, o.Color), age(r.Since, o.Now),
			fmt.Sprintf("%d/%d", r.Ready, r.Desired), next(r.Next, o.Now), reason}
		if o.AllNamespaces {
			cells = append([]string{r.Namespace}, cells...)
		}
		if o.Wide {
			cells = append(cells, strconv.FormatInt(r.Epoch, 10), dash(r.Primary), dash(oneLine(r.Message)))
		}
		t.add(cells...)
	}
	return t.write(w, "")
}

// PrintDetail prints the detail view of one cluster.
func PrintDetail(w io.Writer, v *View, o PrintOptions) error {
	pg := v.Cluster
	st := &pg.Status
	state := StateOf(pg)
	p := &printer{w: w}

	var since time.Time
	if st.StateSince != nil {
		since = st.StateSince.Time
	} else {
		since = pg.CreationTimestamp.Time
	}
	var fields table
	fields.add("Name:", pg.Name)
	fields.add("Namespace:", pg.Namespace)
	fields.add("State:", fmt.Sprintf("%s for %s (since %s)", paint(state, o.Color), age(since, o.Now), clock(since, o.Now)))
	fields.add("Reason:", dash(st.Reason))
	fields.add("Message:", dash(st.Message))
	fields.add("Ready:", fmt.Sprintf("%d/%d", st.ReadyInstances, RowFor(pg).Desired))
	fields.add("Primary:", dash(st.Primary))
	if store := patroniStore(pg); store != "" {
		fields.add("Patroni store:", store)
	}
	fields.add("Epoch:", strconv.FormatInt(st.Epoch, 10))
	fields.add("Generation:", fmt.Sprintf("%d (observed %d)", pg.Generation, st.ObservedGeneration))
	if st.Attempt > 0 {
		fields.add("Attempt:", strconv.Itoa(int(st.Attempt)))
	}
	if pg.DeletionTimestamp != nil {
		fields.add("Deletion:", fmt.Sprintf("requested %s ago (%s)", age(pg.DeletionTimestamp.Time, o.Now), clock(pg.DeletionTimestamp.Time, o.Now)))
	}
	p.table(&fields, "")

	p.section("Conditions")
	if len(st.Conditions) == 0 {
		p.none()
	} else {
		var t table
		t.add("TYPE", "STATUS", "REASON", "AGE", "MESSAGE")
		for _, c := range st.Conditions {
			t.add(c.Type, string(c.Status), dash(c.Reason), age(c.LastTransitionTime.Time, o.Now), dash(oneLine(c.Message)))
		}
		p.table(&t, "  ")
	}

	p.requests(st, o.Now)
	p.inDatabase(st, o.Now)
	p.volumes(st)
	p.backups(st, o.Now)
	p.passwordRotation(st, o.Now)
	p.poolers(v)

	p.section("Timers")
	if len(st.Timers) == 0 {
		p.none()
	} else {
		var t table
		t.add("NAME", "DEADLINE", "WHEN")
		for i := range st.Timers {
			tm := &st.Timers[i]
			when := relative(tm.Deadline.Time, o.Now)
			if stale(st, tm) {
				when = fmt.Sprintf("stale (epoch %d), ignored", tm.Epoch)
			}
			t.add(tm.Name, clock(tm.Deadline.Time, o.Now), when)
		}
		p.table(&t, "  ")
	}

	p.section("Transitions (oldest first)")
	if len(st.History) == 0 {
		p.none()
	} else {
		var t table
		t.add("TIME", "AGE", "FROM", "TO", "EVENT", "REASON")
		for _, h := range st.History {
			t.add(clock(h.Time.Time, o.Now), age(h.Time.Time, o.Now), h.From, h.To, h.Event, dash(join(h.Reason, h.Message)))
		}
		p.table(&t, "  ")
	}

	p.section("Pods")
	switch {
	case v.PodsError != nil:
		p.line("  (" + v.PodsError.Error() + ")")
	case len(v.Pods) == 0:
		p.none()
	default:
		var t table
		t.add("NAME", "ROLE", "PHASE", "READY", "RESTARTS", "AGE", "WHY")
		for _, pod := range v.Pods {
			t.add(pod.Name, dash(pod.Role), dash(string(pod.Phase)), strconv.FormatBool(pod.Ready),
				strconv.Itoa(int(pod.Restarts)), age(pod.Created, o.Now), dash(pod.Why))
		}
		p.table(&t, "  ")
	}

	p.section(fmt.Sprintf("State machine (events available from %s; --mermaid for a diagram)", state))
	p.diagram(state, o.Color)
	return p.err
}

// inDatabase writes what pgloop applied inside PostgreSQL and Patroni:
// each role with when it was last synced, the databases, what the spec no
// longer lists, the configuration and the members pending a restart.
func (p *printer) inDatabase(st *v1.PostgresqlStatus, now time.Time) {
	p.section("Inside PostgreSQL")
	db, cfg := st.Database, st.Config
	if db == nil && cfg == nil {
		p.none()
		return
	}
	var fields table
	if db != nil {
		synced := "by Patroni's bootstrap (no users, no databases)"
		if db.SyncedAt != nil {
			synced = fmt.Sprintf("%s ago (%s)", age(db.SyncedAt.Time, now), clock(db.SyncedAt.Time, now))
		}
		fields.add("Roles synced:", synced)
		if len(db.Databases) > 0 {
			fields.add("Databases:", strings.Join(db.Databases, ", "))
		}
		if len(db.Retained) > 0 {
			fields.add("Left in place:", strings.Join(db.Retained, ", ")+" (no longer in the spec; pgloop never drops them)")
		}
		if db.SyncRequest != "" {
			fields.add("Sync request:", db.SyncRequest)
		}
	}
	if cfg != nil {
		applied := "bootstrapped with it"
		if cfg.AppliedAt != nil {
			applied = fmt.Sprintf("%s ago (%s)", age(cfg.AppliedAt.Time, now), clock(cfg.AppliedAt.Time, now))
		}
		fields.add("Configuration:", applied)
		if len(cfg.Parameters) > 0 {
			fields.add("Parameters:", strings.Join(cfg.Parameters, ", ")+" (in Patroni's dynamic configuration)")
		}
		pending := "none"
		if len(cfg.PendingRestart) > 0 {
			pending = strings.Join(cfg.PendingRestart, ", ")
		}
		fields.add("Restart pending:", pending)
	}
	p.table(&fields, "  ")
	if db != nil && len(db.Roles) > 0 {
		var t table
		t.add("ROLE", "SYNCED")
		for _, r := range db.Roles {
			t.add(r.Name, fmt.Sprintf("%s ago (%s)", age(r.SyncedAt.Time, now), clock(r.SyncedAt.Time, now)))
		}
		p.table(&t, "  ")
	}
}

// volumes writes the growth of the data volumes to spec.volume.size, while
// a claim does not have it: each claim's request, capacity and phase.
// requests writes the users' last request of each kind (pgloop sync,
// pgloop backup, a password rotation) and what became of it; nothing
// when there was none.
func (p *printer) requests(st *v1.PostgresqlStatus, now time.Time) {
	if len(st.Requests) == 0 {
		return
	}
	p.section("Requests")
	var t table
	t.add("KIND", "VALUE", "PHASE", "SEEN", "MESSAGE")
	for _, r := range st.Requests {
		t.add(r.Kind, r.Value, r.Phase, age(r.SeenAt.Time, now), dash(oneLine(r.Message)))
	}
	p.table(&t, "  ")
}

func (p *printer) volumes(st *v1.PostgresqlStatus) {
	v := st.Volumes
	if v == nil {
		return
	}
	p.section("Volumes (growing to " + v.Size + ")")
	var t table
	t.add("CLAIM", "REQUESTED", "CAPACITY", "PHASE", "WHY")
	for _, c := range v.Claims {
		t.add(c.Name, dash(c.Requested), dash(c.Capacity), c.Phase, dash(c.Message))
	}
	p.table(&t, "  ")
}

// backups writes where the cluster's backups go and how its archiving
// goes, when it has a repository (or one it cannot archive to).
func (p *printer) backups(st *v1.PostgresqlStatus, now time.Time) {
	c := meta.FindStatusCondition(st.Conditions, v1.ConditionContinuousArchiving)
	if st.Backup == nil && c == nil {
		return
	}
	p.section("Backups")
	var t table
	if b := st.Backup; b != nil {
		t.add("Repository:", b.Repository)
	}
	if c != nil {
		t.add("Archiving:", fmt.Sprintf("%s (%s): %s", c.Status, c.Reason, dash(c.Message)))
	}
	if b := st.Backup; b != nil && b.Archiving != nil {
		a := b.Archiving
		last := dash(a.LastArchivedWAL)
		if a.LastArchivedTime != nil {
			last += fmt.Sprintf(", %s ago (%s)", age(a.LastArchivedTime.Time, now), clock(a.LastArchivedTime.Time, now))
		}
		t.add("Last archived:", last)
		if a.LastFailedWAL != "" {
			failed := a.LastFailedWAL
			if a.LastFailedTime != nil {
				failed += fmt.Sprintf(", %s ago (%s)", age(a.LastFailedTime.Time, now), clock(a.LastFailedTime.Time, now))
			}
			t.add("Last failed:", failed)
		}
		t.add("Waiting:", fmt.Sprintf("%d segments; pg_wal %s", a.WaitingSegments, bytesIEC(a.WALBytes)))
		// Reports are written when they say something new: this is when
		// the one shown was read, not the last check.
		t.add("As of:", fmt.Sprintf("%s ago (%s)", age(a.CheckedAt.Time, now), clock(a.CheckedAt.Time, now)))
	}
	if b := st.Backup; b != nil {
		baseBackups(&t, b, meta.FindStatusCondition(st.Conditions, v1.ConditionLastBackupSucceeded), now)
	}
	p.table(&t, "  ")
	if b := st.Backup; b != nil && len(b.Backups) > 0 {
		var l table
		l.add("BACKUP", "TYPE", "STARTED", "TOOK", "SIZE", "IN REPOSITORY", "WAL")
		for i := len(b.Backups) - 1; i >= 0; i-- {
			x := b.Backups[i]
			l.add(x.Label, x.Type, clock(x.Start.Time, now), x.Stop.Sub(x.Start.Time).String(), bytesIEC(x.Size), bytesIEC(x.RepoSize),
				dash(x.WALStart)+" - "+dash(x.WALStop))
		}
		p.table(&l, "  ")
	}
}

// passwordRotation writes the schedule of the password rotation, for a
// cluster with users to rotate: the next date, the last rotation and the
// roles rotations made that are kept.
func (p *printer) passwordRotation(st *v1.PostgresqlStatus, now time.Time) {
	r := st.PasswordRotation
	if r == nil {
		return
	}
	p.section("Password rotation")
	var t table
	next := "none (no user to rotate)"
	if r.NextRotation != nil {
		next = fmt.Sprintf("%s (in %s)", clock(r.NextRotation.Time, now), age(now, r.NextRotation.Time))
	}
	t.add("Next:", next)
	if l := r.Last; l != nil {
		var users []string
		for _, u := range l.Users {
			users = append(users, u.Name+" -> "+u.Role)
		}
		state := "under way"
		if l.FinishedAt != nil {
			state = "finished " + clock(l.FinishedAt.Time, now)
		}
		t.add("Last:", fmt.Sprintf("%s, started %s, %s: %s", l.ID, clock(l.StartedAt.Time, now), state, strings.Join(users, ", ")))
	}
	if len(r.Roles) > 0 {
		var roles []string
		for _, x := range r.Roles {
			roles = append(roles, x.Name)
		}
		t.add("Roles kept:", strings.Join(roles, ", "))
	}
	p.table(&t, "  ")
}

// baseBackups adds the base backups' lines: the one running, the last
// result, the next scheduled, what the repository holds.
func baseBackups(t *table, b *v1.BackupStatus, c *metav1.Condition, now time.Time) {
	if r := b.Running; r != nil {
		t.add("Running:", fmt.Sprintf("%s backup %s (%s), started %s ago, gives up at %s", r.Type, r.ID, r.Reason,
			age(r.StartedAt.Time, now), clock(r.Deadline.Time, now)))
	}
	if c != nil {
		t.add("Last backup:", fmt.Sprintf("%s (%s): %s", c.Status, c.Reason, dash(c.Message)))
	}
	if f := b.LastFailure; f != nil && (c == nil || c.Status != metav1.ConditionFalse) {
		t.add("Last failure:", fmt.Sprintf("%s backup %s, %s ago: %s", f.Type, f.ID, age(f.At.Time, now), f.Message))
	}
	if n := b.NextScheduled; n != nil {
		t.add("Next scheduled:", fmt.Sprintf("%s backup at %s (%s)", n.Type, clock(n.Time.Time, now), relative(n.Time.Time, now)))
	}
	if v := b.LastVerification; v != nil {
		verdict := "sound"
		if !v.Succeeded {
			verdict = "FAILED"
		}
		t.add("Verified:", fmt.Sprintf("%s after %s, %s ago: %s", verdict, v.Backup, age(v.At.Time, now), v.Message))
	}
	if d := b.LastRestoreDrill; d != nil {
		verdict := "restored and started"
		if !d.Succeeded {
			verdict = "FAILED"
		}
		t.add("Restore drill:", fmt.Sprintf("%s after %s, %s ago: %s", verdict, d.Backup, age(d.At.Time, now), d.Message))
	}
	if b.BackupCount > 0 {
		held := fmt.Sprintf("%d base backups", b.BackupCount)
		if p := b.FirstRecoverabilityPoint; p != nil {
			held += fmt.Sprintf("; restores to any time from %s (%s ago)", clock(p.Time, now), age(p.Time, now))
		}
		t.add("Repository holds:", held)
	}
}

// bytesIEC writes n bytes in binary units: 48 MiB.
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// poolers writes the cluster's connection poolers, when it has any (or
// they could not be read): each one's ready pods and why not all are.
func (p *printer) poolers(v *View) {
	if len(v.Poolers) == 0 && v.PoolersError == nil {
		return
	}
	p.section("Connection poolers (Deployment and Service of each name)")
	if v.PoolersError != nil {
		p.line("  (" + v.PoolersError.Error() + ")")
	}
	var t table
	t.add("NAME", "ROLE", "READY", "WHY")
	for _, pl := range v.Poolers {
		t.add(pl.Name, pl.Role, fmt.Sprintf("%d/%d", pl.Ready, pl.Desired), dash(pl.Why))
	}
	if len(v.Poolers) > 0 {
		p.table(&t, "  ")
	}
}

// printer writes the sections of the detail view and keeps the first
// write error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) line(s string) {
	if p.err == nil {
		_, p.err = fmt.Fprintln(p.w, s)
	}
}

func (p *printer) section(title string) { p.line("\n" + title + ":") }

func (p *printer) none() { p.line("  <none>") }

func (p *printer) table(t *table, indent string) {
	if p.err == nil {
		p.err = t.write(p.w, indent)
	}
}

// diagram is the text form of the state diagram: every state in the
// documentation's order, the current one marked with '>', and under it
// its outgoing edges, which are the events it takes.
func (p *printer) diagram(current string, color bool) {
	for _, s := range fsm.States {
		if s != current {
			p.line("    " + s)
			continue
		}
		p.line("  > " + paint(s, color))
		var t table
		for _, e := range fsm.From(s) {
			to := e.To
			if to == "" || to == s {
				to = "(same)"
			}
			t.add(e.Event, "-> "+to, e.When)
		}
		p.table(&t, "      ")
	}
}

// PrintJSON prints v as indented JSON: rows, or a cluster from ForOutput.
func PrintJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// PrintYAML prints v as YAML, through its JSON form as kubectl does.
func PrintYAML(w io.Writer, v any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode yaml: %w", err)
	}
	_, err = w.Write(b)
	return err
}

// ForOutput returns a copy of pg as `kubectl get -o yaml` shows it: with
// its apiVersion and kind (typed clients drop them), without managedFields.
func ForOutput(pg *v1.Postgresql) *v1.Postgresql {
	out := pg.DeepCopy()
	out.APIVersion = v1.SchemeGroupVersion.String()
	out.Kind = v1.PostgresqlKind
	out.ManagedFields = nil
	return out
}

// StateOf is the cluster's state; a resource the operator has not written
// a state to yet is Pending, as the state machine treats it.
func StateOf(pg *v1.Postgresql) string { return stateOf(pg) }

// age is how long ago t was, kubectl-style (5s, 4m12s, 3h, 2d); "-" when
// unknown. A t slightly in the future (clock skew) is 0s.
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	return duration.HumanDuration(d)
}

// relative is "in 4m12s" for a future t and "overdue 3s" for a past one.
func relative(t, now time.Time) string {
	if d := t.Sub(now); d > 0 {
		return "in " + duration.HumanDuration(d)
	}
	return "overdue " + duration.HumanDuration(now.Sub(t))
}

// next is the NEXT column: the timer and when it fires.
func next(t *v1.Timer, now time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Name + " " + relative(t.Deadline.Time, now)
}

// clock is an absolute time in now's location.
func clock(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.In(now.Location()).Format(time.DateTime)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// truncate cuts s to n runes, marking the cut with "...".
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimRight(string(r[:n-3]), " ") + "..."
}

// ANSI colours of the states. Pending keeps the terminal's colour.
const (
	colorReset  = "\x1b[0m"
	colorRed    = "\x1b[31m"
	colorGreen  = "\x1b[32m"
	colorYellow = "\x1b[33m"
)

func paint(state string, color bool) string {
	if !color {
		return state
	}
	var c string
	switch state {
	case fsm.Running:
		c = colorGreen
	case fsm.Degraded, fsm.Invalid:
		c = colorRed
	case fsm.Creating, fsm.Updating, fsm.Deleting:
		c = colorYellow
	default:
		return state
	}
	return c + state + colorReset
}

// table aligns cells in columns like text/tabwriter, with three spaces
// between columns as kubectl prints them. It measures cells by their
// visible width: tabwriter counts the bytes of colour escapes and so
// misaligns a coloured column.
type table struct{ rows [][]string }

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

func width(s string) int { return utf8.RuneCountInString(ansi.ReplaceAllString(s, "")) }

func (t *table) write(w io.Writer, indent string) error {
	const gap = 3
	var widths []int
	for _, r := range t.rows {
		for i, c := range r {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], width(c))
		}
	}
	var b, line strings.Builder
	for _, r := range t.rows {
		line.Reset()
		line.WriteString(indent)
		for i, c := range r {
			line.WriteString(c)
			if i < len(r)-1 {
				line.WriteString(strings.Repeat(" ", widths[i]-width(c)+gap))
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// patroniStore says where the cluster's Patroni keeps its leader lock, when
// the cluster names its store (v1.AnnotationPatroniStore: an adopted
// zalando cluster on Endpoints has it written), "" when it does not: the
// default, ConfigMaps, is not shown.
func patroniStore(pg *v1.Postgresql) string {
	if _, set := pg.Annotations[v1.AnnotationPatroniStore]; !set {
		return ""
	}
	switch store := pg.PatroniStore(); store {
	case v1.PatroniStoreEndpoints:
		return fmt.Sprintf("%s (%s): leader lock in Endpoints %s, the master Service's, which has no selector",
			store, v1.AnnotationPatroniStore, cluster.LeaderRecordName(store, pg.Name))
	case v1.PatroniStoreConfigMaps:
		return fmt.Sprintf("%s (%s): leader lock in ConfigMap %s", store, v1.AnnotationPatroniStore, cluster.LeaderRecordName(store, pg.Name))
	default:
		return fmt.Sprintf("%q (%s): not a store pgloop knows", string(store), v1.AnnotationPatroniStore)
	}
}
