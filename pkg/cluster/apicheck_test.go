package cluster_test

import (
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/pgloop/pgloop/pkg/cluster"
)

// apiCheck applies the rules of the apiserver's own validation
// (k8s.io/kubernetes/pkg/apis/core/validation and apps, policy) to the
// fields of built objects that pgloop derives from a spec. The module
// k8s.io/kubernetes is not a dependency of pgloop, so the rules are those of
// k8s.io/apimachinery's helpers, and the few of core validation they lack
// (tolerations, node affinity, resources, the StatefulSet's pods) are
// restated here from it. It also covers what the StatefulSet controller
// derives from the StatefulSet: the pods' names, hostnames and labels and the
// claims' names, which must be valid for the pods to exist at all.
func apiCheck(objs *cluster.Objects) field.ErrorList {
	var errs field.ErrorList
	for _, o := range objs.All() {
		path := field.NewPath(fmt.Sprintf("%T", o), o.GetName())
		nameFn := apivalidation.NameIsDNSSubdomain
		if _, ok := o.(*corev1.Service); ok {
			nameFn = apivalidation.NameIsDNS1035Label
		}
		errs = append(errs, apivalidation.ValidateObjectMetaAccessor(o, true, nameFn, path.Child("metadata"))...)
	}
	for _, s := range objs.Secrets {
		for k := range s.Data {
			errs = append(errs, msgs(field.NewPath("secret", s.Name, "data").Key(k), k, validation.IsConfigMapKey(k))...)
		}
	}
	for _, s := range objs.Services {
		errs = append(errs, checkService(s)...)
	}
	errs = append(errs, checkPDB(objs.PodDisruptionBudget)...)
	return append(errs, checkStatefulSet(objs.StatefulSet)...)
}

func msgs(path *field.Path, value any, found []string) field.ErrorList {
	var errs field.ErrorList
	for _, m := range found {
		errs = append(errs, field.Invalid(path, value, m))
	}
	return errs
}

func checkService(s *corev1.Service) field.ErrorList {
	path := field.NewPath("service", s.Name, "spec")
	errs := metav1validation.ValidateLabels(s.Spec.Selector, path.Child("selector"))
	for i, p := range s.Spec.Ports {
		pp := path.Child("ports").Index(i)
		errs = append(errs, msgs(pp.Child("name"), p.Name, validation.IsValidPortName(p.Name))...)
		errs = append(errs, msgs(pp.Child("port"), p.Port, validation.IsValidPortNum(int(p.Port)))...)
		errs = append(errs, msgs(pp.Child("targetPort"), p.TargetPort.IntVal, validation.IsValidPortNum(int(p.TargetPort.IntVal)))...)
	}
	return errs
}

func checkPDB(p *policyv1.PodDisruptionBudget) field.ErrorList {
	path := field.NewPath("pdb", p.Name, "spec")
	errs := metav1validation.ValidateLabelSelector(p.Spec.Selector, metav1validation.LabelSelectorValidationOptions{}, path.Child("selector"))
	if p.Spec.MinAvailable != nil && p.Spec.MinAvailable.IntVal < 0 {
		errs = append(errs, field.Invalid(path.Child("minAvailable"), p.Spec.MinAvailable.IntVal, "must be non-negative"))
	}
	return errs
}

