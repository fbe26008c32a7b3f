package kubelet

// The process kubelet runs Patroni from the pod spec pgloop generates for the
// Spilo image. This file plays the two parts of the real stack that turn that
// spec into a running Patroni: the kubelet's environment resolution
// (ResolveEnv) and Spilo's configure_spilo.py (PatroniConfig), so the
// operator's StatefulSet stays exactly what a real cluster gets.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

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

// Host is where one instance lives on this machine.
type Host struct {
	PodIP       string            // e.g. 127.1.7.2
	Mounts      map[string]string // container mountPath -> host directory (data volume, emptyDirs)
	SocketDir   string
	BinDir      string // /usr/lib/postgresql/15/bin
	Kubeconfig  string // path of the pod's kubeconfig
	KubeContext string
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

// Values pgloop's pod spec and Spilo's image have in common.
const (
	// spiloSocketDir is the socket directory of PostgreSQL in the Spilo
	// image (Debian's compiled-in default), where Spilo also keeps pgpass.
	spiloSocketDir = "/run/postgresql"
	// spiloLeaderLabelValue is the role label value Patroni 3.0.2 writes on
	// the leader's pod; it cannot be configured before Patroni 3.1.
	spiloLeaderLabelValue = "master"
	// testSharedBuffers replaces Spilo's shared_buffers (a fifth of the
	// memory limit). Many instances share one test machine; PostgreSQL
	// starts and streams fine on 16MB (about 40 MiB per instance in all).
	testSharedBuffers = "16MB"
	// fallbackLocale is used when the host lacks Spilo's initdb locale.
	fallbackLocale = "C.UTF-8"
)

// spiloExtensions are the libraries Spilo adds to shared_preload_libraries
// for the PostgreSQL versions given, unless SPILO_CONFIGURATION sets it
// (spilo_commons.py: timescaledb, pg_cron and pg_stat_kcache).
var spiloExtensions = []struct {
	name     string
	min, max float64
}{
	{"timescaledb", 9.6, 16},
	{"pg_cron", 9.5, 16},
	{"pg_stat_kcache", 9.4, 16},
}

// spiloLibraries are the libraries Spilo's configuration may load, with the
// prefix of their settings. Those not installed here take their settings
// with them, whether shared_preload_libraries names them or not (Spilo's
// template sets bg_mon.* and extwlist.* even when SPILO_CONFIGURATION
// replaces the list).
var spiloLibraries = map[string]string{
	"bg_mon":         "bg_mon",
	"pgextwlist":     "extwlist",
	"pg_auth_mon":    "pg_auth_mon",
	"set_user":       "set_user",
	"timescaledb":    "timescaledb",
	"pg_cron":        "cron",
	"pg_stat_kcache": "pg_stat_kcache",
	"pg_mon":         "pg_mon",
}

// PatroniConfig returns the Patroni configuration Spilo would write for a
// pod with environment env (see ResolveEnv), translated to run on this
// machine as h describes, and the environment Patroni needs in addition.
//
// It follows configure_spilo.py: Spilo's template filled from env, the
// kubernetes section from the KUBERNETES_* variables, SPILO_CONFIGURATION
// deep-merged over it (maps key by key, its other values win, including
// lists), then bin_dir and shared_preload_libraries chosen. The translation
// to this machine then
//  1. binds PostgreSQL and the REST API to the pod IP only, never *;
//  2. maps container paths (PGROOT, PGDATA) to host directories through
//     h.Mounts, sockets and pgpass to h.SocketDir, binaries to h.BinDir;
//  3. sets shared_buffers to 16MB and initdb's locale to C.UTF-8 when the
//     host lacks Spilo's (en_US.UTF-8);
//  4. removes what has no meaning here: Spilo's image scripts (post_init,
//     callbacks, basebackup_fast_xlog, WAL-E), TLS with Spilo's generated
//     certificate (ssl parameters; a certificate of the pod's own, on a
//     mounted volume, stays: customCertificate), pg_hba's hostssl lines
//     (they become host lines, hostnossl lines go), libraries not
//     installed in <BinDir>/../lib with their settings,
//     kubernetes.bypass_api_service and leader_label_value;
//  5. adds what Patroni 3.0.2's --validate-config requires and Patroni
//     itself derives anyway: a rewind user equal to the superuser, and
//     bootstrap.pg_hba equal to postgresql.pg_hba.
//
// Timings (ttl, loop_wait, wal_retrieve_retry_interval...) are Spilo's
// unless SPILO_CONFIGURATION changes them. The output is JSON, which Patroni
// reads as YAML, with sorted keys.
func PatroniConfig(pod *corev1.Pod, env map[string]string, h Host) (config []byte, extraEnv []string, err error) {
	if err := h.validate(); err != nil {
		return nil, nil, err
	}
	if err := checkSpiloEnv(env, h.PodIP); err != nil {
		return nil, nil, err
	}
	cfg, err := spiloTemplate(pod, env, h.PodIP)
	if err != nil {
		return nil, nil, err
	}
	user, err := spiloUserConfig(env)
	if err != nil {
		return nil, nil, err
	}
	// Two maps merge into the first.
	merged := deepUpdate(deepCopyJSON(user), cfg).(map[string]any)
	if err := afterMerge(merged, user, env, h); err != nil {
		return nil, nil, err
	}
	if err := translateToHost(merged, h); err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(merged); err != nil {
		return nil, nil, fmt.Errorf("encode patroni config: %w", err)
	}
	extraEnv = []string{
		// Patroni reads KUBECONFIG when it loads; 3.0.2 uses the context
		// "kind-kind" unless told otherwise.
		"KUBECONFIG=" + h.Kubeconfig,
		"PATRONI_KUBERNETES_CONTEXT=" + h.KubeContext,
	}
	return buf.Bytes(), extraEnv, nil
}

func (h Host) validate() error {
	ip, err := netip.ParseAddr(h.PodIP)
	switch {
	case err != nil:
		return fmt.Errorf("host: pod IP %q: %w", h.PodIP, err)
	case ip.IsUnspecified():
		return fmt.Errorf("host: pod IP %s is the wildcard address", h.PodIP)
	case ip == netip.MustParseAddr("127.0.0.1") || ip == netip.IPv6Loopback():
		// Connections between pods arrive from 127.0.0.1: it must stay
		// nobody's pod IP.
		return fmt.Errorf("host: pod IP %s is the host's own loopback address", h.PodIP)
	case h.SocketDir == "" || !filepath.IsAbs(h.SocketDir):
		return fmt.Errorf("host: socket directory %q is not an absolute path", h.SocketDir)
	case len(h.SocketDir)+len("/.s.PGSQL.65535") > 107:
		return fmt.Errorf("host: socket directory %s is too long for a unix socket path (107 bytes)", h.SocketDir)
	case h.BinDir == "":
		return errors.New("host: no BinDir")
	case h.Kubeconfig == "" || h.KubeContext == "":
		return errors.New("host: Patroni 3.0.2 needs both a kubeconfig and a context name")
	}
	for mp, dir := range h.Mounts {
		if !path.IsAbs(mp) || !filepath.IsAbs(dir) {
			return fmt.Errorf("host: mount %s -> %s: both must be absolute", mp, dir)
		}
	}
	return nil
}

// checkSpiloEnv rejects the Spilo features this machine cannot play, so a
// pod spec that uses one fails here rather than running as something else.
func checkSpiloEnv(env map[string]string, podIP string) error {
	if env["DCS_ENABLE_KUBERNETES_API"] == "" {
		return errors.New("DCS_ENABLE_KUBERNETES_API is empty: Spilo would use etcd or a callback script; only Patroni's Kubernetes store is supported here")
	}
	if m := env["CLONE_METHOD"]; m != "" {
		return fmt.Errorf("CLONE_METHOD=%s: cloning from another cluster is not supported here", m)
	}
	for _, name := range slices.Sorted(maps.Keys(env)) {
		if strings.HasPrefix(name, "STANDBY_") && env[name] != "" {
			return fmt.Errorf("%s is set: standby clusters are not supported here", name)
		}
	}
	if ip := env["POD_IP"]; ip != "" && ip != podIP {
		return fmt.Errorf("POD_IP=%s differs from the pod IP %s given to the host", ip, podIP)
	}
	for _, name := range slices.Sorted(maps.Keys(env)) {
		suffix, ok := strings.CutPrefix(name, "KUBERNETES_")
		if !ok {
			continue
		}
		switch {
		case suffix == "SCOPE_LABEL", suffix == "ROLE_LABEL", suffix == "LABELS", suffix == "USE_CONFIGMAPS",
			suffix == "BYPASS_API_SERVICE":
		case suffix == "LEADER_LABEL_VALUE":
			if env[name] != spiloLeaderLabelValue {
				return fmt.Errorf("%s=%s: Patroni 3.0.2 always labels the leader %s", name, env[name], spiloLeaderLabelValue)
			}
		case strings.HasPrefix(suffix, "SERVICE_"), strings.HasPrefix(suffix, "PORT"):
			// The kubelet's own service links: Spilo copies them into the
			// kubernetes section, where Patroni ignores them.
		default:
			return fmt.Errorf("%s: Spilo would pass kubernetes.%s to Patroni, which has no translation here", name, strings.ToLower(suffix))
		}
	}
	if env["KUBERNETES_USE_CONFIGMAPS"] == "" {
		if ip, err := netip.ParseAddr(podIP); err == nil && ip.IsLoopback() {
			return fmt.Errorf("KUBERNETES_USE_CONFIGMAPS is empty: Patroni would store pod IP %s in Endpoints, which the API server rejects for loopback addresses", podIP)
		}
	}
	return nil
}

// envOr returns env[name], or def when name is not set at all, like
// Python's dict.setdefault on os.environ.
func envOr(env map[string]string, name, def string) string {
	if v, ok := env[name]; ok {
		return v
	}
	return def
}

// podHostname is the container's hostname, which Spilo uses as Patroni's
// name: spec.hostname, else the pod name cut to 63 characters.
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

// spiloTemplate is configure_spilo.py's TEMPLATE and get_dcs_config for env,
// in container paths, before SPILO_CONFIGURATION is merged. Only the
// branches pgloop's environment can reach are kept, plus the ones cheap to
// keep (PAM_OAUTH2, ALLOW_NOSSL, an admin user).
func spiloTemplate(pod *corev1.Pod, env map[string]string, podIP string) (map[string]any, error) {
	pghome := envOr(env, "PGHOME", "/home/postgres")
	pgroot := envOr(env, "PGROOT", path.Join(pghome, "pgroot"))
	pgdata := envOr(env, "PGDATA", path.Join(pgroot, "pgdata"))
	apiPort := envOr(env, "APIPORT", "8008")
	pgPort := envOr(env, "PGPORT", "5432")
	humanRole := envOr(env, "HUMAN_ROLE", "zalandos")
	standby := envOr(env, "PGUSER_STANDBY", "standby")
	rwDir := envOr(env, "RW_DIR", "/run")
	ip := env["POD_IP"]
	if ip == "" {
		ip = podIP
	}
	pam := env["PAM_OAUTH2"] != ""
	allowNoSSL := env["ALLOW_NOSSL"] != ""

	memMB := containerMemoryMB(pod)
	maxConnections := min(max(100, int(memMB/30)), 1000)

	hba := []any{"local all all trust"}
	if pam {
		hba = append(hba, "hostssl all +"+humanRole+" 127.0.0.1/32 pam")
	}
	hba = append(hba, "host all all 127.0.0.1/32 md5")
	if pam {
		hba = append(hba, "hostssl all +"+humanRole+" ::1/128 pam")
	}
	hba = append(hba, "host all all ::1/128 md5",
		"local replication "+standby+" trust",
		"hostssl replication "+standby+" all md5")
	if !allowNoSSL {
		hba = append(hba, "hostnossl all all all reject")
	}
	if pam {
		hba = append(hba, "hostssl all +"+humanRole+" all pam")
	}
	if allowNoSSL {
		hba = append(hba, "host all all all md5")
	} else {
		hba = append(hba, "hostssl all all all md5")
	}

	callbacks := map[string]any{"on_role_change": "/scripts/on_role_change.sh " + humanRole + " true"}
	if script := env["CALLBACK_SCRIPT"]; script != "" {
		callbacks = map[string]any{
			"on_start":       script,
			"on_stop":        script,
			"on_role_change": "/scripts/on_role_change.sh " + humanRole + " " + script,
		}
	}

	bootstrap := map[string]any{
		"post_init": `/scripts/post_init.sh "` + humanRole + `"`,
		"dcs": map[string]any{
			"ttl":                     30,
			"loop_wait":               10,
			"retry_timeout":           10,
			"maximum_lag_on_failover": 33554432,
			"postgresql": map[string]any{
				"use_pg_rewind": true,
				"use_slots":     true,
				"parameters": map[string]any{
					"archive_mode":                    "on",
					"archive_timeout":                 "1800s",
					"wal_level":                       "hot_standby",
					"wal_log_hints":                   "on",
					"wal_compression":                 "on",
					"max_wal_senders":                 10,
					"max_connections":                 maxConnections,
					"max_replication_slots":           10,
					"hot_standby":                     "on",
					"tcp_keepalives_idle":             900,
					"tcp_keepalives_interval":         100,
					"log_line_prefix":                 "%t [%p]: [%l-1] %c %x %d %u %a %h ",
					"log_checkpoints":                 "on",
					"log_lock_waits":                  "on",
					"log_min_duration_statement":      500,
					"log_autovacuum_min_duration":     0,
					"log_connections":                 "on",
					"log_disconnections":              "on",
					"log_statement":                   "ddl",
					"log_temp_files":                  0,
					"track_functions":                 "all",
					"checkpoint_completion_target":    0.9,
					"autovacuum_max_workers":          5,
					"autovacuum_vacuum_scale_factor":  0.05,
					"autovacuum_analyze_scale_factor": 0.02,
				},
			},
		},
		"initdb": []any{
			map[string]any{"encoding": "UTF8"},
			map[string]any{"locale": envOr(env, "INITDB_LOCALE", "en_US") + ".UTF-8"},
			"data-checksums",
		},
	}
	useAdmin := env["PGPASSWORD_ADMIN"] != ""
	if v, ok := env["USE_ADMIN"]; ok {
		useAdmin = v != ""
	}
	if useAdmin {
		bootstrap["users"] = map[string]any{
			envOr(env, "PGUSER_ADMIN", "admin"): map[string]any{
				"password": envOr(env, "PGPASSWORD_ADMIN", "cola"),
				"options":  []any{"createrole", "createdb"},
			},
		}
	}

	cfg := map[string]any{
		"bootstrap": bootstrap,
		"scope":     envOr(env, "SCOPE", "dummy"),
		"restapi": map[string]any{
			"listen":          ":" + apiPort,
			"connect_address": envOr(env, "RESTAPI_CONNECT_ADDRESS", ip) + ":" + apiPort,
		},
		"postgresql": map[string]any{
			"pgpass":               path.Join(spiloSocketDir, "pgpass"),
			"use_unix_socket":      true,
			"use_unix_socket_repl": true,
			"name":                 podHostname(pod),
			"listen":               "*:" + pgPort,
			"connect_address":      ip + ":" + pgPort,
			"data_dir":             pgdata,
			"parameters": map[string]any{
				"archive_command":                  "/bin/true",
				"shared_buffers":                   testSharedBuffers,
				"logging_collector":                "on",
				"log_destination":                  "csvlog",
				"log_directory":                    "../pg_log",
				"log_filename":                     "postgresql-%u.log",
				"log_file_mode":                    "0644",
				"log_rotation_age":                 "1d",
				"log_truncate_on_rotation":         "on",
				"ssl":                              "on",
				"ssl_cert_file":                    envOr(env, "SSL_CERTIFICATE_FILE", path.Join(rwDir, "certs", "server.crt")),
				"ssl_key_file":                     envOr(env, "SSL_PRIVATE_KEY_FILE", path.Join(rwDir, "certs", "server.key")),
				"shared_preload_libraries":         "bg_mon,pg_stat_statements,pgextwlist,pg_auth_mon,set_user",
				"bg_mon.listen_address":            "0.0.0.0",
				"bg_mon.history_buckets":           120,
				"pg_stat_statements.track_utility": "off",
				"extwlist.extensions":              "btree_gin,btree_gist,citext,extra_window_functions,first_last_agg,hll,hstore,hypopg,intarray,ltree,pgcrypto,pgq,pgq_node,pg_trgm,postgres_fdw,tablefunc,uuid-ossp",
				"extwlist.custom_path":             "/scripts",
			},
			"pg_hba": hba,
			"authentication": map[string]any{
				"superuser": map[string]any{
					"username": envOr(env, "PGUSER_SUPERUSER", "postgres"),
					"password": envOr(env, "PGPASSWORD_SUPERUSER", "zalando"),
				},
				"replication": map[string]any{
					"username": standby,
					"password": envOr(env, "PGPASSWORD_STANDBY", "standby"),
				},
			},
			"callbacks":             callbacks,
			"create_replica_method": []any{"basebackup_fast_xlog"},
			"basebackup_fast_xlog":  map[string]any{"command": "/scripts/basebackup.sh", "retries": 2},
		},
	}

	// get_dcs_config: the kubernetes section from KUBERNETES_*.
	var labels map[string]any
	raw := envOr(env, "KUBERNETES_LABELS", `{"application": "spilo"}`)
	if err := json.Unmarshal([]byte(raw), &labels); err != nil || labels == nil {
		// Spilo logs a warning and falls back to its default labels; a
		// test is better served by the error.
		return nil, fmt.Errorf("KUBERNETES_LABELS %q is not a JSON object", raw)
	}
	k8s := map[string]any{
		"role_label":  envOr(env, "KUBERNETES_ROLE_LABEL", "spilo-role"),
		"scope_label": envOr(env, "KUBERNETES_SCOPE_LABEL", "version"),
		"labels":      labels,
	}
	if v, ok := env["KUBERNETES_LEADER_LABEL_VALUE"]; ok {
		k8s["leader_label_value"] = v
	}
	// Spilo tests the string: any non-empty value, even "false", means
	// ConfigMaps.
	if env["KUBERNETES_USE_CONFIGMAPS"] == "" {
		k8s["use_endpoints"] = true
		k8s["pod_ip"] = ip
		k8s["ports"] = []any{map[string]any{"port": 5432, "name": "postgresql"}}
	}
	if strings.ToLower(envOr(env, "KUBERNETES_BYPASS_API_SERVICE", "true")) == "true" {
		k8s["bypass_api_service"] = true
	}
	cfg["kubernetes"] = k8s
	namespace := envOr(env, "NAMESPACE", envOr(env, "POD_NAMESPACE", "default"))
	if namespace != "default" && namespace != "" {
		// Patroni copies the top-level namespace into its kubernetes
		// settings.
		cfg["namespace"] = namespace
	}
	// Spilo's template adds ssl_ca_file from SSL_CA_FILE only when set.
	if ca := env["SSL_CA_FILE"]; ca != "" {
		cfg["postgresql"].(map[string]any)["parameters"].(map[string]any)["ssl_ca_file"] = ca
	}
	return cfg, nil
}

// containerMemoryMB is the memory Spilo sizes max_connections from: the
// Spilo container's memory limit (its cgroup's), at most the host's memory.
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

// spiloUserConfig decodes SPILO_CONFIGURATION (or, when it is not set,
// PATRONI_CONFIGURATION). Spilo reads YAML; this reads the JSON pgloop
// writes, keeping numbers as written.
func spiloUserConfig(env map[string]string) (map[string]any, error) {
	name := "SPILO_CONFIGURATION"
	raw, ok := env[name]
	if !ok {
		name = "PATRONI_CONFIGURATION"
		raw = env[name]
	}
	if strings.TrimSpace(raw) == "" {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%s is not JSON (this translation reads the JSON pgloop writes): %w", name, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s has data after its JSON document", name)
	}
	if v == nil {
		return map[string]any{}, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s should contain a map, yet it is a %T", name, v)
	}
	return m, nil
}

