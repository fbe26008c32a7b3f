package fsm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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
//	operator-restart
//	    A new operator process: a machine made from the persisted status,
//	    then Resume; the output is the timers it hands the new loop.
//	observe [facts]
//	fire TIMER [epoch=N] [facts]
//	    The timer fires, in the current epoch unless given.
//	done [plan=N] [error="..." | waiting="..."] [part=roles|config|backup] [facts]
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
//	sync=HASH sync-boot sync-missing config=HASH config-boot params=P,... loop-wait=D users=U,...
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
		case "state", "loss-grace", "status-delay", "inflight", "epoch", "plan", "error", "waiting", "at", "part", "applied-sync", "applied-config", "backup-verify":
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
	if cmd == "operator-restart" {
		return r.operatorRestart(rest)
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
	r.cfg.BackupVerify = args["backup-verify"] == "true"
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
		if !KnownState(s) {
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

func (r *runner) operatorRestart(rest []string) ([]string, error) {
	if len(rest) > 0 {
		return nil, fmt.Errorf("operator-restart takes no facts: %v", rest)
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
