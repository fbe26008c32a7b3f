package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/version"
)

// versionLine describes the build in one line: pgloop <version> (commit
// <commit>, <go version>, <os>/<arch>).
func versionLine() string {
	return fmt.Sprintf("pgloop %s (commit %s, %s, %s/%s)", version.Version, version.Revision(),
		runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersionCmd() *cobra.Command {
	var images bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version and the commit it was built from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := versionLine() + "\n"
			if images {
				out = "instance " + cluster.DefaultImage + "\npooler " + cluster.PoolerImage + "\n"
			}
			_, err := fmt.Fprint(cmd.OutOrStdout(), out)
			return err
		},
	}
	cmd.Flags().BoolVar(&images, "images", false, "print pgloop's instance and pooler images instead, one per line (kind and reference): what `make images` builds")
	return cmd
}
