// Command pgloop is the pgloop operator and its command-line tools.
package main

import (
	"os"
)

func main() {
	root := newRootCmd()
	asKubectlPlugin(root, os.Args[0])
	if err := root.Execute(); err != nil {
		os.Exit(exitCode(err))
	}
}
