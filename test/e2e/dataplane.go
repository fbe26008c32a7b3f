package e2e

// Helpers of the data-plane suites: clusters on the real node, where each
// pod is a container of pgloop's instance image with a pod IP on the
// node's bridge (docs/testbed.md, "Real node"), or on the process node,
// where it runs real Patroni and PostgreSQL 15 as host processes at a
// loopback pod IP (docs/testbed.md, "Data plane").

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/test/kubelet"
	"github.com/pgloop/pgloop/test/pgtest"
	"github.com/pgloop/pgloop/test/testbed"
)

// OnProcessNode is pgtest.OnProcessNode, under the name the suites use:
// the cluster runs on the process node.
var OnProcessNode = pgtest.OnProcessNode

// OnRealNode is pgtest.OnRealNode: the cluster runs on the real node, as
// containers of pgloop's image (docs/testbed.md, "Real node").
var OnRealNode = pgtest.OnRealNode

// ContainerLogs is the end (n lines) of the log of each container of the
// cluster's pods on the real node (`kubectl logs`), for a failure's
// message; pods of a process node have their logs in the plane's
// directory instead.
func (e *Env) ContainerLogs(ctx context.Context, ns, name string, n int64) string {
	pods, err := e.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: cluster.LabelClusterName + "=" + name})
	if err != nil {
		return fmt.Sprintf("(pods of %s: %v)", name, err)
	}
	var b strings.Builder
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			log, err := e.Kube.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: &n}).DoRaw(ctx)
			fmt.Fprintf(&b, "--- %s/%s (%v) ---\n%s\n", p.Name, c.Name, err, log)
		}
	}
	return b.String()
}

// PodLog is the log of a container of a pod on the real node, as `kubectl
// logs` shows it, after its previous instance's (`--previous`) when the
// container restarted; an error when neither can be read.
func (e *Env) PodLog(ctx context.Context, pod *corev1.Pod, container string) (string, error) {
	var b strings.Builder
	// The previous run's log is an error (and a Status in the body) when
	// the container did not restart.
	prev, perr := pgtest.PreviousLogs(ctx, e.Kube, pod.Namespace, pod.Name, container)
	if perr == nil {
		b.WriteString(prev)
	}
	// The current one is an error while a container that crashed waits
	// to start again.
	cur, err := pgtest.Logs(ctx, e.Kube, pod.Namespace, pod.Name, container)
	switch {
	case err == nil:
		b.WriteString(cur)
	case perr != nil:
		return "", err
	}
	return b.String(), nil
}

// Exec runs cmd in a container of a pod on the real node, as `kubectl
// exec` does, and returns its stdout.
func (e *Env) Exec(ctx context.Context, pod *corev1.Pod, container string, cmd ...string) (string, error) {
	out, _, err := pgtest.Exec(ctx, e.Plane.Config, e.Kube, pod.Namespace, pod.Name, container, cmd...)
	return out, err
}

// ProcessNode returns the plane's process node.
func (e *Env) ProcessNode(t testing.TB) testbed.ProcessNode {
	t.Helper()
	nodes := e.Plane.ProcessNodes()
	if len(nodes) == 0 {
		t.Fatal("the plane has no process node")
	}
	return nodes[0]
}

// Pod returns pod ns/name.
func (e *Env) Pod(ctx context.Context, t testing.TB, ns, name string) *corev1.Pod {
	t.Helper()
	pod, err := e.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("while reading pod %s/%s: %v", ns, name, err)
	}
	return pod
}

// LeaderRecord returns the member Patroni's leader lock names (annotation
// leader of the <cluster>-leader ConfigMap, or with Patroni on Endpoints
// of the Endpoints <cluster>), "" when none.
func (e *Env) LeaderRecord(ctx context.Context, ns, name string) (string, error) {
	cm, err := e.Kube.CoreV1().ConfigMaps(ns).Get(ctx, name+"-leader", metav1.GetOptions{})
	if err == nil {
		return cm.Annotations["leader"], nil
	}
	if !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("while reading the leader record of %s/%s: %w", ns, name, err)
	}
	ep, err := e.Kube.CoreV1().Endpoints(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("while reading the leader record of %s/%s: %w", ns, name, err)
	}
	return ep.Annotations["leader"], nil
}

// SQL connects to the PostgreSQL of pod as the superuser, with the password
// pgloop generated, at the pod's IP: loopback pod IPs are reachable from
// here. The connection is closed when t ends.
func (e *Env) SQL(ctx context.Context, t testing.TB, pod *corev1.Pod) *pgx.Conn {
	t.Helper()
	return e.SQLDatabase(ctx, t, pod, "postgres")
}

