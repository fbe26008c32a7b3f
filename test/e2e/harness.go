// Package e2e holds pgloop's end-to-end suites (issue 4, "What must be
// shown"). They run on one local control plane per test binary
// (test/testbed), with pgloop's CRD applied, pgloop's operator as a
// subprocess built from this tree, and the labeller standing in for
// Patroni's role labels. Every wait is a watch under a deadline; no test
// sleeps for a fixed time.
//
//	cd test && PGLOOP_BIN=$PWD/../bin go test -count=1 ./e2e/...
//
// This file is the harness: the plane and its clients (Env), the operator
// process (Operator), the labeller, and the helpers that create clusters and
// wait for their states.
package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	pgclient "github.com/pgloop/pgloop/pkg/generated/clientset/versioned"
	pgclientv1 "github.com/pgloop/pgloop/pkg/generated/clientset/versioned/typed/pgloop/v1"
	"github.com/pgloop/pgloop/test/labeller"
	"github.com/pgloop/pgloop/test/pgtest"
	"github.com/pgloop/pgloop/test/testbed"
)

// Env is the control plane of one test binary and the clients the suites
// use.
type Env struct {
	Plane *testbed.Plane
	Kube  kubernetes.Interface
	// PG is the typed client of the pgloop.dev/v1 group, from the
	// generated clientset.
	PG  pgclientv1.PgloopV1Interface
	Dyn dynamic.Interface
	// Repo is the root of the repository (where go.mod names
	// github.com/pgloop/pgloop).
	Repo string

	buildOnce sync.Once
	buildDir  string
	pgloop    string // the built binary
	buildErr  error
	// operatorErr is nil when the binary has an operator command, else
	// says why it has none.
	operatorErr error
	// operatorImageLoaded: the real node has OperatorImage's tags of the
	// built binary (installOperatorImage, under imageBinaryMu).
	operatorImageLoaded bool
}

// Setup starts a plane and applies pgloop's CRDs to it. Close it when done.
func Setup(ctx context.Context, opts testbed.Options) (*Env, error) {
	repo, err := pgtest.RepoRoot()
	if err != nil {
		return nil, err
	}
	p, err := testbed.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	env := &Env{Plane: p, Kube: p.Client, Repo: repo}
	if err := env.init(ctx); err != nil {
		_ = p.Stop()
		return nil, err
	}
	return env, nil
}

func (e *Env) init(ctx context.Context) error {
	pg, err := pgclient.NewForConfig(e.Plane.Config)
	if err != nil {
		return err
	}
	e.PG = pg.PgloopV1()
	if e.Dyn, err = dynamic.NewForConfig(e.Plane.Config); err != nil {
		return err
	}
	crds, err := testbed.ReadManifests(filepath.Join(e.Repo, "manifests", "crds"))
	if err != nil {
		return fmt.Errorf("while reading the CRDs: %w", err)
	}
	// The directory may hold more than CRDs (a kustomization.yaml).
	crds = slices.DeleteFunc(crds, func(o *unstructured.Unstructured) bool { return o.GetKind() != "CustomResourceDefinition" })
	if len(crds) == 0 {
		return errors.New("no CustomResourceDefinition in manifests/crds")
	}
	if err := testbed.Apply(ctx, e.Plane.Config, crds); err != nil {
		return fmt.Errorf("while applying the CRDs: %w", err)
	}
	return nil
}

// Close stops the plane and removes the operator build; it reports a plane
// process that died during the tests.
func (e *Env) Close() error {
	health := e.Plane.Healthy()
	if health != nil {
		health = fmt.Errorf("a process of the plane died during the tests: %w", health)
	}
	if e.buildDir != "" {
		_ = os.RemoveAll(e.buildDir)
	}
	err := e.Plane.Stop()
	// The process node's Patroni and PostgreSQL servers (which Patroni
	// detaches) must be gone with the plane: their command lines name
	// their configuration or data directory under the plane's directory.
	if left := survivors([]string{e.Plane.Dir}, 10*time.Second); len(left) > 0 {
		err = errors.Join(err, fmt.Errorf("%d processes of the plane survived Stop by 10 s:\n%s", len(left), strings.Join(left, "\n")))
	}
	return errors.Join(health, err)
}

// Context returns a context for t bounded by d, cancelled when t ends.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Namespace creates a namespace for t, deleted when t ends.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	return e.Plane.Namespace(t)
}

// Operator binary.

