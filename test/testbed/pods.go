package testbed

import (
	"context"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/pgloop/pgloop/test/podreaper"
)

const (
	// podDeleteStage is the file name of kwok's pod-delete stage in
	// bin/kwok-stages, left out of kwok's configuration: the pod reaper
	// does its work, with a UID precondition (docs/testbed.md), unless
	// Options.KwokPodDelete.
	podDeleteStage = "pod-delete.yaml"

	// reaperWorkers, reaperQPS and reaperBurst are the pod reaper's
	// workers and client rate limits: a rollout of a thousand clusters
	// deletes a thousand pods at once.
	reaperWorkers = 8
	reaperQPS     = 500
	reaperBurst   = 1000
)

// startReaper starts the pod reaper on a client of its own, for the pods
// of the nodes kwok manages (their annotation, kwok's
// --manage-nodes-with-annotation-selector) but those whose status a test
// writes (kwok's --disregard-status-with-annotation-selector). It does not
// wait for its caches: a pod deleted before they sync is in their first
// list.
func (p *Plane) startReaper() error {
	kube, log, err := p.inProcessClient(reaperQPS, reaperBurst, p.opts.Log)
	if err != nil {
		return err
	}
	p.reaper = goInProcess("pod reaper", func(ctx context.Context) error {
		return podreaper.Run(ctx, kube, podreaper.Config{
			Nodes:     labels.SelectorFromSet(labels.Set{kwokNodeAnnotation: kwokNodeValue}),
			Disregard: labels.SelectorFromSet(labels.Set{StatusAnnotation: StatusCustom}),
			Workers:   reaperWorkers,
			Log:       log,
		})
	})
	return nil
}
