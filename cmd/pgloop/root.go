package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pgloop/pgloop/pkg/fsm"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "pgloop",
		Short:         "A PostgreSQL operator whose clusters are state machines driven by one event loop",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(newFSMCmd(), newVersionCmd())
	root.AddCommand(newOperatorCmd())
	root.AddCommand(newStatusCmd(), newSyncCmd(), newBackupCmd())
	root.AddCommand(newConvertCmd())
	root.AddCommand(newInstanceCmd(), newPoolerCmd())
	return root
}

func newFSMCmd() *cobra.Command {
	var markdown bool
	var current string
	cmd := &cobra.Command{
		Use:   "fsm",
		Short: "Print the cluster state machine as a Mermaid diagram",
		Long: "Print the cluster state machine as a Mermaid state diagram, generated from the transition\n" +
			"table in pkg/fsm. --markdown prints the whole reference (docs/fsm.md).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if current != "" && !fsm.KnownState(current) {
				return fmt.Errorf("unknown state %q (states: %v)", current, fsm.States)
			}
			out := fsm.Mermaid(current)
			if markdown {
				out = fsm.Markdown()
			}
			_, err := fmt.Fprint(cmd.OutOrStdout(), out)
			return err
		},
	}
	cmd.Flags().BoolVar(&markdown, "markdown", false, "print the full Markdown reference instead of the diagram")
	cmd.Flags().StringVar(&current, "current", "", "highlight this state in the diagram")
	return cmd
}
