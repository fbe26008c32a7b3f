package kubelet

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
)

// slowStop is how long an instance may take to stop before the kubelet
// says what its processes are doing. Patroni stops a leader in 0.5 to 5 s
// here; the grace period (300 s for pgloop's pods) is far longer than a
// test waits for a deletion (the suites' cleanup gives up after 90 s), so
// without this a stop that hangs leaves nothing to read.
var slowStop = 30 * time.Second // a var for TestSlowStopReported

// stacksSignal makes Patroni write the stacks of all its threads to
// stacksFile and go on: Python's faulthandler, registered by the prelude of
// patroniArgv. Patroni itself handles SIGTERM, SIGHUP and SIGCHLD only.
const stacksSignal = syscall.SIGUSR2

// stacksPrelude runs Patroni's own entry script (sys.argv[2]) as __main__
// with the rest of the arguments, after registering faulthandler for
// SIGUSR2 on the file sys.argv[1]. Nothing else changes: the script is the
// one the image runs, multiprocessing's spawn re-imports it by path as
// without the prelude (the module run_path makes has no __spec__), and
// faulthandler only reads the stacks. Production pods run the script
// directly (Spilo's runit starts `patroni postgres.yml`).
const stacksPrelude = "import faulthandler, runpy, signal, sys\n" +
	"faulthandler.register(signal.SIGUSR2, file=open(sys.argv[1], 'a'), all_threads=True)\n" +
	"sys.argv = sys.argv[2:]\n" +
	"runpy.run_path(sys.argv[0], run_name='__main__')\n"

// patroniArgv is the command line of Patroni but its configuration file,
// which pgloop instance appends: python runs the entry script patroni,
// dumping its stacks to stacks on stacksSignal.
func patroniArgv(python, patroni, stacks string) []string {
	return []string{python, "-c", stacksPrelude, stacks, patroni}
}

// createOwned creates path, empty, owned by uid/gid, unless it exists: a
// file the instance appends to across restarts.
func createOwned(path string, uid, gid uint32) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if os.IsExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chown(path, int(uid), int(gid))
}

// reportSlowStop logs, one line each, the processes of an instance that
// has not stopped after waited: its program and its descendants, and each
// postmaster of its data directories with its children (Patroni setsid()s
// it), with their state and kernel wait channel. A program that can dump
// its stacks is asked to (Patroni: into stacksFile in the pod's directory).
func (in *instance) reportSlowStop(waited time.Duration) {
	in.log.WithField("waited", waited.Round(time.Second)).Warn(in.program() + " has not stopped yet: its processes follow")
	pids := append([]int{in.proc.pid}, descendants(in.proc.pid)...)
	if in.prep != nil {
		for _, vol := range in.prep.dataDirs {
			for _, dir := range postmasterDirs(vol, dataDirDepth) {
				if pid, _ := livePostmaster(dir); pid != 0 {
					pids = append(pids, pid)
					pids = append(pids, descendants(pid)...)
				}
			}
		}
	}
	seen := map[int]bool{}
	for _, pid := range pids {
		if seen[pid] {
			continue
		}
		seen[pid] = true
		in.log.WithFields(processFields(pid)).Warn("process of a slow stop")
	}
	if in.proc.stacks != 0 {
		if err := syscall.Kill(in.proc.pid, in.proc.stacks); err != nil {
			in.log.WithError(err).Warn("asking " + in.program() + " for its stacks")
		} else {
			in.log.WithField("file", stacksFile).Warn("asked " + in.program() + " for its threads' stacks")
		}
	}
}

// processFields describes pid for a log line: its state (R, S, D, Z...),
// what it waits on in the kernel, and its command line (patroniArgv's
// prelude shortened, cut at 120 bytes).
func processFields(pid int) map[string]any {
	wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
	args := cmdline(pid)
	if i := slices.Index(args, stacksPrelude); i >= 0 {
		args[i] = "<stacks prelude>"
	}
	cmd := strings.Join(args, " ")
	if len(cmd) > 120 {
		cmd = cmd[:120] + "..."
	}
	return map[string]any{
		"pid":   pid,
		"state": string(procState(pid)),
		"wchan": string(wchan),
		"cmd":   cmd,
	}
}