// operatorBinary builds pgloop from this tree once per test binary, and
// fails t when the binary has no working `pgloop operator`.
func (e *Env) operatorBinary(t testing.TB) string {
	t.Helper()
	e.buildOnce.Do(func() {
		e.buildDir, e.buildErr = os.MkdirTemp("", "pgloop-e2e-")
		if e.buildErr != nil {
			return
		}
		began := time.Now()
		if e.pgloop, e.buildErr = pgtest.Build(context.Background(), e.Repo, e.buildDir); e.buildErr != nil {
			return
		}
		fmt.Fprintf(os.Stderr, "e2e: built pgloop in %v\n", time.Since(began).Round(time.Millisecond))
		if out, err := exec.Command(e.pgloop, "operator", "--help").CombinedOutput(); err != nil ||
			!strings.Contains(string(out), "--leader-elect") {
			e.operatorErr = fmt.Errorf("`pgloop operator --help` (%v): %s", err, firstLines(string(out), 5))
		}
	})
	if e.buildErr != nil {
		t.Fatal(e.buildErr)
	}
	if e.operatorErr != nil {
		t.Fatalf("the pgloop binary has no operator command: %v", e.operatorErr)
	}
	return e.pgloop
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// Operator is a `pgloop operator` process started by a test.
type Operator struct {
	Name string
	// LogPath holds its stdout and stderr.
	LogPath string

	t testing.TB
	p *pgtest.Operator
}

// OperatorArgs are the arguments every operator of the suites gets before
// the test's own: kubeconfig, one namespace, no leader election, a health
// endpoint on a free port, and debug logs.
func (e *Env) OperatorArgs(namespaces []string) []string {
	args := []string{"operator", "--kubeconfig", e.Plane.Kubeconfig}
	for _, ns := range namespaces {
		args = append(args, "--namespace", ns)
	}
	return append(args,
		"--leader-elect=false",
		"--health-addr", "127.0.0.1:0",
		"--log-level", "debug",
	)
}

// StartOperator runs `pgloop operator` for namespaces with args appended to
// OperatorArgs (a later flag overrides an earlier one), as a
// pgtest.Operator. It is stopped with SIGTERM when t ends, and its log's
// tail is printed if t failed. Like the plane's processes it runs in its
// own process group and dies with the test binary (Pdeathsig).
func (e *Env) StartOperator(t testing.TB, name string, namespaces []string, args ...string) *Operator {
	t.Helper()
	bin := e.operatorBinary(t)
	// Not t.TempDir: the log of a failed test is kept for a post-mortem.
	logDir, err := os.MkdirTemp("", "pgloop-e2e-"+sanitizeName(t.Name())+"-")
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(logDir, name+".log")
	args = append(e.OperatorArgs(namespaces), args...)
	p, err := pgtest.StartOperator(bin, args, logPath, nil)
	if err != nil {
		t.Fatalf("while starting operator %s: %v", name, err)
	}
	o := &Operator{Name: name, LogPath: logPath, t: t, p: p}
	t.Logf("operator %s started (pid %d): %s", name, p.PID(), strings.Join(args, " "))
	t.Cleanup(func() {
		if err := o.Stop(); err != nil {
			t.Errorf("operator %s: %v", name, err)
		}
		if t.Failed() {
			t.Logf("--- last lines of operator %s (whole log kept in %s) ---\n%s", name, logPath, o.LogTail(60))
		} else {
			_ = os.RemoveAll(logDir)
		}
	})
	// Cleanups run last-in first-out: this one runs while the operator
	// still does, so the clusters' finalizers are removed and the test's
	// namespaces can go.
	t.Cleanup(func() {
		for _, ns := range namespaces {
			e.deleteClusters(t, o, ns)
		}
	})
	return o
}

// cleanupDeadline bounds the deletion of a test's clusters at its end.
const cleanupDeadline = 90 * time.Second

// deleteClusters deletes every cluster of namespace and waits until they are
// gone, if an operator (o or a later one) still runs to remove their
// finalizers. Clusters still there after cleanupDeadline lose their
// finalizers by force, so the namespace's deletion does not hang, and the
// test fails.
func (e *Env) deleteClusters(t testing.TB, o *Operator, namespace string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupDeadline)
	defer cancel()
	list, err := e.PG.Postgresqls(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("cleanup: while listing the clusters of %s: %v", namespace, err)
		return
	}
	if len(list.Items) == 0 {
		return
	}
	for _, pg := range list.Items {
		if err := e.PG.Postgresqls(namespace).Delete(ctx, pg.Name, metav1.DeleteOptions{}); IgnoreNotFound(err) != nil {
			t.Errorf("cleanup: while deleting cluster %s/%s: %v", namespace, pg.Name, err)
		}
	}
	var stuck []string
	for _, pg := range list.Items {
		if err := e.WaitGone(ctx, namespace, pg.Name); err != nil {
			stuck = append(stuck, pg.Name)
			if !t.Failed() {
				t.Errorf("cleanup: %v", err)
			}
		}
	}
	for _, name := range stuck {
		e.explainStuck(t, namespace, name)
		e.dropFinalizers(t, namespace, name)
	}
	if len(stuck) > 0 {
		t.Logf("cleanup: removed the finalizers of %v in %s by hand (operator %s exited: %v)", stuck, namespace, o.Name, o.Exited())
	}
}

