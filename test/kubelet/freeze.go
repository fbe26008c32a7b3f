package kubelet

import (
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// stoppedTimeout bounds the wait for a SIGSTOPped postmaster to stop: one in
// uninterruptible sleep (disk I/O) stops only once it wakes.
const stoppedTimeout = time.Second

// frozen reports whether FreezeAnnotation asks for the pod's processes to be
// stopped: "true" (Patroni and PostgreSQL) or FreezePostgres (PostgreSQL
// only).
func frozen(pod *corev1.Pod) bool {
	v := pod.Annotations[FreezeAnnotation]
	return v == "true" || v == FreezePostgres
}

// onlyPostgres reports whether the freeze spares Patroni.
func onlyPostgres(pod *corev1.Pod) bool { return pod.Annotations[FreezeAnnotation] == FreezePostgres }

// freeze SIGSTOPs the instance's processes: Patroni's process group first,
// so that Patroni does not see its PostgreSQL hang and act on it, then each
// postmaster with its children (stopPostmaster). It is sent again on every
// pass while the annotation stays: a stopped process ignores a second
// SIGSTOP, and a postmaster that was starting when the first one went out
// (not in postmaster.pid yet) is caught by a later one. A postmaster
// stopped with all its children on an earlier pass and still stopped is
// left alone: stopped, it forked nothing since, and the scan of /proc that
// finds its children costs tens of milliseconds a pass on a busy machine
// (with eight frozen pods, passes every second took most of a core). Once
// every data volume has its postmaster stopped that way, the volumes are
// not even walked for one (allStopped).
//
// With postgresOnly, Patroni is left running: it keeps answering its REST
// API (GET /readiness from its cached state, so the pod stays Ready) while
// every SQL connection hangs, as with a PostgreSQL stuck on its disk.
func (in *instance) freeze(postgresOnly bool) {
	select {
	case ex := <-in.proc.exits: // exited: do not signal a reused pid
		in.crashed(ex)
		return
	default:
	}
	if !postgresOnly {
		_ = syscall.Kill(-in.proc.pid, syscall.SIGSTOP)
	}
	if !in.allStopped() {
		in.stopPostmasters()
	}
	if !in.frozen {
		in.frozen = true
		what := "Patroni and PostgreSQL"
		if postgresOnly {
			what = "PostgreSQL only"
		}
		in.log.WithField("pid", in.proc.pid).Info("freeze annotation: stopped " + what + " (SIGSTOP)")
	}
}

// stopPostmasters stops each postmaster of the instance with its children,
// but for those stopped so already, and records them in stopped.
func (in *instance) stopPostmasters() {
	for _, pid := range in.postmasters() {
		if in.stopped[pid] && procState(pid) == 'T' {
			continue
		}
		if !stopPostmaster(pid) {
			in.log.WithField("pid", pid).Warn("freeze annotation: the postmaster has not stopped yet; its children are stopped on the next pass")
			continue
		}
		if in.stopped == nil {
			in.stopped = map[int]bool{}
		}
		in.stopped[pid] = true
	}
}

// allStopped reports whether freeze stopped a postmaster with its children
// for each data volume, and all are still stopped: while they are, no other
// can run there (each locks its data directory), so there is nothing to
// look for.
func (in *instance) allStopped() bool {
	if in.prep == nil || len(in.stopped) < len(in.prep.dataDirs) {
		return false
	}
	for pid := range in.stopped {
		if procState(pid) != 'T' {
			return false
		}
	}
	return true
}

// thaw SIGCONTs what freeze stopped, in the reverse order: each postmaster's
// children, the postmaster, then Patroni, which finds its PostgreSQL
// answering again. It does nothing unless the instance is frozen; why is
// logged.
func (in *instance) thaw(why string) {
	if !in.frozen {
		return
	}
	in.frozen, in.stopped = false, nil
	for _, pid := range in.postmasters() {
		contPostmaster(pid)
	}
	if in.proc != nil {
		_ = syscall.Kill(-in.proc.pid, syscall.SIGCONT)
	}
	in.log.Info(why + ": resumed Patroni and PostgreSQL (SIGCONT)")
}

// postmasters returns the pids of the PostgreSQL servers running on the
// instance's claims.
func (in *instance) postmasters() []int {
	if in.prep == nil {
		return nil
	}
	var pids []int
	for _, vol := range in.prep.dataDirs {
		for _, dir := range postmasterDirs(vol, dataDirDepth) {
			pid, err := livePostmaster(dir)
			if err != nil {
				in.log.WithError(err).WithField("dataDir", dir).Warn("looking for PostgreSQL")
			}
			if pid != 0 {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// stopPostmaster SIGSTOPs a PostgreSQL server and its children, and reports
// whether they all were. Patroni setsid()s the postmaster and each child of
// the postmaster has a session of its own: no process group holds them, so
// the children are found by parentage. The postmaster goes first and is
// waited for: stopped, it forks no more, so one scan of /proc then finds
// every child (a backend, a parallel worker, an archive command).
func stopPostmaster(pid int) bool {
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	if !waitStopped(pid, stoppedTimeout) {
		return false
	}
	for _, p := range descendants(pid) {
		_ = syscall.Kill(p, syscall.SIGSTOP)
	}
	return true
}

// contPostmaster SIGCONTs a PostgreSQL server's children, then the server,
// so that it finds them where it left them.
func contPostmaster(pid int) {
	for _, p := range descendants(pid) {
		_ = syscall.Kill(p, syscall.SIGCONT)
	}
	_ = syscall.Kill(pid, syscall.SIGCONT)
}

// waitStopped waits until pid is stopped by a signal (state T), or gone,
// or timeout, and reports whether it is stopped or gone.
func waitStopped(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		switch procState(pid) {
		case 'T', 0, 'Z', 'X':
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
