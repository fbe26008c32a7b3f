package kubelet_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/test/kubelet"
	"github.com/pgloop/pgloop/test/pgtest"
	"github.com/pgloop/pgloop/test/testbed"
)

const (
	nodeName  = "proc-1"
	taintKey  = "pgloop.dev/data-plane"
	taintVal  = "process"
	clusterNm = "demo"
	// testDeadline bounds the whole test: a plane (~5 s), a build, two
	// elections, one failover (~20 s), a freeze (~6 s), a delete and a stop.
	testDeadline = 5 * time.Minute
	// kubeletStopGrace bounds the kubelet's own shutdown.
	kubeletStopGrace = 60 * time.Second
	// frozenTimeout is how long a frozen instance is given to answer.
	frozenTimeout = 2 * time.Second
)

// TestKubelet runs the process kubelet against the local control plane with
// the StatefulSet pgloop builds, and shows a real Patroni cluster behind it:
// pods Running and Ready on loopback IPs, a leader labelled by Patroni, a
// connection pooler (PgBouncer) in front of the master Service, the hold
// annotation taking an instance down and back (the pooler follows the
// failover), the freeze annotation hanging one (not ready, still Running)
// and resuming it, a deleted pod replaced on the same data, a crashed
// Patroni restarted, and nothing left running once the kubelet stops.
func TestKubelet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	plane, k, step := startKubeletPlane(ctx, t)
	cs := plane.Client
	root := k.root
	node, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The node lifecycle controller may still have its not-ready taint there.
	hasTaint := slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == taintKey && t.Value == taintVal && t.Effect == corev1.TaintEffectNoSchedule
	})
	if node.Labels[kubelet.NodeTypeLabel] != kubelet.NodeType || node.Labels["zone"] != "test" || !hasTaint {
		t.Errorf("node labels %v, taints %v", node.Labels, node.Spec.Taints)
	}
	step("node %s Ready", nodeName)

	ns := plane.Namespace(t)
	pg := createCluster(ctx, t, cs, ns)
	created := time.Now()
	if _, err := testbed.WaitForStatefulSet(ctx, cs, ns, clusterNm, testbed.StatefulSetReady); err != nil {
		t.Fatal(k.failure(err))
	}
	step("both pods Ready %v after the StatefulSet was created", time.Since(created).Round(time.Millisecond))
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ips := map[string]bool{}
	for _, p := range pods.Items {
		if p.Spec.NodeName != nodeName || !strings.HasPrefix(p.Status.PodIP, "127.") || p.Status.PodIP == "127.0.0.1" || ips[p.Status.PodIP] {
			t.Errorf("pod %s on %s has IP %q: want a distinct 127.x address on %s", p.Name, p.Spec.NodeName, p.Status.PodIP, nodeName)
		}
		ips[p.Status.PodIP] = true
	}

	leader := waitLeader(ctx, t, k, cs, ns, "")
	step("Patroni elected %s: %s-leader names it and it is labelled %s=%s", leader, clusterNm, cluster.LabelRole, cluster.RoleMaster)
	replica := cluster.PodName(pg.Name, 0)
	if replica == leader {
		replica = cluster.PodName(pg.Name, 1)
	}
	podIP := func(name string) string {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Status.PodIP
	}

	// Pooler: PgBouncer in a connection-pooler pod, in front of the master
	// Service, which the kubelet resolves to the leader's pod.
	pooler := startPooler(ctx, t, k, cs, ns, pg, leader)
	took := waitPoolerServes(ctx, t, k, pooler, podIP(leader))
	step("pooler %s Ready at %s; through it, with TLS, the app role reaches %s (%v)", pooler.Name, pooler.Status.PodIP, leader, took.Round(time.Millisecond))

	// Hold: the leader is killed, its pod waits with reason Held, and the
	// replica takes over once the leader key expires.
	setAnnotation(ctx, t, cs, ns, leader, kubelet.HoldAnnotation, true)
	held := time.Now()
	if _, err := testbed.WaitForPod(ctx, cs, ns, leader, func(p *corev1.Pod) (bool, error) {
		s := containerStatus(p)
		return s != nil && !s.Ready && s.State.Waiting != nil && s.State.Waiting.Reason == kubelet.ReasonHeld, nil
	}); err != nil {
		t.Fatal(k.failure(err))
	}
	step("%s held: not ready, waiting %s, after %v", leader, kubelet.ReasonHeld, time.Since(held).Round(time.Millisecond))
	if got := waitLeader(ctx, t, k, cs, ns, replica); got != replica {
		t.Fatalf("leader after the hold = %s, want %s", got, replica)
	}
	step("failover: %s leads %v after the hold", replica, time.Since(held).Round(time.Millisecond))
	waitPoolerServes(ctx, t, k, pooler, podIP(replica))
	if n := poolerRestarts(ctx, t, cs, pooler); n != 0 {
		t.Errorf("the pooler's container restarted %d times: following the Service is no restart", n)
	}
	step("the pooler follows: through it the app role reaches %s, %v after the hold", replica, time.Since(held).Round(time.Millisecond))
	deletePooler(ctx, t, k, cs, pooler)
	step("pooler pod deleted: stopped and removed")
	setAnnotation(ctx, t, cs, ns, leader, kubelet.HoldAnnotation, false)
	released := time.Now()
	back, err := testbed.WaitForPod(ctx, cs, ns, leader, testbed.PodReady)
	if err != nil {
		t.Fatal(k.failure(err))
	}
	if s := containerStatus(back); s == nil || s.RestartCount < 1 || s.LastTerminationState.Terminated == nil {
		t.Errorf("container status after the hold = %+v, want a restart and a last termination", s)
	}
	step("%s released: Ready again %v later", leader, time.Since(released).Round(time.Millisecond))

	// Freeze: the processes of a replica (the old leader) are stopped, not
	// killed. Its ports still accept connections but nothing answers, its
	// pod turns not ready with its container still Running, and once
	// thawed the same processes answer again.
	frozen, err := cs.CoreV1().Pods(ns).Get(ctx, leader, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	beforeFreeze, ip := containerStatus(frozen), frozen.Status.PodIP
	password := superuserPassword(ctx, t, cs, ns)
	setAnnotation(ctx, t, cs, ns, leader, kubelet.FreezeAnnotation, true)
	froze := time.Now()
	notReady, err := testbed.WaitForPod(ctx, cs, ns, leader, func(p *corev1.Pod) (bool, error) {
		s := containerStatus(p)
		return s != nil && !s.Ready && s.State.Running != nil, nil
	})
	if err != nil {
		t.Fatal(k.failure(err))
	}
	if s := containerStatus(notReady); s.ContainerID != beforeFreeze.ContainerID || s.RestartCount != beforeFreeze.RestartCount {
		t.Errorf("container status while frozen = %+v, want %s still running, %d restarts", s, beforeFreeze.ContainerID, beforeFreeze.RestartCount)
	}
	step("%s frozen: not ready, still Running, %v after the annotation", leader, time.Since(froze).Round(time.Millisecond))
	for _, port := range []int{cluster.PostgresPort, cluster.PatroniPort} {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, strconv.Itoa(port)), time.Second)
		if err != nil {
			t.Fatalf("TCP connect to frozen %s:%d: %v", ip, port, err)
		}
		c.Close()
	}
	if err := selectOne(ctx, ip, password, frozenTimeout); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("query to frozen %s = %v, want a timeout after %v", ip, err, frozenTimeout)
	}
	readiness := fmt.Sprintf("http://%s/readiness", net.JoinHostPort(ip, strconv.Itoa(cluster.PatroniPort)))
	client := &http.Client{Timeout: frozenTimeout, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	if resp, err := client.Get(readiness); err == nil {
		resp.Body.Close()
		t.Errorf("GET %s answered %s while frozen", readiness, resp.Status)
	} else if !os.IsTimeout(err) {
		t.Errorf("GET %s = %v, want a timeout", readiness, err)
	}
	step("%s frozen: TCP connects, but PostgreSQL and Patroni do not answer within %v", leader, frozenTimeout)
	setAnnotation(ctx, t, cs, ns, leader, kubelet.FreezeAnnotation, false)
	thawed := time.Now()
	// Ready first: Patroni, resumed, may find its PostgreSQL answered
	// nothing for a while and restart it (seen under load); the pod's
	// readiness says when it serves again, and then it answers, within
	// a restart (SQL has nothing to watch: polled, 20 s at most).
	ready, err := testbed.WaitForPod(ctx, cs, ns, leader, testbed.PodReady)
	if err != nil {
		t.Fatal(k.failure(err))
	}
	var queryErr error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if queryErr = selectOne(ctx, ip, password, 2*time.Second); queryErr == nil {
			break
		}
	}
	if queryErr != nil {
		t.Errorf("query to thawed %s, Ready again: %v", ip, queryErr)
	}
	if s := containerStatus(ready); s.ContainerID != beforeFreeze.ContainerID || s.RestartCount != beforeFreeze.RestartCount {
		t.Errorf("container status after the thaw = %+v, want %s, %d restarts", s, beforeFreeze.ContainerID, beforeFreeze.RestartCount)
	}
	step("%s thawed: answers and Ready again %v later, not restarted", leader, time.Since(thawed).Round(time.Millisecond))

	// Delete: the kubelet stops the instance and removes the pod; the
	// StatefulSet controller re-creates it, on the same claim and data.
	victim, err := cs.CoreV1().Pods(ns).Get(ctx, leader, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dataDir := pvDir(ctx, t, cs, root, victim)
	marker := filepath.Join(dataDir, "pgroot", "pgdata", "PG_VERSION") // Spilo's PGDATA
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the data directory of %s is not where expected: %v", victim.Name, err)
	}
	deleted := time.Now()
	if err := cs.CoreV1().Pods(ns).Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	recreated, err := testbed.WaitForPod(ctx, cs, ns, victim.Name, func(p *corev1.Pod) (bool, error) {
		return p.UID != victim.UID, nil
	})
	if err != nil {
		t.Fatal(k.failure(err))
	}
	step("%s deleted and re-created %v after the delete call", victim.Name, time.Since(deleted).Round(time.Millisecond))
	if _, err := testbed.WaitForPod(ctx, cs, ns, victim.Name, testbed.PodReady); err != nil {
		t.Fatal(k.failure(err))
	}
	step("the new %s Ready %v after the delete call", victim.Name, time.Since(deleted).Round(time.Millisecond))
	if got := pvDir(ctx, t, cs, root, recreated); got != dataDir {
		t.Errorf("the re-created pod uses %s, want the old data directory %s", got, dataDir)
	}
	config, err := os.ReadFile(filepath.Join(root, "pods", string(recreated.UID), "home", "patroni.yml"))
	if err != nil || !strings.Contains(string(config), dataDir) {
		t.Errorf("the re-created pod's Patroni configuration does not use %s (%v)", dataDir, err)
	}

	// Crash: Patroni killed behind the kubelet's back is restarted after
	// its back-off, its PostgreSQL killed first.
	crashPod, err := cs.CoreV1().Pods(ns).Get(ctx, replica, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := containerStatus(crashPod)
	pid, err := strconv.Atoi(strings.TrimPrefix(before.ContainerID, "process://"))
	if err != nil {
		t.Fatalf("container ID %q: %v", before.ContainerID, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	crashed := time.Now()
	after, err := testbed.WaitForPod(ctx, cs, ns, replica, func(p *corev1.Pod) (bool, error) {
		s := containerStatus(p)
		return s != nil && s.Ready && s.RestartCount > before.RestartCount, nil
	})
	if err != nil {
		t.Fatal(k.failure(err))
	}
	if last := containerStatus(after).LastTerminationState.Terminated; last == nil || last.Signal != int32(syscall.SIGKILL) || last.ContainerID != before.ContainerID {
		t.Errorf("last state after the crash = %+v, want SIGKILL of %s", last, before.ContainerID)
	}
	step("Patroni of %s killed: restarted and Ready %v later", replica, time.Since(crashed).Round(time.Millisecond))

	// Stop: every instance stops, the pods stay (not ready), and nothing of
	// the root runs any more.
	stopping := time.Now()
	if err := k.stop(); err != nil {
		t.Fatal(err)
	}
	step("kubelet stopped in %v", time.Since(stopping).Round(time.Millisecond))
	if left := processesOf(root); len(left) > 0 {
		t.Errorf("still running after the kubelet stopped: %s", strings.Join(left, "; "))
	}
	pods, err = cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if s := containerStatus(&p); p.DeletionTimestamp != nil || s == nil || s.Ready {
			t.Errorf("after the stop, pod %s: deleting %v, status %+v; want it kept and not ready", p.Name, p.DeletionTimestamp != nil, s)
		}
		if _, err := os.Stat(socketDirOf(p.UID)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket directory of %s still there: %v", p.Name, err)
		}
	}
}

// testWriter sends the plane's start-up log to the test's.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// instancePgloop, when set, is the pgloop binary the kubelet's pods run
// instead of one built from this tree: the instance image's own
// (kubelet_image_test.go).
var instancePgloop string

// buildKubelet builds test/cmd/pgkubelet (the kubelet reaps every child of
// its process, so it cannot run inside the test binary) and, beside it,
// the pgloop binary whose start-up programs run its pods (its --pgloop
// default).
func buildKubelet(ctx context.Context, t *testing.T) string {
	var dir string
	if instancePgloop != "" {
		// The image's own (kubelet_image_test.go).
		dir = t.TempDir()
		data, err := os.ReadFile(instancePgloop)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "pgloop"), data, 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		dir = filepath.Dir(kubelet.BuildPgloop(ctx, t))
	}
	bin := filepath.Join(dir, "pgkubelet")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/pgloop/pgloop/test/cmd/pgkubelet")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build pgkubelet: %v\n%s", err, out)
	}
	return bin
}

