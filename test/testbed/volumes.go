package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/pgloop/pgloop/test/provisioner"
	"github.com/pgloop/pgloop/test/resizer"
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

// stageClassMatch is how kwok's volume stages select the claims and
// volumes they handle: by the name of one class. kwokVolumeStage widens it
// to the plane's classes.
var stageClassMatch = "self.spec.storageClassName == '" + StorageClassName + "'"

// kwokVolumeStage writes a copy of kwok's volume stage at path into the
// plane's directory, selecting the claims or volumes of every class of
// the plane rather than the default one only, and returns the copy's
// path. A stage that does not select by class as v0.8.0's do is an error,
// not a plane whose fixed class is never provisioned.
func (p *Plane) kwokVolumeStage(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if n := bytes.Count(b, []byte(stageClassMatch)); n != 1 {
		return "", fmt.Errorf("kwok stage %s: want %q once, found it %d times", path, stageClassMatch, n)
	}
	classes := "self.spec.storageClassName in ['" + strings.Join(storageClasses, "', '") + "']"
	dir := filepath.Join(p.Dir, kwokStagesDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(out, bytes.Replace(b, []byte(stageClassMatch), []byte(classes), 1), 0o644); err != nil {
		return "", err
	}
	return out, nil
}

// inProcess is a controller of the plane (the provisioner, the resizer)
// run in the process holding the plane rather than as a process of its
// own: it needs no binary to build, it lives and dies with its plane
// (Stop, or the holder's exit) with nothing to reap, and it is started
// before the first claim can exist.
type inProcess struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error // run's, once done is closed
}

// startInProcess starts run on a client of its own, with the rate limits
// of Options (VolumeQPS, VolumeBurst), logging warnings to Options.Log. It
// does not wait for run's caches: a claim made before they sync is in
// their first list.
func (p *Plane) startInProcess(name string, run func(context.Context, kubernetes.Interface, logrus.FieldLogger) error) (*inProcess, error) {
	cfg := rest.CopyConfig(p.Config)
	cfg.QPS, cfg.Burst = p.opts.VolumeQPS, p.opts.VolumeBurst
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	log := logrus.New()
	log.SetOutput(p.opts.Log)
	log.SetLevel(logrus.WarnLevel)
	runCtx, cancel := context.WithCancel(context.Background())
	c := &inProcess{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.err = run(runCtx, kube, log)
	}()
	return c, nil
}

// startVolumes starts the provisioner (Options.VolumeWorkers).
func (p *Plane) startVolumes() (err error) {
	p.volumes, err = p.startInProcess("provisioner", func(ctx context.Context, kube kubernetes.Interface, log logrus.FieldLogger) error {
		return provisioner.Run(ctx, kube, provisioner.Config{
			StorageClasses: storageClasses, Provisioner: Provisioner, Workers: p.opts.VolumeWorkers, Log: log,
		})
	})
	return err
}

// startResizer starts the resizer (unless Options.NoResizer).
func (p *Plane) startResizer() (err error) {
	p.resizer, err = p.startInProcess("resizer", func(ctx context.Context, kube kubernetes.Interface, log logrus.FieldLogger) error {
		return resizer.Run(ctx, kube, resizer.Config{
			Provisioners: []string{Provisioner}, FSDelay: p.opts.ResizeFSDelay, Log: log,
		})
	})
	return err
}

// stop stops the controller and waits for it; nil does nothing.
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

// failed returns the controller's error if it has stopped on its own.
func (c *inProcess) failed() error {
	if c == nil {
		return nil
	}
	select {
	case <-c.done:
		return errors.Join(errors.New(c.name+" stopped"), c.err)
	default:
		return nil
	}
}
