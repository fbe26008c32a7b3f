package kubelet

// Secret and ConfigMap volumes: the kubelet writes the object's keys as files
// into a directory of the pod, which the container's volumeMounts then place
// in its filesystem (prepare adds them to the mounts hostPath translates
// through).

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

const (
	// defaultDataVolumeMode is the mode of a projected key when the volume
	// sets no defaultMode (the API's default, 0644, for both kinds).
	defaultDataVolumeMode = fs.FileMode(corev1.SecretVolumeSourceDefaultMode)
	// fsGroupReadable is what a kubelet adds to every file of a Secret or
	// ConfigMap volume of a pod with an fsGroup: group read (the volumes
	// are read-only, so not write). pkg/volume's SetVolumeOwnership.
	fsGroupReadable = fs.FileMode(0o440)
	// dataVolumeDirMode is the mode of the volume's directories (the
	// kubelet's atomic writer makes them 0755).
	dataVolumeDirMode = fs.FileMode(0o755)
)

// volumeFile is one file of a Secret or ConfigMap volume: its path relative
// to the volume, its content and its mode.
type volumeFile struct {
	path string
	data string
	mode fs.FileMode
}

// isDataVolume reports whether v is a Secret or ConfigMap volume.
func isDataVolume(v corev1.Volume) bool { return v.Secret != nil || v.ConfigMap != nil }

// dataVolumeFiles returns the files a kubelet projects for Secret or
// ConfigMap volume v of a pod in namespace: every key as a file of that
// name, or only the keys Items lists at their paths; the mode is the item's,
// else the volume's defaultMode, else 0644, with group read added when the
// pod has an fsGroup (as a kubelet does). A missing object or key listed in
// Items is an error unless the volume is optional (then the volume is empty
// or lacks that key); the error names the volume, the object and the key.
func dataVolumeFiles(namespace string, v corev1.Volume, fsGroup bool, l DataLookup) ([]volumeFile, error) {
	var (
		kind, name  string
		items       []corev1.KeyToPath
		defaultMode *int32
		optional    bool
		data        map[string]string
		found       bool
		err         error
	)
	switch {
	case v.Secret != nil:
		kind, name, items, defaultMode = "Secret", v.Secret.SecretName, v.Secret.Items, v.Secret.DefaultMode
		optional = v.Secret.Optional != nil && *v.Secret.Optional
		data, found, err = l.SecretData(namespace, name)
	case v.ConfigMap != nil:
		kind, name, items, defaultMode = "ConfigMap", v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.DefaultMode
		optional = v.ConfigMap.Optional != nil && *v.ConfigMap.Optional
		data, found, err = l.ConfigMapData(namespace, name)
	default:
		return nil, fmt.Errorf("volume %s is neither a Secret nor a ConfigMap volume", v.Name)
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("volume %s: %s %s/%s: %w", v.Name, kind, namespace, name, err)
	case !found && optional:
		return nil, nil
	case !found:
		return nil, fmt.Errorf("volume %s: %s %s/%s not found", v.Name, kind, namespace, name)
	}
	mode := func(m *int32) fs.FileMode {
		out := defaultDataVolumeMode
		switch {
		case m != nil:
			out = fs.FileMode(*m)
		case defaultMode != nil:
			out = fs.FileMode(*defaultMode)
		}
		out &= fs.ModePerm
		if fsGroup {
			out |= fsGroupReadable
		}
		return out
	}
	var files []volumeFile
	if len(items) == 0 {
		for _, key := range slices.Sorted(maps.Keys(data)) {
			files = append(files, volumeFile{path: key, data: data[key], mode: mode(nil)})
		}
		return files, nil
	}
	for _, it := range items {
		value, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("volume %s: %s %s/%s has no key %s", v.Name, kind, namespace, name, it.Key)
		}
		// The API server rejects such paths; a kubelet checks again.
		if it.Path == "" || path.IsAbs(it.Path) || slices.Contains(strings.Split(it.Path, "/"), "..") {
			return nil, fmt.Errorf("volume %s: item %s: path %q must be relative and may not contain '..'", v.Name, it.Key, it.Path)
		}
		files = append(files, volumeFile{path: path.Clean(it.Path), data: value, mode: mode(it.Mode)})
	}
	return files, nil
}

// writeDataVolume makes dir hold exactly files: whatever it held goes (an
// earlier kubelet's copy of the object). Files and directories belong to
// the caller (root, as in a kubelet) with group gid, unless gid is -1 (the
// caller's group); directories are dataVolumeDirMode.
//
// A real kubelet refreshes a mounted Secret or ConfigMap (about every
// minute) through an atomic writer (..data symlinks); this kubelet writes
// plain files when it prepares the pod and never refreshes them, not even
// when the container restarts: a change reaches a pod re-created or served
// by a restarted kubelet.
func writeDataVolume(dir string, files []volumeFile, gid int) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	mkdir := func(d string) error {
		if err := os.MkdirAll(d, dataVolumeDirMode); err != nil {
			return err
		}
		if err := os.Chmod(d, dataVolumeDirMode); err != nil {
			return err
		}
		return os.Lchown(d, -1, gid)
	}
	if err := mkdir(dir); err != nil {
		return err
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.path))
		for d := filepath.Dir(p); d != dir; d = filepath.Dir(d) {
			if err := mkdir(d); err != nil {
				return err
			}
		}
		if err := os.WriteFile(p, []byte(f.data), 0o600); err != nil {
			return err
		}
		if err := os.Lchown(p, -1, gid); err != nil {
			return err
		}
		// After the chown, which may clear set-id bits; and past the umask.
		if err := os.Chmod(p, f.mode); err != nil {
			return err
		}
	}
	return nil
}