// startKubeletPlane starts a plane of one kwok node and the process
// kubelet built from this tree on a fresh root, and returns once its node
// is Ready; step logs a line with the time since the start. Everything
// stops when t ends.
func startKubeletPlane(ctx context.Context, t *testing.T) (*testbed.Plane, *runningKubelet, func(format string, args ...any)) {
	t.Helper()
	kubelet.RequireInstalled(t, kubelet.DefaultPatroni, kubelet.DefaultPython, filepath.Join(kubelet.DefaultPGBin, "postgres"))
	began := time.Now()
	step := func(format string, args ...any) {
		t.Logf("%6.2fs "+format, append([]any{time.Since(began).Seconds()}, args...)...)
	}
	plane, err := testbed.Start(ctx, testbed.Options{Nodes: 1, Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := plane.Stop(); err != nil {
			t.Error(err)
		}
	})
	step("plane up")
	bin := buildKubelet(ctx, t)
	step("pgkubelet built")
	k := startKubelet(t, bin, plane.Kubeconfig, kubeletRoot(t))
	if _, err := testbed.WaitFor(ctx, testbed.Nodes(plane.Client, nodeName), testbed.NodeReady); err != nil {
		t.Fatal(k.failure(err))
	}
	step("node %s Ready", nodeName)
	return plane, k, step
}

