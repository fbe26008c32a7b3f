// Command pgloop is the pgloop operator and its command-line tools.
package main

import (
	"errors"
	"os"
)

func main() {
	root := newRootCmd()
	asKubectlPlugin(root, os.Args[0])
	if err := root.Execute(); err != nil {
		// A start-up program (pgloop pooler) exits with its program's code.
		var coded interface{ ExitCode() int }
		if errors.As(err, &coded) {
			os.Exit(coded.ExitCode())
		}
		os.Exit(1)
	}
}
