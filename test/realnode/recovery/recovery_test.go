// Package recovery checks that a plane whose process was killed leaves
// nothing on the host that the next plane with a real node trips on: its
// containers, mounts, bridge, iptables chains, network namespaces, cgroups
// and sysctls are undone by the next plane, and by that plane's Stop.
package recovery

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/test/pgtest"
	"github.com/pgloop/pgloop/test/testbed"
)

// hostState is what a real node changes on the host, as the test reads it.
type hostState struct {
	sysctls map[string]string
	bridge  bool
	chains  []string // iptables nat chains of kube-proxy and the node
	netns   []string
	cgroups bool
	journal bool
	shims   int
}

func readHost(t *testing.T) hostState {
	t.Helper()
	s := hostState{sysctls: map[string]string{}}
	for _, k := range []string{"net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables", "vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"} {
		b, _ := os.ReadFile(filepath.Join("/proc/sys", k))
		s.sysctls[k] = strings.TrimSpace(string(b))
	}
	s.bridge = exec.Command("ip", "link", "show", testbed.BridgeName).Run() == nil
	out, err := exec.Command("iptables", "-w", "-t", "nat", "-S").Output()
	if err != nil {
		t.Fatalf("iptables -t nat -S: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "-N" && (strings.HasPrefix(f[1], "KUBE-") || strings.HasPrefix(f[1], "PGLOOP-")) {
			s.chains = append(s.chains, f[1])
		}
	}
	ns, _ := filepath.Glob("/var/run/netns/cni-*")
	s.netns = ns
	_, err = os.Stat("/sys/fs/cgroup/memory/kubepods")
	s.cgroups = err == nil
	_, err = os.Stat("/run/pgloop-testbed/realnode.json")
	s.journal = err == nil
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if strings.HasPrefix(filepath.Base(strings.Split(string(b), "\x00")[0]), "containerd-shim") {
			s.shims++
		}
	}
	return s
}

// TestKilledPlaneLeavesNothingBehind starts a plane with a real node in a
// `testbed up` process, runs a pod there, SIGKILLs the process, and checks
// that the next plane with a real node starts and runs a pod, and that its
// Stop leaves the host as it was before the first.
func TestKilledPlaneLeavesNothingBehind(t *testing.T) {
	if err := testbed.RealNodeUnsupported(); err != nil {
		t.Fatalf("%v (make real-node-deps, as root)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	before := readHost(t)
	if before.journal {
		// A plane killed before this test (another package's, timed out)
		// left its journal: a plane's start restores the host first.
		t.Logf("the host has a killed plane's real node state: restoring it first")
		p, err := testbed.Start(ctx, testbed.Options{RealNodes: 1, StartTimeout: 10 * time.Minute, Log: testWriter{t}})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
		before = readHost(t)
	}
	if before.journal || before.bridge || len(before.chains) > 0 {
		t.Fatalf("the host has a real node's state before the test: %+v", before)
	}

	repo, err := pgtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := os.Getenv(testbed.EnvBin)
	if bin == "" {
		bin = filepath.Join(repo, "bin")
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	up := exec.Command(filepath.Join(bin, "testbed"), "up", "--nodes", "0", "--real-nodes", "1", "--kubeconfig-out", kubeconfig)
	upLog, err := os.Create(filepath.Join(t.TempDir(), "testbed.log"))
	if err != nil {
		t.Fatal(err)
	}
	up.Stdout, up.Stderr = upLog, upLog
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = up.Wait()
		close(exited)
	}()
	defer func() {
		_ = up.Process.Kill()
		<-exited
	}()
	if err := waitFile(ctx, kubeconfig, exited); err != nil {
		b, _ := os.ReadFile(upLog.Name())
		t.Fatalf("testbed up: %v\n%s", err, b)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	runPod(ctx, t, cs, "left-behind")

	// SIGKILL: no Stop runs. The plane's own processes die with it
	// (Pdeathsig); the containers and their shims do not.
	if err := up.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	left := readHost(t)
	t.Logf("left by the killed plane: %+v", left)
	if !left.journal || !left.bridge || left.shims == 0 {
		t.Fatalf("the killed plane left no real node's state to recover (%+v): the test shows nothing", left)
	}

	p, err := testbed.Start(ctx, testbed.Options{RealNodes: 1, StartTimeout: 10 * time.Minute, Log: testWriter{t}})
	if err != nil {
		t.Fatalf("a plane after the killed one: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = p.Stop()
		}
	}()
	runPod(ctx, t, p.Client, "after")
	if err := p.Stop(); err != nil {
		t.Fatalf("stopping the second plane: %v", err)
	}
	stopped = true
	after := readHost(t)
	if after.journal || after.bridge || len(after.chains) > 0 || len(after.netns) > 0 || after.cgroups || after.shims != before.shims {
		t.Errorf("after the second plane stopped: %+v; want as before the first: %+v", after, before)
	}
	for k, v := range before.sysctls {
		if after.sysctls[k] != v {
			t.Errorf("sysctl %s = %s after, %s before", k, after.sysctls[k], v)
		}
	}
}

// runPod runs a pod of pgloop's instance image on the real node and waits
// until it is Ready.
func runPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](101), RunAsNonRoot: ptr.To(true)},
			Containers:      []corev1.Container{{Name: "main", Image: cluster.DefaultImage, Command: []string{"sleep", "infinity"}}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := testbed.WaitForPod(ctx, cs, "default", name, testbed.PodReady); err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
}

// waitFile waits until path exists, or exited is closed.
func waitFile(ctx context.Context, path string, exited <-chan struct{}) error {
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		// The process writes the file when its plane is up; there is no
		// watch for a file another process writes but inotify, and a plane
		// takes tens of seconds.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return errors.New("exited before its plane was up")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	s := bufio.NewScanner(strings.NewReader(string(b)))
	for s.Scan() {
		w.t.Log(s.Text())
	}
	return len(b), nil
}