// kubeletRoot returns a fresh root whose parents postgres can traverse
// (t.TempDir's parent is 0700).
func kubeletRoot(t *testing.T) string {
	root, err := os.MkdirTemp("", "pgkubelet-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := kubelet.Cleanup(root); err != nil {
			t.Error(err)
		}
		if !t.Failed() {
			os.RemoveAll(root)
		} else {
			t.Logf("kept %s for inspection", root)
		}
	})
	return root
}

// runningKubelet is the pgkubelet subprocess.
type runningKubelet struct {
	t      *testing.T
	cmd    *exec.Cmd
	log    string
	root   string
	exited chan struct{}
	err    error // valid once exited is closed
}

func startKubelet(t *testing.T, bin, kubeconfig, root string) *runningKubelet {
	logPath := filepath.Join(t.TempDir(), "pgkubelet.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin,
		"--kubeconfig="+kubeconfig,
		"--node-name="+nodeName,
		"--root="+root,
		// The kubelet skips addresses another plane's pods hold.
		"--pod-cidr=127.1.7.0/24",
		"--label=zone=test",
		"--taint="+taintKey+"="+taintVal+":NoSchedule",
		"--log-level=debug",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The kubelet dies with the test (its Patroni processes with it;
	// Cleanup(root) stops the PostgreSQL servers). Pdeathsig fires when the
	// forking thread exits: the fork happens on a thread locked until the
	// kubelet has exited.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	k := &runningKubelet{t: t, cmd: cmd, log: logPath, root: root, exited: make(chan struct{})}
	started := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		k.err = cmd.Wait()
		close(k.exited)
	}()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := k.stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("--- pgkubelet log ---\n%s", tail(logPath, 150))
			logs, _ := filepath.Glob(filepath.Join(root, "pods", "*", "patroni.log"))
			for _, l := range logs {
				t.Logf("--- %s ---\n%s", l, tail(l, 40))
			}
		}
	})
	return k
}

