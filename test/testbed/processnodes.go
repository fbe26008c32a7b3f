package testbed

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/pgloop/pgloop/test/kubelet"
)

// Process nodes are played by test/cmd/pgkubelet rather than kwok: each pod
// bound to one runs a real Patroni and PostgreSQL (docs/testbed.md, "Data
// plane").
const (
	// ProcessNodeLabelValue is the value of NodeLabel on process nodes
	// (kwok's fake nodes have "kwok").
	ProcessNodeLabelValue = "process"
	// DataPlaneTaintKey and DataPlaneTaintValue taint process nodes when
	// Options.TaintProcessNodes is set, so that only clusters which tolerate
	// it (DataPlaneToleration) run real PostgreSQL there.
	DataPlaneTaintKey   = "pgloop.dev/data-plane"
	DataPlaneTaintValue = "process"

	binKubelet = "pgkubelet"
	// binPgloop runs the pods' start-up programs (pgloop instance, pgloop
	// pooler), as pgloop's images do: `make build` makes it.
	binPgloop = "pgloop"
	// kubeletStopGrace is how long a process kubelet may take to stop:
	// it stops each PostgreSQL cleanly (a fast shutdown), which takes a
	// second or two, more on two busy cores.
	kubeletStopGrace = 60 * time.Second
)

// DataPlaneToleration tolerates the taint of process nodes.
func DataPlaneToleration() corev1.Toleration {
	return corev1.Toleration{
		Key:      DataPlaneTaintKey,
		Operator: corev1.TolerationOpEqual,
		Value:    DataPlaneTaintValue,
		Effect:   corev1.TaintEffectNoSchedule,
	}
}

// ProcessNode is a node whose pods run real processes.
type ProcessNode struct {
	Name string
	// Root holds the node's volumes (Root/pv/<pv>) and pods' files
	// (Root/pods/<uid>: Patroni's configuration and log).
	Root string
	// PodCIDR is the loopback range its pod IPs come from.
	PodCIDR string
	// Log is the process kubelet's log.
	Log string
}

// ImageBinaries is Options.ImageBinaries: the images whose containers
// process nodes run, and their binaries.
func (p *Plane) ImageBinaries() map[string]string { return maps.Clone(p.opts.ImageBinaries) }

// ProcessNodes lists the plane's process nodes.
func (p *Plane) ProcessNodes() []ProcessNode { return p.processNodes }

// startProcessNodes starts one process kubelet per process node and waits
// for the nodes to be Ready.
//
// Pod IPs are loopback addresses: the apiserver refuses them in Endpoints, so
// Patroni keeps its state in ConfigMaps (pgloop's choice anyway) and
// Services with selectors get no endpoints; in exchange everything on this
// host reaches the pods without privileges or network namespaces. Each plane
// takes a random /24 per node in 127.64.0.0/10 so that planes side by side
// rarely collide; the kubelet also skips addresses whose ports are taken.
func (p *Plane) startProcessNodes(ctx context.Context) error {
	if p.opts.ProcessNodes == 0 {
		return nil
	}
	// PostgreSQL runs as postgres: it must traverse the plane's directory
	// to reach its own. 0711 lets it pass without listing; what is secret
	// in there (keys, tokens, kubeconfig) is 0600.
	if err := os.Chmod(p.Dir, 0o711); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(p.Dir, "kubelet"), 0o755); err != nil {
		return err
	}
	// 127.64.0.0/10: second octet 64..127.
	second, third := 64+rand.IntN(64), rand.IntN(256-p.opts.ProcessNodes)
	for i := range p.opts.ProcessNodes {
		n := ProcessNode{
			Name:    fmt.Sprintf("pg-node-%d", i+1),
			PodCIDR: fmt.Sprintf("127.%d.%d.0/24", second, third+i),
		}
		n.Root = filepath.Join(p.Dir, "kubelet", n.Name)
		n.Log = filepath.Join(p.Dir, binKubelet+"-"+n.Name+".log")
		args := []string{
			"--kubeconfig=" + p.Kubeconfig,
			"--node-name=" + n.Name,
			"--pgloop=" + p.bins.path(binPgloop),
			"--root=" + n.Root,
			"--pod-cidr=" + n.PodCIDR,
			fmt.Sprintf("--node-ip=127.%d.%d.1", second, third+i),
			"--label=" + NodeLabel + "=" + ProcessNodeLabelValue,
		}
		for _, ref := range slices.Sorted(maps.Keys(p.opts.ImageBinaries)) {
			args = append(args, "--image-binary="+ref+"="+p.opts.ImageBinaries[ref])
		}
		if p.opts.TaintProcessNodes {
			args = append(args, fmt.Sprintf("--taint=%s=%s:%s", DataPlaneTaintKey, DataPlaneTaintValue, corev1.TaintEffectNoSchedule))
		}
		proc, err := p.launcher.start(binKubelet+"-"+n.Name, p.bins.path(binKubelet), n.Log, args, p.env())
		if err != nil {
			return err
		}
		proc.grace = kubeletStopGrace
		proc.cleanup = func() error { return kubelet.Cleanup(n.Root) }
		p.procsMu.Lock()
		p.procs = append(p.procs, proc)
		p.procsMu.Unlock()
		p.processNodes = append(p.processNodes, n)
	}
	for _, n := range p.processNodes {
		if _, err := WaitFor(ctx, Nodes(p.Client, n.Name), NodeReady); err != nil {
			return p.withProcessState(fmt.Errorf("while waiting for process node %s to be Ready: %w", n.Name, err))
		}
	}
	return nil
}

// dataPlanePrograms are what process nodes run, at the paths pgkubelet
// uses by default.
var dataPlanePrograms = []string{"/usr/bin/patroni", "/usr/bin/python3", "/usr/lib/postgresql/15/bin/postgres"}

// dataPlaneMissing says what is missing for process nodes: Patroni and
// PostgreSQL 15 from Debian's packages (`make data-plane-deps`).
func dataPlaneMissing() error {
	var missing []error
	for _, path := range dataPlanePrograms {
		if _, err := os.Stat(path); err != nil {
			missing = append(missing, err)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %w", ErrMissingDataPlane, errors.Join(missing...))
	}
	return nil
}

// ErrMissingDataPlane is returned by Start when process nodes are asked for
// but Patroni or PostgreSQL is not installed.
var ErrMissingDataPlane = errors.New(`patroni and postgresql missing: run "make data-plane-deps" at the repository root`)
