package cluster

import (
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The comparisons look only at what pgloop owns. Objects read back from the
// apiserver carry defaulted fields, allocated addresses and what other
// controllers and users added; none of that is a difference. Labels and
// annotations pgloop sets must be present with its values; others are left
// alone (so one pgloop stops setting stays on the object until it is
// re-created).

// Change is what it takes to bring an existing StatefulSet to the desired
// one.
type Change int

const (
	// NoChange: the StatefulSet is as desired.
	NoChange Change = iota
	// UpdateInPlace: fields that do not touch the pods differ (replicas,
	// labels, annotations, update strategy); updating the StatefulSet is
	// enough, no pod is restarted.
	UpdateInPlace
	// ReplacePods: the pod template differs. The StatefulSet must be
	// updated and, as its update strategy is OnDelete, every pod that is not
	// PodUpToDate deleted (those that run PostgreSQL one at a time) for the
	// StatefulSet controller to re-create it from the new template.
	ReplacePods
	// Recreate: the volume claim template asks for another StorageClass
	// or volume selector.
	// volumeClaimTemplates cannot change in place: the StatefulSet is
	// deleted leaving its pods (orphan propagation) and created anew, and
	// adopts them. Existing claims keep their class; those that never
	// bound are replaced with their pods (see ClaimClassDiffers).
	Recreate
)

var changeNames = []string{NoChange: "NoChange", UpdateInPlace: "UpdateInPlace", ReplacePods: "ReplacePods", Recreate: "Recreate"}

// String returns the name of the change, for logs and events.
func (c Change) String() string {
	if c < 0 || int(c) >= len(changeNames) {
		return "Change(?)"
	}
	return changeNames[c]
}

// Compare tells what it takes to turn current, the StatefulSet in the
// apiserver, into desired, one built by StatefulSet. Both must be non-nil.
// The rules, first match wins:
//
//  0. The data volume claim template asks for another StorageClass, or
//     selects volumes with another selector (volume.selector): Recreate.
//  1. The pod template hash annotations differ, or current has none:
//     ReplacePods. Templates are compared by their hash only, because the
//     apiserver defaults many template fields; a hand edit of the template
//     that leaves the annotation alone is therefore not seen.
//  2. Replicas, a label or annotation pgloop sets on the StatefulSet, the
//     update strategy or the claim retention policy differ: UpdateInPlace.
//  3. Otherwise NoChange.
//
// Other immutable fields are never compared: selector, serviceName,
// podManagementPolicy and the rest of volumeClaimTemplates. The volume
// size can only grow and is applied to the existing claims, not through
// the StatefulSet.
//
// Once the StatefulSet is updated, Compare says NoChange even while pods
// still run the old template: a rollout in progress is tracked per pod with
// PodUpToDate.
func Compare(current, desired *appsv1.StatefulSet) Change {
	return CompareSummary(current, summarize(desired))
}

// StatefulSetSummary is what Compare reads of a desired StatefulSet: a few
// hundred bytes, where the whole object takes some 8 KB (its pod template
// most of it). The facts keep one per cluster to compare the cached
// StatefulSet with (pkg/facts); the effects, which write the template,
// build the whole object.
type StatefulSetSummary struct {
	claimClass          string
	claimSelector       *metav1.LabelSelector
	templateHash        string
	replicas            int32
	labels, annotations map[string]string
	updateStrategy      appsv1.StatefulSetUpdateStrategyType
	retention           appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy
}

// Summarize returns what Compare reads of desired, a copy that shares
// nothing with it, so that desired can be dropped or changed.
func Summarize(desired *appsv1.StatefulSet) StatefulSetSummary {
	s := summarize(desired)
	s.claimSelector = s.claimSelector.DeepCopy()
	s.labels, s.annotations = maps.Clone(s.labels), maps.Clone(s.annotations)
	return s
}

// summarize returns what Compare reads of desired, sharing its maps and
// its claim template's selector: for a comparison at once.
func summarize(desired *appsv1.StatefulSet) StatefulSetSummary {
	return StatefulSetSummary{
		claimClass:     ClaimTemplateClass(desired),
		claimSelector:  claimTemplateSelector(desired),
		templateHash:   PodTemplateHash(desired),
		replicas:       ptr.Deref(desired.Spec.Replicas, 1),
		labels:         desired.Labels,
		annotations:    desired.Annotations,
		updateStrategy: desired.Spec.UpdateStrategy.Type,
		retention:      retention(desired),
	}
}

// CompareSummary is Compare of current with the desired StatefulSet
// desired summarizes.
func CompareSummary(current *appsv1.StatefulSet, desired StatefulSetSummary) Change {
	if ClaimTemplateClass(current) != desired.claimClass ||
		!apiequality.Semantic.DeepEqual(claimTemplateSelector(current), desired.claimSelector) {
		return Recreate
	}
	if h := PodTemplateHash(current); h == "" || h != desired.templateHash {
		return ReplacePods
	}
	switch {
	case ptr.Deref(current.Spec.Replicas, 1) != desired.replicas,
		!containsAll(current.Labels, desired.labels),
		!containsAll(current.Annotations, desired.annotations),
		current.Spec.UpdateStrategy.Type != desired.updateStrategy,
		retention(current) != desired.retention:
		return UpdateInPlace
	}
	return NoChange
}

// retention returns the claim retention policy; unset means Retain for
// both, as the apiserver defaults it.
func retention(sts *appsv1.StatefulSet) appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy {
	p := appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
		WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
		WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
	}
	if r := sts.Spec.PersistentVolumeClaimRetentionPolicy; r != nil {
		if r.WhenDeleted != "" {
			p.WhenDeleted = r.WhenDeleted
		}
		if r.WhenScaled != "" {
			p.WhenScaled = r.WhenScaled
		}
	}
	return p
}