// explainStuck logs what holds up the deletion of cluster namespace/name:
// its pods as the API has them and, for those of a process node, the
// process kubelet's and Patroni's last lines about them (the plane's
// directory goes with the run), for those of the real node their
// containers' logs.
func (e *Env) explainStuck(t testing.TB, namespace, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := e.Kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("cleanup: while listing the pods of %s: %v", namespace, err)
		return
	}
	nodes := map[string]testbed.ProcessNode{}
	for _, n := range e.Plane.ProcessNodes() {
		nodes[n.Name] = n
	}
	for _, pod := range pods.Items {
		if !strings.HasPrefix(pod.Name, name+"-") {
			continue
		}
		var deleting string
		if pod.DeletionTimestamp != nil {
			deleting = fmt.Sprintf(", deleting since %s (grace %ds)", pod.DeletionTimestamp.UTC().Format(time.TimeOnly), ptr.Deref(pod.DeletionGracePeriodSeconds, -1))
		}
		t.Logf("cleanup: pod %s on %q: phase %s%s, finalizers %v", pod.Name, pod.Spec.NodeName, pod.Status.Phase, deleting, pod.Finalizers)
		if slices.ContainsFunc(e.Plane.RealNodes(), func(n testbed.RealNode) bool { return n.Name == pod.Spec.NodeName }) {
			for _, c := range pod.Spec.Containers {
				log, err := pgtest.Logs(ctx, e.Kube, namespace, pod.Name, c.Name)
				t.Logf("--- container %s of pod %s on the real node (last lines; %v) ---\n%s", c.Name, pod.Name, err, lastN(log, 25))
			}
			continue
		}
		node, ok := nodes[pod.Spec.NodeName]
		if !ok {
			continue
		}
		key := "pod=" + namespace + "/" + pod.Name + " "
		t.Logf("--- process kubelet %s on pod %s (last lines) ---\n%s", node.Name, pod.Name,
			lastLines(node.Log, 25, func(l string) bool { return strings.Contains(l, key) }))
		t.Logf("--- Patroni of pod %s (last lines) ---\n%s", pod.Name,
			lastLines(filepath.Join(PodDir(node, &pod), "patroni.log"), 25, nil))
		// What the kubelet asked a stop that hangs for (test/kubelet's
		// slowstop.go): Patroni's threads' stacks.
		if stacks, err := os.ReadFile(filepath.Join(PodDir(node, &pod), "patroni-stacks.txt")); err == nil && len(stacks) > 0 {
			t.Logf("--- Patroni's threads' stacks of pod %s ---\n%s", pod.Name, stacks)
		}
		if logs := e.postgresLogs(ctx, node, &pod); len(logs) > 0 {
			t.Logf("--- PostgreSQL of pod %s (last lines of %s) ---\n%s", pod.Name, logs[len(logs)-1],
				lastLines(logs[len(logs)-1], 25, nil))
		}
	}
}

