package kubelet

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestDataVolumeFiles(t *testing.T) {
	lookup := fakeEnvDataLookup{fakeEnvLookup{
		secrets: map[string]map[string]string{
			"db/s3-ca": {"ca.crt": "CA", "extra": "x"},
			"db/empty": {},
		},
		configMaps: map[string]map[string]string{
			"db/conf": {"pgbackrest.conf": "[global]\n", "b": "bin"},
		},
	}}
	secret := func(name string, optional bool, mode *int32, items ...corev1.KeyToPath) corev1.Volume {
		return corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: name, Items: items, DefaultMode: mode, Optional: ptr.To(optional)}}}
	}
	configMap := func(name string, optional bool, mode *int32, items ...corev1.KeyToPath) corev1.Volume {
		return corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Items: items, DefaultMode: mode, Optional: ptr.To(optional)}}}
	}
	item := func(key, path string, mode *int32) corev1.KeyToPath {
		return corev1.KeyToPath{Key: key, Path: path, Mode: mode}
	}
	tests := []struct {
		name    string
		v       corev1.Volume
		fsGroup bool
		want    []volumeFile
		wantErr string
	}{
		{name: "every key, default mode", v: secret("s3-ca", false, nil),
			want: []volumeFile{{"ca.crt", "CA", 0o644}, {"extra", "x", 0o644}}},
		{name: "defaultMode", v: secret("s3-ca", false, ptr.To[int32](0o400)),
			want: []volumeFile{{"ca.crt", "CA", 0o400}, {"extra", "x", 0o400}}},
		{name: "fsGroup adds group read", v: secret("s3-ca", false, ptr.To[int32](0o400)), fsGroup: true,
			want: []volumeFile{{"ca.crt", "CA", 0o440}, {"extra", "x", 0o440}}},
		{name: "fsGroup leaves other bits", v: secret("s3-ca", false, ptr.To[int32](0o600)), fsGroup: true,
			want: []volumeFile{{"ca.crt", "CA", 0o640}, {"extra", "x", 0o640}}},
		{name: "items: only those, at their paths, item mode over defaultMode",
			v:    secret("s3-ca", false, ptr.To[int32](0o400), item("ca.crt", "tls/ca.pem", ptr.To[int32](0o444))),
			want: []volumeFile{{"tls/ca.pem", "CA", 0o444}}},
		{name: "items: defaultMode when the item has none",
			v:    secret("s3-ca", false, ptr.To[int32](0o440), item("extra", "e", nil)),
			want: []volumeFile{{"e", "x", 0o440}}},
		{name: "items: missing key", v: secret("s3-ca", false, nil, item("nope", "n", nil)),
			wantErr: "volume v: Secret db/s3-ca has no key nope"},
		{name: "items: missing key, optional", v: secret("s3-ca", true, nil, item("nope", "n", nil), item("ca.crt", "ca", nil)),
			want: []volumeFile{{"ca", "CA", 0o644}}},
		{name: "items: absolute path", v: secret("s3-ca", false, nil, item("ca.crt", "/etc/ca", nil)),
			wantErr: `path "/etc/ca" must be relative`},
		{name: "items: dot-dot", v: secret("s3-ca", false, nil, item("ca.crt", "a/../../ca", nil)),
			wantErr: `may not contain '..'`},
		{name: "missing Secret", v: secret("gone", false, nil),
			wantErr: "volume v: Secret db/gone not found"},
		{name: "missing Secret, optional: an empty volume", v: secret("gone", true, nil), want: nil},
		{name: "empty Secret", v: secret("empty", false, nil), want: nil},
		{name: "ConfigMap", v: configMap("conf", false, nil),
			want: []volumeFile{{"b", "bin", 0o644}, {"pgbackrest.conf", "[global]\n", 0o644}}},
		{name: "ConfigMap items", v: configMap("conf", false, ptr.To[int32](0o640), item("pgbackrest.conf", "pgbackrest/pgbackrest.conf", nil)),
			want: []volumeFile{{"pgbackrest/pgbackrest.conf", "[global]\n", 0o640}}},
		{name: "missing ConfigMap", v: configMap("gone", false, nil),
			wantErr: "volume v: ConfigMap db/gone not found"},
		{name: "missing ConfigMap, optional", v: configMap("gone", true, nil), want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dataVolumeFiles("db", tc.v, tc.fsGroup, lookup)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("files = %+v, want %+v", got, tc.want)
			}
		})
	}

	t.Run("lookup error", func(t *testing.T) {
		broken := fakeEnvDataLookup{fakeEnvLookup{err: errors.New("cache not synced")}}
		_, err := dataVolumeFiles("db", secret("s3-ca", true, nil), false, broken)
		if err == nil || !strings.Contains(err.Error(), "Secret db/s3-ca: cache not synced") {
			t.Errorf("error = %v, want the lookup's, naming the Secret (optional or not)", err)
		}
	})
}

func TestWriteDataVolume(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "volumes", "s3-ca")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// What an earlier kubelet left: gone after the write.
	if err := os.WriteFile(filepath.Join(dir, "stale"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	gid := os.Getgid()
	files := []volumeFile{
		{"ca.crt", "CA", 0o440},
		{"tls/deep/key", "KEY", 0o400},
		{"open", "o", 0o644},
	}
	if err := writeDataVolume(dir, files, gid); err != nil {
		t.Fatal(err)
	}
	var got []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if st := fi.Sys().(*syscall.Stat_t); int(st.Gid) != gid {
			t.Errorf("%s: group %d, want %d", rel, st.Gid, gid)
		}
		got = append(got, rel+" "+fi.Mode().String())
		if d.Type().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			got[len(got)-1] += " " + string(data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		". drwxr-xr-x",
		"ca.crt -r--r----- CA",
		"open -rw-r--r-- o",
		"tls drwxr-xr-x",
		"tls/deep drwxr-xr-x",
		"tls/deep/key -r-------- KEY",
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("volume:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Written again with fewer keys (a kubelet restarted after the
	// Secret changed): exactly the new ones.
	if err := writeDataVolume(dir, []volumeFile{{"ca.crt", "CA2", 0o644}}, -1); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "ca.crt" {
		t.Errorf("after the second write the volume holds %v, want ca.crt only", entries)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); string(data) != "CA2" {
		t.Errorf("ca.crt = %q, want CA2", data)
	}
}