// ApplyStatefulSet returns a copy of current with what pgloop owns taken
// from desired, ready for an Update: replicas, pod template, update
// strategy, claim retention policy, and pgloop's labels and annotations
// merged into the existing ones. Immutable fields keep current's values,
// so the apiserver accepts the update; resourceVersion is kept, so a
// concurrent change makes it fail with a conflict rather than be lost.
func ApplyStatefulSet(current, desired *appsv1.StatefulSet) *appsv1.StatefulSet {
	out := current.DeepCopy()
	out.Labels = mergeInto(out.Labels, desired.Labels)
	out.Annotations = mergeInto(out.Annotations, desired.Annotations)
	d := desired.DeepCopy()
	out.Spec.Replicas = d.Spec.Replicas
	out.Spec.Template = d.Spec.Template
	out.Spec.UpdateStrategy = d.Spec.UpdateStrategy
	out.Spec.PersistentVolumeClaimRetentionPolicy = d.Spec.PersistentVolumeClaimRetentionPolicy
	return out
}

// ServiceNeedsUpdate reports whether current differs from desired in what
// pgloop owns: type, load balancer source ranges, ports (name, protocol,
// port, target port), selector, and its labels and annotations. The cluster
// IP is never compared, nor a node port desired leaves to the apiserver
// (0): it allocates them. A node port the spec names is compared.
func ServiceNeedsUpdate(current, desired *corev1.Service) bool {
	return current.Spec.Type != desired.Spec.Type ||
		!slices.Equal(current.Spec.LoadBalancerSourceRanges, desired.Spec.LoadBalancerSourceRanges) ||
		!maps.Equal(current.Spec.Selector, desired.Spec.Selector) ||
		!slices.EqualFunc(current.Spec.Ports, desired.Spec.Ports, samePort) ||
		namedNodePortMoved(current.Spec.Ports, desired.Spec.Ports) ||
		!containsAll(current.Labels, desired.Labels) ||
		!containsAll(current.Annotations, desired.Annotations)
}

// namedNodePortMoved reports whether a port of desired names a node port
// that its current port does not have. The ports are the same list
// (samePort) when it is asked.
func namedNodePortMoved(current, desired []corev1.ServicePort) bool {
	for i := range desired {
		if desired[i].NodePort != 0 && (i >= len(current) || current[i].NodePort != desired[i].NodePort) {
			return true
		}
	}
	return false
}

func samePort(a, b corev1.ServicePort) bool {
	return a.Name == b.Name && protocol(a) == protocol(b) && a.Port == b.Port && a.TargetPort == b.TargetPort
}

// protocol returns the port's protocol; unset means TCP, as the apiserver
// defaults it.
func protocol(p corev1.ServicePort) corev1.Protocol {
	if p.Protocol == "" {
		return corev1.ProtocolTCP
	}
	return p.Protocol
}