// stop sends SIGTERM and waits for the kubelet to exit; it is idempotent.
func (k *runningKubelet) stop() error {
	select {
	case <-k.exited:
		return nil
	default:
	}
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-k.exited:
		if k.err != nil {
			return fmt.Errorf("pgkubelet exited with %v\n%s", k.err, tail(k.log, 30))
		}
		return nil
	case <-time.After(kubeletStopGrace):
		_ = k.cmd.Process.Kill()
		<-k.exited
		return fmt.Errorf("pgkubelet ignored SIGTERM for %v\n%s", kubeletStopGrace, tail(k.log, 30))
	}
}

// failure adds the end of the kubelet's log to err, and says whether it died.
func (k *runningKubelet) failure(err error) error {
	select {
	case <-k.exited:
		return fmt.Errorf("%w\npgkubelet exited (%v):\n%s", err, k.err, tail(k.log, 40))
	default:
		return err
	}
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// createCluster creates what pgloop would for a two-instance cluster
// tolerating the process node's taint and bound to it.
func createCluster(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) *v1.Postgresql {
	return createClusterWith(ctx, t, cs, ns, 2, nil)
}

// createClusterWith is createCluster with that many instances, and edit,
// when not nil, applied to the StatefulSet before it is created.
func createClusterWith(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string, instances int32, edit func(*appsv1.StatefulSet)) *v1.Postgresql {
	pg := planeCluster(ns, clusterNm, instances)
	createClusterFrom(ctx, t, cs, pg, cluster.Options{}, edit)
	return pg
}

// planeCluster is a cluster this plane can run: PostgreSQL 15, short
// Patroni timings, its pods on the test's node.
func planeCluster(ns, name string, instances int32) *v1.Postgresql {
	pg := pgtest.Cluster(ns, name, instances)
	pg.Spec.PostgreSQL.Version = "15" // the binaries installed here
	// The shortest valid timings: a failover within ttl (20 s), not 30.
	pg.Spec.Patroni = &v1.Patroni{TTL: 20, LoopWait: 2, RetryTimeout: 5}
	pg.Spec.Tolerations = []corev1.Toleration{{Key: taintKey, Operator: corev1.TolerationOpEqual, Value: taintVal, Effect: corev1.TaintEffectNoSchedule}}
	pg.Spec.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName},
		}}}},
	}}
	return pg
}