// SQLDatabase is SQL to the database db.
func (e *Env) SQLDatabase(ctx context.Context, t testing.TB, pod *corev1.Pod, db string) *pgx.Conn {
	t.Helper()
	clusterName := pod.Labels[cluster.LabelClusterName]
	secret, err := e.Kube.CoreV1().Secrets(pod.Namespace).Get(ctx, cluster.SecretName(cluster.SuperuserName, clusterName), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("while reading the superuser's secret of %s: %v", clusterName, err)
	}
	if pod.Status.PodIP == "" {
		t.Fatalf("pod %s has no IP", pod.Name)
	}
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=prefer connect_timeout=5",
		pod.Status.PodIP, cluster.PostgresPort, cluster.SuperuserName, db))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Password = string(secret.Data[cluster.SecretPasswordKey])
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("while connecting to pod %s at %s: %v", pod.Name, pod.Status.PodIP, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	})
	return conn
}

// sqlPoll paces the checks of state that only SQL shows (replication,
// replayed rows): nothing can be watched there.
const sqlPoll = 200 * time.Millisecond

// Eventually calls check until it returns true, an error wrapping
// errStop, or ctx ends; the last error is reported on timeout.
func Eventually(ctx context.Context, what string, check func(context.Context) (bool, error)) error {
	var last error
	for {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		done, err := check(attempt)
		cancel()
		if errors.Is(err, errStop) {
			return err
		}
		if err == nil && done {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), last)
		case <-time.After(sqlPoll):
		}
	}
}

var errStop = errors.New("giving up")

// Streaming returns the application names (Patroni member names, that is
// pod names) of the replicas streaming from the server conn is connected
// to, sorted.
func Streaming(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	rows, err := conn.Query(ctx, "SELECT application_name FROM pg_stat_replication WHERE state = 'streaming' ORDER BY 1")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// SetHold sets or clears a hold on a pod's instance: set, its Patroni and
// PostgreSQL are killed (a crash) and not restarted; cleared, they start
// again on their data. On the process node it is the process kubelet's
// hold annotation; on the real node, testbed's RealNode.Hold, from the
// host (the container ends and the kubelet restarts it when cleared).
func (e *Env) SetHold(ctx context.Context, ns, pod string, hold bool) error {
	return e.setFault(ctx, ns, pod, kubelet.HoldAnnotation, hold, func(n *testbed.RealNode, id string) error { return n.Hold(ctx, id) })
}

// SetFreeze freezes or resumes a pod's instance: frozen, its Patroni and
// PostgreSQL are stopped (SIGSTOP), a hung instance whose ports accept
// connections that nothing answers, its pod not ready but Running;
// resumed, they go on where they were. On the process node it is the
// process kubelet's freeze annotation; on the real node, RealNode.Freeze.
func (e *Env) SetFreeze(ctx context.Context, ns, pod string, freeze bool) error {
	return e.setFault(ctx, ns, pod, kubelet.FreezeAnnotation, freeze, func(n *testbed.RealNode, id string) error { return n.Freeze(ctx, id, "") })
}

// setFault sets (on) or clears a fault on a pod's instance: on the real
// node set does set, clear resumes the container's processes; on the
// process node it is the process kubelet's annotation.
func (e *Env) setFault(ctx context.Context, ns, pod, annotation string, on bool, set func(*testbed.RealNode, string) error) error {
	node, id, err := e.realContainer(ctx, ns, pod)
	switch {
	case err != nil:
		return err
	case node == nil:
		return e.setKubeletAnnotation(ctx, ns, pod, annotation, on)
	case on:
		return set(node, id)
	default:
		return node.Resume(ctx, id)
	}
}

// FreezePostgres stops only the PostgreSQL of a pod (kubelet.FreezePostgres
// on the process node): Patroni keeps the pod Ready while no SQL statement
// is answered, a hung primary as pgloop sees it. SetFreeze(..., false)
// resumes it.
func (e *Env) FreezePostgres(ctx context.Context, ns, pod string) error {
	node, id, err := e.realContainer(ctx, ns, pod)
	if err != nil {
		return err
	}
	if node != nil {
		return node.Freeze(ctx, id, "postgres")
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, kubelet.FreezeAnnotation, kubelet.FreezePostgres)
	if _, err := e.Kube.CoreV1().Pods(ns).Patch(ctx, pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("while freezing PostgreSQL of pod %s/%s: %w", ns, pod, err)
	}
	return nil
}

// realContainer returns the real node a pod runs on and the ID of its
// instance's container there, or a nil node for a pod elsewhere.
func (e *Env) realContainer(ctx context.Context, ns, name string) (*testbed.RealNode, string, error) {
	pod, err := e.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, "", err
	}
	for _, n := range e.Plane.RealNodes() {
		if n.Name != pod.Spec.NodeName {
			continue
		}
		for _, s := range pod.Status.ContainerStatuses {
			if s.Name == cluster.ContainerName {
				return &n, s.ContainerID, nil
			}
		}
		return nil, "", fmt.Errorf("pod %s/%s on %s has no %s container running", ns, name, n.Name, cluster.ContainerName)
	}
	return nil, "", nil
}

