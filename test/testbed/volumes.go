package testbed

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

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

// realNodeVolumeWorkers are the provisioner's workers when it makes the
// real node's volumes only.
const realNodeVolumeWorkers = 2

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

// startVolumes starts the provisioner on a client of its own, with the
// rate limits of Options: for every class with Options.VolumeWorkers, else
// for the real node's class only (kwok's stages do the others). It does not
// wait for its caches: a claim made before they sync is in their first
// list.
func (p *Plane) startVolumes() error {
	classes, workers := storageClasses, p.opts.VolumeWorkers
	if workers == 0 {
		classes, workers = nil, realNodeVolumeWorkers
	}
	if p.opts.RealNodes > 0 {
		classes = append(slices.Clone(classes), RealStorageClassName)
	}
	kube, log, err := p.inProcessClient(p.opts.VolumeQPS, p.opts.VolumeBurst, p.opts.Log)
	if err != nil {
		return err
	}
	var local *provisioner.LocalVolumes
	if p.opts.RealNodes > 0 {
		local = &provisioner.LocalVolumes{StorageClass: RealStorageClassName, Root: filepath.Join(p.Dir, "realnode", "pv"), Node: RealNodeName}
		if err := os.MkdirAll(local.Root, 0o755); err != nil {
			return err
		}
	}
	p.volumes = goInProcess("provisioner", func(ctx context.Context) error {
		return provisioner.Run(ctx, kube, provisioner.Config{
			StorageClasses: classes, Provisioner: Provisioner, Workers: workers, Log: log,
			Local: local,
		})
	})
	return nil
}

// startResizer starts the resizer (unless Options.NoResizer) on a client
// of its own, with the rate limits of Options. It does not wait for its
// caches: a claim grown before they sync is in their first list.
func (p *Plane) startResizer() error {
	kube, log, err := p.inProcessClient(p.opts.VolumeQPS, p.opts.VolumeBurst, p.opts.Log)
	if err != nil {
		return err
	}
	p.resizer = goInProcess("resizer", func(ctx context.Context) error {
		return resizer.Run(ctx, kube, resizer.Config{
			Provisioners: []string{Provisioner}, FSDelay: p.opts.ResizeFSDelay, Log: log,
		})
	})
	return nil
}
