package v1

import (
	"fmt"
	pathpkg "path"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The pod template fields taken from zalando's manifest: env, envFrom,
// additionalVolumes, topologySpreadConstraints, podPriorityClassName,
// schedulerName, spiloRunAsUser/Group/FSGroup, livenessProbe, huge pages in
// resources, and volume.selector, subPath and isSubPathExpr. Their meaning
// is zalando's (pkg/cluster/k8sres.go of zalando/postgres-operator at
// a7aaad0a); pgloop refuses with an error what zalando skips with a log
// line or what the apiserver would refuse in the StatefulSet's pods, once
// the cluster is admitted.

// AdditionalVolume is a volume added to the cluster's pods, with the
// fields and JSON names of zalando's AdditionalVolume.
type AdditionalVolume struct {
	// Name of the volume in the pod: a DNS label, not one of pgloop's
	// own volumes (pgdata, dshm, pgbackrest-ca).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// MountPath is where the volume is mounted in the target containers:
	// an absolute path, not one where pgloop mounts a volume.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	MountPath string `json:"mountPath"`
	// SubPath is the path inside the volume to mount instead of its root
	// (a file of a ConfigMap, for example).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	SubPath string `json:"subPath,omitempty"`
	// IsSubPathExpr makes subPath an expression: $(NAME) references to
	// the container's environment variables are expanded.
	// +optional
	IsSubPathExpr *bool `json:"isSubPathExpr,omitempty"`
	// TargetContainers are the containers that mount the volume: "all"
	// alone (the PostgreSQL container and the sidecars), or names of
	// those. Empty means the PostgreSQL container, postgres.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	TargetContainers []string `json:"targetContainers,omitempty"`
	// VolumeSource is the volume: an emptyDir, a Secret, a ConfigMap, a
	// PersistentVolumeClaim, ...; exactly one kind. Its schema is left
	// open, as in zalando's CRD: the full one would double the CRD's size
	// (kubectl apply keeps a copy of it in an annotation of at most 256
	// KiB); pgloop's validation and the apiserver's, of the StatefulSet,
	// judge it.
	// +required
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	VolumeSource corev1.VolumeSource `json:"volumeSource"`
}

// AllContainers is the TargetContainers entry that mounts a volume in every
// container of the pod (init containers aside), as zalando's "all".
const AllContainers = "all"

// Volumes and mount paths pgloop puts in the pods (pkg/cluster builds them;
// a test there checks the lists): an additional volume must not take them.
var (
	reservedVolumeNames = []string{"pgdata", "dshm", "pgbackrest-ca", "tls-secret", "tls-ca-secret"}
	reservedMountPaths  = []string{"/home/postgres/pgdata", "/dev/shm", "/etc/pgbackrest/repo", TLSMountPath, TLSCAMountPath}
)

// ReservedEnvNames are the variables pgloop sets in the PostgreSQL
// container (pkg/cluster's spiloEnv and, with spec.tls, the SSL_* files; a
// test there checks the list), and
// the ports Spilo reads (PGPORT, APIPORT: the Services, the probes and
// pgloop reach 5432 and 8008). A variable of spec.env with one of these
// names is refused: zalando drops it silently, since its own comes first.
// The PGBACKREST_ prefix is refused too: pgloop configures pgBackRest.
var ReservedEnvNames = []string{
	"SCOPE", "PGROOT", "POD_IP", "POD_NAMESPACE",
	"PGUSER_SUPERUSER", "PGPASSWORD_SUPERUSER", "PGUSER_STANDBY", "PGPASSWORD_STANDBY",
	"PGVERSION", "DCS_ENABLE_KUBERNETES_API", "KUBERNETES_SCOPE_LABEL", "KUBERNETES_ROLE_LABEL",
	"KUBERNETES_LEADER_LABEL_VALUE", "KUBERNETES_LABELS", "KUBERNETES_USE_CONFIGMAPS",
	"SPILO_CONFIGURATION", "PGPORT", "APIPORT",
	"SSL_CERTIFICATE_FILE", "SSL_PRIVATE_KEY_FILE", "SSL_CA_FILE", // spec.tls
}

// reservedEnvPrefix is the prefix of pgBackRest's variables, which pgloop
// sets for the cluster's repository.
const reservedEnvPrefix = "PGBACKREST_"

// hugePageSizes are the huge page resources and their page sizes.
var hugePageSizes = []struct {
	name string
	size resource.Quantity
	get  func(*ResourceDescription) *resource.Quantity
}{
	{"hugepages-2Mi", resource.MustParse("2Mi"), func(d *ResourceDescription) *resource.Quantity { return d.HugePages2Mi }},
	{"hugepages-1Gi", resource.MustParse("1Gi"), func(d *ResourceDescription) *resource.Quantity { return d.HugePages1Gi }},
}

// validateHugePages checks huge pages as the apiserver does for a
// container: each amount a whole number of pages, and a request only with
// a limit equal to it (huge pages are never overcommitted; a limit alone
// is also the request).
func (r *Resources) validateHugePages(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, hp := range hugePageSizes {
		var req, lim *resource.Quantity
		if r.Requests != nil {
			req = hp.get(r.Requests)
		}
		if r.Limits != nil {
			lim = hp.get(r.Limits)
		}
		for _, q := range []struct {
			p *field.Path
			v *resource.Quantity
		}{{path.Child("requests", hp.name), req}, {path.Child("limits", hp.name), lim}} {
			if q.v == nil {
				continue
			}
			if q.v.Sign() < 0 || q.v.Value()%hp.size.Value() != 0 {
				errs = append(errs, field.Invalid(q.p, q.v.String(),
					fmt.Sprintf("must be a whole number of %s pages (a multiple of %s)", hp.size.String(), hp.size.String())))
			}
		}
		switch {
		case req != nil && lim == nil:
			errs = append(errs, field.Required(path.Child("limits", hp.name),
				fmt.Sprintf("huge pages are not overcommitted: set limits.%s equal to requests.%s (%s)", hp.name, hp.name, req.String())))
		case req != nil && req.Cmp(*lim) != 0:
			errs = append(errs, field.Invalid(path.Child("requests", hp.name), req.String(),
				fmt.Sprintf("must equal limits.%s (%s): huge pages are not overcommitted", hp.name, lim.String())))
		}
	}
	return errs
}

// validatePodTemplate checks the pod template fields of this file.
func (s *PostgresqlSpec) validatePodTemplate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, l := range []struct {
		name    string
		n, most int
	}{
		{"env", len(s.Env), 64},
		{"envFrom", len(s.EnvFrom), 16},
		{"additionalVolumes", len(s.AdditionalVolumes), 32},
		{"topologySpreadConstraints", len(s.TopologySpreadConstraints), 8},
	} {
		if l.n > l.most {
			errs = append(errs, field.TooMany(path.Child(l.name), l.n, l.most))
		}
	}
	errs = append(errs, validateEnv(s.Env, path.Child("env"))...)
	errs = append(errs, validateEnvFrom(s.EnvFrom, path.Child("envFrom"))...)
	errs = append(errs, s.validateAdditionalVolumes(path.Child("additionalVolumes"))...)
	errs = append(errs, validateTopologySpread(s.TopologySpreadConstraints, path.Child("topologySpreadConstraints"))...)
	for _, n := range []struct {
		name, value string
	}{{"podPriorityClassName", s.PodPriorityClassName}, {"schedulerName", s.SchedulerName}} {
		if n.value == "" {
			continue
		}
		for _, msg := range validation.IsDNS1123Subdomain(n.value) {
			errs = append(errs, field.Invalid(path.Child(n.name), n.value, msg))
		}
	}
	if u := s.SpiloRunAsUser; u != nil && (*u < 1 || *u > 2147483647) {
		errs = append(errs, field.Invalid(path.Child("spiloRunAsUser"), *u,
			"must be between 1 and 2147483647: pgloop's pods run as non-root (runAsNonRoot), and the kubelet refuses to start a container as root"))
	}
	for _, g := range []struct {
		name string
		v    *int64
	}{{"spiloRunAsGroup", s.SpiloRunAsGroup}, {"spiloFSGroup", s.SpiloFSGroup}} {
		if g.v != nil && (*g.v < 0 || *g.v > 2147483647) {
			errs = append(errs, field.Invalid(path.Child(g.name), *g.v, "must be between 0 and 2147483647"))
		}
	}
	if s.LivenessProbe != nil {
		errs = append(errs, validateLivenessProbe(s.LivenessProbe, path.Child("livenessProbe"))...)
	}
	vp := path.Child("volume")
	if s.Volume.Selector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(s.Volume.Selector,
			metav1validation.LabelSelectorValidationOptions{}, vp.Child("selector"))...)
	}
	if s.Volume.SubPath != "" {
		errs = append(errs, validateSubPath(s.Volume.SubPath, vp.Child("subPath"))...)
	} else if s.Volume.IsSubPathExpr != nil && *s.Volume.IsSubPathExpr {
		errs = append(errs, field.Required(vp.Child("subPath"), "isSubPathExpr needs a subPath expression"))
	}
	return errs
}

