package sim

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// timerGrace is how long after its deadline a timer persisted in status
// must have fired: the loop fires it at its deadline, to the instant.
const timerGrace = time.Second

// checkState is what the invariants remember during a run. Its methods
// lock s.mu: the loop goroutine, the plans and the simulator call them.
type checkState struct {
	createdAt   map[string]time.Time
	goneAt      map[string]time.Time // resource removed from the API
	deleteAsked map[string]bool
	// writes counts each cluster's write calls by simulated minute.
	writes map[string]map[int64]int
	timers []*timerExpect
}

// timerExpect is a timer a restarted operator found in a cluster's status:
// it must fire at its deadline, not before and not never, unless the
// machine itself drops or moves it (a new epoch, the timer set again or
// cancelled).
type timerExpect struct {
	inc      int
	key      string
	name     string
	epoch    int64
	deadline time.Time
	done     bool
}

func newCheckState() checkState {
	return checkState{createdAt: map[string]time.Time{}, goneAt: map[string]time.Time{},
		deleteAsked: map[string]bool{}, writes: map[string]map[int64]int{}}
}

// violation records a broken invariant; s.mu is held.
func (s *Sim) violation(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.res.Violations = append(s.res.Violations, fmt.Sprintf("at %v: %s", s.since().Round(time.Millisecond), msg))
	s.traceLocked("VIOLATION %s", msg)
}

func (c *checkState) created(key string, at time.Time) { c.createdAt[key] = at }

func (c *checkState) askDelete(key string) { c.deleteAsked[key] = true }

// gone notes that a resource left the API (under the API's lock).
func (c *checkState) gone(s *Sim, k objKey) {
	if k.res != "postgresqls" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c.goneAt[k.ns+"/"+k.name] = s.clock.Now()
}

// restarted notes the timers a new incarnation finds persisted: those of
// the cluster's current epoch, which Machine.Resume re-arms. The
// expectations of the incarnation before are void: it is gone.
func (c *checkState) restarted(s *Sim, objs map[objKey]runtime.Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range c.timers {
		e.done = true
	}
	c.timers = c.timers[:0]
	for k, obj := range objs {
		pg, ok := obj.(*v1.Postgresql)
		if !ok || k.res != "postgresqls" {
			continue
		}
		for _, t := range pg.Status.Timers {
			if t.Epoch == pg.Status.Epoch {
				c.timers = append(c.timers, &timerExpect{inc: s.inc, key: k.ns + "/" + k.name, name: t.Name,
					epoch: t.Epoch, deadline: t.Deadline.Time})
			}
		}
	}
}

