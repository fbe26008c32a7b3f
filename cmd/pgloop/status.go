package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	"github.com/pgloop/pgloop/pkg/fsm"
	pgclient "github.com/pgloop/pgloop/pkg/generated/clientset/versioned"
	"github.com/pgloop/pgloop/pkg/status"
)

// statusOptions are the flags of `pgloop status` beyond the connection
// flags.
type statusOptions struct {
	all     bool
	output  string
	watch   bool
	mermaid bool
}

func newStatusCmd() *cobra.Command {
	conn := genericclioptions.NewConfigFlags(true)
	var o statusOptions
	cmd := &cobra.Command{
		Use:   "status [NAME]",
		Short: "Show where each cluster's state machine is, why, and what happens next",
		Long: "Without NAME, list the Postgresql clusters: state, how long in it, ready instances, the next\n" +
			"timer and the reason. With NAME, show one cluster in detail: conditions, pending timers, the\n" +
			"last transitions, its pods and why one is not ready, and the events its state takes.\n" +
			"--watch prints a line per change as it happens. The connection flags are kubectl's; installed\n" +
			"as kubectl-pgloop, the command also runs as `kubectl pgloop status`.",
		Example: "  pgloop status -A\n" +
			"  pgloop status -n prod -o wide\n" +
			"  pgloop status db --context staging\n" +
			"  pgloop status db --mermaid > db.mmd\n" +
			"  pgloop status --watch",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var name string
			if len(args) == 1 {
				name = args[0]
			}
			if err := o.validate(name); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runStatus(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), conn, o, name)
		},
	}
	conn.AddFlags(cmd.Flags())
	f := cmd.Flags()
	f.BoolVarP(&o.all, "all-namespaces", "A", false, "list the clusters of every namespace")
	f.StringVarP(&o.output, "output", "o", "", "output format: wide, json or yaml")
	f.BoolVarP(&o.watch, "watch", "w", false, "after the current state, print a line per change until interrupted")
	f.BoolVar(&o.mermaid, "mermaid", false, "print the state diagram of cluster NAME, its state marked, as Mermaid")
	return cmd
}

func (o *statusOptions) validate(name string) error {
	switch o.output {
	case "", "wide", "json", "yaml":
	default:
		return fmt.Errorf("unknown output format %q: use wide, json or yaml", o.output)
	}
	switch {
	case name != "" && o.all:
		return errors.New("a cluster NAME cannot be combined with -A: give its namespace with -n")
	case o.mermaid && name == "":
		return errors.New("--mermaid needs a cluster NAME (pgloop fsm prints the diagram without a cluster)")
	case o.mermaid && (o.watch || o.output != ""):
		return errors.New("--mermaid prints only the diagram: it cannot be combined with --watch or -o")
	case o.watch && (o.output == "json" || o.output == "yaml"):
		return fmt.Errorf("--watch prints lines: it cannot be combined with -o %s", o.output)
	}
	return nil
}

// runStatus connects with the kubectl flags and prints the view asked for.
func runStatus(ctx context.Context, out, errOut io.Writer, conn *genericclioptions.ConfigFlags, o statusOptions, name string) error {
	cfg, err := conn.ToRESTConfig()
	if err != nil {
		return fmt.Errorf("while loading the kubeconfig: %w", err)
	}
	ns, _, err := conn.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return fmt.Errorf("while reading the namespace from the kubeconfig: %w", err)
	}
	pg, err := pgclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("while building the pgloop.dev client: %w", err)
	}
	color := status.UseColor(out, os.Getenv)
	now := time.Now()
	po := status.PrintOptions{AllNamespaces: o.all, Wide: o.output == "wide", Color: color, Now: now}

	switch {
	case o.mermaid:
		c, err := status.Get(ctx, pg, ns, name)
		if err != nil {
			return err
		}
		_, err = fmt.Fprint(out, fsm.Mermaid(status.StateOf(c)))
		return err

	case o.watch:
		return status.Watch(ctx, pg, out, status.WatchOptions{
			Namespace: ns, AllNamespaces: o.all, Name: name, Color: color, Now: time.Now,
		})

	case name != "":
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("while building the Kubernetes client: %w", err)
		}
		v, err := status.Detail(ctx, pg, kube, ns, name)
		if v == nil {
			return err
		}
		// A view without its pods is still printed; err, if any, says
		// what is missing and makes the exit code non-zero.
		var perr error
		switch o.output {
		case "json":
			perr = status.PrintJSON(out, status.ForOutput(v.Cluster))
		case "yaml":
			perr = status.PrintYAML(out, status.ForOutput(v.Cluster))
		default:
			perr = status.PrintDetail(out, v, po)
		}
		return errors.Join(perr, err)

	default:
		rows, err := status.List(ctx, pg, ns, o.all)
		if err != nil {
			return err
		}
		switch o.output {
		case "json":
			return status.PrintJSON(out, rows)
		case "yaml":
			return status.PrintYAML(out, rows)
		}
		if len(rows) == 0 {
			where := fmt.Sprintf(" in %s namespace", ns)
			if o.all {
				where = ""
			}
			_, err := fmt.Fprintf(errOut, "No Postgresql clusters found%s.\n", where)
			return err
		}
		return status.PrintTable(out, rows, po)
	}
}

// kubectlPlugin is the binary name under which kubectl runs pgloop as
// `kubectl pgloop`.
const kubectlPlugin = "kubectl-pgloop"

// asKubectlPlugin makes help and usage say `kubectl pgloop ...` when the
// binary runs as kubectl-pgloop. cobra names a command by the first word
// of its Use, so Use stays "pgloop" and the display name carries the two
// words (cobra's convention for kubectl plugins).
func asKubectlPlugin(root *cobra.Command, arg0 string) {
	base := strings.TrimSuffix(filepath.Base(arg0), ".exe")
	if base != kubectlPlugin {
		return
	}
	if root.Annotations == nil {
		root.Annotations = map[string]string{}
	}
	root.Annotations[cobra.CommandDisplayNameAnnotation] = "kubectl pgloop"
	for _, c := range root.Commands() {
		c.Example = strings.ReplaceAll(c.Example, "  pgloop ", "  kubectl pgloop ")
	}
}
