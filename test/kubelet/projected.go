package kubelet

// Projected volumes of image containers (image.go), above all the one the
// ServiceAccount admission plugin adds to every pod (kube-api-access-*):
// a token from the TokenRequest API bound to the pod, with the source's
// audience and expirationSeconds, the kube-root-ca.crt ConfigMap's ca.crt
// and the namespace from the downward API, at
// /var/run/secrets/kubernetes.io/serviceaccount, where client-go's
// in-cluster configuration reads them. The token is requested again once
// 80% of the life asked for has passed, as a kubelet's token manager does
// (or after 24 hours), and the file replaced by a rename: client-go
// re-reads it.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

const (
	// defaultTokenSeconds is a token source's expirationSeconds when unset
	// (the API's default).
	defaultTokenSeconds = 3600
	// maxTokenAge: a kubelet renews a token older than this whatever its
	// expiry.
	maxTokenAge = 24 * time.Hour
	// projectedDefaultMode is a projected volume's defaultMode when unset.
	projectedDefaultMode = 0o644
)

// tokenRefresh is when a token issued at issued and expiring at expires is
// requested again: after 80% of its life, or maxTokenAge.
func tokenRefresh(issued, expires time.Time) time.Time {
	life := expires.Sub(issued)
	return issued.Add(min(life*8/10, maxTokenAge))
}

// projectedFile is one file of a projected volume.
type projectedFile struct {
	path string
	data []byte
	mode os.FileMode
}

// projectedVolume is a projected volume of a pod written on the host: its
// directory and when its token (if it has one) must be renewed.
type projectedVolume struct {
	name      string
	dir       string
	refreshAt time.Time // zero: no token
}

// tokenRequester asks for a token of the pod's ServiceAccount.
type tokenRequester func(ctx context.Context, audience string, seconds int64) (token string, issued, expires time.Time, err error)

// podTokenRequester requests tokens bound to pod through the TokenRequest
// API (kube is an admin client: a kubelet's node authorizer lets it ask for
// its pods' ServiceAccounts).
func podTokenRequester(kube kubernetes.Interface, pod *corev1.Pod) tokenRequester {
	return func(ctx context.Context, audience string, seconds int64) (string, time.Time, time.Time, error) {
		sa := pod.Spec.ServiceAccountName
		if sa == "" {
			sa = "default"
		}
		spec := authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To(seconds),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}
		if audience != "" {
			spec.Audiences = []string{audience}
		}
		issued := time.Now()
		tr, err := kube.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			return "", time.Time{}, time.Time{}, fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", pod.Namespace, sa, err)
		}
		return tr.Status.Token, issued, tr.Status.ExpirationTimestamp.Time, nil
	}
}

// projectedFiles builds the files of projected volume v of pod: tokens
// from request, ConfigMap and Secret keys from l, downward API fields from
// the pod (podIP is the IP the kubelet gave it). refreshAt is when the
// earliest token must be renewed; zero when there is none.
func projectedFiles(ctx context.Context, pod *corev1.Pod, podIP string, v *corev1.ProjectedVolumeSource, l DataLookup, request tokenRequester) (files []projectedFile, refreshAt time.Time, err error) {
	mode := os.FileMode(projectedDefaultMode)
	if v.DefaultMode != nil {
		mode = os.FileMode(*v.DefaultMode)
	}
	itemMode := func(m *int32) os.FileMode {
		if m != nil {
			return os.FileMode(*m)
		}
		return mode
	}
	for _, src := range v.Sources {
		switch {
		case src.ServiceAccountToken != nil:
			t := src.ServiceAccountToken
			seconds := int64(defaultTokenSeconds)
			if t.ExpirationSeconds != nil {
				seconds = *t.ExpirationSeconds
			}
			token, issued, _, err := request(ctx, t.Audience, seconds)
			if err != nil {
				return nil, time.Time{}, err
			}
			// The life asked for, not the token's exp: the API server
			// extends a kubelet's short tokens to a year by default
			// (--service-account-extend-token-expiration), and a kubelet
			// renews them all the same.
			if at := tokenRefresh(issued, issued.Add(time.Duration(seconds)*time.Second)); refreshAt.IsZero() || at.Before(refreshAt) {
				refreshAt = at
			}
			files = append(files, projectedFile{path: t.Path, data: []byte(token), mode: mode})
		case src.ConfigMap != nil:
			data, ok, err := l.ConfigMapData(pod.Namespace, src.ConfigMap.Name)
			f, err := keyFiles("ConfigMap", pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, data, ok, err, itemMode)
			if err != nil {
				return nil, time.Time{}, err
			}
			files = append(files, f...)
		case src.Secret != nil:
			data, ok, err := l.SecretData(pod.Namespace, src.Secret.Name)
			f, err := keyFiles("Secret", pod.Namespace, src.Secret.Name, src.Secret.Items, src.Secret.Optional, data, ok, err, itemMode)
			if err != nil {
				return nil, time.Time{}, err
			}
			files = append(files, f...)
		case src.DownwardAPI != nil:
			for _, item := range src.DownwardAPI.Items {
				if item.FieldRef == nil {
					return nil, time.Time{}, fmt.Errorf("downwardAPI %s: only fieldRef is supported here", item.Path)
				}
				val, err := podFieldValue(pod, podIP, item.FieldRef)
				if err != nil {
					return nil, time.Time{}, fmt.Errorf("downwardAPI %s: %w", item.Path, err)
				}
				files = append(files, projectedFile{path: item.Path, data: []byte(val), mode: itemMode(item.Mode)})
			}
		default:
			return nil, time.Time{}, fmt.Errorf("a projected source of a kind not supported here (clusterTrustBundle, podCertificate)")
		}
	}
	return files, refreshAt, nil
}

// keyFiles turns the keys of a ConfigMap or Secret into files: every key, or
// only items at their paths.
func keyFiles(kind, namespace, name string, items []corev1.KeyToPath, optional *bool, data map[string]string, ok bool, err error, mode func(*int32) os.FileMode) ([]projectedFile, error) {
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s %s/%s: %w", kind, namespace, name, err)
	case !ok && optional != nil && *optional:
		return nil, nil
	case !ok:
		return nil, fmt.Errorf("%s %s/%s not found", kind, namespace, name)
	}
	var out []projectedFile
	if len(items) == 0 {
		for k, v := range data {
			out = append(out, projectedFile{path: k, data: []byte(v), mode: mode(nil)})
		}
		return out, nil
	}
	for _, it := range items {
		v, has := data[it.Key]
		if !has {
			if optional != nil && *optional {
				continue
			}
			return nil, fmt.Errorf("%s %s/%s has no key %s", kind, namespace, name, it.Key)
		}
		out = append(out, projectedFile{path: it.Path, data: []byte(v), mode: mode(it.Mode)})
	}
	return out, nil
}

// writeProjected writes files into dir, each replaced by a rename so a
// reader sees the old or the new content, never a part. The files are
// root's, as a kubelet's are; their mode decides who reads them.
func writeProjected(dir string, files []projectedFile) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		if filepath.IsAbs(f.path) || !filepath.IsLocal(f.path) {
			return fmt.Errorf("path %q leaves the volume", f.path)
		}
		path := filepath.Join(dir, f.path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		tmp := path + ".tmp"
		_ = os.Remove(tmp)
		if err := os.WriteFile(tmp, f.data, f.mode.Perm()); err != nil {
			return err
		}
		if err := os.Chmod(tmp, f.mode.Perm()); err != nil { // past the umask
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
	}
	return nil
}
