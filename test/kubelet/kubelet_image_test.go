//go:build images

package kubelet_test

// The instance image's start-up program, run by the process kubelet as the
// image runs it: `make test-images` builds the image (make images) and runs
// this test with -instance-image.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/test/kubelet"
	"github.com/pgloop/pgloop/test/testbed"
)

var instanceImage = flag.String("instance-image", "", "the instance image's OCI archive (make images: bin/pgloop-instance-image.tar)")

// TestInstanceImage takes the start-up program out of the instance image
// (its entrypoint, /usr/local/bin/pgloop) and has the process kubelet run
// a cluster of pgloop's default image with it, as pgloop renders the pod
// (the environment of a real pod), on this machine's PostgreSQL 15, Patroni
// and pgBackRest, Debian's packages as in the image: the member becomes
// the leader, serves TLS with the certificate the program made, and
// archives to the object store with real pgBackRest.
func TestInstanceImage(t *testing.T) {
	if *instanceImage == "" {
		t.Fatal("-instance-image: the instance image's archive (make test-images passes it)")
	}
	kubelet.RequireInstalled(t, "/usr/bin/pgbackrest")
	bin := filepath.Join(t.TempDir(), "pgloop")
	entrypoint := extractEntrypoint(t, *instanceImage, bin)
	t.Logf("the image's entrypoint %v, /usr/local/bin/pgloop extracted (sha256 %s)", entrypoint, fileDigest(t, bin))
	if len(entrypoint) != 2 || entrypoint[0] != "/usr/local/bin/pgloop" || entrypoint[1] != "instance" {
		t.Fatalf("the image's entrypoint is %v, want [/usr/local/bin/pgloop instance]", entrypoint)
	}
	instancePgloop = bin
	t.Cleanup(func() { instancePgloop = "" })

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	store, err := testbed.StartObjectStore(ctx, testbed.ObjectStoreOptions{Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := store.Stop(); err != nil {
			t.Errorf("stopping the object store: %v", err)
		}
	})
	plane, k, step := startKubeletPlane(ctx, t)
	cs := plane.Client
	// The kubelet installed the image's program, not one of this tree.
	if _, err := os.Stat(filepath.Join(k.root, "images", "sha256-"+fileDigest(t, bin), "pgloop")); err != nil {
		t.Fatalf("the kubelet does not run the image's program: %v", err)
	}
	ca, err := os.ReadFile(store.S3.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	ns := plane.Namespace(t)
	repo := &v1.BackupS3{Endpoint: store.S3.Endpoint, Bucket: store.S3.Bucket, SecretName: "s3", CAKey: "ca.crt"}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: repo.SecretName},
		Data: map[string][]byte{
			v1.BackupAccessKeyIDKey: []byte(store.S3.AccessKey), v1.BackupSecretAccessKeyKey: []byte(store.S3.SecretKey), repo.CAKey: ca,
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// pgloop's defaults: no spec.dockerImage, so the default image, which
	// archives with no other setting.
	pg := planeCluster(ns, "img", 1)
	pg.UID = types.UID("7e1d2c3b-4a59-4f68-9b7a-0c1d2e3f4a5b")
	pg.Spec.Backup = &v1.Backup{S3: repo}
	if reason := cluster.ArchiveBlocked(pg, cluster.Options{}); reason != "" {
		t.Fatalf("the default image does not archive: %s", reason)
	}
	createClusterFrom(ctx, t, cs, pg, cluster.Options{}, nil)
	pod, err := testbed.WaitForPod(ctx, cs, ns, cluster.PodName(pg.Name, 0), testbed.PodReady)
	if err != nil {
		t.Fatal(k.failure(err))
	}
	if img := pod.Spec.Containers[0].Image; img != cluster.DefaultImage {
		t.Errorf("the pod runs %s, want the default image %s", img, cluster.DefaultImage)
	}
	step("%s Ready on %s", pod.Name, pod.Spec.Containers[0].Image)

	// TLS with the certificate the start-up program made: sslmode=require.
	conn := connectAs(ctx, t, cs, pod, pg.Name)
	defer conn.Close(context.Background())
	var ssl bool
	if err := conn.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
		t.Errorf("the connection is not TLS (%v): the program's certificate is not served", err)
	}
	plain, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable connect_timeout=5", pod.Status.PodIP, cluster.PostgresPort))
	if err == nil {
		plain.Close(context.Background())
		t.Errorf("a connection without TLS was let in: Spilo's pg_hba refuses them (hostnossl ... reject)")
	} else if !strings.Contains(err.Error(), "no pg_hba.conf entry") && !strings.Contains(err.Error(), "rejects connection") {
		t.Logf("without TLS: %v", err)
	}

	segment := archiveOne(ctx, t, conn, pg.Name)
	step("segment %s archived to the object store with pgBackRest", segment)

	// The program's log: what it said before Patroni.
	log, _ := os.ReadFile(filepath.Join(k.root, "pods", string(pod.UID), "patroni.log"))
	if !strings.Contains(string(log), "pgloop instance: made a self-signed certificate") {
		t.Errorf("the program did not say it made the certificate; its log:\n%s", tailOf(string(log), 40))
	}
}

// extractEntrypoint copies /usr/local/bin/pgloop out of the OCI archive's
// (single-platform) image into dst, and returns the image's entrypoint.
func extractEntrypoint(t *testing.T, archive, dst string) []string {
	t.Helper()
	blobs := map[string][]byte{}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := strings.TrimPrefix(h.Name, "./")
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		blobs[name] = data
	}
	type desc struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
	}
	blob := func(d string) []byte {
		b, ok := blobs["blobs/"+strings.Replace(d, ":", "/", 1)]
		if !ok {
			t.Fatalf("blob %s not in %s", d, archive)
		}
		return b
	}
	var index struct{ Manifests []desc }
	if err := json.Unmarshal(blobs["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v (%d manifests)", err, len(index.Manifests))
	}
	top := index.Manifests[0]
	if strings.Contains(top.MediaType, "index") {
		var inner struct{ Manifests []desc }
		if err := json.Unmarshal(blob(top.Digest), &inner); err != nil || len(inner.Manifests) != 1 {
			t.Fatalf("image index: %v", err)
		}
		top = inner.Manifests[0]
	}
	var manifest struct {
		Config desc
		Layers []desc
	}
	if err := json.Unmarshal(blob(top.Digest), &manifest); err != nil {
		t.Fatal(err)
	}
	var config struct {
		Config struct{ Entrypoint []string }
	}
	if err := json.Unmarshal(blob(manifest.Config.Digest), &config); err != nil {
		t.Fatal(err)
	}
	// pgloop is in the last layer (the small one).
	last := manifest.Layers[len(manifest.Layers)-1]
	gz, err := gzip.NewReader(bytes.NewReader(blob(last.Digest)))
	if err != nil {
		t.Fatal(err)
	}
	lt := tar.NewReader(gz)
	for {
		h, err := lt.Next()
		if err == io.EOF {
			t.Fatalf("usr/local/bin/pgloop is not in the image's last layer")
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimPrefix(h.Name, "./") == "usr/local/bin/pgloop" {
			out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, lt); err != nil {
				t.Fatal(err)
			}
			if err := out.Close(); err != nil {
				t.Fatal(err)
			}
			return config.Config.Entrypoint
		}
	}
}

func fileDigest(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func tailOf(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