// validateEnv checks the variables of spec.env: valid names, once each,
// none of pgloop's, and a value or one source.
func validateEnv(env []corev1.EnvVar, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, e := range env {
		ip := path.Index(i)
		switch {
		case e.Name == "":
			errs = append(errs, field.Required(ip.Child("name"), "a variable name"))
		case slices.Contains(ReservedEnvNames, e.Name):
			errs = append(errs, field.Forbidden(ip.Child("name"), e.Name+" is set by pgloop in the PostgreSQL container and cannot be overridden"))
		case strings.HasPrefix(e.Name, reservedEnvPrefix):
			errs = append(errs, field.Forbidden(ip.Child("name"), "PGBACKREST_ variables are set by pgloop from spec.backup and the operator's repository"))
		case seen[e.Name]:
			errs = append(errs, field.Duplicate(ip.Child("name"), e.Name))
		default:
			for _, msg := range validation.IsEnvVarName(e.Name) {
				errs = append(errs, field.Invalid(ip.Child("name"), e.Name, msg))
			}
		}
		seen[e.Name] = true
		if e.ValueFrom == nil {
			continue
		}
		vp := ip.Child("valueFrom")
		if e.Value != "" {
			errs = append(errs, field.Invalid(vp, "", "may not be given with value"))
		}
		sources := 0
		if f := e.ValueFrom.FieldRef; f != nil {
			sources++
			if f.FieldPath == "" {
				errs = append(errs, field.Required(vp.Child("fieldRef", "fieldPath"), "a field of the pod, e.g. metadata.name"))
			}
		}
		if f := e.ValueFrom.ResourceFieldRef; f != nil {
			sources++
			if f.Resource == "" {
				errs = append(errs, field.Required(vp.Child("resourceFieldRef", "resource"), "a resource, e.g. limits.memory"))
			}
		}
		if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
			sources++
			errs = append(errs, validateKeyRef(r.Name, r.Key, vp.Child("configMapKeyRef"))...)
		}
		if r := e.ValueFrom.SecretKeyRef; r != nil {
			sources++
			errs = append(errs, validateKeyRef(r.Name, r.Key, vp.Child("secretKeyRef"))...)
		}
		if sources != 1 {
			errs = append(errs, field.Invalid(vp, sources, "must have exactly one of fieldRef, resourceFieldRef, configMapKeyRef or secretKeyRef"))
		}
	}
	return errs
}

