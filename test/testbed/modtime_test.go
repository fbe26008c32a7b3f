package testbed_test

import (
	"encoding/xml"
	"net/http"
	"testing"
	"time"

	"github.com/pgloop/pgloop/test/testbed"
)

// SetModTimes: objects S3 lists with the times set, their data kept, the
// others of their directory untouched.
func TestObjectStoreSetModTimes(t *testing.T) {
	ctx := testContext(t)
	s, err := testbed.StartObjectStore(ctx, testbed.ObjectStoreOptions{Bucket: "backups", Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	c := s.S3
	for _, k := range []string{"old", "older", "new"} {
		putGet(ctx, t, c, "/backups/dir/"+k, "data of "+k)
	}
	old := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	older := time.Date(2024, 11, 30, 23, 59, 59, 0, time.UTC)
	began := time.Now()
	if err := s.SetModTimes(ctx, "backups", map[string]time.Time{"dir/old": old, "dir/older": older}); err != nil {
		t.Fatal(err)
	}
	t.Logf("two times set in %v", time.Since(began).Round(time.Millisecond))

	status, body, err := c.Do(ctx, nil, http.MethodGet, "/backups?prefix=dir%2F", nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("list: %d %v\n%s", status, err, body)
	}
	var list struct {
		Contents []struct {
			Key          string
			LastModified time.Time
		}
	}
	if err := xml.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	got := map[string]time.Time{}
	for _, o := range list.Contents {
		got[o.Key] = o.LastModified
	}
	if !got["dir/old"].Equal(old) || !got["dir/older"].Equal(older) {
		t.Errorf("listed %v, want dir/old at %v and dir/older at %v", got, old, older)
	}
	if n := got["dir/new"]; time.Since(n) > 10*time.Minute || time.Until(n) > time.Minute {
		t.Errorf("dir/new listed at %v, want the time it was written", n)
	}
	for _, k := range []string{"old", "older"} {
		status, body, err := c.Do(ctx, nil, http.MethodGet, "/backups/dir/"+k, nil)
		if err != nil || status != http.StatusOK || string(body) != "data of "+k {
			t.Errorf("dir/%s after: %d %v %q", k, status, err, body)
		}
	}
	if err := s.SetModTimes(ctx, "backups", map[string]time.Time{"dir/missing": old}); err == nil {
		t.Errorf("a missing object: no error")
	}
}
