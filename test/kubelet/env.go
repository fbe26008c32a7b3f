package kubelet

// The kubelet's environment resolution (ResolveEnv): the environment a
// container of the pod spec pgloop generates gets, which pgloop's start-up
// program (pgloop instance, pkg/instance) then turns into a running Patroni
// as in pgloop's image. What a container would learn of itself (its
// hostname, its memory limit) the kubelet gives it as flags
// (instance.go).

import (
	"errors"
	"fmt"
	"math"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Lookup resolves secretKeyRef and configMapKeyRef; ok=false when the object
// or key is missing.
type Lookup interface {
	SecretKey(namespace, name, key string) (value string, ok bool, err error)
	ConfigMapKey(namespace, name, key string) (value string, ok bool, err error)
}

// DataLookup is a Lookup that can also return all the keys of an object,
// which envFrom needs. ResolveEnv rejects envFrom when its Lookup is not a
// DataLookup. ok=false when the object is missing.
type DataLookup interface {
	Lookup
	SecretData(namespace, name string) (data map[string]string, ok bool, err error)
	ConfigMapData(namespace, name string) (data map[string]string, ok bool, err error)
}

// ResolveEnv returns the environment the kubelet would give container c of
// pod, whose IP is podIP. It follows the kubelet: envFrom first (later
// sources win, keys that are not valid variable names are skipped), then env
// in order, a value expanding $(VAR) references to variables defined before
// it ($$ is a literal $, unknown references stay as written). A missing
// optional secretKeyRef or configMapKeyRef leaves its variable unset; a
// missing required one is an error naming the variable, the object and the
// key.
//
// Unlike a kubelet it adds no service environment (KUBERNETES_SERVICE_HOST
// and the *_SERVICE_* links): there are no ClusterIPs here.
func ResolveEnv(pod *corev1.Pod, c *corev1.Container, podIP string, l Lookup) (map[string]string, error) {
	env := map[string]string{}
	if len(c.EnvFrom) > 0 {
		dl, ok := l.(DataLookup)
		if !ok {
			return nil, fmt.Errorf("container %s uses envFrom, which needs a Lookup that lists an object's keys (kubelet.DataLookup); %T is not one", c.Name, l)
		}
		for _, from := range c.EnvFrom {
			if err := resolveEnvFrom(env, pod.Namespace, from, dl); err != nil {
				return nil, err
			}
		}
	}
	for _, v := range c.Env {
		switch {
		case v.Value != "":
			env[v.Name] = expandEnvRefs(v.Value, env)
		case v.ValueFrom == nil:
			env[v.Name] = ""
		default:
			value, set, err := resolveEnvSource(pod, c, podIP, v.ValueFrom, l)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", v.Name, err)
			}
			if set {
				env[v.Name] = value
			}
		}
	}
	return env, nil
}

func resolveEnvFrom(env map[string]string, namespace string, from corev1.EnvFromSource, l DataLookup) error {
	var (
		kind, name string
		optional   *bool
		data       map[string]string
		ok         bool
		err        error
	)
	switch {
	case from.ConfigMapRef != nil:
		kind, name, optional = "configmap", from.ConfigMapRef.Name, from.ConfigMapRef.Optional
		data, ok, err = l.ConfigMapData(namespace, name)
	case from.SecretRef != nil:
		kind, name, optional = "secret", from.SecretRef.Name, from.SecretRef.Optional
		data, ok, err = l.SecretData(namespace, name)
	default:
		return errors.New("envFrom: neither configMapRef nor secretRef")
	}
	switch {
	case err != nil:
		return fmt.Errorf("envFrom %s %s/%s: %w", kind, namespace, name, err)
	case !ok && optional != nil && *optional:
		return nil
	case !ok:
		return fmt.Errorf("envFrom %s %s/%s: not found", kind, namespace, name)
	}
	for k, v := range data {
		k = from.Prefix + k
		// The kubelet skips such keys with an event, not an error.
		if len(validation.IsEnvVarName(k)) > 0 {
			continue
		}
		env[k] = v
	}
	return nil
}