// setKubeletAnnotation sets annotation to "true" on pod, or removes it.
func (e *Env) setKubeletAnnotation(ctx context.Context, ns, pod, annotation string, on bool) error {
	value := `null`
	if on {
		value = `"true"`
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, annotation, value)
	_, err := e.Kube.CoreV1().Pods(ns).Patch(ctx, pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("while setting %s=%v on pod %s/%s: %w", annotation, on, ns, pod, err)
	}
	return nil
}

// DataDir returns the host directory of the volume bound to pod's data
// claim, on the process node or the real node.
func (e *Env) DataDir(ctx context.Context, t testing.TB, pod *corev1.Pod) string {
	t.Helper()
	claim := ""
	for _, v := range pod.Spec.Volumes {
		if v.Name == cluster.DataVolumeName && v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	if claim == "" {
		t.Fatalf("pod %s has no data volume claim", pod.Name)
	}
	pvc, err := e.Kube.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pvc.Spec.VolumeName == "" {
		t.Fatalf("claim %s is not bound", claim)
	}
	pv, err := e.Kube.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.Local != nil { // the real node's
		return pv.Spec.Local.Path
	}
	return filepath.Join(e.ProcessNode(t).Root, "pv", pvc.Spec.VolumeName)
}

// PodDir is where the process kubelet keeps a pod's files (Patroni's
// configuration among them).
func PodDir(node testbed.ProcessNode, pod *corev1.Pod) string {
	return filepath.Join(node.Root, "pods", string(pod.UID))
}

// Memory sums the proportional set size (PSS) of the processes whose
// command line names one of dirs, and of all their descendants: given the
// pods' PodDir and DataDir, each Patroni (its configuration is in PodDir)
// and each postmaster (its data directory is in DataDir; Patroni detaches
// it) with its backends.
func Memory(dirs []string) (pss int64, procs int, err error) {
	in, err := processesUnder(dirs)
	if err != nil {
		return 0, 0, err
	}
	for pid := range in {
		kib, err := pssKiB(pid)
		if err != nil {
			continue // exited meanwhile
		}
		pss += kib << 10
		procs++
	}
	return pss, procs, nil
}

// processesUnder returns the processes whose command line names one of
// dirs, and all their descendants.
func processesUnder(dirs []string) (map[int]bool, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	parent := map[int]int{}
	var roots []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		for _, dir := range dirs {
			if strings.Contains(string(cmdline), dir+"/") {
				roots = append(roots, pid)
				break
			}
		}
		if ppid, err := parentPID(pid); err == nil {
			parent[pid] = ppid
		}
	}
	in := map[int]bool{}
	for _, r := range roots {
		in[r] = true
	}
	// Descendants: follow parents up to a member of the set.
	for pid := range parent {
		for p, depth := pid, 0; p > 1 && depth < 16; p, depth = parent[p], depth+1 {
			if in[p] {
				in[pid] = true
				break
			}
		}
	}
	return in, nil
}

// survivors describes the processes still running under dirs
// (processesUnder), zombies left out, waiting up to wait for those just
// killed to go: "pid: command line".
func survivors(dirs []string, wait time.Duration) []string {
	deadline := time.Now().Add(wait)
	for {
		var out []string
		in, err := processesUnder(dirs)
		if err != nil {
			return []string{err.Error()}
		}
		for pid := range in {
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if err != nil || len(cmdline) == 0 {
				continue // gone, or a zombie
			}
			line := strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")
			if len(line) > 300 {
				line = line[:300] + "..."
			}
			out = append(out, fmt.Sprintf("%d: %s", pid, line))
		}
		if len(out) == 0 || time.Now().After(deadline) {
			slices.Sort(out)
			return out
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func parentPID(pid int) (int, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	end := strings.LastIndexByte(string(data), ')')
	fields := strings.Fields(string(data[end+1:]))
	if end < 0 || len(fields) < 2 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	return strconv.Atoi(fields[1])
}

func pssKiB(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "Pss:"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("no Pss for pid %d", pid)
}

// Switchover asks the Patroni of leader, at its pod IP, to hand the
// leadership to candidate now (POST /switchover), and returns once Patroni
// answered: it answers when the switchover is done.
func Switchover(ctx context.Context, leader *corev1.Pod, candidate string) error {
	body := fmt.Sprintf(`{"leader":%q,"candidate":%q}`, leader.Name, candidate)
	url := fmt.Sprintf("http://%s:%d/switchover", leader.Status.PodIP, cluster.PatroniPort)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("while asking %s for a switchover: %w", url, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("switchover %s -> %s: Patroni answered %s: %s", leader.Name, candidate, resp.Status, answer)
	}
	return nil
}
