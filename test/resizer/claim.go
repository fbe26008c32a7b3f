package resizer

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FileSystemResizePendingMessage is the message of the
// FileSystemResizePending condition, word for word the external-resizer's
// (kubernetes-csi/external-resizer, markForPendingNodeExpansion).
const FileSystemResizePendingMessage = "Waiting for user to (re-)start a pod to finish file system resize of volume on node."

// Step is what a claim needs next.
type Step int

const (
	// None: nothing to do (not Bound, not growing, or grown already).
	None Step = iota
	// Expand is the controller's half, the external-resizer's: the
	// volume's capacity raised to the request, the claim left
	// FileSystemResizePending.
	Expand
	// FinishFileSystem is the node's half, the kubelet's: the claim's
	// capacity raised, its resize conditions removed.
	FinishFileSystem
)

func (s Step) String() string {
	switch s {
	case Expand:
		return "expand"
	case FinishFileSystem:
		return "finishFileSystem"
	}
	return "none"
}

// Next says what claim needs. The cases:
//
//  1. not Bound to a volume, or being deleted: None;
//  2. requests.storage not above status.capacity.storage (equal, or a
//     smaller request, which a resizer never shrinks to): None;
//  3. FileSystemResizePending, and allocatedResources covering the
//     request: the controller's half is done, FinishFileSystem;
//  4. otherwise: Expand (a new request, a half done Expand, or a request
//     raised again while the file system was pending).
func Next(claim *corev1.PersistentVolumeClaim) Step {
	if claim.DeletionTimestamp != nil || claim.Status.Phase != corev1.ClaimBound || claim.Spec.VolumeName == "" {
		return None // 1
	}
	want, ok := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return None
	}
	if have := claim.Status.Capacity[corev1.ResourceStorage]; want.Cmp(have) <= 0 {
		return None // 2
	}
	allocated, ok := claim.Status.AllocatedResources[corev1.ResourceStorage]
	if hasCondition(claim, corev1.PersistentVolumeClaimFileSystemResizePending) && ok && allocated.Cmp(want) >= 0 {
		return FinishFileSystem // 3
	}
	return Expand // 4
}

// Requested is the claim's requests.storage.
func Requested(claim *corev1.PersistentVolumeClaim) resource.Quantity {
	return claim.Spec.Resources.Requests[corev1.ResourceStorage]
}

// Resizing is claim's status as the external-resizer writes it before it
// expands the volume: condition Resizing, allocatedResources.storage the
// new size, allocatedResourceStatuses.storage ControllerResizeInProgress.
// claim is not modified.
func Resizing(claim *corev1.PersistentVolumeClaim, size resource.Quantity, now metav1.Time) *corev1.PersistentVolumeClaim {
	c := claim.DeepCopy()
	c.Status.Conditions = withResizeConditions(c.Status.Conditions, now, corev1.PersistentVolumeClaimCondition{
		Type: corev1.PersistentVolumeClaimResizing, Status: corev1.ConditionTrue})
	if c.Status.AllocatedResources == nil {
		c.Status.AllocatedResources = corev1.ResourceList{}
	}
	c.Status.AllocatedResources[corev1.ResourceStorage] = size
	setResourceStatus(c, corev1.PersistentVolumeClaimControllerResizeInProgress)
	return c
}

// FileSystemResizePending is claim's status once the volume is expanded
// and the file system is left to the node: condition
// FileSystemResizePending (True, FileSystemResizePendingMessage) in place
// of Resizing, allocatedResourceStatuses.storage NodeResizePending. claim
// is not modified.
func FileSystemResizePending(claim *corev1.PersistentVolumeClaim, now metav1.Time) *corev1.PersistentVolumeClaim {
	c := claim.DeepCopy()
	c.Status.Conditions = withResizeConditions(c.Status.Conditions, now, corev1.PersistentVolumeClaimCondition{
		Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue,
		Message: FileSystemResizePendingMessage})
	setResourceStatus(c, corev1.PersistentVolumeClaimNodeResizePending)
	return c
}

// Resized is claim's status as the kubelet leaves it once the file system
// is grown: capacity.storage the new size, no resize condition, no
// allocatedResourceStatuses.storage (allocatedResources stays). claim is
// not modified.
func Resized(claim *corev1.PersistentVolumeClaim, size resource.Quantity) *corev1.PersistentVolumeClaim {
	c := claim.DeepCopy()
	if c.Status.Capacity == nil {
		c.Status.Capacity = corev1.ResourceList{}
	}
	c.Status.Capacity[corev1.ResourceStorage] = size
	c.Status.Conditions = withResizeConditions(c.Status.Conditions, metav1.Time{})
	delete(c.Status.AllocatedResourceStatuses, corev1.ResourceStorage)
	if len(c.Status.AllocatedResourceStatuses) == 0 {
		c.Status.AllocatedResourceStatuses = nil
	}
	return c
}

// resizeConditions are the conditions a resize sets; the others are left
// alone.
var resizeConditions = []corev1.PersistentVolumeClaimConditionType{
	corev1.PersistentVolumeClaimResizing,
	corev1.PersistentVolumeClaimFileSystemResizePending,
}

// withResizeConditions replaces the resize conditions of conds by set, as
// the resizer's MergeResizeConditionsOfPVC does: a condition of a type
// there already keeps its lastTransitionTime, a new one gets now.
func withResizeConditions(conds []corev1.PersistentVolumeClaimCondition, now metav1.Time,
	set ...corev1.PersistentVolumeClaimCondition) []corev1.PersistentVolumeClaimCondition {
	var out []corev1.PersistentVolumeClaimCondition
	for _, c := range conds {
		if !slices.Contains(resizeConditions, c.Type) {
			out = append(out, c)
		}
	}
	for _, s := range set {
		s.LastTransitionTime = now
		for _, c := range conds {
			if c.Type == s.Type {
				s.LastTransitionTime = c.LastTransitionTime
			}
		}
		out = append(out, s)
	}
	return out
}

func setResourceStatus(c *corev1.PersistentVolumeClaim, s corev1.ClaimResourceStatus) {
	if c.Status.AllocatedResourceStatuses == nil {
		c.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{}
	}
	c.Status.AllocatedResourceStatuses[corev1.ResourceStorage] = s
}

func hasCondition(claim *corev1.PersistentVolumeClaim, t corev1.PersistentVolumeClaimConditionType) bool {
	for _, c := range claim.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
