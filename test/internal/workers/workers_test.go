package workers

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// Every key is handled; one that fails is retried until it succeeds and
// told to retrying each time; Run returns once ctx ends.
func TestRun(t *testing.T) {
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 10*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu      sync.Mutex
		handled = map[string]int{}
		retried = map[string]int{}
		done    = make(chan struct{})
	)
	handle := func(_ context.Context, k string) error {
		mu.Lock()
		defer mu.Unlock()
		handled[k]++
		if k == "flaky" && handled[k] < 3 {
			return errors.New("not yet")
		}
		if handled["a"] > 0 && handled["b"] > 0 && handled["flaky"] == 3 {
			select {
			case <-done:
			default:
				close(done)
			}
		}
		return nil
	}
	retrying := func(k string, _ error) {
		mu.Lock()
		defer mu.Unlock()
		retried[k]++
	}
	for _, k := range []string{"a", "b", "flaky"} {
		queue.Add(k)
	}
	returned := make(chan struct{})
	go func() {
		Run(ctx, queue, 3, handle, retrying)
		close(returned)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("not every key handled within 10 s")
	}
	cancel()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	mu.Lock()
	defer mu.Unlock()
	if handled["a"] != 1 || handled["b"] != 1 || handled["flaky"] != 3 || retried["flaky"] != 2 || retried["a"]+retried["b"] != 0 {
		t.Errorf("handled %v, retried %v; want a and b once, flaky 3 times with 2 retries", handled, retried)
	}
}
