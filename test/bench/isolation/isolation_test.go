package isolation

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/bench/benchkit"
)

func TestSectionRenders(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Stuck = []int{0, 100}
	r := &Result{Config: cfg, Start: time.Unix(0, 0), End: time.Unix(300, 0), Nproc: 2, Revision: "abc",
		OperatorFlags: []string{"--create-timeout=15s"}}
	for _, k := range cfg.Stuck {
		p := Phase{K: k, Quiet: true}
		for i := range 10 {
			d := time.Duration(1000+i+k) * time.Millisecond
			p.Clusters = append(p.Clusters, benchkit.Probe{Name: "h", ToRunning: d, ReadyToRunning: d / 10, LabelledToRunning: d / 20})
		}
		r.Phases = append(r.Phases, p)
	}
	retry := r.Phases[1]
	r.RetryRound = &retry
	s := r.Section()
	for _, want := range []string{`begin "defaults"`, "| 100 | 1.105s | 1.109s | 1.10 |", "| 100, during a retry round | 1.105s |", "PASS: ", doc.End(),
		"- K = 100: during a retry round (not in the verdict)"} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
	r.Phases[1].Clusters[4].ToRunning = 2 * time.Second
	r.Phases[1].Clusters[5].ToRunning = 2 * time.Second
	if r.Pass() || !strings.HasPrefix(r.Verdict(), "FAIL: ") {
		t.Errorf("a ratio of %.2f passed: %s", r.Ratio(), r.Verdict())
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name          string
		stuck, frozen []int
		want          string // in the error; "" for none
	}{
		{"stuck", []int{0, 10, 100}, nil, ""},
		{"frozen", nil, []int{0, 4, 8}, ""},
		{"both", []int{0, 10}, []int{0, 4}, "each mode runs on a plane of its own"},
		{"neither", nil, nil, "the stuck counts must start at 0"},
		{"frozen not from 0", nil, []int{4, 8}, "the frozen counts must start at 0"},
		{"frozen decreasing", nil, []int{0, 8, 4}, "the frozen counts must start at 0 and increase"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Stuck, cfg.Frozen = tc.stuck, tc.frozen
			err := cfg.Check()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Check() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestSyncedAndHung(t *testing.T) {
	conds := func(roles metav1.ConditionStatus, msg string, config metav1.ConditionStatus) map[string]benchkit.Condition {
		return map[string]benchkit.Condition{
			v1.ConditionRolesSynced:   {Status: roles, Message: msg},
			v1.ConditionConfigApplied: {Status: config},
		}
	}
	const timedOut = "primary 127.64.1.2:5432 did not answer within 5s"
	for _, tc := range []struct {
		name         string
		s            *benchkit.Seen
		synced, hung bool
	}{
		{"not seen", nil, false, false},
		{"running, in effect", &benchkit.Seen{State: fsm.Running, Current: true, Conditions: conds(metav1.ConditionTrue, "synced", metav1.ConditionTrue)}, true, false},
		{"running, an older generation", &benchkit.Seen{State: fsm.Running, Conditions: conds(metav1.ConditionTrue, "synced", metav1.ConditionTrue)}, false, false},
		{"running, configuration pending", &benchkit.Seen{State: fsm.Running, Current: true, Conditions: conds(metav1.ConditionTrue, "synced", metav1.ConditionFalse)}, false, false},
		{"creating", &benchkit.Seen{State: fsm.Creating, Current: true, Conditions: conds(metav1.ConditionFalse, "roles and databases not synced yet", metav1.ConditionTrue)}, false, false},
		{"sync timed out", &benchkit.Seen{State: fsm.Updating, Current: true, Conditions: conds(metav1.ConditionFalse, timedOut, metav1.ConditionTrue)}, false, true},
		{"sync refused", &benchkit.Seen{State: fsm.Updating, Current: true, Conditions: conds(metav1.ConditionFalse, "role bad: permission denied", metav1.ConditionTrue)}, false, false},
		{"timed out, then deleted", &benchkit.Seen{State: fsm.Updating, Gone: true, Conditions: conds(metav1.ConditionFalse, timedOut, metav1.ConditionTrue)}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := synced(tc.s); got != tc.synced {
				t.Errorf("synced = %v, want %v", got, tc.synced)
			}
			if got := hung(tc.s); got != tc.hung {
				t.Errorf("hung = %v, want %v", got, tc.hung)
			}
		})
	}
}

// TestAnswers asks a server that answers the SSLRequest as PostgreSQL does,
// and a listener whose owner never accepts (a frozen postmaster: the kernel
// completes the handshake, nothing reads).
func TestAnswers(t *testing.T) {
	ctx := context.Background()
	answering, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer answering.Close()
	go func() {
		for {
			conn, err := answering.Accept()
			if err != nil {
				return
			}
			var msg [8]byte
			if _, err := io.ReadFull(conn, msg[:]); err == nil && bytes.Equal(msg[:], sslRequest) {
				_, _ = conn.Write([]byte("N"))
			}
			conn.Close()
		}
	}()
	frozen, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()

	if ok, err := answers(ctx, answering.Addr().String(), 2*time.Second); !ok || err != nil {
		t.Errorf("answering server: %v, %v; want true", ok, err)
	}
	began := time.Now()
	if ok, err := answers(ctx, frozen.Addr().String(), 200*time.Millisecond); ok || err != nil {
		t.Errorf("frozen server: %v, %v; want false", ok, err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("a frozen server took %v to tell, want about the timeout", took)
	}
	closed := frozen.Addr().String()
	frozen.Close()
	if _, err := answers(ctx, closed, time.Second); err == nil {
		t.Error("no error for a port nothing listens on")
	}
}

func TestFrozenSectionRenders(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Stuck, cfg.Frozen = nil, []int{0, 8}
	r := &Result{Config: cfg, Start: time.Unix(0, 0), End: time.Unix(300, 0), Nproc: 2, Revision: "abc",
		OperatorFlags: []string{"--create-timeout=15s"}, HungFlags: "--workers=16 --sql-connect-timeout=5s"}
	phase := func(k, extra int) Phase {
		p := Phase{K: k, Quiet: k == 0, PeakRunning: 3 + k,
			CPU: CPU{Busy: 1.5, Used: 15 * time.Second, Operator: 2 * time.Second, DataPlane: time.Duration(k) * time.Second}}
		for i := range 10 {
			d := time.Duration(1000+i+extra) * time.Millisecond
			p.Clusters = append(p.Clusters, benchkit.Probe{Name: "h", ToRunning: d, ReadyToRunning: d / 10, LabelledToRunning: d / 20})
		}
		return p
	}
	r.Phases = append(r.Phases, phase(0, 0))
	hung := phase(8, 8)
	hung.ReadyAfter, hung.HungAfter, hung.HungAtEnd = 40*time.Second, 7*time.Second, 8
	hung.HungMessage = "primary 127.64.1.2:5432 did not answer within 5s"
	hung.Background = benchkit.Samples{`pgloop_loop_worker_waits_total{lane="hung"}`: 3, `pgloop_loop_worker_wait_seconds_total{lane="hung"}`: 1.5,
		"pgloop_loop_plans_detached_total": 8}
	unfrozen := phase(8, 500)
	hung.Unfrozen = &unfrozen
	r.Phases = append(r.Phases, hung)

	s := r.Section()
	for _, want := range []string{
		`begin "frozen: defaults"`,
		"### Hung primaries (frozen mode), operator flags: defaults",
		"in effect for a hung primary: `--workers=16 --sql-connect-timeout=5s`",
		"`pgloop.dev/test-freeze: postgres`",
		"| K frozen | healthy create → Running",
		"| 0 | 1.005s | 1.009s | 1.00 |",
		"| 8 Running, none frozen | 1.505s | 1.509s | 1.50 |",
		"| 8 | 1.013s | 1.017s | 1.01 |",
		"PASS: ratio of the healthy median with K = 8 frozen (1.013s) to K = 0 (1.005s) is 1.01, at most 1.10 (to the same 8 clusters Running, none frozen (1.505s): 0.67)",
		"- K = 0: operator quiet after 0s;",
		"- K = 8 Running, none frozen: the 8 clusters on the process node Running with roles synced and configuration applied 40s after the first Create; measured at once",
		`- K = 8: then all hung mid-sync 7s after the first freeze (RolesSynced: "primary 127.64.1.2:5432 did not answer within 5s"); measured at once`,
		"at most 11 plans running (on the workers, in the hung lane, or past --slow-after) and 0 waiting (for their cluster's running plan, a free worker or a place of the hung lane); 0 plans waited for a worker (0s in all), 3 for a place of the hung lane (1.5s), 8 went on off them after --slow-after; 8 of the 8 frozen clusters still hung at the end;",
		"CPU: 1.50 of 2 cores busy on average (15.0s of CPU time): the operator 2.0s, the control plane 0.0s, the process kubelet 0.0s, Patroni and PostgreSQL 8.0s, the bench 0.0s, others 0.0s.\n",
		doc.End(),
	} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
	if strings.Count(s, "still hung at the end") != 1 {
		t.Errorf("only the frozen row says how many still hung:\n%s", s)
	}
	r.Phases = r.Phases[:1]
	if v := r.Verdict(); v != "INCOMPLETE: the run stopped after 1 of 2 values of K" {
		t.Errorf("verdict of a run cut short: %q", v)
	}
}

func TestCPU(t *testing.T) {
	busy, total, err := parseProcStat("cpu  100 5 50 800 40 3 2 0 7 0\ncpu0 50 2 25 400 20 1 1 0 0 0\n")
	if err != nil || busy != 160 || total != 1000 {
		t.Errorf("parseProcStat = %d, %d, %v; want 160, 1000", busy, total, err)
	}
	if _, _, err := parseProcStat("intr 1 2 3\n"); err == nil {
		t.Error("no error for a /proc/stat without its cpu line")
	}
	// comm with a space and a parenthesis; ppid 1, utime 30, stime 12.
	ppid, ticks, err := parsePidStat("4242 (postgres: (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 30 12 0 0 20 0 1 0 5 0 0")
	if err != nil || ppid != 1 || ticks != 42 {
		t.Errorf("parsePidStat = %d, %d, %v; want 1, 42", ppid, ticks, err)
	}
	const root = "/tmp/plane/kubelet/pg-node-1"
	procs := map[int]proc{
		10: {ppid: 1, cmdline: "pgkubelet --root=" + root},
		11: {ppid: 10, cmdline: "python3 /usr/bin/patroni " + root + "/pods/u1/patroni.yml"},
		12: {ppid: 1, cmdline: "postgres -D " + root + "/pv/pv1/pgroot/pgdata"},
		13: {ppid: 12, cmdline: "postgres: checkpointer"},
		14: {ppid: 13, cmdline: "a grandchild"},
		20: {ppid: 1, cmdline: "kube-apiserver"},
	}
	got := under(procs, root+"/pods/", root+"/pv/")
	slices.Sort(got)
	if !slices.Equal(got, []int{11, 12, 13, 14}) {
		t.Errorf("under = %v, want Patroni, the postmaster and its descendants, not the kubelet", got)
	}
	a := cpuSample{at: time.Unix(0, 0), busy: 100, total: 1000, by: [cpuGroups]int64{10, 100, 5, 50, 1}}
	b := cpuSample{at: time.Unix(10, 0), busy: 1600, total: 3000, by: [cpuGroups]int64{30, 700, 105, 350, 11}}
	c := cpuBetween(a, b)
	want := CPU{Busy: 1.5, Used: 15 * time.Second, Operator: 200 * time.Millisecond, ControlPlane: 6 * time.Second,
		Kubelet: time.Second, DataPlane: 3 * time.Second, Bench: 100 * time.Millisecond, Others: 4700 * time.Millisecond}
	if c != want {
		t.Errorf("cpuBetween = %+v, want %+v", c, want)
	}
	if got := c.describe(2, true); got != "1.50 of 2 cores busy on average (15.0s of CPU time): the operator 0.2s, the control plane 6.0s, the process kubelet 1.0s, Patroni and PostgreSQL 3.0s, the bench 0.1s, others 4.7s" {
		t.Errorf("describe = %q", got)
	}
	if got := c.describe(2, false); strings.Contains(got, "Patroni") {
		t.Errorf("describe without a process node = %q", got)
	}

	const dir = "/tmp/plane"
	o := cpuOwners{operator: 30, planeDir: dir, root: root}
	data := map[int]bool{11: true}
	for _, tc := range []struct {
		pid  int
		p    proc
		want int
	}{
		{30, proc{cmdline: "pgloop operator --kubeconfig " + dir + "/kubeconfig"}, groupOperator},
		{os.Getpid(), proc{}, groupBench},
		{11, procs[11], groupDataPlane},
		{10, procs[10], groupKubelet},
		{21, proc{cmdline: "kube-apiserver --cert-dir=" + dir + "/pki"}, groupControlPlane},
		{20, procs[20], -1},
	} {
		if got := o.group(tc.pid, tc.p, data); got != tc.want {
			t.Errorf("group of %d (%q) = %d, want %d", tc.pid, tc.p.cmdline, got, tc.want)
		}
	}
}
