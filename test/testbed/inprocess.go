package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// inProcess is one of the plane's controllers run as goroutines in the
// process holding the plane rather than as a process of its own (the
// volume provisioner, the volume resizer, the pod reaper): it needs no
// binary to build, it lives and dies with its plane (Stop, or the
// holder's exit) with nothing to reap, and it is started before the first
// object it handles can exist.
type inProcess struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error // run's, once done is closed
}

// goInProcess starts run, named name in errors, until stop.
func goInProcess(name string, run func(context.Context) error) *inProcess {
	ctx, cancel := context.WithCancel(context.Background())
	c := &inProcess{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.err = run(ctx)
	}()
	return c
}

// stop stops it and waits for it; nil does nothing.
func (c *inProcess) stop() error {
	if c == nil {
		return nil
	}
	c.cancel()
	<-c.done
	if c.err != nil {
		return fmt.Errorf("%s: %w", c.name, c.err)
	}
	return nil
}

// failed returns its error if it has stopped on its own; nil does nothing.
func (c *inProcess) failed() error {
	if c == nil {
		return nil
	}
	select {
	case <-c.done:
		return errors.Join(fmt.Errorf("%s stopped", c.name), c.err)
	default:
		return nil
	}
}

// inProcessClient is a client of the plane's own for an in-process
// controller, with its rate limits, and a logger writing warnings to log.
func (p *Plane) inProcessClient(qps float32, burst int, log io.Writer) (kubernetes.Interface, *logrus.Logger, error) {
	cfg := rest.CopyConfig(p.Config)
	cfg.QPS, cfg.Burst = qps, burst
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	logger := logrus.New()
	logger.SetOutput(log)
	logger.SetLevel(logrus.WarnLevel)
	return kube, logger, nil
}
