package traffic

import (
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
)

// The fence lets reads and Events through always, and writes only while
// what it was armed with says the Lease is held.
func TestFence(t *testing.T) {
	f := &Fence{}
	rt := f.Wrap(okTransport{})
	do := func(method, path string) error {
		req, err := http.NewRequest(method, "https://127.0.0.1"+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = rt.RoundTrip(req)
		return err
	}
	write, read, event := func() error { return do(http.MethodPut, "/api/v1/namespaces/a/services/b") },
		func() error { return do(http.MethodGet, "/api/v1/namespaces/a/services/b") },
		func() error { return do(http.MethodPost, "/api/v1/namespaces/a/events") }

	if err := write(); err != nil {
		t.Errorf("unarmed: a write refused: %v", err)
	}
	var held atomic.Bool
	f.Arm(held.Load)
	if err := write(); !errors.Is(err, ErrFenced) {
		t.Errorf("armed, not held: write error %v, want ErrFenced", err)
	}
	if err := read(); err != nil {
		t.Errorf("not held: a read refused: %v", err)
	}
	if err := event(); err != nil {
		t.Errorf("not held: an Event refused: %v", err)
	}
	held.Store(true)
	if err := write(); err != nil {
		t.Errorf("held: a write refused: %v", err)
	}
	held.Store(false)
	if err := write(); !errors.Is(err, ErrFenced) {
		t.Errorf("no longer held: write error %v, want ErrFenced", err)
	}
}