func validateKeyRef(name, key string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if name == "" {
		errs = append(errs, field.Required(path.Child("name"), "the object's name"))
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(name) {
			errs = append(errs, field.Invalid(path.Child("name"), name, msg))
		}
	}
	if key == "" {
		errs = append(errs, field.Required(path.Child("key"), "a key of the object"))
	} else {
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(path.Child("key"), key, msg))
		}
	}
	return errs
}

// validateEnvFrom checks spec.envFrom: one ConfigMap or Secret each, by
// name, and a prefix that makes variable names.
func validateEnvFrom(from []corev1.EnvFromSource, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, f := range from {
		ip := path.Index(i)
		if f.Prefix != "" {
			for _, msg := range validation.IsEnvVarName(f.Prefix) {
				errs = append(errs, field.Invalid(ip.Child("prefix"), f.Prefix, msg))
			}
		}
		var name string
		var np *field.Path
		switch {
		case f.ConfigMapRef != nil && f.SecretRef != nil, f.ConfigMapRef == nil && f.SecretRef == nil:
			errs = append(errs, field.Invalid(ip, "", "must have exactly one of configMapRef or secretRef"))
			continue
		case f.ConfigMapRef != nil:
			name, np = f.ConfigMapRef.Name, ip.Child("configMapRef", "name")
		default:
			name, np = f.SecretRef.Name, ip.Child("secretRef", "name")
		}
		if name == "" {
			errs = append(errs, field.Required(np, "the object's name"))
			continue
		}
		for _, msg := range validation.IsDNS1123Subdomain(name) {
			errs = append(errs, field.Invalid(np, name, msg))
		}
	}
	return errs
}

