package testbed_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgloop/pgloop/test/testbed"
)

// The object store alone: S3 over HTTPS with the plane's CA, its one key,
// its bucket; stopped and started again on the same port with its data;
// gone, with its directory and sockets, after Stop.
func TestObjectStore(t *testing.T) {
	ctx := testContext(t)
	began := time.Now()
	s, err := testbed.StartObjectStore(ctx, testbed.ObjectStoreOptions{Bucket: "backups", Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	proc := s.Process()
	rss, err := proc.RSS()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("object store up in %v (StartObjectStore %v), RSS %d MiB", s.StartupTime.Round(time.Millisecond), time.Since(began).Round(time.Millisecond), rss>>20)

	c := s.S3
	if c.Bucket != "backups" || c.Region != testbed.DefaultRegion || c.URIStyle != "path" || c.Host != "127.0.0.1" || !strings.HasPrefix(c.Endpoint, "127.0.0.1:") {
		t.Errorf("unexpected S3 %+v", c)
	}
	began = time.Now()
	putGet(ctx, t, c, "/backups/dir/object", "hello")
	t.Logf("first object written, read and listed in %v", time.Since(began).Round(time.Millisecond))

	// The files a client reads: the CA, and the env and JSON forms.
	if fi, err := os.Stat(c.CAFile); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("CA file %s: %v %v, want mode 0644", c.CAFile, fi.Mode(), err)
	}
	env, err := os.ReadFile(filepath.Join(s.Dir, "s3.env"))
	if err != nil || !strings.Contains(string(env), "PGLOOP_S3_SECRET_KEY="+c.SecretKey+"\n") {
		t.Errorf("s3.env: %v\n%s", err, env)
	}

	// TLS only, and only with the CA: a plain client is refused.
	plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	_, _, err = c.Do(ctx, plain, http.MethodGet, "/backups/dir/object", nil)
	var unknownCA x509.UnknownAuthorityError
	if !errors.As(err, &unknownCA) {
		t.Errorf("a client without the CA: got %v, want x509.UnknownAuthorityError", err)
	}
	resp, err := plain.Get("http://" + c.Endpoint + "/backups/dir/object")
	if err == nil {
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP was served")
		}
		resp.Body.Close()
	}
	// The certificate names 127.0.0.1 as an IP and a DNS name (for
	// pgBackRest 2.45), and localhost.
	conn, err := tls.Dial("tcp", c.Endpoint, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reading the certificate
	if err != nil {
		t.Fatal(err)
	}
	leaf := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal([]byte{127, 0, 0, 1}) || strings.Join(leaf.DNSNames, ",") != "127.0.0.1,localhost" {
		t.Errorf("certificate names IPs %v, DNS %v", leaf.IPAddresses, leaf.DNSNames)
	}
	// Signed with another secret: refused.
	wrong := c
	wrong.SecretKey = "not-the-secret"
	if status, _, err := wrong.Do(ctx, nil, http.MethodGet, "/backups/dir/object", nil); err != nil || status != http.StatusForbidden {
		t.Errorf("wrong secret: got %d %v, want 403", status, err)
	}

	// Down: connections refused. Up again: same port, same data.
	if err := s.StopServer(true); err != nil {
		t.Fatal(err)
	}
	if err := s.Healthy(); err != nil {
		t.Errorf("Healthy after StopServer: %v", err)
	}
	if _, _, err := c.Do(ctx, nil, http.MethodGet, "/backups/dir/object", nil); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("store stopped: got %v, want connection refused", err)
	}
	began = time.Now()
	if err := s.StartServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("started again in %v", time.Since(began).Round(time.Millisecond))
	began = time.Now()
	if status, body, err := c.Do(ctx, nil, http.MethodGet, "/backups/dir/object", nil); err != nil || status != http.StatusOK || string(body) != "hello" {
		t.Errorf("after a restart: got %d %q %v, want the object", status, body, err)
	}
	t.Logf("read back in %v", time.Since(began).Round(time.Millisecond))

	sockets, err := os.ReadFile(filepath.Join(s.Dir, "grpc-sockets"))
	if err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped in %v", time.Since(began).Round(time.Millisecond))
	if alive(s.Process().PID) {
		t.Errorf("weed (pid %d) still exists after Stop", s.Process().PID)
	}
	if _, err := os.Stat(filepath.Dir(s.Dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists after Stop (stat: %v)", filepath.Dir(s.Dir), err)
	}
	for _, sock := range strings.Fields(string(sockets)) {
		if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists after Stop (lstat: %v)", sock, err)
		}
	}
}

// The shared plane's object store, started with it.
func TestObjectStoreOnPlane(t *testing.T) {
	ctx := testContext(t)
	s := plane.ObjectStore
	if s == nil {
		t.Fatal("the plane has no object store")
	}
	if s.S3.Bucket != testbed.DefaultBucket {
		t.Errorf("bucket %q, want %q", s.S3.Bucket, testbed.DefaultBucket)
	}
	if !strings.HasPrefix(s.Dir, plane.Dir+"/") {
		t.Errorf("store directory %s is not in the plane's %s", s.Dir, plane.Dir)
	}
	found := false
	for _, proc := range plane.Processes() {
		found = found || proc.Name == "weed"
	}
	if !found {
		t.Errorf("weed is not among the plane's processes %v", plane.Processes())
	}
	putGet(ctx, t, s.S3, "/"+s.S3.Bucket+"/smoke", "on the plane")
}

// putGet writes body at path, reads it back and lists the bucket.
func putGet(ctx context.Context, t *testing.T, c testbed.S3, path, body string) {
	t.Helper()
	client, err := c.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	defer client.CloseIdleConnections()
	if status, resp, err := c.Do(ctx, client, http.MethodPut, path, []byte(body)); err != nil || status != http.StatusOK {
		t.Fatalf("PUT %s: %d %s %v", path, status, resp, err)
	}
	if status, resp, err := c.Do(ctx, client, http.MethodGet, path, nil); err != nil || status != http.StatusOK || string(resp) != body {
		t.Fatalf("GET %s: %d %q %v, want %q", path, status, resp, err, body)
	}
	key := strings.TrimPrefix(path, "/"+c.Bucket+"/")
	status, resp, err := c.Do(ctx, client, http.MethodGet, "/"+c.Bucket+"?list-type=2", nil)
	if err != nil || status != http.StatusOK || !bytes.Contains(resp, []byte("<Key>"+key+"</Key>")) {
		t.Fatalf("listing %s: %d %s %v, want %s", c.Bucket, status, resp, err, key)
	}
}

// testWriter sends start-up lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