// event checks a timer that fires after a restart: not before its
// persisted deadline.
func (c *checkState) event(s *Sim, inc int, ev eventloop.Event) {
	if ev.Kind != eventloop.TimerFired {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range c.timers {
		if e.done || e.inc != inc || e.key != ev.Key || e.name != ev.Name || e.epoch != ev.Epoch {
			continue
		}
		s.res.Checks["timerAfterRestart"]++
		e.done = true
		if ev.At.Before(e.deadline) {
			s.violation("timer %s of %s fired at %v, before its persisted deadline %v", e.name, e.key, ev.At, e.deadline)
		}
	}
}

// outcome voids the expectations the machine itself changes: a new
// epoch, the timer set to another deadline or cancelled. The first
// outcome of a resumed cluster re-arms its timers with their persisted
// deadlines; that is what is expected.
func (c *checkState) outcome(s *Sim, inc int, ev eventloop.Event, out eventloop.Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range c.timers {
		if e.done || e.inc != inc || e.key != ev.Key {
			continue
		}
		if out.Epoch != e.epoch || out.Forget {
			e.done = true
			continue
		}
		for _, op := range out.Timers {
			if op.Name == e.name && (op.Cancel || !op.Deadline.Equal(e.deadline)) {
				e.done = true
			}
		}
	}
}

// nextTimerCheck is when the next persisted timer must have fired.
func (c *checkState) nextTimerCheck() (time.Time, bool) {
	var best time.Time
	for _, e := range c.timers {
		if t := e.deadline.Add(timerGrace); !e.done && (best.IsZero() || t.Before(best)) {
			best = t
		}
	}
	return best, !best.IsZero()
}

// checkTimers fails the persisted timers whose deadline passed without
// their firing, while their cluster still exists.
func (s *Sim) checkTimers(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.checks.timers {
		if e.done || e.inc != s.live || now.Before(e.deadline.Add(timerGrace)) {
			continue
		}
		s.res.Checks["timerAfterRestart"]++
		e.done = true
		if _, gone := s.checks.goneAt[e.key]; !gone {
			s.violation("timer %s of %s (epoch %d) persisted with deadline %v never fired after the restart", e.name, e.key, e.epoch, e.deadline)
		}
	}
}

// write counts a write call of a cluster's plan and bounds them per
// simulated minute, faults or not.
func (c *checkState) write(s *Sim, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res.Writes++
	s.res.Checks["writesPerMinute"]++
	minute := int64(s.since() / time.Minute)
	if c.writes[key] == nil {
		c.writes[key] = map[int64]int{}
	}
	c.writes[key][minute]++
	n := c.writes[key][minute]
	s.res.MaxWritesPerMinute = max(s.res.MaxWritesPerMinute, n)
	if n == maxWritesPerMinute+1 {
		s.violation("%s made more than %d write calls in simulated minute %d: a busy loop", key, maxWritesPerMinute, minute)
	}
}

// committed checks a write of a cluster's plan that the API stored: none
// after the cluster's deletion finished; the status epoch and observed
// generation never go back.
func (c *checkState) committed(s *Sim, planKey, verb string, key objKey, before, after runtime.Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res.Checks["noWriteAfterDeletion"]++
	if at, ok := c.goneAt[planKey]; ok {
		s.violation("%s %s by a plan of %s, whose deletion finished at %v", verb, key, planKey, at)
	}
	b, ok1 := before.(*v1.Postgresql)
	a, ok2 := after.(*v1.Postgresql)
	if !ok1 || !ok2 {
		return
	}
	s.res.Checks["statusMonotonic"]++
	if a.Status.Epoch < b.Status.Epoch {
		s.violation("%s: status.epoch went back from %d to %d", planKey, b.Status.Epoch, a.Status.Epoch)
	}
	if a.Status.ObservedGeneration < b.Status.ObservedGeneration {
		s.violation("%s: status.observedGeneration went back from %d to %d", planKey, b.Status.ObservedGeneration, a.Status.ObservedGeneration)
	}
}

// oldWrite checks a write of incarnation inc, which lost its Lease, that
// the API stored: within its overlap only (handover.go). After it the
// process is gone; this checks the simulation's model of the handover as
// much as the operator.
func (c *checkState) oldWrite(s *Sim, inc int, planKey, verb string, key objKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res.Checks["oldLeaderStops"]++
	s.res.OldWrites++
	if s.old == nil || s.old.inc != inc || !s.clock.Now().Before(s.old.until) {
		s.violation("%s %s by a plan of %s of operator %d, after its overlap ended", verb, key, planKey, inc)
	}
}

// finalChecks runs once the faults have stopped and the quiet time
// passed: every deletion finished; every cluster observed its last
// generation; every cluster that can be served is Running, every other
// says why.
func (s *Sim) finalChecks() {
	end := s.clock.Now()
	objs, _ := s.api.snapshot()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pc := range s.plan {
		created, ok := s.checks.createdAt[pc.key]
		if !ok {
			continue
		}
		until := end
		if at, gone := s.checks.goneAt[pc.key]; gone {
			until = at
		}
		s.res.ClusterHours += until.Sub(created).Hours()
		obj, exists := objs[objKey{"postgresqls", keyNS(pc.key), keyName(pc.key)}]
		if s.checks.deleteAsked[pc.key] {
			s.res.Checks["deletionFinished"]++
			if exists {
				s.violation("%s: deletion asked, resource still there (state %s)", pc.key, obj.(*v1.Postgresql).Status.State)
			}
			continue
		}
		if !exists {
			s.violation("%s: resource gone, never deleted", pc.key)
			continue
		}
		pg := obj.(*v1.Postgresql)
		st := pg.Status
		s.res.Checks["observedGeneration"]++
		s.res.Checks["runningOrReason"]++
		if st.ObservedGeneration != pg.Generation {
			s.violation("%s: generation %d never observed (status.observedGeneration %d, state %s)", pc.key, pg.Generation, st.ObservedGeneration, st.State)
		}
		s.res.Checks["statusOfMachine"]++
		if m := s.op.ctrl.Machine(pc.key); m != nil && !sameStatus(m.Status(), &st) {
			s.violation("%s: status in the API (%s epoch %d, %s) is not its machine's (%s epoch %d, %s)", pc.key,
				st.State, st.Epoch, st.Reason, m.Status().State, m.Status().Epoch, m.Status().Reason)
		}
		switch servable := pc.valid && pc.fate.kind == fateReady; {
		case servable && st.State != fsm.Running:
			s.violation("%s: servable, %s after the quiet time, not Running (reason %q: %s)", pc.key, st.State, st.Reason, st.Message)
		case !servable && (st.Reason == "" || st.Message == ""):
			s.violation("%s: cannot be served (valid %t, pods %s), state %s without a reason", pc.key, pc.valid, pc.fate.kind, st.State)
		}
	}
}

// sameStatus tells whether the machine's status a is the stored one b,
// once a is stored as the API stores it (times in whole seconds).
func sameStatus(a, b *v1.PostgresqlStatus) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

func keyNS(key string) string {
	ns, _, _ := strings.Cut(key, "/")
	return ns
}

func keyName(key string) string {
	_, name, _ := strings.Cut(key, "/")
	return name
}
