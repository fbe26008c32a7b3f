package kubelet

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// kubeAPIAccess is the volume the ServiceAccount admission plugin adds to a
// pod (Kubernetes 1.37).
func kubeAPIAccess() *corev1.ProjectedVolumeSource {
	return &corev1.ProjectedVolumeSource{
		DefaultMode: ptr.To[int32](0o644),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: ptr.To[int64](3607), Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}},
			}}},
		},
	}
}

func TestProjectedFiles(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "op-1", Namespace: "ops", UID: "u1"}}
	lookup := fakeEnvDataLookup{fakeEnvLookup{configMaps: map[string]map[string]string{
		"ops/kube-root-ca.crt": {"ca.crt": "-----BEGIN CERTIFICATE-----\n"},
	}}}
	issued := time.Date(2026, 12, 3, 15, 0, 0, 0, time.UTC)
	var asked []string
	request := func(_ context.Context, audience string, seconds int64) (string, time.Time, time.Time, error) {
		asked = append(asked, audience+"/"+time.Duration(seconds*int64(time.Second)).String())
		// The API server extends a kubelet's token to a year.
		return "header.claims.signature", issued, issued.AddDate(1, 0, 0), nil
	}

	t.Run("kube-api-access", func(t *testing.T) {
		asked = nil
		files, refreshAt, err := projectedFiles(context.Background(), pod, "127.9.0.2", kubeAPIAccess(), lookup, request)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, f := range files {
			got[f.path] = string(f.data)
			if f.mode != 0o644 {
				t.Errorf("%s: mode %v, want the defaultMode 0644", f.path, f.mode)
			}
		}
		want := map[string]string{"token": "header.claims.signature", "ca.crt": "-----BEGIN CERTIFICATE-----\n", "namespace": "ops"}
		if len(got) != len(want) {
			t.Errorf("files %v, want %v", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %q, want %q", k, got[k], v)
			}
		}
		if len(asked) != 1 || asked[0] != "/1h0m7s" {
			t.Errorf("token requests %q, want one of 3607s for the API server's audiences", asked)
		}
		// 80% of the 3607 s asked for, not of the year granted.
		if want := issued.Add(2885600 * time.Millisecond); !refreshAt.Equal(want) {
			t.Errorf("refresh at %v, want %v", refreshAt, want)
		}
	})
	t.Run("audience, item mode, optional ConfigMap missing", func(t *testing.T) {
		asked = nil
		src := &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "vault", Path: "vault/token"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Optional: ptr.To(true)}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "ip", Mode: ptr.To[int32](0o400), FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}},
			}}},
		}}
		files, _, err := projectedFiles(context.Background(), pod, "127.9.0.2", src, lookup, request)
		if err != nil {
			t.Fatal(err)
		}
		if len(asked) != 1 || asked[0] != "vault/1h0m0s" {
			t.Errorf("token requests %q, want vault's of the default 3600 s", asked)
		}
		if len(files) != 2 || files[0].path != "vault/token" || files[0].mode != 0o644 || files[1].path != "ip" || string(files[1].data) != "127.9.0.2" || files[1].mode != 0o400 {
			t.Errorf("files %+v", files)
		}
	})
	t.Run("ConfigMap missing", func(t *testing.T) {
		src := kubeAPIAccess()
		_, _, err := projectedFiles(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "other"}}, "127.9.0.2", src, lookup, request)
		if err == nil || !strings.Contains(err.Error(), "ConfigMap other/kube-root-ca.crt not found") {
			t.Errorf("error %v, want the missing ConfigMap named", err)
		}
	})
}

func TestTokenRefresh(t *testing.T) {
	issued := time.Date(2026, 12, 3, 15, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		life, want time.Duration
	}{
		{time.Hour, 48 * time.Minute},
		{10 * time.Minute, 8 * time.Minute},
		{48 * time.Hour, 24 * time.Hour}, // a kubelet renews any token after a day
	} {
		if got := tokenRefresh(issued, issued.Add(tc.life)); !got.Equal(issued.Add(tc.want)) {
			t.Errorf("tokenRefresh(life %v) = +%v, want +%v", tc.life, got.Sub(issued), tc.want)
		}
	}
}

func TestWriteProjected(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kube-api-access-x")
	files := []projectedFile{{path: "token", data: []byte("one"), mode: 0o644}, {path: "sub/ca.crt", data: []byte("ca"), mode: 0o600}}
	if err := writeProjected(dir, files); err != nil {
		t.Fatal(err)
	}
	// A renewal replaces the file by a rename: a reader holding the old
	// one keeps it whole.
	old, err := os.Open(filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := writeProjected(dir, []projectedFile{{path: "token", data: []byte("two"), mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if n, _ := old.Read(buf); string(buf[:n]) != "one" {
		t.Errorf("the old file reads %q", buf[:n])
	}
	for path, want := range map[string]string{"token": "two", "sub/ca.crt": "ca"} {
		b, err := os.ReadFile(filepath.Join(dir, path))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", path, b, err, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "sub/ca.crt")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ca.crt mode: %v, %v", fi, err)
	}
	for _, bad := range []string{"../escape", "/abs"} {
		if err := writeProjected(dir, []projectedFile{{path: bad, mode: 0o644}}); err == nil {
			t.Errorf("path %q was written", bad)
		}
	}
}
