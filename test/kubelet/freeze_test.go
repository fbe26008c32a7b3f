package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pgloop/pgloop/pkg/selfsigned"
)

// These tests need no control plane: they run an instance's freeze, thaw
// and stop against a real PostgreSQL 15, started by a stand-in for Patroni
// (standInPatroni), with the kubelet's own reaper, launcher and probe.

// standInPatroni does what the kubelet relies on Patroni for, and no more:
// it double-forks a postmaster in a session of its own (as Patroni does,
// so only the postmaster.pid route reaches it), answers GET /readiness on
// the pod IP, and on SIGTERM shuts PostgreSQL down (fast) and exits 0.
const standInPatroni = `
import http.server, os, signal, socketserver, subprocess, sys, time
ip, postgres, data, sockets = sys.argv[1:]
pidfile = os.path.join(data, "postmaster.pid")
if os.fork() == 0:
    os.setsid()
    subprocess.Popen([postgres, "-D", data, "-k", sockets, "-h", ip, "-p", "5432", "-c", "fsync=off"])
    os._exit(0)
os.wait()

def stop(*_):
    try:
        with open(pidfile) as f:
            os.kill(int(f.readline()), signal.SIGINT)
    except (OSError, ValueError):
        pass
    deadline = time.time() + 20
    while os.path.exists(pidfile) and time.time() < deadline:
        time.sleep(0.05)
    os._exit(0)

signal.signal(signal.SIGTERM, stop)

class Readiness(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/readiness" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass

class Server(socketserver.TCPServer):
    allow_reuse_address = True  # and no reverse lookup of ip, unlike HTTPServer

Server((ip, 8008), Readiness).serve_forever()
`

// freezeTestCIDR is where the tests' pod IP comes from, away from
// TestKubelet's 127.1.7.0/24.
const freezeTestCIDR = "127.1.8.0/24"

// queryTimeout is the deadline of a query to a frozen server.
const queryTimeout = 2 * time.Second