// deepUpdate is Spilo's deep_update(a, b): maps are merged key by key; for
// anything else a wins unless it is null (two lists: a's list).
func deepUpdate(a, b any) any {
	am, aMap := a.(map[string]any)
	bm, bMap := b.(map[string]any)
	if aMap && bMap {
		for k, bv := range bm {
			if av, ok := am[k]; ok {
				am[k] = deepUpdate(av, bv)
			} else {
				am[k] = bv
			}
		}
		return am
	}
	if a != nil {
		return a
	}
	return b
}

// deepCopyJSON copies a decoded JSON value.
func deepCopyJSON[T any](v T) T {
	var out any
	switch x := any(v).(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopyJSON(e)
		}
		out = m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = deepCopyJSON(e)
		}
		out = l
	default:
		return v
	}
	return out.(T)
}

// section returns m[key] as a map, creating it when absent.
func section(m map[string]any, key string) (map[string]any, error) {
	switch v := m[key].(type) {
	case map[string]any:
		return v, nil
	case nil:
		s := map[string]any{}
		m[key] = s
		return s, nil
	default:
		return nil, fmt.Errorf("%s is a %T, not a map", key, v)
	}
}

// sections walks a path of sections, creating them.
func sections(m map[string]any, keys ...string) (map[string]any, error) {
	for i, k := range keys {
		s, err := section(m, k)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", strings.Join(keys[:i], "."), err)
		}
		m = s
	}
	return m, nil
}