func checkStatefulSet(sts *appsv1.StatefulSet) field.ErrorList {
	path := field.NewPath("statefulset", sts.Name, "spec")
	var errs field.ErrorList
	replicas := *sts.Spec.Replicas
	if replicas < 0 {
		errs = append(errs, field.Invalid(path.Child("replicas"), replicas, "must be non-negative"))
	}
	errs = append(errs, metav1validation.ValidateLabelSelector(sts.Spec.Selector, metav1validation.LabelSelectorValidationOptions{}, path.Child("selector"))...)
	errs = append(errs, msgs(path.Child("serviceName"), sts.Spec.ServiceName, validation.IsDNS1035Label(sts.Spec.ServiceName))...)
	tmpl := sts.Spec.Template
	tpath := path.Child("template")
	errs = append(errs, metav1validation.ValidateLabels(tmpl.Labels, tpath.Child("metadata", "labels"))...)
	errs = append(errs, apivalidation.ValidateAnnotations(tmpl.Annotations, tpath.Child("metadata", "annotations"))...)
	if sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector); err != nil || !sel.Matches(labels.Set(tmpl.Labels)) {
		errs = append(errs, field.Invalid(tpath.Child("metadata", "labels"), tmpl.Labels, "`selector` does not match template `labels`"))
	}

	// The StatefulSet controller names pod i "<name>-i", makes it its
	// hostname (a DNS-1123 label) and labels it with its name and with
	// "<name>-<revision hash of 10 characters>".
	for _, i := range []int32{0, max(replicas-1, 0)} {
		pod := cluster.PodName(sts.Name, i)
		ppath := field.NewPath("pod", pod)
		errs = append(errs, msgs(ppath.Child("spec", "hostname"), pod, validation.IsDNS1123Label(pod))...)
		errs = append(errs, msgs(ppath.Child("metadata", "labels").Key(appsv1.StatefulSetPodNameLabel), pod, validation.IsValidLabelValue(pod))...)
		revision := sts.Name + "-0123456789"
		errs = append(errs, msgs(ppath.Child("metadata", "labels").Key(appsv1.ControllerRevisionHashLabelKey), revision, validation.IsValidLabelValue(revision))...)
		for _, c := range sts.Spec.VolumeClaimTemplates {
			claim := c.Name + "-" + pod
			errs = append(errs, msgs(field.NewPath("persistentvolumeclaim", claim), claim, validation.IsDNS1123Subdomain(claim))...)
		}
	}

	spec := tmpl.Spec
	spath := tpath.Child("spec")
	errs = append(errs, msgs(spath.Child("serviceAccountName"), spec.ServiceAccountName, validation.IsDNS1123Subdomain(spec.ServiceAccountName))...)
	volumes := map[string]bool{}
	for i, v := range spec.Volumes {
		errs = append(errs, msgs(spath.Child("volumes").Index(i).Child("name"), v.Name, validation.IsDNS1123Label(v.Name))...)
		volumes[v.Name] = true
	}
	for i, c := range sts.Spec.VolumeClaimTemplates {
		errs = append(errs, checkClaim(c, path.Child("volumeClaimTemplates").Index(i))...)
		volumes[c.Name] = true
	}
	for i, c := range spec.Containers {
		errs = append(errs, checkContainer(c, volumes, spath.Child("containers").Index(i))...)
	}
	errs = append(errs, checkTolerations(spec.Tolerations, spath.Child("tolerations"))...)
	if spec.Affinity != nil && spec.Affinity.NodeAffinity != nil {
		errs = append(errs, checkNodeAffinity(spec.Affinity.NodeAffinity, spath.Child("affinity", "nodeAffinity"))...)
	}
	return errs
}

func checkClaim(c corev1.PersistentVolumeClaim, path *field.Path) field.ErrorList {
	errs := msgs(path.Child("metadata", "name"), c.Name, validation.IsDNS1123Subdomain(c.Name))
	errs = append(errs, metav1validation.ValidateLabels(c.Labels, path.Child("metadata", "labels"))...)
	if len(c.Spec.AccessModes) == 0 {
		errs = append(errs, field.Required(path.Child("spec", "accessModes"), ""))
	}
	storage, ok := c.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok || storage.Sign() <= 0 {
		errs = append(errs, field.Invalid(path.Child("spec", "resources", "requests", "storage"), storage.String(), "must be greater than zero"))
	}
	if c.Spec.StorageClassName != nil {
		errs = append(errs, msgs(path.Child("spec", "storageClassName"), *c.Spec.StorageClassName, validation.IsDNS1123Subdomain(*c.Spec.StorageClassName))...)
	}
	return errs
}

func checkContainer(c corev1.Container, volumes map[string]bool, path *field.Path) field.ErrorList {
	errs := msgs(path.Child("name"), c.Name, validation.IsDNS1123Label(c.Name))
	// Core validation refuses a pod (not the template) whose image is
	// empty or has leading or trailing whitespace.
	if c.Image == "" || strings.TrimSpace(c.Image) != c.Image {
		errs = append(errs, field.Invalid(path.Child("image"), c.Image, "must be set, without leading or trailing whitespace"))
	}
	for i, e := range c.Env {
		errs = append(errs, msgs(path.Child("env").Index(i).Child("name"), e.Name, validation.IsEnvVarName(e.Name))...)
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			ref := e.ValueFrom.SecretKeyRef
			errs = append(errs, msgs(path.Child("env").Index(i).Child("valueFrom", "secretKeyRef", "name"), ref.Name, validation.IsDNS1123Subdomain(ref.Name))...)
			errs = append(errs, msgs(path.Child("env").Index(i).Child("valueFrom", "secretKeyRef", "key"), ref.Key, validation.IsConfigMapKey(ref.Key))...)
		}
	}
	for i, p := range c.Ports {
		errs = append(errs, msgs(path.Child("ports").Index(i).Child("name"), p.Name, validation.IsValidPortName(p.Name))...)
		errs = append(errs, msgs(path.Child("ports").Index(i).Child("containerPort"), p.ContainerPort, validation.IsValidPortNum(int(p.ContainerPort)))...)
	}
	for i, m := range c.VolumeMounts {
		if !volumes[m.Name] {
			errs = append(errs, field.NotFound(path.Child("volumeMounts").Index(i).Child("name"), m.Name))
		}
	}
	// Core validation: every quantity non-negative, and a request at most
	// its limit.
	rpath := path.Child("resources")
	check := func(kind string, list corev1.ResourceList) {
		for name, q := range list {
			if q.Sign() < 0 {
				errs = append(errs, field.Invalid(rpath.Child(kind).Key(string(name)), q.String(), "must be greater than or equal to 0"))
			}
		}
	}
	check("requests", c.Resources.Requests)
	check("limits", c.Resources.Limits)
	for name, req := range c.Resources.Requests {
		if lim, ok := c.Resources.Limits[name]; ok && req.Cmp(lim) > 0 {
			errs = append(errs, field.Invalid(rpath.Child("requests").Key(string(name)), req.String(),
				fmt.Sprintf("must be less than or equal to %s limit of %s", name, lim.String())))
		}
	}
	return errs
}

