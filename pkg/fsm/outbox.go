package fsm

import (
	"errors"
	"slices"
	"time"
)

// The outbox is what a Machine remembers of its plans between inputs, beside
// the status: what must be sent, what is in flight, what was acknowledged,
// and what waits. It plays the part of etcd raft's unstable log: next hands
// out what is due, as a Plan, and report accounts for the executor's result.
// The status itself is the Machine's; the outbox only knows whether a
// snapshot of it must be written.
//
// The executor may supersede a queued plan by a newer one, so a plan carries
// everything still due, not only what changed since the last one, and only
// the results of the plans the outbox tracks count: any other is stale.
//
// Invariants (checkOutbox in outbox_test.go asserts the checkable ones after
// every step of the tests and of the scripts):
//  1. seq is the ID of the latest plan; effectsPlan and statusPlan are 0 or
//     at most seq. IDs start at 1 and are never reused.
//  2. At most one kind of effects is wanted (the type says so): cleanup, and
//     only in Deleting, or ensure, never in Deleting. Wanted effects ride on
//     every plan until a plan carrying them reports. Succeeded, they are
//     acknowledged (troubled cleared, cleanupDone for a cleanup); failed,
//     they are dropped and troubled is set: the retry timer asks for them
//     again, with backoff, not the next input; waiting (ErrWaiting), they
//     are dropped and again is set: the next observation asks again; so
//     does any other ask (a timer's), which clears again (ask).
//  3. effectsPlan, when not 0, is the latest plan that carried effects and
//     has not reported. Effects may have been dropped meanwhile (entering
//     Invalid): the plan in flight still finishes and reports.
//  4. statusPlan, when not 0, is the latest plan that carried a status
//     snapshot and has not reported; until it does, every new plan carries
//     the newest snapshot again. dirty says the status changed since the
//     last snapshot was sent; a failed write makes it dirty again. So a
//     status change is never lost: it is dirty, in flight or written.
//  5. held is set when a plan that carried the status and nothing else that
//     can fail (no effects, no replacement, no nudge: Events never fail a
//     plan) failed, and cleared when a plan carrying the status succeeds.
//     While it is set and the retry timer is pending, no plan is made for
//     the status alone; the status is not lost meanwhile: held implies dirty
//     or in flight.
//  6. replace and nudge (and restart, switchover, resume and backup) ride
//     on every plan until the latest plan reports:
//     succeeded, they are done; failed, they are dropped, and the facts ask
//     for them again later: replaced is forgotten when the next input
//     begins (forget), so the failing input does not ask again; nudged
//     when the retry timer fires (retried), so an API server that refuses
//     the patch sees it again with the retry's backoff, not at once.
//  7. replaced are the UIDs of the pods asked to be replaced that the cache
//     may still list (so they are not replaced twice); nudged is the quota
//     version last asked for.
//  8. cleanupDone implies no effects are wanted: the cleanup was the last.
type outbox struct {
	seq uint64 // ID of the latest plan
	// waits counts the effects that reported waiting (ErrWaiting) one
	// after another in this state: the retry that asks again in case no
	// observation does backs off with it. Not kept in status: a restarted
	// operator asks again soon, as after any restart.
	waits int32
	// configWait: the configuration waiting for Patroni (configwait.go).
	configWait configWait

	// What must be sent.
	want work // the state's work, until a plan carrying it reports
	// sent: want rides on effectsPlan, and was not asked for again
	// since. While that plan runs, new plans need not carry it.
	sent     bool
	dirty    bool     // the status changed since the last snapshot was sent
	deferred bool     // it changed in a way that may wait (Machine.deferWrite)
	replace  []PodRef // pods the next plans delete (copy-on-write)
	nudge    string   // the quota version the next plans record
	// restart and switchover ride on every plan like replace: members
	// to restart, a switchover to ask Patroni for.
	restart    []PodRef
	switchover *Switchover
	// resumePoolers rides on every plan like switchover while status records a
	// pause of the poolers and no switchover is asked (poolerpause.go).
	resumePoolers bool
	// backup rides on every plan like switchover: the base backup run to
	// start on the primary (backups.go). backupSeen is the time of the
	// last report that the primary shows no trace of the run, which asked
	// for it again; backupErr why its last start failed, until it ends.
	backup     *BackupStart
	backupSeen time.Time
	backupErr  string
	// inDatabase is the in-database work of the latest plan carrying
	// effects, until it reports: succeeded, it is applied.
	inDatabase *InDatabase

	// What is in flight.
	effectsPlan uint64 // latest plan carrying effects, 0 once reported
	statusPlan  uint64 // latest plan carrying a status snapshot, 0 once reported

	// What was acknowledged.
	replaced []string // UIDs of the pods asked to be replaced (copy-on-write)
	nudged   string   // the quota version last asked for
	// restarted are the members asked to restart whose Patroni may
	// still report the restart pending; switchedFrom is the primary
	// asked to hand its role over, while it is still the primary. Both are forgotten with replaced after a failure.
	restarted    []string
	switchedFrom string
	// forget: the latest replacement failed; replaced is forgotten when
	// the next input begins.
	forget      bool
	cleanupDone bool // a cleanup plan succeeded
	// troubled: a plan failed (its effects, or a write) or pgloop panicked,
	// and no effects succeeded since. Pods may be Ready, but the objects
	// are not known to match the spec, or pgloop cannot write.
	troubled bool

	// What waits.
	held  bool // a failed status write waits for the retry timer
	again bool // the effects wait for the next observation (ErrWaiting)
}

