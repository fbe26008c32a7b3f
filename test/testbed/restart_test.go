package testbed_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgloop/pgloop/test/testbed"
)

// A crashed apiserver comes back on the same address with the same data,
// and the plane's clients keep working. Its own plane: the shared one's
// tests would see the outage.
func TestRestartAPIServer(t *testing.T) {
	ctx := testContext(t)
	p, err := testbed.Start(ctx, testbed.Options{Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Error(err)
		}
	})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kept"}, Data: map[string]string{"k": "v"}}
	if _, err := p.Client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pidOf := func() int {
		for _, proc := range p.Processes() {
			if proc.Name == "kube-apiserver" {
				return proc.PID
			}
		}
		return 0
	}
	// The crash only: a graceful stop (SIGTERM) takes another 10-25 s on
	// two busy cores, and shares the code.
	for _, kill := range []bool{true} {
		before := pidOf()
		down, err := p.RestartAPIServer(ctx, kill)
		if err != nil {
			t.Fatalf("restart (kill %v): %v", kill, err)
		}
		t.Logf("apiserver restarted (kill %v) in %v", kill, down)
		if after := pidOf(); after == before || after == 0 {
			t.Errorf("apiserver pid %d after the restart, %d before", after, before)
		}
		got, err := p.Client.CoreV1().ConfigMaps("default").Get(context.WithoutCancel(ctx), "kept", metav1.GetOptions{})
		if err != nil || got.Data["k"] != "v" {
			t.Errorf("after the restart: %v, %v", got, err)
		}
	}
	// The pod reaper, whose watches and calls the outage broke, still
	// deletes pods; and so after a restart of kwok (chaos restarts a
	// process that exits), started again without its pod-delete stage.
	deleteGracefulPod(ctx, t, p, "default", "after-apiserver")
	if _, err := p.RestartProcess(ctx, "kwok", true); err != nil {
		t.Fatalf("restart kwok: %v", err)
	}
	deleteGracefulPod(ctx, t, p, "default", "after-kwok")
	if err := p.Healthy(); err != nil {
		t.Error(err)
	}
}
