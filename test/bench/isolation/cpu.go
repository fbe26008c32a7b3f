package isolation

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc's CPU times (USER_HZ), 100 Hz on Linux.
const clockTick = 10 * time.Millisecond

// CPU is what the CPUs did during a measurement's window: how busy the
// whole machine was, and what the operator and the process node's Patroni
// and PostgreSQL used of it. It tells a slower healthy cluster caused by
// pgloop from one caused by cores shared with a data plane, or with
// another program on the machine.
type CPU struct {
	// Busy is the machine's average number of busy cores (of
	// runtime.NumCPU).
	Busy float64
	// Operator and DataPlane are the CPU time used by the operator's
	// process and by the processes under the process node's root (each
	// Patroni and postmaster, and their children; a process that exited
	// during the window is missed).
	Operator, DataPlane time.Duration
}

// cpuSample is one reading of the counters CPU is made of.
type cpuSample struct {
	busy, total         int64 // ticks of /proc/stat
	operator, dataPlane int64 // ticks
}

// sampleCPU reads the counters: the machine's, the process pid's, and those
// of the process node's Patroni and PostgreSQL: the processes whose command
// line names a pod's directory or a volume under root (each Patroni names
// its configuration, each postmaster its data directory), with their
// descendants. A counter that cannot be read counts 0.
func sampleCPU(pid int, root string) cpuSample {
	s := cpuSample{}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		s.busy, s.total, _ = parseProcStat(string(data))
	}
	procs := readProcs()
	s.operator = procs[pid].ticks
	if root != "" {
		for _, p := range under(procs, root+"/pods/", root+"/pv/") {
			s.dataPlane += procs[p].ticks
		}
	}
	return s
}

// cpuBetween is what the CPUs did between two samples.
func cpuBetween(a, b cpuSample) CPU {
	var c CPU
	if b.total > a.total {
		c.Busy = float64(b.busy-a.busy) / float64(b.total-a.total) * float64(runtime.NumCPU())
	}
	c.Operator = time.Duration(b.operator-a.operator) * clockTick
	c.DataPlane = time.Duration(b.dataPlane-a.dataPlane) * clockTick
	return c
}

// parseProcStat reads the machine's busy and total ticks from the first
// line of /proc/stat: "cpu user nice system idle iowait irq softirq steal
// …"; idle and iowait are not busy, guest time is within user's.
func parseProcStat(data string) (busy, total int64, err error) {
	line, _, _ := strings.Cut(data, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	for i, v := range f[1:9] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, nil
}

// proc is what the bench reads of a process.
type proc struct {
	ppid    int
	ticks   int64 // utime + stime
	cmdline string
}

// readProcs reads every process of /proc; one that exits meanwhile is
// left out.
func readProcs() map[int]proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make(map[int]proc, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		ppid, ticks, err := parsePidStat(string(stat))
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out[pid] = proc{ppid: ppid, ticks: ticks, cmdline: string(cmdline)}
	}
	return out
}

// parsePidStat reads the parent and the user + system ticks from a
// /proc/<pid>/stat: "pid (comm) state ppid … utime stime …", fields 4, 14
// and 15; comm may hold spaces and parentheses, so fields are counted from
// the last ')'.
func parsePidStat(data string) (ppid int, ticks int64, err error) {
	end := strings.LastIndexByte(data, ')')
	if end < 0 {
		return 0, 0, fmt.Errorf("unexpected stat %q", data)
	}
	f := strings.Fields(data[end+1:])
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("unexpected stat %q", data)
	}
	if ppid, err = strconv.Atoi(f[1]); err != nil {
		return 0, 0, err
	}
	utime, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, 0, err
	}
	stime, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, 0, err
	}
	return ppid, utime + stime, nil
}

// under returns the processes whose command line holds one of needles,
// and their descendants (a postmaster's children name nothing).
func under(procs map[int]proc, needles ...string) []int {
	in := map[int]bool{}
	for pid, p := range procs {
		for _, n := range needles {
			if strings.Contains(p.cmdline, n) {
				in[pid] = true
			}
		}
	}
	var out []int
	for pid := range procs {
		// Up the parents, at most 16 levels, to one that names root.
		for p, depth := pid, 0; p > 1 && depth < 16; p, depth = procs[p].ppid, depth+1 {
			if in[p] {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}
