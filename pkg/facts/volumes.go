package facts

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/observed"
)

// Conditions of a claim that the resizer and the kubelet set, besides
// corev1.PersistentVolumeClaimResizing and
// PersistentVolumeClaimFileSystemResizePending.
const (
	claimControllerResizeError corev1.PersistentVolumeClaimConditionType = "ControllerResizeError"
	claimNodeResizeError       corev1.PersistentVolumeClaimConditionType = "NodeResizeError"
)

// volumes returns the bound data volume claims of the desired instances
// (ordinals below desired) whose volume is smaller than size, by name, with
// where their growth is. A claim not bound yet has no volume to grow: the
// ensure effects grow it once it is (and VolumePending explains a wait).
func volumes(objs observed.Cluster, stsName string, desired int32, size resource.Quantity) []v1.ClaimStatus {
	if size.IsZero() {
		return nil
	}
	prefix := cluster.DataVolumeName + "-"
	var out []v1.ClaimStatus
	for _, c := range objs.Claims {
		pod, ok := strings.CutPrefix(c.Name, prefix)
		if !ok || c.DeletionTimestamp != nil || c.Status.Phase != corev1.ClaimBound {
			continue
		}
		if ord := ordinal(pod, stsName); ord < 0 || ord >= int(desired) {
			continue
		}
		capacity, hasCapacity := c.Status.Capacity[corev1.ResourceStorage]
		if hasCapacity && capacity.Cmp(size) >= 0 {
			continue
		}
		requested := c.Spec.Resources.Requests[corev1.ResourceStorage]
		cs := v1.ClaimStatus{Name: c.Name, Requested: requested.String(), Phase: v1.ClaimResizing}
		if hasCapacity {
			cs.Capacity = capacity.String()
		}
		switch {
		case requested.Cmp(size) < 0:
			cs.Phase = v1.ClaimToResize
			if class := claimClass(c); class != "" && !expandable(objs.StorageClasses, class) {
				cs.Phase = v1.ClaimNotExpandable
				cs.Message = fmt.Sprintf("StorageClass %s does not allow volume expansion", class)
			}
		case claimCondition(c, claimControllerResizeError) != nil:
			cs.Phase, cs.Message = v1.ClaimResizeFailed, truncate(claimCondition(c, claimControllerResizeError).Message)
		case claimCondition(c, claimNodeResizeError) != nil:
			cs.Phase, cs.Message = v1.ClaimResizeFailed, truncate(claimCondition(c, claimNodeResizeError).Message)
		case claimCondition(c, corev1.PersistentVolumeClaimFileSystemResizePending) != nil:
			cs.Phase = v1.ClaimFileSystemResizePending
			cs.Message = truncate(claimCondition(c, corev1.PersistentVolumeClaimFileSystemResizePending).Message)
		}
		out = append(out, cs)
	}
	slices.SortFunc(out, func(a, b v1.ClaimStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// notExpandable returns the stuck cause of claims that cannot grow: their
// StorageClass does not allow expansion.
func notExpandable(claims []v1.ClaimStatus, size string) (reason, message string) {
	var names []string
	why := ""
	for _, c := range claims {
		if c.Phase == v1.ClaimNotExpandable {
			names = append(names, c.Name)
			why = c.Message
		}
	}
	if len(names) == 0 {
		return "", ""
	}
	return fsm.ReasonVolumeNotExpandable, truncate(fmt.Sprintf("volume.size %s: claim %s cannot grow: %s (allowVolumeExpansion); the claims keep their size until it does",
		size, strings.Join(names, ", "), why))
}

// claimClass is the StorageClass of claim c, "" when it names none.
func claimClass(c *corev1.PersistentVolumeClaim) string {
	if c.Spec.StorageClassName != nil {
		return *c.Spec.StorageClassName
	}
	return ""
}

// expandable reports whether the StorageClass class allows volume
// expansion. A class pgloop does not know of is given the benefit of the
// doubt: the apiserver refuses a resize it does not allow, with its reason.
func expandable(classes []*storagev1.StorageClass, class string) bool {
	for _, sc := range classes {
		if sc.Name == class {
			return sc.AllowVolumeExpansion != nil && *sc.AllowVolumeExpansion
		}
	}
	return true
}

// claimCondition returns the condition typ of c when it is True, nil when
// it is not.
func claimCondition(c *corev1.PersistentVolumeClaim, typ corev1.PersistentVolumeClaimConditionType) *corev1.PersistentVolumeClaimCondition {
	for i := range c.Status.Conditions {
		if cond := &c.Status.Conditions[i]; cond.Type == typ && cond.Status == corev1.ConditionTrue {
			return cond
		}
	}
	return nil
}