// expandEnvRefs replaces $(NAME) in s by the value of NAME in env, as the
// kubelet does: $$ is a literal $, a reference to a variable not (yet)
// defined and an unclosed $( stay as written.
func expandEnvRefs(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; next {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := env[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
			b.WriteByte(next)
			i++
		}
	}
	return b.String()
}

// resolveEnvSource returns the value of a valueFrom, and false when an
// optional reference is missing.
func resolveEnvSource(pod *corev1.Pod, c *corev1.Container, podIP string, src *corev1.EnvVarSource, l Lookup) (string, bool, error) {
	switch {
	case src.FieldRef != nil:
		v, err := podFieldValue(pod, podIP, src.FieldRef)
		return v, err == nil, err
	case src.ResourceFieldRef != nil:
		v, err := containerResourceValue(pod, c, src.ResourceFieldRef)
		return v, err == nil, err
	case src.SecretKeyRef != nil:
		r := src.SecretKeyRef
		v, ok, err := l.SecretKey(pod.Namespace, r.Name, r.Key)
		return keyRefResult("secret", pod.Namespace, r.Name, r.Key, r.Optional, v, ok, err)
	case src.ConfigMapKeyRef != nil:
		r := src.ConfigMapKeyRef
		v, ok, err := l.ConfigMapKey(pod.Namespace, r.Name, r.Key)
		return keyRefResult("configmap", pod.Namespace, r.Name, r.Key, r.Optional, v, ok, err)
	}
	return "", false, errors.New("valueFrom sets no source")
}

func keyRefResult(kind, namespace, name, key string, optional *bool, v string, ok bool, err error) (string, bool, error) {
	switch {
	case err != nil:
		return "", false, fmt.Errorf("%s %s/%s key %s: %w", kind, namespace, name, key, err)
	case ok:
		return v, true, nil
	case optional != nil && *optional:
		return "", false, nil
	}
	return "", false, fmt.Errorf("%s %s/%s has no key %s (or does not exist) and the reference is not optional", kind, namespace, name, key)
}

// subscriptedField matches metadata.labels['key'] and metadata.annotations['key'].
var subscriptedField = regexp.MustCompile(`^metadata\.(labels|annotations)\['(.*)'\]$`)

// podFieldValue resolves the downward API fields the API server allows in
// env. status.podIP(s) come from podIP, which the kubelet chose; the host
// IPs from the pod's status.
func podFieldValue(pod *corev1.Pod, podIP string, ref *corev1.ObjectFieldSelector) (string, error) {
	if ref.APIVersion != "" && ref.APIVersion != "v1" {
		return "", fmt.Errorf("fieldRef %s: unsupported apiVersion %q", ref.FieldPath, ref.APIVersion)
	}
	if m := subscriptedField.FindStringSubmatch(ref.FieldPath); m != nil {
		if m[1] == "labels" {
			return pod.Labels[m[2]], nil
		}
		return pod.Annotations[m[2]], nil
	}
	switch ref.FieldPath {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		if podIP == "" {
			return "", fmt.Errorf("fieldRef %s: the pod has no IP yet", ref.FieldPath)
		}
		return podIP, nil
	case "status.hostIP":
		if pod.Status.HostIP == "" {
			return "", errors.New("fieldRef status.hostIP: the pod's status has no hostIP")
		}
		return pod.Status.HostIP, nil
	case "status.hostIPs":
		ips := make([]string, 0, len(pod.Status.HostIPs))
		for _, ip := range pod.Status.HostIPs {
			ips = append(ips, ip.IP)
		}
		if len(ips) == 0 {
			return "", errors.New("fieldRef status.hostIPs: the pod's status has no hostIPs")
		}
		return strings.Join(ips, ","), nil
	}
	return "", fmt.Errorf("fieldRef %s: not a field the API server allows in env", ref.FieldPath)
}

