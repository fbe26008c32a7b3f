package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	pgclient "github.com/pgloop/pgloop/pkg/generated/clientset/versioned"
)

func newSyncCmd() *cobra.Command {
	conn := genericclioptions.NewConfigFlags(true)
	cmd := &cobra.Command{
		Use:   "sync NAME",
		Short: "Sync a cluster's roles, databases and Patroni configuration again now",
		Long: "Sets the annotation " + v1.AnnotationSyncRequestedAt + " of cluster NAME to the current time.\n" +
			"The operator then syncs the cluster's roles and databases and applies its Patroni\n" +
			"configuration again, even though the spec did not change (Running -> Updating -> Running,\n" +
			"in the cluster's history). `pgloop status NAME` shows the request (Requests: Pending, then\n" +
			"Succeeded once applied) and status.requests says the same.",
		Example: "  pgloop sync db\n  pgloop sync db -n prod",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			return runSync(ctx, cmd.OutOrStdout(), conn, args[0], time.Now())
		},
	}
	conn.AddFlags(cmd.Flags())
	return cmd
}

func runSync(ctx context.Context, out io.Writer, conn *genericclioptions.ConfigFlags, name string, now time.Time) error {
	at := now.UTC().Format(time.RFC3339Nano)
	ns, err := annotateCluster(ctx, conn, name, "pgloop-sync", map[string]string{v1.AnnotationSyncRequestedAt: at})
	if err != nil {
		return fmt.Errorf("request a sync of %s: %w", name, err)
	}
	fmt.Fprintf(out, "sync of %s/%s requested at %s; `pgloop status %s` shows when it is done\n", ns, name, at, name)
	return nil
}

// annotateCluster sets annotations on cluster name, in the namespace conn names,
// and returns that namespace.
func annotateCluster(ctx context.Context, conn *genericclioptions.ConfigFlags, name, manager string, annotations map[string]string) (string, error) {
	cfg, err := conn.ToRESTConfig()
	if err != nil {
		return "", err
	}
	ns, _, err := conn.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", err
	}
	pg, err := pgclient.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return "", err
	}
	_, err = pg.PgloopV1().Postgresqls(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: manager})
	if apierrors.IsNotFound(err) {
		return ns, fmt.Errorf("postgresql %s/%s not found", ns, name)
	}
	return ns, err
}
