// Package realnode holds the suites that run on the test plane's real node
// (testbed.Options.RealNodes): a kubelet on containerd whose pods are
// containers of pgloop's images, with pod IPs on a bridge, Services through
// kube-proxy and names through CoreDNS. They check what only a real node
// shows: in-cluster clients, cluster DNS, logs, exec and port-forward,
// volumes a non-root PostgreSQL writes, Patroni on Endpoints.
//
//	make test-realnode
//
// Exec, logs and port-forward are pgtest's (pods.go).
package realnode

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/pgloop/pgloop/test/e2e"
	"github.com/pgloop/pgloop/test/testbed"
)

// env is the plane of this test binary: one real node and no other.
var env *e2e.Env

func TestMain(m *testing.M) {
	if _, set := os.LookupEnv("KUBE_CACHE_MUTATION_DETECTOR"); !set {
		_ = os.Setenv("KUBE_CACHE_MUTATION_DETECTOR", "true")
	}
	// The first plane of a machine loads pgloop's images into containerd,
	// and a plane of another package may hold the real node meanwhile.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	e, err := e2e.Setup(ctx, testbed.Options{
		RealNodes:    1,
		ImageAliases: map[string]string{zalandoImage: instanceImage},
		StartTimeout: 10 * time.Minute,
		Log:          os.Stderr,
		KeepDir:      os.Getenv("PGLOOP_KEEP_PLANE") != "",
	})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: starting the control plane: %v\n", err)
		os.Exit(1)
	}
	env = e
	code := m.Run()
	if err := env.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		code = 1
	}
	os.Exit(code)
}
