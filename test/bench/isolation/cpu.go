package isolation

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc's CPU times (USER_HZ), 100 Hz on Linux.
const clockTick = 10 * time.Millisecond

// CPU is what the CPUs did during a measurement's window: how busy the
// whole machine was, and who used that time. It tells a slower healthy
// cluster caused by pgloop from one caused by cores shared with the plane,
// the data plane, or another program on the machine.
type CPU struct {
	// Busy is the machine's average number of busy cores.
	Busy float64
	// Used is the machine's busy CPU time; Operator, ControlPlane (the
	// plane's etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler and kwok), Kubelet (the process kubelet), DataPlane
	// (the process node's Patroni and PostgreSQL) and Bench (this
	// process, the labeller included) how much of it each used; Others
	// is the rest: other programs on the machine, and processes that
	// exited during the window.
	Used, Operator, ControlPlane, Kubelet, DataPlane, Bench, Others time.Duration
}

// cpuSample is one reading of the counters CPU is made of, in ticks.
type cpuSample struct {
	at          time.Time
	busy, total int64 // of /proc/stat
	by          [cpuGroups]int64
}

// Groups of processes whose CPU time is told apart.
const (
	groupOperator = iota
	groupControlPlane
	groupKubelet
	groupDataPlane
	groupBench
	cpuGroups
)

// cpuOwners says whose the processes of a run are: the operator's pid, the
// plane's directory (every process of the plane names it), and the
// process node's root ("" without one).
type cpuOwners struct {
	operator       int
	planeDir, root string
}

// group returns the group of process pid, -1 for none. dataPlane holds the
// process node's Patroni and PostgreSQL processes.
func (o cpuOwners) group(pid int, p proc, dataPlane map[int]bool) int {
	switch {
	case pid == o.operator:
		return groupOperator
	case pid == os.Getpid():
		return groupBench
	case dataPlane[pid]:
		return groupDataPlane
	case o.root != "" && strings.Contains(p.cmdline, o.root):
		return groupKubelet
	case o.planeDir != "" && strings.Contains(p.cmdline, o.planeDir):
		return groupControlPlane
	}
	return -1
}

// sampleCPU reads the counters: the machine's, and each group's. The data
// plane is the processes whose command line names a pod's directory or a
// volume under the process node's root (each Patroni names its
// configuration, each postmaster its data directory), with their
// descendants. A counter that cannot be read counts 0.
func sampleCPU(o cpuOwners) cpuSample {
	s := cpuSample{at: time.Now()}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		s.busy, s.total, _ = parseProcStat(string(data))
	}
	procs := readProcs()
	dataPlane := map[int]bool{}
	if o.root != "" {
		for _, pid := range under(procs, o.root+"/pods/", o.root+"/pv/") {
			dataPlane[pid] = true
		}
	}
	for pid, p := range procs {
		if g := o.group(pid, p, dataPlane); g >= 0 {
			s.by[g] += p.ticks
		}
	}
	return s
}

// cpuBetween is what the CPUs did between two samples.
func cpuBetween(a, b cpuSample) CPU {
	var c CPU
	if b.total > a.total {
		// /proc/stat's ticks add up every CPU's.
		c.Used = time.Duration(b.busy-a.busy) * clockTick
	}
	if wall := b.at.Sub(a.at); wall > 0 {
		c.Busy = float64(c.Used) / float64(wall)
	}
	d := func(g int) time.Duration { return time.Duration(b.by[g]-a.by[g]) * clockTick }
	c.Operator, c.ControlPlane, c.Kubelet, c.DataPlane, c.Bench = d(groupOperator), d(groupControlPlane), d(groupKubelet), d(groupDataPlane), d(groupBench)
	c.Others = c.Used - c.Operator - c.ControlPlane - c.Kubelet - c.DataPlane - c.Bench
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