// validateAdditionalVolumes applies zalando's rules (a mount path once, not
// the data directory, "all" alone), which zalando enforces by skipping the
// volume with a log line, and the apiserver's (names once, not pgloop's;
// one kind of source; a relative subPath).
func (s *PostgresqlSpec) validateAdditionalVolumes(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	containers := []string{reservedContainerName}
	for _, sc := range s.Sidecars {
		containers = append(containers, sc.Name)
	}
	names, paths := map[string]bool{}, map[string]bool{}
	for i, v := range s.AdditionalVolumes {
		ip := path.Index(i)
		switch {
		case v.Name == "":
			errs = append(errs, field.Required(ip.Child("name"), "a volume name"))
		case slices.Contains(reservedVolumeNames, v.Name):
			errs = append(errs, field.Invalid(ip.Child("name"), v.Name, "is a volume of pgloop's ("+strings.Join(reservedVolumeNames, ", ")+")"))
		case names[v.Name]:
			errs = append(errs, field.Duplicate(ip.Child("name"), v.Name))
		default:
			for _, msg := range validation.IsDNS1123Label(v.Name) {
				errs = append(errs, field.Invalid(ip.Child("name"), v.Name, msg))
			}
		}
		names[v.Name] = true
		mp := pathpkg.Clean(v.MountPath)
		switch {
		case v.MountPath == "":
			errs = append(errs, field.Required(ip.Child("mountPath"), "an absolute path"))
		case !strings.HasPrefix(v.MountPath, "/"):
			errs = append(errs, field.Invalid(ip.Child("mountPath"), v.MountPath, "must be an absolute path"))
		case slices.Contains(reservedMountPaths, mp):
			errs = append(errs, field.Invalid(ip.Child("mountPath"), v.MountPath, "pgloop mounts a volume there ("+strings.Join(reservedMountPaths, ", ")+")"))
		case paths[mp]:
			errs = append(errs, field.Duplicate(ip.Child("mountPath"), v.MountPath))
		}
		paths[mp] = true
		if v.SubPath != "" {
			errs = append(errs, validateSubPath(v.SubPath, ip.Child("subPath"))...)
		}
		for j, t := range v.TargetContainers {
			tp := ip.Child("targetContainers").Index(j)
			switch {
			case t == AllContainers && len(v.TargetContainers) > 1:
				errs = append(errs, field.Invalid(tp, t, `"all" must be the only target container`))
			case t != AllContainers && !slices.Contains(containers, t):
				errs = append(errs, field.NotSupported(tp, t, append([]string{AllContainers}, containers...)))
			}
		}
		if n := volumeSources(v.VolumeSource); n != 1 {
			errs = append(errs, field.Invalid(ip.Child("volumeSource"), n, "must have exactly one kind of volume (emptyDir, secret, configMap, persistentVolumeClaim, ...)"))
		}
	}
	return errs
}

// volumeSources counts the kinds of volume a VolumeSource sets.
func volumeSources(vs corev1.VolumeSource) int {
	n := 0
	v := reflect.ValueOf(vs)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			n++
		}
	}
	return n
}

// validateSubPath checks a subPath as the apiserver does: relative, and
// never leaving its volume through "..".
func validateSubPath(p string, fp *field.Path) field.ErrorList {
	if strings.HasPrefix(p, "/") {
		return field.ErrorList{field.Invalid(fp, p, "must be a relative path")}
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		return field.ErrorList{field.Invalid(fp, p, "must not contain '..'")}
	}
	return nil
}