// TestFreeze freezes a running instance and thaws it: while frozen,
// connections to PostgreSQL and Patroni are accepted but nothing answers,
// and the readiness probe makes the container not ready, still Running; a
// second freeze changes nothing; once thawed, the same processes answer.
func TestFreeze(t *testing.T) {
	in := startStandIn(t)
	pod := standInPod(in)
	ctx := context.Background()
	addr := netip.AddrPortFrom(in.prep.ip, postgresPort).String()

	conn := connect(ctx, t, in)
	in.probe()
	if !in.state.Ready {
		t.Fatal("not ready before the freeze")
	}
	pids := instanceProcesses(in)
	if len(pids) < 3 {
		t.Fatalf("processes %v: want Patroni, the postmaster and its children", pids)
	}

	frozenPod := pod.DeepCopy()
	frozenPod.Annotations = map[string]string{FreezeAnnotation: "true"}
	in.reconcile(ctx, frozenPod)
	if !in.frozen {
		t.Fatal("reconcile of a frozen pod did not freeze the instance")
	}
	waitStates(t, pids, stoppedOrGone, "stopped (T)")
	for _, pid := range append(in.postmasters(), in.proc.pid, int(conn.PgConn().PID())) {
		if s := procState(pid); s != 'T' {
			t.Errorf("%d (%s) is in state %q, want T", pid, strings.Join(cmdline(pid), " "), s)
		}
	}

	// (a) TCP connects, PostgreSQL does not answer.
	for _, port := range []uint16{postgresPort, patroniPort} {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(in.prep.ip, port).String(), time.Second)
		if err != nil {
			t.Fatalf("TCP connect to frozen port %d: %v", port, err)
		}
		c.Close()
	}
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	began := time.Now()
	err := conn.QueryRow(qctx, "SELECT 1").Scan(new(int))
	cancel()
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("query on a connection opened before the freeze = %v after %v, want a timeout", err, time.Since(began))
	}
	if _, err := query(ctx, in); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("query on a new connection to %s = %v, want a timeout", addr, err)
	}

	// (b) Patroni does not answer.
	client := &http.Client{Timeout: queryTimeout, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	url := fmt.Sprintf("http://%s/readiness", netip.AddrPortFrom(in.prep.ip, patroniPort))
	if resp, err := client.Get(url); err == nil {
		resp.Body.Close()
		t.Errorf("GET %s answered %s while frozen", url, resp.Status)
	} else if !os.IsTimeout(err) {
		t.Errorf("GET %s = %v, want a timeout", url, err)
	}

	// (c) Not ready, still running, no restart.
	in.probe()
	st := buildStatus(frozenPod, frozenPod.Status, runContainerName, in.state, time.Now())
	cs := st.ContainerStatuses[0]
	if cs.Ready || cs.State.Running == nil || cs.RestartCount != 0 || ready(st) {
		t.Errorf("frozen container status %+v, pod ready %v: want Running, not ready, no restart", cs, ready(st))
	}

	// Again: stopped processes stay stopped, nothing else happens; the
	// postmaster, stopped with its children, is not looked into again.
	postmasters := in.postmasters()
	for _, pm := range postmasters {
		if !in.stopped[pm] {
			t.Errorf("postmaster %d, stopped with its children, is not recorded as such: %v", pm, in.stopped)
		}
	}
	in.reconcile(ctx, frozenPod)
	waitStates(t, pids, stoppedOrGone, "stopped (T)")
	if in.proc == nil || in.state.Phase != containerRunning {
		t.Fatalf("a second freeze changed the instance: proc %v, phase %v", in.proc, in.state.Phase)
	}
	if len(postmasters) == 0 || len(in.stopped) != len(postmasters) || !in.allStopped() {
		t.Errorf("stopped postmasters %v after a second freeze (all stopped: %v), want %v", in.stopped, in.allStopped(), postmasters)
	}

	// (d) Thawed: the same processes answer again.
	in.reconcile(ctx, pod)
	if in.frozen || in.stopped != nil {
		t.Fatalf("reconcile of a pod without the annotation did not thaw the instance (frozen %v, stopped %v)", in.frozen, in.stopped)
	}
	// The backend of the connection that timed out may have exited since.
	waitStates(t, pids, func(s byte) bool { return s != 'T' }, "resumed")
	if n, err := query(ctx, in); err != nil || n != 1 {
		t.Errorf("query after the thaw = %d, %v; want 1", n, err)
	}
	in.probe()
	if !in.state.Ready {
		t.Error("not ready after the thaw")
	}
	if in.proc == nil || in.proc.pid != pids[0] || in.state.RestartCount != 0 {
		t.Errorf("after the thaw: proc %v, restarts %d; want the same Patroni %d", in.proc, in.state.RestartCount, pids[0])
	}
}