// afterMerge plays what configure_spilo.py does after the merge: bin_dir
// from the data directory's PG_VERSION, SPILO_CONFIGURATION's bin_dir or
// PGVERSION, which must all be the version of h.BinDir here; Spilo's extra
// shared_preload_libraries unless SPILO_CONFIGURATION sets them; a
// replication line in a bootstrap.pg_hba that has none.
func afterMerge(cfg, user map[string]any, env map[string]string, h Host) error {
	pg, err := section(cfg, "postgresql")
	if err != nil {
		return err
	}
	have, err := binVersion(h.BinDir)
	if err != nil {
		return err
	}
	want, source := "", ""
	dataDir, _ := pg["data_dir"].(string)
	if hostDir, err := hostPath(h.Mounts, dataDir); err == nil {
		if b, err := os.ReadFile(filepath.Join(hostDir, "PG_VERSION")); err == nil {
			want, source = strings.TrimSpace(string(b)), "the data directory's PG_VERSION"
		}
	}
	if want == "" {
		if binDir, ok := pg["bin_dir"].(string); ok && binDir != "" {
			m := spiloBinDir.FindStringSubmatch(binDir)
			if m == nil {
				return fmt.Errorf("SPILO_CONFIGURATION postgresql.bin_dir %s is not a Spilo binary directory", binDir)
			}
			want, source = m[1], "SPILO_CONFIGURATION's postgresql.bin_dir"
		} else if v := env["PGVERSION"]; v != "" {
			want, source = v, "PGVERSION"
		}
	}
	if want != "" && want != have {
		return fmt.Errorf("%s asks for PostgreSQL %s, but the binaries in %s are PostgreSQL %s", source, want, h.BinDir, have)
	}
	pg["bin_dir"] = h.BinDir

	params, err := section(pg, "parameters")
	if err != nil {
		return fmt.Errorf("postgresql: %w", err)
	}
	userParams, _ := sectionValue(user, "postgresql", "parameters").(map[string]any)
	if _, set := userParams["shared_preload_libraries"]; !set {
		version, _ := strconv.ParseFloat(have, 64)
		libs := splitLibraries(fmt.Sprint(params["shared_preload_libraries"]))
		for _, e := range spiloExtensions {
			if e.min <= version && version <= e.max && !slices.Contains(libs, e.name) {
				libs = append(libs, e.name)
			}
		}
		params["shared_preload_libraries"] = strings.Join(libs, ",")
	}

	if boot, ok := cfg["bootstrap"].(map[string]any); ok {
		if hba, ok := boot["pg_hba"].([]any); ok {
			if !slices.ContainsFunc(hba, func(l any) bool { return strings.Contains(fmt.Sprint(l), "replication") }) {
				repl, _ := sectionValue(pg, "authentication", "replication", "username").(string)
				boot["pg_hba"] = append([]any{"hostssl replication " + repl + " all md5"}, hba...)
			}
		}
	}
	return nil
}