// validateTopologySpread applies the apiserver's rules for a pod's
// topologySpreadConstraints.
func validateTopologySpread(cs []corev1.TopologySpreadConstraint, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	pairs := map[string]bool{}
	for i, c := range cs {
		ip := path.Index(i)
		if c.MaxSkew < 1 {
			errs = append(errs, field.Invalid(ip.Child("maxSkew"), c.MaxSkew, "must be greater than zero"))
		}
		if c.TopologyKey == "" {
			errs = append(errs, field.Required(ip.Child("topologyKey"), "a node label, e.g. topology.kubernetes.io/zone"))
		} else {
			for _, msg := range validation.IsQualifiedName(c.TopologyKey) {
				errs = append(errs, field.Invalid(ip.Child("topologyKey"), c.TopologyKey, msg))
			}
		}
		switch c.WhenUnsatisfiable {
		case corev1.DoNotSchedule, corev1.ScheduleAnyway:
		default:
			errs = append(errs, field.NotSupported(ip.Child("whenUnsatisfiable"), c.WhenUnsatisfiable,
				[]corev1.UnsatisfiableConstraintAction{corev1.DoNotSchedule, corev1.ScheduleAnyway}))
		}
		if c.MinDomains != nil {
			if *c.MinDomains < 1 {
				errs = append(errs, field.Invalid(ip.Child("minDomains"), *c.MinDomains, "must be greater than zero"))
			}
			if c.WhenUnsatisfiable != corev1.DoNotSchedule {
				errs = append(errs, field.Invalid(ip.Child("minDomains"), *c.MinDomains, "can only be set with whenUnsatisfiable DoNotSchedule"))
			}
		}
		if c.LabelSelector != nil {
			errs = append(errs, metav1validation.ValidateLabelSelector(c.LabelSelector,
				metav1validation.LabelSelectorValidationOptions{}, ip.Child("labelSelector"))...)
		}
		pair := c.TopologyKey + "/" + string(c.WhenUnsatisfiable)
		if pairs[pair] {
			errs = append(errs, field.Duplicate(ip, "topologyKey "+c.TopologyKey+" with whenUnsatisfiable "+string(c.WhenUnsatisfiable)))
		}
		pairs[pair] = true
	}
	return errs
}

// livenessPorts are the PostgreSQL container's named ports.
var livenessPorts = []string{"postgresql", "patroni"}

// validateLivenessProbe applies the apiserver's rules for a liveness probe
// of the PostgreSQL container: one handler, non-negative timings,
// successThreshold 1, and a named port one of the container's.
func validateLivenessProbe(p *corev1.Probe, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	handlers := 0
	portOK := func(fp *field.Path, port string, number int32) {
		if port != "" {
			if !slices.Contains(livenessPorts, port) {
				errs = append(errs, field.NotSupported(fp, port, livenessPorts))
			}
			return
		}
		if number < 1 || number > 65535 {
			errs = append(errs, field.Invalid(fp, number, "must be between 1 and 65535"))
		}
	}
	if h := p.HTTPGet; h != nil {
		handlers++
		portOK(path.Child("httpGet", "port"), h.Port.StrVal, h.Port.IntVal)
		if h.Path != "" && !strings.HasPrefix(h.Path, "/") {
			errs = append(errs, field.Invalid(path.Child("httpGet", "path"), h.Path, "must start with /"))
		}
	}
	if t := p.TCPSocket; t != nil {
		handlers++
		portOK(path.Child("tcpSocket", "port"), t.Port.StrVal, t.Port.IntVal)
	}
	if e := p.Exec; e != nil {
		handlers++
		if len(e.Command) == 0 {
			errs = append(errs, field.Required(path.Child("exec", "command"), "a command"))
		}
	}
	if g := p.GRPC; g != nil {
		handlers++
		portOK(path.Child("grpc", "port"), "", g.Port)
	}
	if handlers != 1 {
		errs = append(errs, field.Invalid(path, handlers, "must have exactly one of httpGet, tcpSocket, exec or grpc"))
	}
	for _, n := range []struct {
		name string
		v    int32
	}{
		{"initialDelaySeconds", p.InitialDelaySeconds}, {"timeoutSeconds", p.TimeoutSeconds},
		{"periodSeconds", p.PeriodSeconds}, {"failureThreshold", p.FailureThreshold},
	} {
		if n.v < 0 {
			errs = append(errs, field.Invalid(path.Child(n.name), n.v, "must not be negative"))
		}
	}
	if p.SuccessThreshold != 0 && p.SuccessThreshold != 1 {
		errs = append(errs, field.Invalid(path.Child("successThreshold"), p.SuccessThreshold, "must be 1 for a liveness probe"))
	}
	if g := p.TerminationGracePeriodSeconds; g != nil && *g < 1 {
		errs = append(errs, field.Invalid(path.Child("terminationGracePeriodSeconds"), *g, "must be greater than zero"))
	}
	return errs
}