// TestStopFrozen deletes a frozen instance: it is resumed before SIGTERM,
// so Patroni stops PostgreSQL cleanly well within the grace period, and
// nothing of it is left.
func TestStopFrozen(t *testing.T) {
	in := startStandIn(t)
	ctx := context.Background()
	connect(ctx, t, in)
	pids := instanceProcesses(in)
	frozenPod := standInPod(in)
	frozenPod.Annotations = map[string]string{FreezeAnnotation: "true"}
	in.reconcile(ctx, frozenPod)
	waitStates(t, pids, stoppedOrGone, "stopped (T)")

	const grace = 20 * time.Second
	began := time.Now()
	in.stop(grace)
	took := time.Since(began)
	t.Logf("stopped in %v", took.Round(time.Millisecond))
	if took > grace/2 {
		t.Errorf("stop took %v of its %v grace period: SIGTERM was not handled", took, grace)
	}
	if last := in.state.Last; last == nil || last.Signal != 0 || last.ExitCode != 0 {
		t.Errorf("Patroni's termination %+v: want exit code 0, from its own SIGTERM handler", last)
	}
	if in.proc != nil || in.frozen {
		t.Errorf("after stop: proc %v, frozen %v", in.proc, in.frozen)
	}
	if left := waitGone(pids, time.Second); len(left) > 0 {
		t.Errorf("still running after stop: %v", left)
	}
	if _, err := os.Stat(filepath.Join(standInDataDir(in), postmasterPIDFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("postmaster.pid after stop: %v; want it removed by a clean shutdown", err)
	}
}

// TestHoldFrozen holds a frozen instance: SIGKILL ends stopped processes
// too, and the instance is not frozen any more.
func TestHoldFrozen(t *testing.T) {
	in := startStandIn(t)
	ctx := context.Background()
	connect(ctx, t, in)
	pids := instanceProcesses(in)
	pod := standInPod(in)
	pod.Annotations = map[string]string{FreezeAnnotation: "true"}
	in.reconcile(ctx, pod)
	waitStates(t, pids, stoppedOrGone, "stopped (T)")

	pod.Annotations[HoldAnnotation] = "true"
	in.reconcile(ctx, pod)
	if in.proc != nil || in.frozen || in.state.Reason != ReasonHeld {
		t.Errorf("held: proc %v, frozen %v, reason %q; want no process, not frozen, %s", in.proc, in.frozen, in.state.Reason, ReasonHeld)
	}
	if left := waitGone(pids, time.Second); len(left) > 0 {
		t.Errorf("still running after the hold: %v", left)
	}
}

// TestCleanupFrozen runs Cleanup over a frozen instance, as a plane does
// after a kubelet killed outright: SIGKILL ends stopped processes too.
func TestCleanupFrozen(t *testing.T) {
	in := startStandIn(t)
	ctx := context.Background()
	connect(ctx, t, in)
	pids := instanceProcesses(in)
	frozenPod := standInPod(in)
	frozenPod.Annotations = map[string]string{FreezeAnnotation: "true"}
	in.reconcile(ctx, frozenPod)
	waitStates(t, pids, stoppedOrGone, "stopped (T)")

	if err := Cleanup(in.k.opts.Root); err != nil {
		t.Fatal(err)
	}
	if left := waitGone(pids, time.Second); len(left) > 0 {
		t.Errorf("still running after Cleanup: %v", left)
	}
}

// startStandIn runs an instance as the kubelet would, on a fresh data
// directory, with standInPatroni for Patroni, and waits until PostgreSQL
// answers. Everything is stopped when t ends.
func startStandIn(t *testing.T) *instance {
	t.Helper()
	python, postgres := DefaultPython, filepath.Join(DefaultPGBin, "postgres")
	requireInstalled(t, python, postgres, filepath.Join(DefaultPGBin, "initdb"))
	requireRoot(t)
	uid, gid, err := lookupUser(postgresUser)
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.MkdirTemp("", "pgkubelet-freeze-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Cleanup(root); err != nil {
			t.Error(err)
		}
		os.RemoveAll(root)
	})

	// Its first 8 hex digits name the socket directory: this process's.
	podUID := types.UID(fmt.Sprintf("%08x-f7ee-4000-8000-000000000000", os.Getpid()))
	pv := pvPath(root, "pv-freeze")
	p := &prepared{dataDirs: []string{pv}, podDir: podPath(root, podUID), socketDir: socketDir(podUID)}
	for _, d := range []string{filepath.Join(pv, "pgroot"), p.podDir, p.socketDir} {
		if err := mkdirOwned(d, 0o755, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(pv, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(p.socketDir) })
	dataDir := filepath.Join(pv, "pgroot", "pgdata")
	// Before the reaper runs: it would reap initdb, which runs as postgres.
	initdb := exec.Command(filepath.Join(DefaultPGBin, "initdb"), "-D", dataDir, "-A", "trust", "-U", postgresUser, "--no-sync", "--locale=C")
	initdb.Dir, initdb.Env = root, []string{"LC_ALL=C", "PATH=/usr/bin:/bin"}
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	// TLS, as pgloop's instances serve it (pgloop instance makes such a
	// certificate): the pooler requires it towards PostgreSQL.
	certPEM, keyPEM, err := selfsigned.Certificate("freeze", netip.Addr{}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"server.crt": certPEM, "server.key": keyPEM} {
		path := filepath.Join(dataDir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(path, int(uid), int(gid)); err != nil {
			t.Fatal(err)
		}
	}
	conf, err := os.OpenFile(filepath.Join(dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conf.WriteString("ssl = on\n"); err != nil {
		t.Fatal(err)
	}
	if err := conf.Close(); err != nil {
		t.Fatal(err)
	}
	prefix, err := parsePodCIDR(freezeTestCIDR)
	if err != nil {
		t.Fatal(err)
	}
	if p.ip, err = lowestFree(prefix, func(netip.Addr) bool { return false }, canBind); err != nil {
		t.Fatal(err)
	}

	// The postmaster is double-forked: as in the kubelet, this process
	// adopts it and the reaper reaps it.
	if err := becomeSubreaper(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	log := logrus.New()
	log.SetOutput(testLog{t})
	log.SetLevel(logrus.DebugLevel)
	k := &kubelet{
		opts: Options{Root: root}, log: log, uid: uid, gid: gid,
		reaper: newReaper(), launcher: newLauncher(),
		probes: &http.Client{Timeout: probeTimeout, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}},
	}
	reaperCtx, stopReaper := context.WithCancel(context.Background())
	reaperDone := make(chan struct{})
	go func() {
		defer close(reaperDone)
		k.reaper.run(reaperCtx)
	}()
	in := &instance{k: k, uid: podUID, key: "test/freeze", log: log.WithField("pod", "test/freeze"), prep: p}
	t.Cleanup(func() {
		// The stand-in's Pdeathsig fires when the launcher's thread ends:
		// only once it is reaped.
		if in.proc != nil {
			in.kill()
		}
		stopReaper()
		<-reaperDone
		k.launcher.Close()
	})

	proc, err := spawn(k.launcher, k.reaper, spawnSpec{
		argv:    []string{python, "-c", standInPatroni, p.ip.String(), postgres, dataDir, p.socketDir},
		env:     []string{"PATH=/usr/bin:/bin", "LC_ALL=C.UTF-8"},
		dir:     p.podDir,
		logPath: filepath.Join(p.podDir, logFile),
		uid:     uid, gid: gid,
	})
	if err != nil {
		t.Fatal(err)
	}
	in.proc = proc
	in.state.EverStarted, in.state.Phase, in.state.PID, in.state.StartedAt = true, containerRunning, proc.pid, proc.started
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := os.ReadFile(filepath.Join(p.podDir, logFile))
			t.Logf("--- stand-in Patroni and PostgreSQL log ---\n%s", out)
		}
	})

	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := query(context.Background(), in)
		if err == nil {
			return in
		}
		if time.Now().After(deadline) {
			t.Fatalf("PostgreSQL at %s does not answer: %v", p.ip, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// standInDataDir is the data directory startStandIn made.
func standInDataDir(in *instance) string {
	return filepath.Join(in.prep.dataDirs[0], "pgroot", "pgdata")
}

// standInPod is a pod that instance in may run.
func standInPod(in *instance) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "test", Name: "freeze", UID: in.uid},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: runContainerName}}},
	}
}

