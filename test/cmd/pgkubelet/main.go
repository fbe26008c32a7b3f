// Command pgkubelet is the process kubelet of package kubelet: it owns one
// node of the local control plane and runs a real Patroni and PostgreSQL for
// every pod bound to it (PgBouncer for a connection-pooler pod). SIGTERM or SIGINT stops every instance (the pods
// stay, not ready) and exits once nothing it started runs. It must run as
// root, in a process of its own.
//
//	pgkubelet --kubeconfig PATH --node-name NAME --root DIR --pod-cidr CIDR
//	          [--node-ip IP] [--label k=v]... [--taint k=v:Effect]...
//	          [--patroni PATH] [--python PATH] [--pg-bin DIR] [--pgbouncer PATH]
//	          [--image-binary REF=PATH]... [--log-level LEVEL]
//
// --image-binary makes a container of image REF (a repository, for any of
// its tags, or an exact reference, which wins) run the binary PATH as the
// image's entrypoint, the way a kubelet runs a container (package
// kubelet, image.go). Such a container's first process is this binary
// again, as its init (kubelet.InitCommand).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pgloop/pgloop/test/kubelet"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == kubelet.InitCommand {
		kubelet.ContainerInitMain(os.Args[2:])
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "pgkubelet:", err)
		}
		stop()
		os.Exit(1)
	}
}

// config is what the flags ask for.
type config struct {
	kubeconfig string
	logLevel   string
	opts       kubelet.Options
}

// parse reads the flags; it checks their syntax, Run checks the rest.
func parse(args []string, stderr io.Writer) (config, error) {
	cfg := config{opts: kubelet.Options{Labels: map[string]string{}, ImageBinaries: map[string]string{}}}
	fs := flag.NewFlagSet("pgkubelet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &cfg.opts
	fs.StringVar(&cfg.kubeconfig, "kubeconfig", "", "admin kubeconfig of the control plane (required)")
	fs.StringVar(&o.NodeName, "node-name", "", "name of the node to register and serve (required)")
	fs.StringVar(&o.Root, "root", "", "directory for data and per-pod files; its parents must be traversable by postgres (required)")
	fs.StringVar(&o.PodCIDR, "pod-cidr", "", "IPv4 range of pod IPs, e.g. 127.1.7.0/24 (required)")
	fs.StringVar(&o.NodeIP, "node-ip", kubelet.DefaultNodeIP, "the node's InternalIP and the pods' hostIP")
	fs.Func("label", "node label key=value (repeatable)", func(s string) error {
		k, v, err := kubelet.ParseLabel(s)
		if err == nil {
			o.Labels[k] = v
		}
		return err
	})
	fs.Func("taint", "node taint key=value:Effect or key:Effect (repeatable)", func(s string) error {
		t, err := kubelet.ParseTaint(s)
		if err == nil {
			o.Taints = append(o.Taints, t)
		}
		return err
	})
	fs.StringVar(&o.Pgloop, "pgloop", "", "the pgloop binary whose start-up programs (pgloop instance, pgloop pooler) run the pods; default: pgloop beside this program")
	fs.StringVar(&o.Patroni, "patroni", kubelet.DefaultPatroni, "Patroni's entry script")
	fs.StringVar(&o.Python, "python", kubelet.DefaultPython, "the python3 that runs Patroni (Debian's, with its modules)")
	fs.StringVar(&o.PGBin, "pg-bin", kubelet.DefaultPGBin, "PostgreSQL's bin directory")
	fs.StringVar(&o.PgBouncer, "pgbouncer", kubelet.DefaultPgBouncer, "the pgbouncer that runs connection-pooler pods")
	fs.Func("image-binary", "REF=PATH: containers of image REF (any tag of a repository, or an exact reference, which wins) run the binary PATH as the image's entrypoint (repeatable)", func(s string) error {
		ref, path, err := kubelet.ParseImageBinary(s)
		if err == nil {
			o.ImageBinaries[ref] = path
		}
		return err
	})
	fs.StringVar(&cfg.logLevel, "log-level", "info", "log level: debug, info, warning, error")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if o.Pgloop == "" {
		if self, err := os.Executable(); err == nil {
			o.Pgloop = filepath.Join(filepath.Dir(self), "pgloop")
		}
	}
	var missing []string
	for _, f := range []struct{ name, value string }{
		{"--kubeconfig", cfg.kubeconfig}, {"--node-name", o.NodeName}, {"--root", o.Root}, {"--pod-cidr", o.PodCIDR},
	} {
		if f.value == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return config{}, fmt.Errorf("missing required flags: %s", strings.Join(missing, ", "))
	}
	return cfg, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := parse(args, stderr)
	if err != nil {
		return err
	}
	if err := cfg.opts.Validate(); err != nil {
		return err
	}
	level, err := logrus.ParseLevel(cfg.logLevel)
	if err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := logrus.New()
	log.SetOutput(stderr)
	log.SetLevel(level)
	cfg.opts.Log = log
	rest, err := clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	if err != nil {
		return fmt.Errorf("while loading %s: %w", cfg.kubeconfig, err)
	}
	// One pod start costs a few calls; the default 5 QPS would pace a
	// StatefulSet's worth of them.
	rest.QPS, rest.Burst = 50, 100
	return kubelet.Run(ctx, rest, cfg.opts)
}
