package kubelet

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestMain lets this test binary be the container's init, as pgkubelet is
// (InitCommand).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == InitCommand {
		ContainerInitMain(os.Args[2:])
	}
	os.Exit(m.Run())
}

// containerKubelet is a kubelet with what spawning an image container
// needs (the reaper and the launcher), under a fresh root; stopped when t
// ends.
func containerKubelet(t *testing.T) *kubelet {
	t.Helper()
	requireRoot(t)
	root, err := os.MkdirTemp("", "pgkubelet-container-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	log := logrus.New()
	log.SetOutput(testLog{t})
	k := &kubelet{opts: Options{Root: root}, log: log, reaper: newReaper(), launcher: newLauncher()}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.reaper.run(ctx)
	}()
	t.Cleanup(func() {
		stop()
		<-done
		k.launcher.Close()
	})
	return k
}

// TestContainerInit runs a shell as an image container's process through
// the init, and checks what it saw: the pod's hostname, its user, the
// token at client-go's path, read-only everywhere but /dev with
// readOnlyRootFilesystem, and nothing of its mounts in this namespace.
func TestContainerInit(t *testing.T) {
	k := containerKubelet(t)
	podDir := filepath.Join(k.opts.Root, podsDir, "uid-1")
	vol := filepath.Join(podDir, volumesDir, "kube-api-access-x")
	if err := writeProjected(vol, []projectedFile{{path: "token", data: []byte("the-token"), mode: 0o644}, {path: "namespace", data: []byte("ops"), mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	const target = "/var/run/secrets/kubernetes.io/serviceaccount"
	script := `echo "host=$(cat /proc/sys/kernel/hostname) uid=$(id -u) gid=$(id -g) ns=$(cat ` + target + `/namespace) token=$(cat ` + target + `/token)"
touch /tmp/pgkubelet-ro-test 2>/dev/null && echo tmp=writable || echo tmp=read-only
touch ` + target + `/x 2>/dev/null && echo token=writable || echo token=read-only
echo "env=$POD_NAMESPACE"`
	spec := initSpec{
		Hostname:     "op-1",
		Mounts:       []initMount{{Source: vol, Target: target, ReadOnly: true}},
		ReadOnlyRoot: true,
		UID:          65532, GID: 65532,
		Argv: []string{"/bin/sh", "-c", script},
	}
	argv, err := initArgv("/proc/self/exe", spec)
	if err != nil {
		t.Fatal(err)
	}
	logPath := containerLogPath(podDir, "operator")
	hostname, _ := os.Hostname()
	proc, err := spawn(k.launcher, k.reaper, spawnSpec{
		argv: argv, env: []string{"POD_NAMESPACE=ops", "PATH=" + defaultPath}, dir: "/", logPath: logPath,
		unshare: unix.CLONE_NEWNS | unix.CLONE_NEWUTS,
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ex := <-proc.exits:
		if ex.status.ExitStatus() != 0 {
			t.Errorf("exit status %v", ex.status)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the container did not exit within 30s")
	}
	out, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"host=op-1 uid=65532 gid=65532 ns=ops token=the-token\n",
		"tmp=read-only\n", "token=read-only\n", "env=ops\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the container's output has no %q:\n%s", want, out)
		}
	}
	if now, _ := os.Hostname(); now != hostname {
		t.Errorf("this namespace's hostname changed from %s to %s", hostname, now)
	}
	if _, err := os.Stat(target); err == nil {
		t.Errorf("%s exists in this mount namespace", target)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), k.opts.Root) {
		t.Errorf("a mount of the container leaked into this namespace:\n%s", mounts)
	}
	if f, err := os.CreateTemp("", "still-writable-"); err != nil {
		t.Errorf("this namespace's /tmp turned read-only: %v", err)
	} else {
		f.Close()
		os.Remove(f.Name())
	}
}

// TestContainerInitFails: a command that cannot run ends the container
// with 127 and says why in its log.
func TestContainerInitFails(t *testing.T) {
	k := containerKubelet(t)
	logPath := filepath.Join(k.opts.Root, "c.log")
	argv, err := initArgv("/proc/self/exe", initSpec{UID: 65532, GID: 65532, Argv: []string{"/nonexistent/pgloop"}})
	if err != nil {
		t.Fatal(err)
	}
	proc, err := spawn(k.launcher, k.reaper, spawnSpec{argv: argv, dir: "/", logPath: logPath, unshare: unix.CLONE_NEWNS | unix.CLONE_NEWUTS})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ex := <-proc.exits:
		if ex.status.ExitStatus() != 127 {
			t.Errorf("exit status %d, want 127", ex.status.ExitStatus())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the container did not exit within 30s")
	}
	if out, _ := os.ReadFile(logPath); !strings.Contains(string(out), "container init: exec /nonexistent/pgloop: no such file or directory") {
		t.Errorf("log: %s", out)
	}
}

// TestImageLiveness: an image container whose liveness probe fails
// failureThreshold times in a row is killed and waits for its back-off to
// be started again; its readiness probe makes it not ready after its own
// failureThreshold. The probes' times are given, not waited for.
func TestImageLiveness(t *testing.T) {
	k := containerKubelet(t)
	var healthy atomic.Bool
	healthy.Store(true)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	ap := netip.MustParseAddrPort(l.Addr().String())

	c := &corev1.Container{
		Name:  "operator",
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(ap.Port())}},
		LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
			InitialDelaySeconds: 5, PeriodSeconds: 10, FailureThreshold: 3},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}},
			PeriodSeconds: 5, FailureThreshold: 2},
	}
	in := &instance{k: k, key: "ops/op-1", log: k.log.WithField("pod", "ops/op-1"),
		prep: &prepared{ip: ap.Addr()}, image: &imageState{}}
	proc, err := spawn(k.launcher, k.reaper, spawnSpec{argv: []string{"/bin/sleep", "600"}, dir: "/", logPath: filepath.Join(k.opts.Root, "c.log")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if in.proc != nil {
			in.kill()
		}
	})
	t0 := time.Now()
	in.proc = proc
	in.state.EverStarted, in.state.Phase, in.state.PID, in.state.StartedAt = true, containerRunning, proc.pid, t0

	at := func(d time.Duration) time.Time { return t0.Add(d) }
	if !in.probeImage(c, at(0)) {
		t.Fatal("not ready while /readyz answers 200")
	}
	in.state.Ready = true
	healthy.Store(false)
	if !in.probeImage(c, at(5*time.Second)) {
		t.Error("not ready after one failure of two")
	}
	if in.probeImage(c, at(10*time.Second)) {
		t.Error("still ready after failureThreshold failures")
	}
	in.state.Ready = false

	for i, d := range []time.Duration{5, 15, 25} {
		in.checkLiveness(c, at(d*time.Second))
		if i < 2 && in.proc == nil {
			t.Fatalf("killed after %d failures, want 3", i+1)
		}
	}
	if in.proc != nil {
		t.Fatal("still running after 3 liveness failures in a row")
	}
	if in.state.Last == nil || in.state.Last.Signal != 9 {
		t.Errorf("last termination %+v, want SIGKILL", in.state.Last)
	}
	if in.state.Reason != ReasonCrashLoop || !strings.Contains(in.state.Message, "liveness probe failed") {
		t.Errorf("waiting %s: %s", in.state.Reason, in.state.Message)
	}
	if want := at(25*time.Second + backoffInitial); !in.restartAt.Equal(want) {
		t.Errorf("restart at +%v, want +%v (the first back-off)", in.restartAt.Sub(t0), want.Sub(t0))
	}
}
