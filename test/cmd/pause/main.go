// Command pause is the real node's sandbox process (test/testbed packs it
// as its pause image): it holds a pod's namespaces and sleeps until it is
// told to stop. Built static, as the image has nothing else.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
