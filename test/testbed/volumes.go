package testbed

import (
	"context"
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/pgloop/pgloop/test/provisioner"
)

// volumeStages are the file names of kwok's volume stages in
// bin/kwok-stages, left out of kwok's configuration when the plane's
// provisioner does their work (Options.VolumeWorkers).
var volumeStages = map[string]bool{
	"pvc-provision.yaml": true,
	"pv-bind.yaml":       true,
	"pvc-delete.yaml":    true,
	"pv-delete.yaml":     true,
}

// volumes is the plane's provisioner, run in the process holding the plane
// rather than as a process of its own: it needs no binary to build, it
// lives and dies with its plane (Stop, or the holder's exit) with nothing
// to reap, and it is started before the first claim can exist.
type volumes struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's, once done is closed
}

// startVolumes starts the provisioner on a client of its own, with the
// rate limits of Options. It does not wait for its caches: a claim made
// before they sync is in their first list.
func (p *Plane) startVolumes() error {
	cfg := rest.CopyConfig(p.Config)
	cfg.QPS, cfg.Burst = p.opts.VolumeQPS, p.opts.VolumeBurst
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	log := logrus.New()
	log.SetOutput(p.opts.Log)
	log.SetLevel(logrus.WarnLevel)
	runCtx, cancel := context.WithCancel(context.Background())
	v := &volumes{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(v.done)
		v.err = provisioner.Run(runCtx, kube, provisioner.Config{
			StorageClass: StorageClassName, Provisioner: Provisioner, Workers: p.opts.VolumeWorkers, Log: log,
		})
	}()
	p.volumes = v
	return nil
}

// stop stops the provisioner and waits for it; nil does nothing.
func (v *volumes) stop() error {
	if v == nil {
		return nil
	}
	v.cancel()
	<-v.done
	if v.err != nil {
		return fmt.Errorf("provisioner: %w", v.err)
	}
	return nil
}

// failed returns the provisioner's error if it has stopped on its own.
func (v *volumes) failed() error {
	if v == nil {
		return nil
	}
	select {
	case <-v.done:
		return errors.Join(errors.New("provisioner stopped"), v.err)
	default:
		return nil
	}
}