// work names the state's own effects a plan may carry: its work, the
// ensure or the cleanup ('effects' alone names pkg/effects).
type work uint8

const (
	noWork work = iota
	// ensureWork: every object the spec describes created or brought
	// in line with it (Plan.Ensure).
	ensureWork
	// cleanupWork: the owned objects deleted and the finalizer
	// removed (Plan.Cleanup).
	cleanupWork
)

// begin is called when an input begins.
func (o *outbox) begin() {
	if o.forget {
		o.replaced, o.restarted, o.switchedFrom, o.forget = nil, nil, "", false
	}
}

// restartPod asks for ref to be restarted by the next plans, and
// remembers it while its Patroni reports the restart pending.
func (o *outbox) restartPod(ref *PodRef) {
	o.restarted = append(slices.Clone(o.restarted), ref.Name)
	o.restart = []PodRef{*ref}
}

// keep forgets the members asked to restart whose Patroni no longer
// reports a restart pending (pending), and the switchover asked once the
// primary is another pod. A restart the next plans would carry again is
// dropped too once its member reports nothing pending: carried again, it
// would pause the primary's pooler for nothing (poolerpause.go).
func (o *outbox) keep(pending []string, primary string) {
	if len(o.restart) > 0 && !slices.ContainsFunc(o.restart, func(r PodRef) bool { return slices.Contains(pending, r.Name) }) {
		o.restart = nil
	}
	if len(o.restarted) > 0 {
		var restarted []string
		for _, name := range o.restarted {
			if slices.Contains(pending, name) {
				restarted = append(restarted, name)
			}
		}
		o.restarted = restarted
	}
	if primary != "" && primary != o.switchedFrom {
		o.switchedFrom = ""
	}
}

// askSwitchover asks for s by the next plans, remembering the primary it
// moves away from.
func (o *outbox) askSwitchover(s *Switchover) {
	o.switchover, o.switchedFrom = s, s.From
}

// ask wants the state's effects e (noWork drops them) until a plan
// carrying them reports. Asked again while a plan carries them, they are
// sent again: what they act on may have changed since that plan started.
func (o *outbox) ask(e work) { o.want, o.sent, o.again = e, false, false }

// changed records that the status changed: the next plan writes it.
func (o *outbox) changed() { o.dirty = true }

// flush makes the changes that waited due: the next plan writes them.
func (o *outbox) flush() {
	if o.deferred {
		o.dirty = true
	}
}

// trouble records a failure or a panic: trust nothing until effects succeed.
func (o *outbox) trouble() { o.troubled = true }

// signalled is told of every Signal (the cluster's objects changed):
// effects that were waiting for one (ErrWaiting) are asked for again, e
// being the state's.
func (o *outbox) signalled(e work) {
	if o.again {
		o.again = false
		o.ask(e)
	}
}

// replacePods asks for refs to be deleted by the next plans. listed are the
// pods the cache lists for replacement now: the UIDs asked for earlier are
// remembered while it may still show their pods, and forgotten once it does
// not.
func (o *outbox) replacePods(refs, listed []PodRef) {
	asked := o.replaced
	if o.forget {
		asked, o.forget = nil, false
	}
	var replaced []string
	for _, uid := range asked {
		if slices.ContainsFunc(listed, func(p PodRef) bool { return p.UID == uid }) {
			replaced = append(replaced, uid)
		}
	}
	for _, p := range refs {
		replaced = append(replaced, p.UID)
	}
	o.replaced = replaced
	o.replace = append(slices.Clone(o.replace), refs...)
}

// retried forgets what was asked for once and may not have happened: the
// retry timer fired, and a nudge that failed (or whose annotation the cache
// still does not show) is asked for again, and so is a switchover Patroni
// accepted while the primary stayed (its candidate failed to promote, or
// the old primary took the lock back before pgloop saw another): else the
// rollout would wait for a primary change that never comes.
func (o *outbox) retried() { o.nudged, o.switchedFrom = "", "" }

// askNudge asks for the quota version v to be recorded on the StatefulSet,
// once per version.
func (o *outbox) askNudge(v string) {
	if v != "" && v != o.nudged {
		o.nudge, o.nudged = v, v
	}
}

