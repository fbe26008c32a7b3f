package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/pgloop/pgloop/pkg/version"
)

// versionLine describes the build in one line: pgloop <version> (commit
// <commit>, <go version>, <os>/<arch>).
func versionLine() string {
	return fmt.Sprintf("pgloop %s (commit %s, %s, %s/%s)", version.Version, version.Revision(),
		runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and the commit it was built from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionLine())
			return err
		},
	}
}