// lastN is the last n lines of s.
func lastN(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// postgresLogs returns the log files PostgreSQL of pod on a process node
// wrote (Spilo's pg_log beside the data directory, in the volume of the
// pod's data claim), the most recently written last.
func (e *Env) postgresLogs(ctx context.Context, node testbed.ProcessNode, pod *corev1.Pod) []string {
	for _, v := range pod.Spec.Volumes {
		if v.Name != cluster.DataVolumeName || v.PersistentVolumeClaim == nil {
			continue
		}
		pvc, err := e.Kube.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
		if err != nil || pvc.Spec.VolumeName == "" {
			return nil
		}
		logs, _ := filepath.Glob(filepath.Join(node.Root, "pv", pvc.Spec.VolumeName, "pgroot", "pg_log", "postgresql-*"))
		slices.SortFunc(logs, func(a, b string) int { return modTime(a).Compare(modTime(b)) })
		return logs
	}
	return nil
}

// modTime is when path was last written, the zero time if unknown.
func modTime(path string) time.Time {
	fi, err := os.Stat(path)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// lastLines returns the last n lines of file path that keep accepts (all
// when keep is nil), or why it could not read them.
func lastLines(path string, n int, keep func(string) bool) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if keep == nil || keep(l) {
			out = append(out, l)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.Join(out, "\n")
}

func (e *Env) dropFinalizers(t testing.TB, namespace, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pg, err := e.PG.Postgresqls(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pg.Finalizers = nil
		_, err = e.PG.Postgresqls(pg.Namespace).Update(ctx, pg, metav1.UpdateOptions{})
		return err
	})
	if IgnoreNotFound(err) != nil {
		t.Logf("cleanup: while removing the finalizers of %s/%s: %v", namespace, name, err)
	}
}

// sanitizeName makes a test name usable in a file name.
func sanitizeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, s)
}

// operatorEnv is pgtest.OperatorEnv: the test's environment without a
// KUBECONFIG (nor PGLOOP_ variables), so only the flag decides which API
// server a command talks to.
func operatorEnv() []string { return pgtest.OperatorEnv() }

// PID is the operator's process id.
func (o *Operator) PID() int { return o.p.PID() }

// Exited reports whether the process has ended.
func (o *Operator) Exited() bool {
	select {
	case <-o.p.Exited():
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL to the operator's process group and waits until it
// is reaped: the crash the restart suites need, no cleanup, no lease
// release.
func (o *Operator) Kill() {
	o.t.Helper()
	if o.Exited() {
		return
	}
	o.p.Kill()
	o.t.Logf("operator %s killed (SIGKILL)", o.Name)
}

// Stop sends SIGTERM and waits for the operator to exit, at most
// pgtest.StopGrace (30s), then kills it. It is an error if the operator
// needed SIGKILL or exited with a failure on SIGTERM; a process that was
// killed or had exited is no error here (the test saw to that).
func (o *Operator) Stop() error { return o.p.Stop() }

// Log returns the operator's log so far.
func (o *Operator) Log() string {
	data, _ := os.ReadFile(o.LogPath)
	return string(data)
}

// LogTail returns the last n lines of the operator's log.
func (o *Operator) LogTail(n int) string {
	lines := strings.Split(strings.TrimRight(o.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// LogCount counts the log lines containing every one of parts.
func (o *Operator) LogCount(parts ...string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(o.Log()))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if containsAll(sc.Text(), parts) {
			n++
		}
	}
	return n
}

// WaitLog waits until a line of the operator's log contains every one of
// parts. A log file has no watch; it is read every 100ms, which is the one
// poll of the suites.
func (o *Operator) WaitLog(ctx context.Context, parts ...string) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if o.LogCount(parts...) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("operator %s logged no line with %q: %w\n--- last lines ---\n%s", o.Name, parts, ctx.Err(), o.LogTail(30))
		case <-o.p.Exited():
			if o.LogCount(parts...) > 0 {
				return nil
			}
			return fmt.Errorf("operator %s exited (%v) before logging %q\n--- last lines ---\n%s", o.Name, o.p.Err(), parts, o.LogTail(30))
		case <-tick.C:
		}
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// StartLabeller runs the labeller for namespace in this process until t
// ends: the stand-in for Patroni's role labels.
func (e *Env) StartLabeller(t testing.TB, namespace string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := logrus.New()
	log.SetOutput(io.Discard)
	done := make(chan error, 1)
	go func() { done <- labeller.Run(ctx, e.Kube, namespace, log) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("labeller: %v", err)
		}
	})
}

// Clusters.

// NewCluster returns pgtest.Cluster: a small valid cluster.
func NewCluster(ns, name string, instances int32) *v1.Postgresql {
	return pgtest.Cluster(ns, name, instances)
}

