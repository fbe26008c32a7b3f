// Package workers runs the workers of the test-only controllers (the
// labeller, the volume provisioner, the pod reaper): n goroutines draining one typed
// workqueue until their context ends.
package workers

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Run hands each key of queue to handle on n workers until ctx ends, then
// shuts the queue down and returns once every worker has. A key whose handling
// fails, ctx still going, is told to retrying and queued again with the
// queue's rate limit; one that succeeds is forgotten by the rate limiter.
func Run[K comparable](ctx context.Context, queue workqueue.TypedRateLimitingInterface[K], n int,
	handle func(context.Context, K) error, retrying func(K, error)) {
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				key, shutdown := queue.Get()
				if shutdown {
					return
				}
				if err := handle(ctx, key); err != nil && ctx.Err() == nil {
					retrying(key, err)
					queue.AddRateLimited(key)
				} else {
					queue.Forget(key)
				}
				queue.Done(key)
			}
		})
	}
	wg.Wait()
}

// CallTimeout bounds each API call of the test-only controllers.
const CallTimeout = 10 * time.Second

// Call makes one API call under its own deadline, CallTimeout.
func Call(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	return f(ctx)
}

// Gone drops the error of a call about an object that is gone (NotFound):
// there is nothing left to do for it, or its delete event says what is.
func Gone(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Informer is one informer of a test-only controller and the handler of
// its events; without a handler the controller only reads its cache.
type Informer struct {
	Informer cache.SharedIndexInformer
	Handler  cache.ResourceEventHandler
}

// OnChange is the handler that hands each object added or updated (and,
// with onDelete, deleted) to add.
func OnChange(add func(any), onDelete bool) cache.ResourceEventHandlerFuncs {
	h := cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, obj any) { add(obj) }}
	if onDelete {
		h.DeleteFunc = add
	}
	return h
}

// Sync adds each handler to its informer, starts factory and waits until
// every informer has handed its initial list to its handler (or, without
// one, holds it). It returns false with no error if ctx ended first, and an
// error naming the controller if the caches could not sync. The caller
// shuts the factory down once done.
func Sync(ctx context.Context, name string, factory interface{ Start(<-chan struct{}) }, infs ...Informer) (bool, error) {
	var synced []cache.InformerSynced
	for _, inf := range infs {
		if inf.Handler == nil {
			synced = append(synced, inf.Informer.HasSynced)
			continue
		}
		reg, err := inf.Informer.AddEventHandler(inf.Handler)
		if err != nil {
			return false, fmt.Errorf("%s: while adding a handler: %w", name, err)
		}
		synced = append(synced, reg.HasSynced)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		if ctx.Err() != nil {
			return false, nil
		}
		return false, fmt.Errorf("%s: caches did not sync", name)
	}
	return true, nil
}