// next makes the plan of what is due and reports whether it carries a status
// snapshot, which the caller attaches. There is no plan when nothing asks for
// one: (1) no effects, no Event to record (events), no pod to replace and no
// nudge, and (2) no status change to write (a snapshot in flight already
// carries the latest), or only one that is held while the retry timer is
// pending (retryPending).
func (o *outbox) next(events, retryPending bool, inFlight uint64) (p *Plan, status bool) {
	// Effects sent on the plan that runs now need no new plan: it is not
	// superseded, and its report is accounted.
	want := o.want
	if o.sent && o.effectsPlan != 0 && o.effectsPlan == inFlight {
		want = noWork
	}
	if want == noWork && !events && !o.carries() && (!o.dirty || o.held && retryPending) {
		return nil, false
	}
	// A plan made anyway carries the status while another snapshot is in
	// flight (the executor may supersede a queued plan), and writes what
	// waited too.
	status = o.dirty || o.statusPlan != 0 || o.deferred
	o.seq++
	p = &Plan{ID: o.seq, Ensure: want == ensureWork, Cleanup: want == cleanupWork, ReplacePods: o.replace, Nudge: o.nudge,
		Restart: o.restart, Switchover: o.switchover, ResumePoolers: o.resumePoolers, StartBackup: o.backup}
	if status {
		o.statusPlan, o.dirty, o.deferred = p.ID, false, false
	}
	if want != noWork {
		o.effectsPlan, o.sent = p.ID, true
	}
	return p, status
}

// carries reports whether there is a replacement, a nudge, a restart, a
// switchover, a resume of the poolers or a backup's start to carry on the
// next plans.
func (o *outbox) carries() bool {
	return len(o.replace) > 0 || o.nudge != "" || len(o.restart) > 0 || o.switchover != nil || o.resumePoolers || o.backup != nil
}

// receipt is what the result of a plan means to the machine.
type receipt struct {
	// stale: a newer plan carries everything this one did.
	stale bool
	// written: the plan's status snapshot, the latest sent, was written.
	written bool
	// outcome of the effects, or of the whole plan when it failed.
	outcome outcome
	// inDatabase is the in-database work of the effects that reported:
	// all of it applied when they succeeded, the part before the one
	// that failed or waits otherwise (PartError).
	inDatabase *InDatabase
	// poolersResumed: the plan carried the resume of the poolers and succeeded.
	poolersResumed bool
}

type outcome uint8

const (
	// noOutcome: nothing for the state machine.
	noOutcome outcome = iota
	// succeeded: the effects in flight succeeded (effectsSucceeded).
	succeeded
	// failed: the effects in flight, or the latest plan, failed
	// (effectsFailed).
	failed
	// waiting: the effects in flight are waiting (ErrWaiting): they are
	// asked for again on the next observation.
	waiting
)

// report accounts for the result of plan id, err nil when it succeeded.
func (o *outbox) report(id uint64, err error) receipt {
	var r receipt
	latest := id == o.seq
	// Replacements and a nudge ride on every plan: the latest one's
	// result is theirs. After a failure they are asked again when the
	// retry comes.
	carried := latest && o.carries()
	if carried {
		if err != nil {
			o.forget = true
		}
		r.poolersResumed = o.resumePoolers && err == nil
		o.replace, o.nudge, o.restart, o.switchover, o.resumePoolers, o.backup = nil, "", nil, nil, false, nil
	}
	accounted := latest
	if o.statusPlan != 0 && id == o.statusPlan {
		o.statusPlan, accounted = 0, true
		if err != nil {
			// The snapshot may not have been written: write it again,
			// the latest one. The error does not say which step
			// failed, but in a plan without effects or a replacement
			// only the status can fail it (Events never do): then
			// hold the write until the retry timer the failure arms
			// has fired. When other effects failed too, nothing new
			// is known about the status: it is written again at once,
			// and held if that write fails.
			o.dirty = true
			if id != o.effectsPlan && !carried {
				o.held = true
			}
		} else {
			o.held, r.written = false, true
		}
	}
	switch {
	case o.effectsPlan != 0 && id == o.effectsPlan:
		o.effectsPlan = 0
		done, db := o.want, o.inDatabase
		o.want, o.sent, o.inDatabase = noWork, false, nil
		r.inDatabase = db
		switch {
		case errors.Is(err, ErrWaiting):
			o.again, r.outcome = true, waiting
		case err != nil:
			// Not again at once: the retry timer asks, with backoff.
			o.troubled, r.outcome = true, failed
		default:
			o.troubled, r.outcome = false, succeeded
			if done == cleanupWork {
				o.cleanupDone = true
			}
		}
	case latest && err != nil:
		// The latest plan wrote only status or events, or replaced a
		// pod, and failed. As for failed effects, trust nothing until a
		// retry's effects succeed: otherwise a Running cluster would go
		// to Degraded and straight back (podsReady) on every failed
		// write, each time with two Events to record and a new plan.
		o.troubled, r.outcome = true, failed
	}
	r.stale = !accounted && r.outcome == noOutcome
	return r
}