// ApplyService returns a copy of current with what pgloop owns taken from
// desired, ready for an Update. Cluster IPs, IP families and everything else
// the apiserver or others set are kept, with two exceptions that follow
// the type:
//
//  1. A Service that stays or becomes a load balancer or NodePort keeps
//     the node ports the apiserver allocated where desired names none, so
//     an update does not move them; a port desired names replaces it.
//  2. A Service that becomes ClusterIP loses its node ports and the fields
//     only an external Service may have (external traffic policy, health
//     check node port, load balancer class and node port allocation): the
//     apiserver refuses a ClusterIP Service that keeps them.
func ApplyService(current, desired *corev1.Service) *corev1.Service {
	out := current.DeepCopy()
	out.Labels = mergeInto(out.Labels, desired.Labels)
	out.Annotations = mergeInto(out.Annotations, desired.Annotations)
	d := desired.DeepCopy()
	out.Spec.Type = d.Spec.Type
	out.Spec.Selector = d.Spec.Selector
	out.Spec.LoadBalancerSourceRanges = d.Spec.LoadBalancerSourceRanges
	ports := d.Spec.Ports
	switch d.Spec.Type {
	case corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort:
		for i := range ports {
			for _, c := range current.Spec.Ports {
				if ports[i].NodePort == 0 && c.Name == ports[i].Name && c.Port == ports[i].Port && protocol(c) == protocol(ports[i]) {
					ports[i].NodePort = c.NodePort
				}
			}
		}
	default:
		for i := range ports {
			ports[i].NodePort = 0
		}
		out.Spec.ExternalTrafficPolicy = ""
		out.Spec.HealthCheckNodePort = 0
		out.Spec.LoadBalancerClass = nil
		out.Spec.AllocateLoadBalancerNodePorts = nil
	}
	out.Spec.Ports = ports
	return out
}

// PodDisruptionBudgetNeedsUpdate reports whether current differs from
// desired in what pgloop owns: minAvailable, maxUnavailable (pgloop never
// sets it), the selector, and its labels.
func PodDisruptionBudgetNeedsUpdate(current, desired *policyv1.PodDisruptionBudget) bool {
	return !apiequality.Semantic.DeepEqual(current.Spec.MinAvailable, desired.Spec.MinAvailable) ||
		!apiequality.Semantic.DeepEqual(current.Spec.MaxUnavailable, desired.Spec.MaxUnavailable) ||
		!apiequality.Semantic.DeepEqual(current.Spec.Selector, desired.Spec.Selector) ||
		!containsAll(current.Labels, desired.Labels)
}

// ApplyPodDisruptionBudget returns a copy of current with what pgloop owns
// taken from desired, ready for an Update.
func ApplyPodDisruptionBudget(current, desired *policyv1.PodDisruptionBudget) *policyv1.PodDisruptionBudget {
	out := current.DeepCopy()
	out.Labels = mergeInto(out.Labels, desired.Labels)
	d := desired.DeepCopy()
	out.Spec.MinAvailable = d.Spec.MinAvailable
	out.Spec.MaxUnavailable = d.Spec.MaxUnavailable
	out.Spec.Selector = d.Spec.Selector
	return out
}

// RoleNeedsUpdate reports whether the pods' Role grants other rules than
// desired, as after an upgrade of pgloop that changed them.
func RoleNeedsUpdate(current, desired *rbacv1.Role) bool {
	return !apiequality.Semantic.DeepEqual(current.Rules, desired.Rules) ||
		!containsAll(current.Labels, desired.Labels)
}

// ApplyRole returns a copy of current with desired's rules and labels,
// ready for an Update. Everything else of current is kept (an owner
// reference left by an older release is the effects' business).
func ApplyRole(current, desired *rbacv1.Role) *rbacv1.Role {
	out := current.DeepCopy()
	out.Labels = mergeInto(out.Labels, desired.Labels)
	out.Rules = desired.DeepCopy().Rules
	return out
}

// ClaimTemplateClass is the StorageClass the StatefulSet's data volume
// claim template asks for; "" for the cluster's default class.
func ClaimTemplateClass(sts *appsv1.StatefulSet) string {
	for i := range sts.Spec.VolumeClaimTemplates {
		if t := &sts.Spec.VolumeClaimTemplates[i]; t.Name == DataVolumeName {
			return ptr.Deref(t.Spec.StorageClassName, "")
		}
	}
	return ""
}

// claimTemplateSelector is the volume selector of the StatefulSet's data
// volume claim template; nil for none. As zalando's operator does, a new
// one replaces the StatefulSet: claims made from then on (a scale-up)
// select with it, existing ones keep theirs (a claim's selector is
// immutable).
func claimTemplateSelector(sts *appsv1.StatefulSet) *metav1.LabelSelector {
	for i := range sts.Spec.VolumeClaimTemplates {
		if t := &sts.Spec.VolumeClaimTemplates[i]; t.Name == DataVolumeName {
			return t.Spec.Selector
		}
	}
	return nil
}
