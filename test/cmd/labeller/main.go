// Command labeller stands in for Patroni on the kwok nodes of a control
// plane, where no Spilo container runs (see package labeller): it writes the
// role labels and the leader record. `make run` starts it next to pgloop so
// clusters get a primary and reach Running.
//
//	labeller [--kubeconfig PATH] [--namespace NS] [--qps Q --burst B]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pgloop/pgloop/test/labeller"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig to use; empty means $KUBECONFIG, ~/.kube/config or the in-cluster configuration")
	namespace := flag.String("namespace", "", "namespace whose spilo pods to label; empty means every namespace (nodes are read in any case)")
	qps := flag.Float64("qps", 0, "requests per second of the labeller's client (0: client-go's default, 5); a burst of clusters needs more")
	burst := flag.Int("burst", 0, "burst of the labeller's client (0: client-go's default, 10)")
	flag.Parse()

	log := logrus.New()
	if err := run(*kubeconfig, *namespace, float32(*qps), *burst, log); err != nil {
		fmt.Fprintln(os.Stderr, "labeller:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace string, qps float32, burst int, log logrus.FieldLogger) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("while loading the kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = qps, burst
	log.WithFields(logrus.Fields{"qps": cfg.QPS, "burst": cfg.Burst}).Info("labeller: client rate limit (0: client-go's default)")
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return labeller.Run(ctx, kube, namespace, log)
}
