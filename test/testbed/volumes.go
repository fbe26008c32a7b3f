package testbed

import (
	"context"

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

// startVolumes starts the provisioner on a client of its own, with the
// rate limits of Options. It does not wait for its caches: a claim made
// before they sync is in their first list.
func (p *Plane) startVolumes() error {
	kube, log, err := p.inProcessClient(p.opts.VolumeQPS, p.opts.VolumeBurst, p.opts.Log)
	if err != nil {
		return err
	}
	p.volumes = goInProcess("provisioner", func(ctx context.Context) error {
		return provisioner.Run(ctx, kube, provisioner.Config{
			StorageClass: StorageClassName, Provisioner: Provisioner, Workers: p.opts.VolumeWorkers, Log: log,
		})
	})
	return nil
}
