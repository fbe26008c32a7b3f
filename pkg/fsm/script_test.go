package fsm

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// TestScripts runs the scripts under testdata/: the state machine's
// behaviour as data, in the manner of etcd raft's interaction tests. Each
// command is one line, followed by a line "----" and the output it must
// give, up to a blank line; `go test ./pkg/fsm -run TestScripts -update`
// rewrites the outputs. Lines starting with # are comments.
//
// Commands (times are durations since t0, 2026-11-30 12:00:00 UTC):
//
//	start [state=S] [loss-grace=D] [applied-sync=H] [applied-config=H]
//	    A new machine. With a state, one resumed in it at epoch 5, having
//	    acted on generation 1, with the timer it would hold there, due at
//	    1m (timeout in Creating and Updating, resync in Running, retry in
//	    Degraded), and the sync and configuration given recorded as
//	    applied; Resume is not called, as if the machine had been
//	    running. Without, a cluster never seen (no status).
//	restart
//	    A new operator process: a machine made from the persisted status,
//	    then Resume; the output is the timers it hands the new loop.
//	observe [facts]
//	fire TIMER [epoch=N] [facts]
//	    The timer fires, in the current epoch unless given.
//	done [plan=N] [error="..." | waiting="..."] [part=roles|config] [facts]
//	    The plan (by default the latest) reports: ok, failed, or waiting
//	    (an error wrapping ErrWaiting); with part, the error is a
//	    PartError of the in-database work.
//	panic error="..." [facts]
//
// Every input may say inflight=N: plan N is running (Input.InFlight), so
// it is not superseded and reports.
//
// Every input may say at=D; by default it comes 1s after the one before
// (the first at 0s). Facts, when a line gives any, replace the facts of the
// input before; a line that gives none reuses them:
//
//	gen=N desired=N ready=N primary=POD no-primary="why" current
//	outdated=N replace=POD/UID[/CLAIM/CLAIMUID],... nudge=VERSION
//	stuck="Reason: message" spec-error="..." deleting gone
//	sync=HASH sync-boot sync-missing config=HASH config-boot params=P,... users=U,...
//	databases=D,... sync-request=V target=POD no-target="why"
//	pending=POD,... restart=POD/UID switchover=FROM>TO window=D
//	running started template no-slot="why" size=Q volume=NAME:CAPACITY:PHASE[:MESSAGE]
//
// running says the pod to replace runs PostgreSQL (Facts.ReplaceRunning),
// started that a rollout is under way (Facts.RolloutStarted), template
// that the pod template is to change (Facts.TemplateChanged), and no-slot
// that the controller's rollout budget has no slot for the cluster
// (Facts.RolloutWait); without it, the cluster may roll. window says the
// maintenance windows are closed until D since t0 (Facts.MaintenanceWait,
// MaintenanceOpens).
//
// The output of an input: what was ignored, the events fired, the plan
// (ensure, cleanup, status, pods to replace, nudge, in-database work,
// restart, switchover, urgent, then its Events), the timer operations
// handed to the loop, cancel and forget, the cluster's part in the rollout
// budget when it changed, and the status fields that changed, with the
// history entries added. After every input
// the runner checks what must always hold (runner.check), and after all
// scripts that every row of Table fired from every source state.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	covered := map[guardKey]bool{}
	ran := 0
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			ran++
			runScript(t, file, covered)
		})
	}
	if ran < len(files) || t.Failed() {
		return // some scripts did not run: coverage unknown
	}
	// Every row of the table, from every source state, was exercised.
	for _, tr := range Table {
		for _, from := range tr.From {
			if !covered[guardKey{tr.Event, from}] {
				t.Errorf("no script fires %s from %s", tr.Event, from)
			}
		}
	}
}

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