// connect opens a connection to the instance's PostgreSQL, closed when t
// ends.
func connect(ctx context.Context, t *testing.T, in *instance) *pgx.Conn {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	conn, err := pgx.Connect(cctx, connString(in))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	})
	return conn
}

func connString(in *instance) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=prefer", in.prep.ip, postgresPort, postgresUser)
}

// query connects and runs SELECT 1, all within queryTimeout.
func query(ctx context.Context, in *instance) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, connString(in))
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var n int
	err = conn.QueryRow(ctx, "SELECT 1").Scan(&n)
	return n, err
}

// instanceProcesses returns Patroni, its descendants, and the postmasters
// with theirs.
func instanceProcesses(in *instance) []int {
	pids := append([]int{in.proc.pid}, descendants(in.proc.pid)...)
	for _, pm := range in.postmasters() {
		pids = append(pids, pm)
		pids = append(pids, descendants(pm)...)
	}
	return pids
}

// stoppedOrGone: a process of a frozen instance, or one that has exited
// meanwhile (the backend of a connection just closed).
func stoppedOrGone(state byte) bool {
	return state == 'T' || state == 'Z' || state == 'X' || state == 0
}

// waitStates waits until the state of every pid of pids satisfies ok.
func waitStates(t *testing.T, pids []int, ok func(state byte) bool, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var off []string
		for _, pid := range pids {
			if s := procState(pid); !ok(s) {
				off = append(off, fmt.Sprintf("%d (%s): %q", pid, strings.Join(cmdline(pid), " "), s))
			}
		}
		if len(off) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %s: %s", want, strings.Join(off, "; "))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ready(st corev1.PodStatus) bool {
	for _, c := range st.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// testLog sends the kubelet's log to the test's.
type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