// createClusterFrom creates pg's ServiceAccount, RBAC, Secrets and
// StatefulSet (built with opts, then edit when not nil) as pgloop would,
// without the Postgresql object.
func createClusterFrom(ctx context.Context, t *testing.T, cs kubernetes.Interface, pg *v1.Postgresql, opts cluster.Options, edit func(*appsv1.StatefulSet)) {
	t.Helper()
	ns := pg.Namespace
	secrets, err := cluster.Secrets(pg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// No Postgresql object exists: owner references would let the garbage
	// collector delete everything.
	core := cs.CoreV1()
	sa := cluster.ServiceAccount(pg)
	sa.OwnerReferences = nil
	if _, err := core.ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := cluster.Role(pg)
	role.OwnerReferences = nil
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := cluster.RoleBinding(pg)
	binding.OwnerReferences = nil
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		s.OwnerReferences = nil
		if _, err := core.Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sts := cluster.StatefulSet(pg, opts)
	sts.OwnerReferences = nil
	if edit != nil {
		edit(sts)
	}
	if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitLeader waits until Patroni's <scope>-leader ConfigMap names a member
// (want, if not empty) and that member's pod carries the master label, and
// returns it.
func waitLeader(ctx context.Context, t *testing.T, k *runningKubelet, cs kubernetes.Interface, ns, want string) string {
	t.Helper()
	lw := testbed.ListWatch(cs.CoreV1().ConfigMaps(ns), "metadata.name="+clusterNm+"-leader")
	cm, err := testbed.WaitFor(ctx, lw, func(cm *corev1.ConfigMap) (bool, error) {
		l := cm.Annotations["leader"]
		return l != "" && (want == "" || l == want), nil
	})
	if err != nil {
		t.Fatal(k.failure(err))
	}
	leader := cm.Annotations["leader"]
	if _, err := testbed.WaitForPod(ctx, cs, ns, leader, func(p *corev1.Pod) (bool, error) {
		return p.Labels[cluster.LabelRole] == cluster.RoleMaster, nil
	}); err != nil {
		t.Fatal(k.failure(err))
	}
	return leader
}

// setAnnotation sets one of the kubelet's test annotations on pod to "true",
// or removes it.
func setAnnotation(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, pod, annotation string, on bool) {
	t.Helper()
	value := "null"
	if on {
		value = `"true"`
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, annotation, value)
	if _, err := cs.CoreV1().Pods(ns).Patch(ctx, pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// superuserPassword is the password of the cluster's superuser.
func superuserPassword(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) string {
	t.Helper()
	s, err := cs.CoreV1().Secrets(ns).Get(ctx, cluster.SecretName(cluster.SuperuserName, clusterNm), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(s.Data[cluster.SecretPasswordKey])
}

// selectOne connects to the PostgreSQL at ip as the superuser and runs
// SELECT 1, all within timeout.
func selectOne(ctx context.Context, ip, password string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=prefer", ip, cluster.PostgresPort, cluster.SuperuserName))
	if err != nil {
		return err
	}
	cfg.Password = password
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}

func containerStatus(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == cluster.ContainerName {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// pvDir is the host directory of the pod's data volume: <root>/pv/<pv>.
func pvDir(ctx context.Context, t *testing.T, cs kubernetes.Interface, root string, p *corev1.Pod) string {
	t.Helper()
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc, err := cs.CoreV1().PersistentVolumeClaims(p.Namespace).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return filepath.Join(root, "pv", pvc.Spec.VolumeName)
	}
	t.Fatalf("pod %s has no claim", p.Name)
	return ""
}

// socketDirOf mirrors the kubelet's socket directory naming.
func socketDirOf(uid types.UID) string {
	return "/tmp/pgk-" + strings.ReplaceAll(string(uid), "-", "")[:8]
}

// processesOf lists the processes whose working directory or command line
// is under root, as "pid: command line".
func processesOf(root string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " ")
		if under(cwd, root) || strings.Contains(args, root+"/") || strings.HasSuffix(args, root) {
			out = append(out, fmt.Sprintf("%d: %s", pid, args))
		}
	}
	return out
}

func under(path, root string) bool { return path == root || strings.HasPrefix(path, root+"/") }