// checkTolerations restates ValidateTolerations of core validation.
func checkTolerations(tolerations []corev1.Toleration, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, t := range tolerations {
		ip := path.Index(i)
		if t.Key != "" {
			errs = append(errs, metav1validation.ValidateLabelName(t.Key, ip.Child("key"))...)
		}
		if t.Key == "" && t.Operator != corev1.TolerationOpExists {
			errs = append(errs, field.Invalid(ip.Child("operator"), t.Operator, "operator must be Exists when `key` is empty"))
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			errs = append(errs, field.Invalid(ip.Child("effect"), t.Effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
		}
		switch t.Operator {
		case corev1.TolerationOpEqual, "":
			errs = append(errs, msgs(ip.Child("operator"), t.Value, validation.IsValidLabelValue(t.Value))...)
		case corev1.TolerationOpExists:
			if t.Value != "" {
				errs = append(errs, field.Invalid(ip.Child("operator"), t.Value, "value must be empty when `operator` is 'Exists'"))
			}
		default:
			errs = append(errs, field.NotSupported(ip.Child("operator"), t.Operator, []corev1.TolerationOperator{corev1.TolerationOpEqual, corev1.TolerationOpExists}))
		}
		switch t.Effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			errs = append(errs, field.NotSupported(ip.Child("effect"), t.Effect, []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}))
		}
	}
	return errs
}

// checkNodeAffinity restates validateNodeAffinity of core validation.
func checkNodeAffinity(na *corev1.NodeAffinity, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r := na.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
		rp := path.Child("requiredDuringSchedulingIgnoredDuringExecution")
		if len(r.NodeSelectorTerms) == 0 {
			errs = append(errs, field.Required(rp.Child("nodeSelectorTerms"), "must have at least one node selector term"))
		}
		for i, term := range r.NodeSelectorTerms {
			errs = append(errs, checkNodeSelectorTerm(term, true, rp.Child("nodeSelectorTerms").Index(i))...)
		}
	}
	for i, p := range na.PreferredDuringSchedulingIgnoredDuringExecution {
		pp := path.Child("preferredDuringSchedulingIgnoredDuringExecution").Index(i)
		if p.Weight <= 0 || p.Weight > 100 {
			errs = append(errs, field.Invalid(pp.Child("weight"), p.Weight, "must be in the range 1-100"))
		}
		errs = append(errs, checkNodeSelectorTerm(p.Preference, false, pp.Child("preference"))...)
	}
	return errs
}

// checkNodeSelectorTerm restates ValidateNodeSelectorTerm; the values of a
// required term's expressions must be label values.
func checkNodeSelectorTerm(term corev1.NodeSelectorTerm, required bool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, r := range term.MatchExpressions {
		rp := path.Child("matchExpressions").Index(i)
		switch r.Operator {
		case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
			if len(r.Values) == 0 {
				errs = append(errs, field.Required(rp.Child("values"), "must be specified when `operator` is 'In' or 'NotIn'"))
			}
		case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
			if len(r.Values) > 0 {
				errs = append(errs, field.Forbidden(rp.Child("values"), "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
			}
		case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
			if len(r.Values) != 1 {
				errs = append(errs, field.Required(rp.Child("values"), "must be specified single value when `operator` is 'Lt' or 'Gt'"))
			}
			for _, v := range r.Values {
				if _, err := strconv.ParseInt(v, 10, 64); err != nil {
					errs = append(errs, field.Invalid(rp.Child("values"), v, "must be an integer"))
				}
			}
		default:
			errs = append(errs, field.Invalid(rp.Child("operator"), r.Operator, "not a valid selector operator"))
		}
		errs = append(errs, metav1validation.ValidateLabelName(r.Key, rp.Child("key"))...)
		for j, v := range r.Values {
			if required {
				errs = append(errs, msgs(rp.Child("values").Index(j), v, validation.IsValidLabelValue(v))...)
			}
		}
	}
	for i, r := range term.MatchFields {
		rp := path.Child("matchFields").Index(i)
		if r.Operator != corev1.NodeSelectorOpIn && r.Operator != corev1.NodeSelectorOpNotIn {
			errs = append(errs, field.Invalid(rp.Child("operator"), r.Operator, "not a valid selector operator"))
		} else if len(r.Values) != 1 {
			errs = append(errs, field.Required(rp.Child("values"), "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"))
		}
		if r.Key != "metadata.name" {
			errs = append(errs, field.Invalid(rp.Child("key"), r.Key, "not a valid field selector key"))
		}
		for j, v := range r.Values {
			errs = append(errs, msgs(rp.Child("values").Index(j), v, validation.IsDNS1123Subdomain(v))...)
		}
	}
	return errs
}
