package resizer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/pgloop/pgloop/test/resizer"
	"github.com/pgloop/pgloop/test/testbed"
)

// refusal is what the API server's PersistentVolumeClaimResize admission
// answers to a larger request on a claim whose class does not allow
// expansion, after `persistentvolumeclaims "<name>" is forbidden: `
// (docs/testbed.md quotes it: pgloop shows it to users).
const refusal = "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"

// fsDelay makes FileSystemResizePending last long enough to be seen by a
// person reading the log; the test would see it with none (a watch sees
// every write).
const fsDelay = time.Second

// TestPlane grows a claim of the expandable class on the real plane, once
// with kwok's volume stages and once with the plane's provisioner (both
// must provision the fixed class too): FileSystemResizePending with the
// volume grown, then the claim's capacity; and checks that the API server
// refuses to grow a claim of the fixed class.
func TestPlane(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
	}{
		{"kwok's volume stages", 0},
		{"the plane's provisioner", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			p, err := testbed.Start(ctx, testbed.Options{Nodes: 1, VolumeWorkers: tc.workers, ResizeFSDelay: fsDelay})
			if err != nil {
				t.Fatalf("starting the control plane: %v", err)
			}
			t.Cleanup(func() {
				if err := p.Healthy(); err != nil {
					t.Errorf("the plane: %v", err)
				}
				if err := p.Stop(); err != nil {
					t.Errorf("stopping the plane: %v", err)
				}
			})
			testGrow(t, ctx, p)
		})
	}
}

func testGrow(t *testing.T, ctx context.Context, p *testbed.Plane) {
	ns := p.Namespace(t)
	claims := p.Client.CoreV1().PersistentVolumeClaims(ns)
	for _, c := range []*corev1.PersistentVolumeClaim{
		claim(ns, "grows", testbed.StorageClassName), claim(ns, "fixed", testbed.FixedStorageClassName),
	} {
		if _, err := claims.Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := testbed.WaitFor(ctx, testbed.PersistentVolumeClaims(p.Client, ns, c.Name), func(c *corev1.PersistentVolumeClaim) (bool, error) {
			return c.Status.Phase == corev1.ClaimBound, nil
		}); err != nil {
			t.Fatalf("claim %s Bound: %v", c.Name, err)
		}
	}

	began := time.Now()
	if _, err := claims.Patch(ctx, "grows", types.MergePatchType, sizePatch("2Gi"), metav1.PatchOptions{}); err != nil {
		t.Fatalf("growing a claim of %s: %v", testbed.StorageClassName, err)
	}
	pending, err := testbed.WaitFor(ctx, testbed.PersistentVolumeClaims(p.Client, ns, "grows"), func(c *corev1.PersistentVolumeClaim) (bool, error) {
		return condition(c, corev1.PersistentVolumeClaimFileSystemResizePending) != nil, nil
	})
	if err != nil {
		t.Fatalf("waiting for FileSystemResizePending: %v", err)
	}
	t.Logf("FileSystemResizePending %v after the patch", time.Since(began).Round(time.Millisecond))
	gi1, gi2 := resource.MustParse("1Gi"), resource.MustParse("2Gi")
	cond := condition(pending, corev1.PersistentVolumeClaimFileSystemResizePending)
	if cond.Status != corev1.ConditionTrue || cond.Message != resizer.FileSystemResizePendingMessage {
		t.Errorf("FileSystemResizePending: %+v", cond)
	}
	if !pending.Status.Capacity.Storage().Equal(gi1) {
		t.Errorf("capacity %v while FileSystemResizePending, want 1Gi", pending.Status.Capacity.Storage())
	}
	if got := pending.Status.AllocatedResources[corev1.ResourceStorage]; !got.Equal(gi2) ||
		pending.Status.AllocatedResourceStatuses[corev1.ResourceStorage] != corev1.PersistentVolumeClaimNodeResizePending {
		t.Errorf("allocatedResources %v, allocatedResourceStatuses %v; want 2Gi, NodeResizePending",
			pending.Status.AllocatedResources, pending.Status.AllocatedResourceStatuses)
	}
	pv, err := p.Client.CoreV1().PersistentVolumes().Get(ctx, pending.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !pv.Spec.Capacity.Storage().Equal(gi2) {
		t.Errorf("volume's capacity %v while FileSystemResizePending, want 2Gi", pv.Spec.Capacity.Storage())
	}

	resized, err := testbed.WaitFor(ctx, testbed.PersistentVolumeClaims(p.Client, ns, "grows"), func(c *corev1.PersistentVolumeClaim) (bool, error) {
		return c.Status.Capacity.Storage().Equal(gi2), nil
	})
	if err != nil {
		t.Fatalf("waiting for capacity 2Gi: %v", err)
	}
	t.Logf("capacity 2Gi %v after the patch (FSDelay %v)", time.Since(began).Round(time.Millisecond), fsDelay)
	// Other conditions may be there: kube-controller-manager 1.37 sets
	// Unused (NoPodsUsingPVC) on a claim no pod uses.
	if condition(resized, corev1.PersistentVolumeClaimResizing) != nil ||
		condition(resized, corev1.PersistentVolumeClaimFileSystemResizePending) != nil ||
		len(resized.Status.AllocatedResourceStatuses) > 0 {
		t.Errorf("resized claim's conditions %+v, allocatedResourceStatuses %v; want no resize condition nor status",
			resized.Status.Conditions, resized.Status.AllocatedResourceStatuses)
	}

	_, err = claims.Patch(ctx, "fixed", types.MergePatchType, sizePatch("2Gi"), metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), refusal) {
		t.Fatalf("growing a claim of %s: %v; want Forbidden, %q", testbed.FixedStorageClassName, err, refusal)
	}
	t.Logf("growing a claim of %s: %v", testbed.FixedStorageClassName, err)
	fixed, err := claims.Get(ctx, "fixed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fixed.Spec.Resources.Requests[corev1.ResourceStorage]; !got.Equal(gi1) || !fixed.Status.Capacity.Storage().Equal(gi1) {
		t.Errorf("fixed claim's request %v, capacity %v; want 1Gi", got.String(), fixed.Status.Capacity.Storage())
	}
}

// claim is a 1Gi claim of class.
func claim(ns, name, class string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(class),
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			},
		},
	}
}

// sizePatch is the merge patch pgloop sends to grow a claim.
func sizePatch(size string) []byte {
	return fmt.Appendf(nil, `{"spec":{"resources":{"requests":{"storage":%q}}}}`, size)
}

func condition(c *corev1.PersistentVolumeClaim, t corev1.PersistentVolumeClaimConditionType) *corev1.PersistentVolumeClaimCondition {
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == t {
			return &c.Status.Conditions[i]
		}
	}
	return nil
}
