package facts

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// A grown spec.volume.size: each bound claim of a desired instance that is
// smaller says where its growth is; the claims of a scale-down and those
// not bound are no part of it; a class that does not allow expansion is
// the cause while every pod serves.
func TestVolumes(t *testing.T) {
	pg := newPG("c1", 3)
	grown := pg.DeepCopy()
	grown.Spec.Volume.Size = resource.MustParse("20Gi")
	// The claims were made at the old size, pg's.
	asked := func(q string) func(*corev1.PersistentVolumeClaim) {
		return func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse(q)
		}
	}
	cond := func(typ corev1.PersistentVolumeClaimConditionType, msg string) func(*corev1.PersistentVolumeClaim) {
		return func(c *corev1.PersistentVolumeClaim) {
			c.Status.Conditions = append(c.Status.Conditions, corev1.PersistentVolumeClaimCondition{Type: typ, Status: corev1.ConditionTrue, Message: msg})
		}
	}
	class := func(name string, expand bool) *storagev1.StorageClass {
		return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, AllowVolumeExpansion: ptr.To(expand)}
	}
	healthy := func(claims ...runtime.Object) []runtime.Object {
		return append([]runtime.Object{statefulSet(pg), lock(pg, "c1-0"), pod(pg, 0, master), pod(pg, 1), pod(pg, 2)}, claims...)
	}
	tests := []struct {
		name     string
		pg       *v1.Postgresql
		objs     []runtime.Object
		classes  []*storagev1.StorageClass
		want     []v1.ClaimStatus
		stuck    string
		notStuck bool
	}{{
		name: "every claim has the size",
		pg:   pg,
		objs: healthy(claim(pg, 0, corev1.ClaimBound), claim(pg, 1, corev1.ClaimBound), claim(pg, 2, corev1.ClaimBound)),
	}, {
		name: "grown: the claims to resize, a resizing one, one waiting for its file system, one failed",
		pg:   grown,
		objs: healthy(claim(pg, 0, corev1.ClaimBound),
			claim(pg, 1, corev1.ClaimBound, asked("20Gi"), cond(corev1.PersistentVolumeClaimResizing, "")),
			claim(pg, 2, corev1.ClaimBound, asked("20Gi"), cond(corev1.PersistentVolumeClaimFileSystemResizePending, "Waiting for user to (re-)start a pod")),
			// Scaled away: kept, grown by the ensure, no part of the spec in effect.
			claim(pg, 3, corev1.ClaimBound),
		),
		want: []v1.ClaimStatus{
			{Name: "pgdata-c1-0", Requested: "10Gi", Capacity: "10Gi", Phase: v1.ClaimToResize},
			{Name: "pgdata-c1-1", Requested: "20Gi", Capacity: "10Gi", Phase: v1.ClaimResizing},
			{Name: "pgdata-c1-2", Requested: "20Gi", Capacity: "10Gi", Phase: v1.ClaimFileSystemResizePending, Message: "Waiting for user to (re-)start a pod"},
		},
	}, {
		name: "the resizer's error",
		pg:   grown,
		objs: healthy(claim(pg, 0, corev1.ClaimBound, asked("20Gi"), cond("ControllerResizeError", "quota of the storage backend"))),
		want: []v1.ClaimStatus{{Name: "pgdata-c1-0", Requested: "20Gi", Capacity: "10Gi", Phase: v1.ClaimResizeFailed, Message: "quota of the storage backend"}},
	}, {
		name:    "a class that does not allow expansion: the cause",
		pg:      grown,
		objs:    healthy(claim(pg, 0, corev1.ClaimBound, withClass("fixed")), claim(pg, 1, corev1.ClaimBound, withClass("standard"))),
		classes: []*storagev1.StorageClass{class("fixed", false), class("standard", true)},
		want: []v1.ClaimStatus{
			{Name: "pgdata-c1-0", Requested: "10Gi", Capacity: "10Gi", Phase: v1.ClaimNotExpandable, Message: "StorageClass fixed does not allow volume expansion"},
			{Name: "pgdata-c1-1", Requested: "10Gi", Capacity: "10Gi", Phase: v1.ClaimToResize},
		},
		stuck: "volume.size 20Gi: claim pgdata-c1-0 cannot grow: StorageClass fixed does not allow volume expansion (allowVolumeExpansion); the claims keep their size until it does",
	}, {
		name: "a class unknown to pgloop: the apiserver decides",
		pg:   grown,
		objs: healthy(claim(pg, 0, corev1.ClaimBound, withClass("elsewhere"))),
		want: []v1.ClaimStatus{{Name: "pgdata-c1-0", Requested: "10Gi", Capacity: "10Gi", Phase: v1.ClaimToResize}},
	}, {
		name: "a claim not bound has no volume to grow",
		pg:   grown,
		objs: healthy(claim(pg, 0, corev1.ClaimPending)),
	}, {
		name: "a pod not Ready: its cause, not the volumes'",
		pg:   grown,
		objs: []runtime.Object{statefulSet(pg), lock(pg, "c1-0"), pod(pg, 0, master), pod(pg, 1), pod(pg, 2, notReady),
			claim(pg, 0, corev1.ClaimBound, withClass("fixed"))},
		classes:  []*storagev1.StorageClass{class("fixed", false)},
		want:     []v1.ClaimStatus{{Name: "pgdata-c1-0", Requested: "10Gi", Capacity: "10Gi", Phase: v1.ClaimNotExpandable, Message: "StorageClass fixed does not allow volume expansion"}},
		notStuck: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := objects(tt.pg, tt.objs...)
			objs.StorageClasses = tt.classes
			f := NewDeriver(cluster.Options{}, true).Facts(objs, now)
			if f.VolumeSize != tt.pg.Spec.Volume.Size.String() {
				t.Errorf("VolumeSize %q, want %q", f.VolumeSize, tt.pg.Spec.Volume.Size.String())
			}
			if !reflect.DeepEqual(f.Volumes, tt.want) {
				t.Errorf("Volumes\n got %+v\nwant %+v", f.Volumes, tt.want)
			}
			switch {
			case tt.stuck != "" && (f.StuckReason != fsm.ReasonVolumeNotExpandable || f.Stuck != tt.stuck):
				t.Errorf("stuck %s: %q, want %s: %q", f.StuckReason, f.Stuck, fsm.ReasonVolumeNotExpandable, tt.stuck)
			case tt.stuck == "" && !tt.notStuck && f.Stuck != "":
				t.Errorf("stuck %s: %q, want none", f.StuckReason, f.Stuck)
			case tt.notStuck && f.StuckReason == fsm.ReasonVolumeNotExpandable:
				t.Errorf("stuck %s while a pod is not Ready: a cause of the pod's loss it is not", f.StuckReason)
			}
		})
	}
}
