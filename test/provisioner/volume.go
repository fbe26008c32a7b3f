package provisioner

import (
	"encoding/json"
	"maps"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Annotations written as kwok's volume stages write them (pvc-provision.yaml).
const (
	AnnProvisionedBy           = "pv.kubernetes.io/provisioned-by"
	AnnBindCompleted           = "pv.kubernetes.io/bind-completed"
	AnnBoundByController       = "pv.kubernetes.io/bound-by-controller"
	AnnStorageProvisioner      = "volume.kubernetes.io/storage-provisioner"
	AnnBetaStorageProvisioner  = "volume.beta.kubernetes.io/storage-provisioner"
	hostPathRoot               = "/tmp/kwok-local-path-provisioner/"
	annotationYes              = "yes"
	claimAPIVersion, claimKind = "v1", "PersistentVolumeClaim"
)

// VolumeName is the name of the volume provisioned for a claim: pvc-<uid>,
// as kwok's stage and most CSI provisioners name it.
func VolumeName(claim *corev1.PersistentVolumeClaim) string {
	return "pvc-" + string(claim.UID)
}

// Volume builds the PersistentVolume for claim exactly as kwok's
// pvc-provision stage does: the claim's access modes, volume mode and
// class, its requests as capacity, reclaim policy Delete (the stage's
// default: a claim has no reclaim policy of its own), a hostPath under
// /tmp/kwok-local-path-provisioner, and a claimRef naming the claim with
// its uid and resourceVersion, so that the PV controller sees a volume
// pre-bound to that very claim.
func Volume(claim *corev1.PersistentVolumeClaim, provisioner string) *corev1.PersistentVolume {
	name := VolumeName(claim)
	mode := corev1.PersistentVolumeFilesystem
	if claim.Spec.VolumeMode != nil {
		mode = *claim.Spec.VolumeMode
	}
	class := ""
	if claim.Spec.StorageClassName != nil {
		class = *claim.Spec.StorageClassName
	}
	hostPathType := corev1.HostPathDirectoryOrCreate
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{AnnProvisionedBy: provisioner},
		},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes:                   append([]corev1.PersistentVolumeAccessMode(nil), claim.Spec.AccessModes...),
			Capacity:                      maps.Clone(claim.Spec.Resources.Requests),
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              class,
			VolumeMode:                    &mode,
			ClaimRef: &corev1.ObjectReference{
				APIVersion:      claimAPIVersion,
				Kind:            claimKind,
				Namespace:       claim.Namespace,
				Name:            claim.Name,
				UID:             claim.UID,
				ResourceVersion: claim.ResourceVersion,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: hostPathRoot + name, Type: &hostPathType},
			},
		},
	}
}

// patchMeta is the metadata of a merge patch. uid guards it: a claim
// deleted and created again under its name answers Invalid (uid is
// immutable) instead of being bound to the old one's volume.
// resourceVersion, when set, is a precondition besides.
type patchMeta struct {
	UID             types.UID         `json:"uid,omitempty"`
	ResourceVersion string            `json:"resourceVersion,omitempty"`
	Annotations     map[string]string `json:"annotations,omitempty"`
}

// BindPatch is the merge patch that binds claim to its volume, the
// stage's second and third steps in one request: the bind annotations and
// spec.volumeName.
func BindPatch(claim *corev1.PersistentVolumeClaim, provisioner string) []byte {
	return mustJSON(struct {
		Metadata patchMeta      `json:"metadata"`
		Spec     map[string]any `json:"spec"`
	}{
		Metadata: patchMeta{UID: claim.UID, Annotations: map[string]string{
			AnnBindCompleted:          annotationYes,
			AnnBoundByController:      annotationYes,
			AnnBetaStorageProvisioner: provisioner,
			AnnStorageProvisioner:     provisioner,
		}},
		Spec: map[string]any{"volumeName": VolumeName(claim)},
	})
}

// ClaimBoundPatch is the merge patch of the claim's status subresource:
// Bound, with its access modes and its requests as capacity (the stage's
// last step).
func ClaimBoundPatch(claim *corev1.PersistentVolumeClaim) []byte {
	return mustJSON(struct {
		Metadata patchMeta      `json:"metadata"`
		Status   map[string]any `json:"status"`
	}{
		Metadata: patchMeta{UID: claim.UID},
		Status: map[string]any{
			"phase":       corev1.ClaimBound,
			"accessModes": claim.Spec.AccessModes,
			"capacity":    claim.Spec.Resources.Requests,
		},
	})
}

// VolumePhasePatch is the merge patch of a volume's status subresource
// setting phase (Bound as pv-bind.yaml, Released as pvc-delete.yaml). It
// carries the volume's resourceVersion: a volume that changed since it was
// read answers Conflict, so a volume Released meanwhile is never made Bound
// again. The API server sets lastPhaseTransitionTime on a change of phase.
func VolumePhasePatch(pv *corev1.PersistentVolume, phase corev1.PersistentVolumePhase) []byte {
	return mustJSON(struct {
		Metadata patchMeta      `json:"metadata"`
		Status   map[string]any `json:"status"`
	}{
		Metadata: patchMeta{UID: pv.UID, ResourceVersion: pv.ResourceVersion},
		Status:   map[string]any{"phase": phase},
	})
}

// mustJSON marshals what cannot fail to marshal: maps of strings, and
// API types.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// MakeLocal turns a volume of Volume into a local volume at root/<name> on
// node, as a local-volume provisioner makes them: the node affinity pins
// its pods to the node.
func MakeLocal(pv *corev1.PersistentVolume, root, node string) {
	pv.Spec.PersistentVolumeSource = corev1.PersistentVolumeSource{
		Local: &corev1.LocalVolumeSource{Path: filepath.Join(root, pv.Name)},
	}
	pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node},
		}}}},
	}}
}
