package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

func newBackupCmd() *cobra.Command {
	conn := genericclioptions.NewConfigFlags(true)
	typ := v1.BackupFull
	cmd := &cobra.Command{
		Use:   "backup NAME",
		Short: "Take a base backup of a cluster now",
		Long: "Sets the annotations " + v1.AnnotationBackupRequestedAt + " (to the current time) and\n" +
			v1.AnnotationBackupType + " of cluster NAME. The operator then starts a pgBackRest backup on\n" +
			"the cluster's primary, into its repository, unless one runs already (then this one starts\n" +
			"after it). `pgloop status NAME` shows the request (Requests: Pending while the backup runs,\n" +
			"then Succeeded or Failed with pgBackRest's words), the backup running, then the last backup;\n" +
			"status.requests and the LastBackupSucceeded condition say the same.",
		Example: "  pgloop backup db\n  pgloop backup db --type diff -n prod",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			return runBackup(ctx, cmd.OutOrStdout(), conn, args[0], typ, time.Now())
		},
	}
	cmd.Flags().StringVar(&typ, "type", typ, "type of backup: full, diff (files changed since the last full) or incr (since the last backup)")
	conn.AddFlags(cmd.Flags())
	return cmd
}

func runBackup(ctx context.Context, out io.Writer, conn *genericclioptions.ConfigFlags, name, typ string, now time.Time) error {
	if !slices.Contains(v1.BackupTypes, typ) {
		return fmt.Errorf("--type %q: must be one of %s", typ, strings.Join(v1.BackupTypes, ", "))
	}
	at := now.UTC().Format(time.RFC3339Nano)
	ns, err := annotateCluster(ctx, conn, name, "pgloop-backup", map[string]string{
		v1.AnnotationBackupRequestedAt: at, v1.AnnotationBackupType: typ})
	if err != nil {
		return fmt.Errorf("request a backup of %s: %w", name, err)
	}
	fmt.Fprintf(out, "%s backup of %s/%s requested at %s; `pgloop status %s` shows how it goes\n", typ, ns, name, at, name)
	return nil
}
