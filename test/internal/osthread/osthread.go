// Package osthread runs functions on one OS thread that lives as long as
// the Thread. Children forked with SysProcAttr.Pdeathsig get their signal
// when the thread that forked them exits, not when the process does (see
// syscall.SysProcAttr.Pdeathsig and golang/go#27505), and the Go runtime
// ends threads at will: forking from an arbitrary goroutine could kill a
// child at a random moment. The plane (test/testbed) and the process
// kubelet (test/kubelet) start their children through a Thread.
package osthread

import "runtime"

// Thread is one goroutine locked to its OS thread until Close.
type Thread struct {
	jobs chan func()
}

// New starts the thread.
func New() *Thread {
	t := &Thread{jobs: make(chan func())}
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread exits with this goroutine, after Close.
		for job := range t.jobs {
			job()
		}
	}()
	return t
}

// Do runs f on the thread and returns when f has.
func (t *Thread) Do(f func()) {
	done := make(chan struct{})
	t.jobs <- func() {
		defer close(done)
		f()
	}
	<-done
}

// Close lets the thread exit, and with it the Pdeathsig of every child it
// forked: call it once they are all reaped. Do must not be called after.
func (t *Thread) Close() { close(t.jobs) }