// containerResourceValue resolves a resourceFieldRef as the kubelet does:
// the value divided by the divisor (default 1), rounded up. A kubelet
// substitutes the node's allocatable for a limit the container does not
// set; this one knows no allocatable and says so.
func containerResourceValue(pod *corev1.Pod, c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	target := c
	if ref.ContainerName != "" && ref.ContainerName != c.Name {
		target = nil
		for i := range pod.Spec.Containers {
			if pod.Spec.Containers[i].Name == ref.ContainerName {
				target = &pod.Spec.Containers[i]
			}
		}
		if target == nil {
			return "", fmt.Errorf("resourceFieldRef %s: no container %q in the pod", ref.Resource, ref.ContainerName)
		}
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	var list corev1.ResourceList
	switch {
	case ok && kind == "limits":
		list = target.Resources.Limits
	case ok && kind == "requests":
		list = target.Resources.Requests
	default:
		return "", fmt.Errorf("resourceFieldRef %s: not limits.<name> or requests.<name>", ref.Resource)
	}
	rn := corev1.ResourceName(name)
	if rn != corev1.ResourceCPU && rn != corev1.ResourceMemory && rn != corev1.ResourceEphemeralStorage {
		return "", fmt.Errorf("resourceFieldRef %s: only cpu, memory and ephemeral-storage are supported here", ref.Resource)
	}
	q, set := list[rn]
	if !set && kind == "limits" {
		return "", fmt.Errorf("resourceFieldRef %s: container %s sets no such limit, and this kubelet has no node allocatable to use instead", ref.Resource, target.Name)
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	var v float64
	if rn == corev1.ResourceCPU {
		v = math.Ceil(float64(q.MilliValue()) / float64(divisor.MilliValue()))
	} else {
		v = math.Ceil(float64(q.Value()) / float64(divisor.Value()))
	}
	return strconv.FormatInt(int64(v), 10), nil
}

// podHostname is the container's hostname, which Patroni's member is named
// after: spec.hostname, else the pod name cut to 63 characters.
func podHostname(pod *corev1.Pod) string {
	if pod.Spec.Hostname != "" {
		return pod.Spec.Hostname
	}
	name := pod.Name
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-.")
	}
	return name
}

// containerMemoryMB is the memory a container of pod would see as its
// cgroup's limit: the Spilo container's memory limit, at most the host's
// memory.
func containerMemoryMB(pod *corev1.Pod) float64 {
	var info unix.Sysinfo_t
	mem := math.MaxFloat64
	if unix.Sysinfo(&info) == nil {
		mem = float64(info.Totalram) * float64(info.Unit) / 1048576
	}
	var c *corev1.Container
	for i := range pod.Spec.Containers {
		if len(pod.Spec.Containers) == 1 || pod.Spec.Containers[i].Name == "postgres" {
			c = &pod.Spec.Containers[i]
		}
	}
	if c != nil {
		if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
			mem = min(mem, float64(q.Value())/1048576)
		}
	}
	return mem
}

// hostPath maps an absolute container path to the host through the mount
// that holds it (the longest mount path that is a prefix).
func hostPath(mounts map[string]string, p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("%q is not an absolute path", p)
	}
	p = path.Clean(p)
	best := ""
	for mp := range mounts {
		mp = path.Clean(mp)
		if (p == mp || strings.HasPrefix(p, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best = mp
		}
	}
	if best == "" {
		return "", fmt.Errorf("%s is on no mounted volume", p)
	}
	dir := mounts[best]
	if dir == "" {
		dir = mounts[best+"/"]
	}
	return filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(p, best))), nil
}

const (
	// testSharedBuffers replaces Spilo's shared_buffers (a fifth of the
	// memory limit). Many instances share one test machine; PostgreSQL
	// starts and streams fine on 16MB (about 40 MiB per instance in all).
	testSharedBuffers = "16MB"
	// certsMountPath is Spilo's $RW_DIR/certs, where pgloop instance
	// makes PostgreSQL's certificate when the pod mounts none.
	certsMountPath = "/run/certs"
)