// sectionValue returns the value at a path of map keys, or nil.
func sectionValue(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

func splitLibraries(s string) []string {
	var libs []string
	for l := range strings.SplitSeq(s, ",") {
		if l = strings.Trim(strings.TrimSpace(l), `"`); l != "" {
			libs = append(libs, l)
		}
	}
	return libs
}

var (
	// spiloBinDir matches Spilo's binary directories, by major version.
	spiloBinDir = regexp.MustCompile(`^/usr/lib/postgresql/([0-9.]+)/bin/?$`)
	// postgresVersion matches the output of postgres --version.
	postgresVersion = regexp.MustCompile(`^\S+ \S+ (\d+)(?:\.(\d+))?`)
)

// binVersions caches binVersion: PatroniConfig runs for every pod start.
var binVersions sync.Map

// binVersion returns the major version of the postgres binary in binDir,
// as Spilo's get_binary_version reads it ("15", or "9.6" before 10).
func binVersion(binDir string) (string, error) {
	if v, ok := binVersions.Load(binDir); ok {
		return v.(string), nil
	}
	out, err := exec.Command(filepath.Join(binDir, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("while reading the version of %s/postgres: %w", binDir, err)
	}
	m := postgresVersion.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("%s/postgres --version: unexpected output %q", binDir, out)
	}
	v := string(m[1])
	if major, _ := strconv.Atoi(v); major < 10 {
		v += "." + string(m[2])
	}
	binVersions.Store(binDir, v)
	return v, nil
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

// installedLocale reports whether the host has the locale (initdb fails on
// a missing one). Tests replace it.
var installedLocale = func(name string) bool { return hostLocales()[normalizeLocale(name)] }

var hostLocales = sync.OnceValue(func() map[string]bool {
	out, _ := exec.Command("locale", "-a").Output()
	have := map[string]bool{}
	for l := range strings.FieldsSeq(string(out)) {
		have[normalizeLocale(l)] = true
	}
	return have
})

// normalizeLocale folds the spellings of a locale name: en_US.UTF-8 and
// en_US.utf8 are the same locale.
func normalizeLocale(name string) string {
	lang, codeset, ok := strings.Cut(name, ".")
	if !ok {
		return strings.ToLower(lang)
	}
	return strings.ToLower(lang) + "." + strings.ReplaceAll(strings.ToLower(codeset), "-", "")
}

// translateToHost turns the merged configuration into one for this
// machine; see PatroniConfig.
func translateToHost(cfg map[string]any, h Host) error {
	podIP := h.PodIP

	// 1. Listen on the pod IP only; keep the ports.
	restapi, err := section(cfg, "restapi")
	if err != nil {
		return err
	}
	pg, err := section(cfg, "postgresql")
	if err != nil {
		return err
	}
	for _, s := range []struct {
		name string
		m    map[string]any
	}{{"restapi", restapi}, {"postgresql", pg}} {
		listen, _ := s.m["listen"].(string)
		i := strings.LastIndexByte(listen, ':')
		if i < 0 {
			return fmt.Errorf("%s.listen %q has no port", s.name, listen)
		}
		s.m["listen"] = net.JoinHostPort(podIP, listen[i+1:])
	}
	// Members reach each other at the connect addresses: never the
	// wildcard, which would mean every pod IP of the machine.
	for _, s := range []struct {
		name string
		m    map[string]any
	}{{"restapi", restapi}, {"postgresql", pg}} {
		addr, _ := s.m["connect_address"].(string)
		host, _, err := net.SplitHostPort(addr)
		if err != nil || host == "" || host == "*" || net.ParseIP(host).IsUnspecified() {
			return fmt.Errorf("%s.connect_address %q is not an address other members can reach", s.name, addr)
		}
	}
	for _, k := range []string{"certfile", "keyfile", "cafile"} {
		delete(restapi, k)
	}
	if name, ok := pg["name"]; ok {
		cfg["name"] = name
	}

	// 2. Paths.
	for _, k := range []string{"data_dir", "config_dir"} {
		p, ok := pg[k].(string)
		if !ok {
			continue
		}
		hp, err := hostPath(h.Mounts, p)
		if err != nil {
			return fmt.Errorf("postgresql.%s: %w", k, err)
		}
		pg[k] = hp
	}
	if p, ok := pg["pgpass"].(string); ok {
		if path.Dir(p) == spiloSocketDir || path.Dir(p) == "/var"+spiloSocketDir {
			pg["pgpass"] = filepath.Join(h.SocketDir, path.Base(p))
		} else if hp, err := hostPath(h.Mounts, p); err == nil {
			pg["pgpass"] = hp
		} else {
			return fmt.Errorf("postgresql.pgpass: %w", err)
		}
	}
	params, err := section(pg, "parameters")
	if err != nil {
		return fmt.Errorf("postgresql: %w", err)
	}
	// Spilo's PostgreSQL uses its compiled-in /var/run/postgresql.
	params["unix_socket_directories"] = h.SocketDir
	if _, ok := params["bg_mon.listen_address"]; ok {
		// Spilo listens on the wildcard; should bg_mon be installed here,
		// only the pod IP.
		params["bg_mon.listen_address"] = podIP
	}
	for _, k := range []string{"log_directory", "hba_file", "ident_file", "external_pid_file"} {
		if p, ok := params[k].(string); ok && path.IsAbs(p) {
			hp, err := hostPath(h.Mounts, p)
			if err != nil {
				return fmt.Errorf("postgresql.parameters.%s: %w", k, err)
			}
			params[k] = hp
		}
	}

	// 3. initdb's locale.
	boot, err := section(cfg, "bootstrap")
	if err != nil {
		return err
	}
	if initdb, ok := boot["initdb"].([]any); ok {
		for _, opt := range initdb {
			if m, ok := opt.(map[string]any); ok {
				if l, ok := m["locale"].(string); ok && !installedLocale(l) {
					m["locale"] = fallbackLocale
				}
			}
		}
	}

	// 4. A custom bootstrap method (a clone's restore) is kept: Patroni
	// runs its command here as in the container, without a shell, in
	// the environment it passes on (PGBACKREST_* translated). Its
	// arguments are not translated: one naming a path of the container's
	// volumes would act on the host's own directory, so it is an error.
	if method, _ := boot["method"].(string); method != "" && method != "initdb" {
		if m, ok := boot[method].(map[string]any); ok {
			command, _ := m["command"].(string)
			for _, arg := range strings.Fields(command) {
				arg = strings.Trim(arg, `"'`)
				if _, v, ok := strings.Cut(arg, "="); ok {
					arg = v
				}
				if _, err := hostPath(h.Mounts, arg); err == nil {
					return fmt.Errorf("bootstrap.%s.command names %s, a path of the container's volumes, which this kubelet does not translate in commands (give it through the environment)", method, arg)
				}
			}
		}
	}

	// 5. What has no meaning here.
	delete(boot, "post_init")
	delete(pg, "callbacks")
	delete(pg, "recovery_conf")
	for _, k := range []string{"basebackup_fast_xlog", "wal_e", "bootstrap_standby_with_wale"} {
		delete(pg, k)
	}
	if methods, ok := pg["create_replica_method"].([]any); ok {
		var kept []any
		for _, m := range methods {
			switch m {
			case "basebackup_fast_xlog":
				m = "basebackup"
			case "wal_e", "bootstrap_standby_with_wale":
				continue
			}
			if !slices.Contains(kept, m) {
				kept = append(kept, m)
			}
		}
		pg["create_replica_method"] = kept
	}
	dcsParams, err := sections(boot, "dcs", "postgresql", "parameters")
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	libDir := filepath.Join(h.BinDir, "..", "lib")
	customTLS, err := customCertificate(params, h)
	if err != nil {
		return err
	}
	for i, ps := range []map[string]any{params, dcsParams} {
		for k := range ps {
			// A certificate of the pod's own (spec.tls) is served as
			// Spilo serves it; Spilo's generated one has no file here.
			if (k == "ssl" || strings.HasPrefix(k, "ssl_")) && !(customTLS && i == 0) {
				delete(ps, k)
			}
		}
		var dropped []string
		if s, ok := ps["shared_preload_libraries"]; ok {
			var kept []string
			for _, lib := range splitLibraries(fmt.Sprint(s)) {
				if libraryInstalled(libDir, lib) {
					kept = append(kept, lib)
				} else {
					dropped = append(dropped, lib)
				}
			}
			ps["shared_preload_libraries"] = strings.Join(kept, ",")
		}
		for lib, prefix := range spiloLibraries {
			if !libraryInstalled(libDir, lib) {
				dropped = append(dropped, prefix)
			}
		}
		for _, prefix := range dropped {
			for k := range ps {
				if strings.HasPrefix(k, prefix+".") {
					delete(ps, k)
				}
			}
		}
	}
	if k8s, ok := cfg["kubernetes"].(map[string]any); ok {
		delete(k8s, "bypass_api_service")
		delete(k8s, "leader_label_value")
		// Patroni's default, spelled out: the ConfigMaps hold the leader.
		if _, ok := k8s["use_endpoints"]; !ok {
			k8s["use_endpoints"] = false
		}
	}
	for _, m := range []map[string]any{pg, boot} {
		if hba, ok := m["pg_hba"].([]any); ok {
			m["pg_hba"] = withoutTLS(hba)
		}
	}

	// 6. What --validate-config of Patroni 3.0.2 insists on; Patroni uses
	// the superuser for pg_rewind when no rewind user is given, and
	// ignores bootstrap.pg_hba when postgresql.pg_hba is set.
	auth, err := section(pg, "authentication")
	if err != nil {
		return fmt.Errorf("postgresql: %w", err)
	}
	if _, ok := auth["rewind"]; !ok {
		auth["rewind"] = deepCopyJSON(auth["superuser"])
	}
	if _, ok := boot["pg_hba"]; !ok {
		if hba, ok := pg["pg_hba"].([]any); ok {
			boot["pg_hba"] = deepCopyJSON(hba)
		}
	}
	return nil
}

// libraryInstalled reports whether a shared_preload_libraries entry names
// a library present in libDir (or, given as a path, present there).
func libraryInstalled(libDir, lib string) bool {
	lib = strings.TrimPrefix(lib, "$libdir/")
	if !strings.Contains(lib, "/") {
		lib = filepath.Join(libDir, lib)
	}
	if !strings.HasSuffix(lib, ".so") {
		lib += ".so"
	}
	_, err := os.Stat(lib)
	return err == nil
}

// customCertificate reports whether PostgreSQL serves a certificate of the
// pod's own: ssl_cert_file and ssl_key_file (Spilo's SSL_CERTIFICATE_FILE
// and SSL_PRIVATE_KEY_FILE) on mounted volumes, as spec.tls's Secret is.
// Then it points them (and ssl_ca_file, when set) at the host's files.
// This kubelet, like a real one, writes a Secret's files as root with the
// pod's fsGroup as their group (writeDataVolume): PostgreSQL checks the
// key as in the container, and takes it owned by root and readable by its
// group only (0640 or less). Without such files Spilo generates a
// certificate, which has no file here: false, and the ssl settings go.
func customCertificate(params map[string]any, h Host) (bool, error) {
	cert, _ := params["ssl_cert_file"].(string)
	key, _ := params["ssl_key_file"].(string)
	if cert == "" || key == "" {
		return false, nil
	}
	certHost, err := hostPath(h.Mounts, cert)
	if err != nil {
		return false, nil
	}
	keyHost, err := hostPath(h.Mounts, key)
	if err != nil {
		return false, fmt.Errorf("ssl_key_file: %w (ssl_cert_file %s is on a volume)", err, cert)
	}
	params["ssl_cert_file"], params["ssl_key_file"] = certHost, keyHost
	if ca, ok := params["ssl_ca_file"].(string); ok && ca != "" {
		caHost, err := hostPath(h.Mounts, ca)
		if err != nil {
			return false, fmt.Errorf("ssl_ca_file: %w", err)
		}
		params["ssl_ca_file"] = caHost
	}
	return true, nil
}

// withoutTLS translates pg_hba lines for a server without TLS. On a real
// Spilo cluster every client that can use TLS does (libpq and Patroni
// default to sslmode=prefer), so a hostssl line there is a host line here; a
// hostnossl line, which there catches only clients refusing TLS, would catch
// every connection here and is dropped, and so is a line only a client
// certificate can satisfy.
func withoutTLS(hba []any) []any {
	out := make([]any, 0, len(hba))
	for _, l := range hba {
		line, ok := l.(string)
		fields := strings.Fields(line)
		if !ok || len(fields) == 0 {
			out = append(out, l)
			continue
		}
		switch fields[0] {
		case "hostnossl":
			continue
		case "hostssl":
			if slices.Contains(fields, "cert") || slices.ContainsFunc(fields, func(f string) bool { return strings.HasPrefix(f, "clientcert=") }) {
				continue
			}
			line = "host" + strings.TrimPrefix(strings.TrimLeft(line, " \t"), "hostssl")
		}
		out = append(out, line)
	}
	return out
}
