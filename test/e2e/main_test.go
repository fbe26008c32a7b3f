package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/test/testbed"
)

// env is the plane every test of this binary shares; each test works in
// namespaces of its own.
var env *Env

func TestMain(m *testing.M) {
	// The operators the suites start check that nothing modifies a
	// cached object (client-go's cache mutation detector: the process
	// panics when one differs from its copy taken as it entered the
	// cache): the caches hand one label map to every object of a cluster
	// that has it (pkg/informers, labelMaps), so a write into one would
	// change them all. The variable is read when client-go starts, so
	// this process's own clients are left as they are.
	if _, set := os.LookupEnv("KUBE_CACHE_MUTATION_DETECTOR"); !set {
		_ = os.Setenv("KUBE_CACHE_MUTATION_DETECTOR", "true")
	}
	// The process node runs OperatorImage's containers with the operator
	// binary built from this tree, copied here by DeployOperator
	// (deployment.go) before its first pod starts.
	imageDir, err := os.MkdirTemp("", "pgloop-e2e-image-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	e, err := Setup(ctx, testbed.Options{
		Nodes: 3,
		// One node runs real Patroni and PostgreSQL (dataplane_test.go);
		// its taint keeps the other suites' clusters on kwok's nodes.
		ProcessNodes:      1,
		TaintProcessNodes: true,
		// TestUpgradeOperator's second version has a build of its own.
		ImageBinaries: map[string]string{
			OperatorImage:                        filepath.Join(imageDir, "pgloop"),
			OperatorImage + ":" + upgradeVersion: filepath.Join(imageDir, "pgloop-"+upgradeVersion),
		},
		// The S3 store pgBackRest archives to (archiving_test.go).
		// The suites that check what runs in pods on a real node: containers
		// of pgloop's images, pod IPs that Endpoints accept (zalando's
		// Patroni on Endpoints), cluster DNS. It runs the zalando-made
		// clusters under zalando's image reference.
		RealNodes:    1,
		ImageAliases: map[string]string{zalandoImage: cluster.DefaultImage},
		ObjectStore:  true,
		// The first plane of a machine loads pgloop's images into the real
		// node's containerd; another package's plane may hold the real node.
		StartTimeout: 10 * time.Minute,
		Log:          os.Stderr,
		KeepDir:      os.Getenv("PGLOOP_KEEP_PLANE") != "",
	})
	cancel()
	if err != nil {
		_ = os.RemoveAll(imageDir)
		fmt.Fprintf(os.Stderr, "FAIL: starting the control plane: %v\n", err)
		os.Exit(1)
	}
	env = e
	code := m.Run()
	if err := env.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		code = 1
	}
	_ = os.RemoveAll(imageDir)
	os.Exit(code)
}