// CreateCluster creates NewCluster(ns, name, instances), with mutate applied
// first when not nil.
func (e *Env) CreateCluster(t testing.TB, ns, name string, instances int32, mutate ...func(*v1.Postgresql)) *v1.Postgresql {
	t.Helper()
	pg := NewCluster(ns, name, instances)
	for _, m := range mutate {
		m(pg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	created, err := e.PG.Postgresqls(pg.Namespace).Create(ctx, pg, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("while creating cluster %s/%s: %v", ns, name, err)
	}
	return created
}

// Clusters lists and watches the cluster ns/name (every cluster of ns when
// name is "").
func (e *Env) Clusters(ns, name string) *cache.ListWatch {
	sel := ""
	if name != "" {
		sel = ByName(name)
	}
	return testbed.ListWatch(e.PG.Postgresqls(ns), sel)
}

// Summary renders the part of a cluster's status a failure message needs.
func Summary(pg *v1.Postgresql) string {
	if pg == nil {
		return "(not seen)"
	}
	s := pg.Status
	var conds []string
	for _, c := range s.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s(%s: %q)", c.Type, c.Status, c.Reason, c.Message))
	}
	var history []string
	for _, h := range s.History {
		history = append(history, fmt.Sprintf("%s->%s(%s)", h.From, h.To, h.Event))
	}
	return fmt.Sprintf("state=%q reason=%q message=%q ready=%d/%d epoch=%d observedGeneration=%d/%d timers=%s conditions=[%s] history=[%s]",
		s.State, s.Reason, s.Message, s.ReadyInstances, s.DesiredInstances, s.Epoch,
		s.ObservedGeneration, pg.Generation, timersString(s.Timers), strings.Join(conds, " "), strings.Join(history, " "))
}

func timersString(timers []v1.Timer) string {
	var parts []string
	for _, tm := range timers {
		parts = append(parts, fmt.Sprintf("%s@%s(epoch %d)", tm.Name, tm.Deadline.UTC().Format(time.RFC3339), tm.Epoch))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// WaitCluster watches cluster ns/name until cond holds and returns it. On
// timeout the error carries the last status seen.
func (e *Env) WaitCluster(ctx context.Context, ns, name string, what string, cond func(*v1.Postgresql) bool) (*v1.Postgresql, error) {
	var last *v1.Postgresql
	found, err := testbed.WaitFor(ctx, e.Clusters(ns, name), func(pg *v1.Postgresql) (bool, error) {
		last = pg
		return cond(pg), nil
	})
	if err != nil {
		return nil, fmt.Errorf("cluster %s/%s never %s: %w\nlast status: %s", ns, name, what, err, Summary(last))
	}
	return found, nil
}

// WaitState waits until cluster ns/name is in state, for the spec's
// current generation, and returns it.
func (e *Env) WaitState(ctx context.Context, ns, name, state string) (*v1.Postgresql, error) {
	return e.WaitCluster(ctx, ns, name, "reached "+state, func(pg *v1.Postgresql) bool {
		return pg.Status.State == state && pg.Status.ObservedGeneration >= pg.Generation
	})
}

// MustState is WaitState that fails t.
func (e *Env) MustState(ctx context.Context, t testing.TB, ns, name, state string) *v1.Postgresql {
	t.Helper()
	pg, err := e.WaitState(ctx, ns, name, state)
	if err != nil {
		t.Fatal(err)
	}
	return pg
}

// WaitGone waits until cluster ns/name no longer exists.
func (e *Env) WaitGone(ctx context.Context, ns, name string) error {
	var last *v1.Postgresql
	_, err := watchtools.UntilWithSync(ctx, e.Clusters(ns, name), &v1.Postgresql{},
		func(store cache.Store) (bool, error) {
			for _, obj := range store.List() {
				last = obj.(*v1.Postgresql)
			}
			return len(store.List()) == 0, nil
		},
		func(ev watch.Event) (bool, error) {
			if pg, ok := ev.Object.(*v1.Postgresql); ok {
				last = pg
			}
			return ev.Type == watch.Deleted, nil
		})
	if err != nil {
		finalizers := []string(nil)
		if last != nil {
			finalizers = last.Finalizers
		}
		return fmt.Errorf("cluster %s/%s still exists: %w\nlast status: %s finalizers=%v", ns, name, err, Summary(last), finalizers)
	}
	return nil
}

// UpdateCluster applies change to the current cluster ns/name and writes
// it, again on a Conflict: the operator writes the status meanwhile.
func (e *Env) UpdateCluster(ctx context.Context, ns, name string, change func(*v1.Postgresql)) (*v1.Postgresql, error) {
	var out *v1.Postgresql
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pg, err := e.PG.Postgresqls(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(pg)
		out, err = e.PG.Postgresqls(pg.Namespace).Update(ctx, pg, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("while updating cluster %s/%s: %w", ns, name, err)
	}
	return out, nil
}

// MergePatchCluster sends a JSON merge patch to cluster ns/name, as
// `kubectl patch --type merge` does, and returns the result.
func (e *Env) MergePatchCluster(ctx context.Context, ns, name, patch string) (*v1.Postgresql, error) {
	u, err := e.Dyn.Resource(v1.SchemeGroupVersionResource).Namespace(ns).
		Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("while patching cluster %s/%s with %s: %w", ns, name, patch, err)
	}
	pg := &v1.Postgresql{}
	if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, pg); err != nil {
		return nil, err
	}
	return pg, nil
}

// WaitAbsent waits until what lw lists is empty: the object it selects by
// name is gone (or never was). obj is an object of the listed type.
func WaitAbsent(ctx context.Context, lw cache.ListerWatcher, obj k8sruntime.Object, what string) error {
	_, err := watchtools.UntilWithSync(ctx, lw, obj,
		func(store cache.Store) (bool, error) { return len(store.List()) == 0, nil },
		func(ev watch.Event) (bool, error) { return ev.Type == watch.Deleted, nil })
	if err != nil {
		return fmt.Errorf("%s still exists: %w", what, err)
	}
	return nil
}

// ByName is a field selector for one object.
func ByName(name string) string {
	return fields.OneTermEqualSelector("metadata.name", name).String()
}

// Pods.

// WaitPods watches the pods of cluster name until cond holds for all of
// them at once (deletions count), and returns them. testbed.WaitFor judges
// one object at a time; instance counts and roles are properties of the set.
func (e *Env) WaitPods(ctx context.Context, ns, name string, cond func([]*corev1.Pod) bool) ([]*corev1.Pod, error) {
	pods, err := e.WaitPodsSelected(ctx, ns, cluster.Selector(name), cond)
	if err != nil {
		return nil, fmt.Errorf("while waiting for the pods of %s/%s: %w", ns, name, err)
	}
	return pods, nil
}

// WaitPodsSelected waits until cond holds for the pods of ns that match
// the labels sel (a connection pooler's, say), and returns them.
func (e *Env) WaitPodsSelected(ctx context.Context, ns string, sel map[string]string, cond func([]*corev1.Pod) bool) ([]*corev1.Pod, error) {
	selector := labels.SelectorFromSet(sel).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (k8sruntime.Object, error) {
			opts.LabelSelector = selector
			return e.Kube.CoreV1().Pods(ns).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			return e.Kube.CoreV1().Pods(ns).Watch(ctx, opts)
		},
	}
	var store cache.Store
	var last []*corev1.Pod
	check := func() bool {
		last = nil
		for _, obj := range store.List() {
			last = append(last, obj.(*corev1.Pod))
		}
		return cond(last)
	}
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Pod{},
		func(s cache.Store) (bool, error) { store = s; return check(), nil },
		func(watch.Event) (bool, error) { return check(), nil })
	if err != nil {
		return nil, fmt.Errorf("%w; last seen: %s", err, DescribePods(last))
	}
	return last, nil
}

// ReadyPods holds when exactly n pods exist, all Ready and none
// terminating.
func ReadyPods(n int) func([]*corev1.Pod) bool {
	return func(pods []*corev1.Pod) bool {
		if len(pods) != n {
			return false
		}
		for _, p := range pods {
			if ready, _ := testbed.PodReady(p); !ready || p.DeletionTimestamp != nil {
				return false
			}
		}
		return true
	}
}

// DescribePods renders pods for a failure message.
func DescribePods(pods []*corev1.Pod) string {
	var parts []string
	for _, p := range pods {
		ready, _ := testbed.PodReady(p)
		s := fmt.Sprintf("%s(phase=%s ready=%v role=%q", p.Name, p.Status.Phase, ready, p.Labels[cluster.LabelRole])
		if p.DeletionTimestamp != nil {
			s += " terminating"
		}
		parts = append(parts, s+")")
	}
	slices.Sort(parts)
	return "[" + strings.Join(parts, " ") + "]"
}

// IgnoreNotFound returns nil for a NotFound error.
func IgnoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
