// Command labeller stands in for Patroni on the kwok nodes of a control
// plane, where no Spilo container runs (see package labeller): it writes the
// role labels and the leader record. `make run` starts it next to pgloop so
// clusters get a primary and reach Running.
//
//	labeller [--kubeconfig PATH] [--namespace NS]
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
	flag.Parse()

	log := logrus.New()
	if err := run(*kubeconfig, *namespace, log); err != nil {
		fmt.Fprintln(os.Stderr, "labeller:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace string, log logrus.FieldLogger) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("while loading the kubeconfig: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return labeller.Run(ctx, kube, namespace, log)
}