func runScript(t *testing.T, file string, covered map[guardKey]bool) {
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blocks, tail, err := parseScript(string(text))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	r := &runner{covered: covered}
	var out strings.Builder
	for _, b := range blocks {
		got, err := r.run(b.cmd)
		if err != nil {
			t.Fatalf("%s:%d: %s: %v", file, b.line, b.cmd, err)
		}
		for _, problem := range r.check() {
			t.Errorf("%s:%d: %s: %s", file, b.line, b.cmd, problem)
		}
		if !*update && !slices.Equal(got, b.want) {
			t.Errorf("%s:%d: %s\n got:\n%s\nwant:\n%s", file, b.line, b.cmd, strings.Join(got, "\n"), strings.Join(b.want, "\n"))
		}
		for _, l := range b.before {
			out.WriteString(l + "\n")
		}
		out.WriteString(b.cmd + "\n----\n")
		for _, l := range got {
			out.WriteString(l + "\n")
		}
	}
	for _, l := range tail {
		out.WriteString(l + "\n")
	}
	if *update && out.String() != string(text) {
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// runner holds one script's machine and what the event loop would know.
type runner struct {
	cfg   Config
	m     *Machine
	facts Facts
	// at is the time of the last input since t0, inputs their number
	// since the last start.
	at     time.Duration
	inputs int
	// latest is the ID of the latest plan.
	latest uint64
	// loop are the timers the loop holds, as the results told it.
	loop map[string]time.Time
	// before is the status before the last input, res its result.
	before v1.PostgresqlStatus
	res    Result
	input  Input
	// handled: the last command was an input the machine did not ignore.
	handled bool
	// rollout is the machine's part in the rollout budget before the last
	// input, as the controller knows it.
	rollout Rollout

	covered map[guardKey]bool
}

func (r *runner) run(line string) ([]string, error) {
	words, err := splitWords(line)
	if err != nil {
		return nil, err
	}
	cmd, args := words[0], map[string]string{}
	var rest []string
	for _, w := range words[1:] {
		k, v, _ := strings.Cut(w, "=")
		switch k {
		case "state", "loss-grace", "status-delay", "inflight", "epoch", "plan", "error", "waiting", "at", "part", "applied-sync", "applied-config":
			args[k] = v
		default:
			rest = append(rest, w)
		}
	}
	if cmd == "start" {
		return r.start(args, rest)
	}
	if r.m == nil {
		return nil, errors.New("no machine: start first")
	}
	if cmd == "restart" {
		return r.restart(rest)
	}
	in := Input{Kind: Signal}
	switch cmd {
	case "observe":
	case "fire":
		if len(rest) == 0 {
			return nil, errors.New("fire which timer?")
		}
		in = Input{Kind: TimerFired, Timer: rest[0], Epoch: r.m.Status().Epoch}
		rest = rest[1:]
		if e, ok := args["epoch"]; ok {
			if in.Epoch, err = strconv.ParseInt(e, 10, 64); err != nil {
				return nil, err
			}
		}
	case "done":
		in = Input{Kind: PlanDone, PlanID: r.latest}
		if p, ok := args["plan"]; ok {
			if in.PlanID, err = strconv.ParseUint(p, 10, 64); err != nil {
				return nil, err
			}
		}
		if e, ok := args["error"]; ok {
			in.Err = errors.New(e)
		}
		if w, ok := args["waiting"]; ok {
			in.Err = fmt.Errorf("%s (%w)", w, ErrWaiting)
		}
		if part, ok := args["part"]; ok && in.Err != nil {
			in.Err = &PartError{Part: part, Err: in.Err}
		}
	case "panic":
		in = Input{Kind: Panicked, Err: errors.New(args["error"])}
	default:
		return nil, fmt.Errorf("unknown command %s", cmd)
	}
	if len(rest) > 0 {
		if r.facts, err = parseFacts(rest); err != nil {
			return nil, err
		}
	}
	if f, ok := args["inflight"]; ok {
		if in.InFlight, err = strconv.ParseUint(f, 10, 64); err != nil {
			return nil, err
		}
	}
	if at, ok := args["at"]; ok {
		if r.at, err = time.ParseDuration(at); err != nil {
			return nil, err
		}
	} else if r.inputs > 0 {
		r.at += time.Second
	}
	r.inputs++
	r.before, r.input, r.rollout = *r.m.Status().DeepCopy(), in, r.res.Rollout
	r.res = r.m.Handle(in, r.facts, t0.Add(r.at))
	r.handled = r.res.Ignored == ""
	r.loopLearns()
	return r.output(), nil
}

func (r *runner) start(args map[string]string, rest []string) ([]string, error) {
	if len(rest) > 0 {
		return nil, fmt.Errorf("start takes no facts: %v", rest)
	}
	r.cfg = DefaultConfig()
	r.cfg.StatusDelay = 0
	for name, d := range map[string]*time.Duration{"loss-grace": &r.cfg.LossGrace, "status-delay": &r.cfg.StatusDelay} {
		if v, ok := args[name]; ok {
			var err error
			if *d, err = time.ParseDuration(v); err != nil {
				return nil, err
			}
		}
	}
	var st *v1.PostgresqlStatus
	if s, ok := args["state"]; ok {
		if !knownState(s) {
			return nil, fmt.Errorf("unknown state %s", s)
		}
		st = statusIn(s)
		if h, ok := args["applied-sync"]; ok {
			st.Database = &v1.DatabaseStatus{Hash: h}
		}
		if h, ok := args["applied-config"]; ok {
			st.Config = &v1.ConfigStatus{Hash: h}
		}
	}
	r.m = newMachine(NewEngine(r.cfg), st)
	r.facts, r.at, r.inputs, r.latest, r.handled = Facts{}, 0, 0, 0, false
	r.res = Result{From: r.m.State(), To: r.m.State(), Epoch: r.m.Status().Epoch}
	r.before = *r.m.Status().DeepCopy()
	r.loop = map[string]time.Time{}
	for _, tm := range append(r.m.Status().Timers, r.m.soft...) {
		r.loop[tm.Name] = tm.Deadline.Time
	}
	return statusLines(r.m.Status()), nil
}

func (r *runner) restart(rest []string) ([]string, error) {
	if len(rest) > 0 {
		return nil, fmt.Errorf("restart takes no facts: %v", rest)
	}
	r.m = NewEngine(r.cfg).New(r.m.Status())
	r.before = *r.m.Status().DeepCopy()
	r.res = r.m.Resume(t0.Add(r.at))
	r.latest, r.input, r.handled = 0, Input{}, false
	// The new process's loop holds only what Resume hands it.
	r.loop = map[string]time.Time{}
	r.loopLearns()
	var out []string
	if ops := timerOps(r.res.Timers); ops != "" {
		out = append(out, "timers: "+ops)
	}
	return out, nil
}

// loopLearns applies the last result to the loop's timers, as the event
// loop does: a fired timer is gone, a new epoch drops every timer.
func (r *runner) loopLearns() {
	res := r.res
	if r.input.Kind == TimerFired && res.Ignored == "" {
		delete(r.loop, r.input.Timer)
	}
	if res.Epoch != r.before.Epoch {
		r.loop = map[string]time.Time{}
	}
	for _, op := range res.Timers {
		if op.Cancel {
			delete(r.loop, op.Name)
		} else {
			r.loop[op.Name] = op.Deadline
		}
	}
	if res.Plan != nil {
		r.latest = res.Plan.ID
	}
	for _, f := range res.Fired {
		r.covered[guardKey{f.Event, f.From}] = true
	}
}

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
	for _, typ := range []string{v1.ConditionRolesSynced, v1.ConditionConfigApplied} {
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
	return [][2]string{
		{"state", str(st.State)}, {"stateSince", stateSince}, {"epoch", fmt.Sprint(st.Epoch)},
		{"observedGeneration", fmt.Sprint(st.ObservedGeneration)}, {"reason", str(st.Reason)}, {"message", str(st.Message)},
		{"attempt", fmt.Sprint(st.Attempt)}, {"ready", str(st.Ready)}, {"primary", str(st.Primary)},
		{"lastPrimary", str(st.LastPrimary)}, {"timers", str(strings.Join(timers, " "))},
		{"conditions", str(strings.Join(conds, " "))},
		{"database", database}, {"config", config}, {"volumes", volumes},
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
	if p := res.Plan; p != nil && p.Status != nil && !equality.Semantic.DeepEqual(p.Status, st) {
		bad = append(bad, "the plan's snapshot is not the status")
	}
	if err := checkOutbox(&m.out); err != nil {
		bad = append(bad, err.Error())
	}
	if err := checkRollout(m); err != nil {
		bad = append(bad, err.Error())
	}
	if w := m.out.want; w == cleanupEffects && st.State != Deleting || w == ensureEffects && st.State == Deleting {
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
		case "users":
			f.Users = strings.Split(v, ",")
		case "databases":
			f.Databases = strings.Split(v, ",")
		case "sync-request":
			f.SyncRequest = v
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
