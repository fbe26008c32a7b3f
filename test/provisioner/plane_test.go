package provisioner_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/pgloop/pgloop/test/provisioner"
	"github.com/pgloop/pgloop/test/testbed"
)

// The plane test's size, and who binds: go test ./provisioner/ -run
// TestPlane -claims 1000 -workers 0 measures kwok's stages on the same
// claims (docs/testbed.md has the figures).
var (
	claims  = flag.Int("claims", 200, "claims the plane test creates")
	workers = flag.Int("workers", provisioner.DefaultWorkers, "the provisioner's workers in the plane test (0: kwok's volume stages)")
)

// TestPlane creates claims on a plane whose volumes are the provisioner's,
// checks that each is Bound to a volume made as kwok's stage makes it,
// then deletes them and checks their volumes are deleted. It logs how long
// each half took; it asserts no time.
func TestPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	p, err := testbed.Start(ctx, testbed.Options{Nodes: 1, VolumeWorkers: *workers})
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
	checkKwokStages(t, p, *workers > 0)
	ns := p.Namespace(t)
	client := p.Client.CoreV1().PersistentVolumeClaims(ns)

	began := time.Now()
	var creates sync.WaitGroup
	errs := make(chan error, *claims)
	for w := range 8 {
		creates.Go(func() {
			for i := w; i < *claims; i += 8 {
				if _, err := client.Create(ctx, claim(ns, fmt.Sprintf("data-%04d", i)), metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		})
	}
	creates.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("creating a claim: %v", err)
	}
	created := time.Since(began)
	poll(t, ctx, fmt.Sprintf("%d claims Bound", *claims), func() (string, bool) {
		list, err := client.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error(), false
		}
		bound := 0
		for _, c := range list.Items {
			if c.Status.Phase == corev1.ClaimBound {
				bound++
			}
		}
		return fmt.Sprintf("%d of %d Bound", bound, len(list.Items)), bound == *claims
	})
	t.Logf("%d claims created in %v, all Bound after %v (workers %d)", *claims, created.Round(time.Millisecond),
		time.Since(began).Round(time.Millisecond), *workers)

	list, err := client.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The PV controller may be a moment behind in making the volumes
	// Bound too.
	poll(t, ctx, "every volume Bound", func() (string, bool) {
		n, err := boundVolumes(ctx, p)
		return fmt.Sprintf("%d Bound", n), err == nil && n == *claims
	})
	for _, c := range list.Items {
		checkBound(t, ctx, p, &c)
	}

	began = time.Now()
	if err := client.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "every volume deleted", func() (string, bool) {
		pvs, err := p.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error(), false
		}
		return fmt.Sprintf("%d left", len(pvs.Items)), len(pvs.Items) == 0
	})
	t.Logf("%d claims deleted: every volume Released and deleted after %v", *claims, time.Since(began).Round(time.Millisecond))
}

// claim is a claim as a StatefulSet's volumeClaimTemplate makes it, of
// the plane's default class.
func claim(ns, name string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(testbed.StorageClassName),
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			},
		},
	}
}

func boundVolumes(ctx context.Context, p *testbed.Plane) (int, error) {
	pvs, err := p.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, pv := range pvs.Items {
		if pv.Status.Phase == corev1.VolumeBound {
			n++
		}
	}
	return n, nil
}

// checkBound checks a Bound claim and its volume: the fields kwok's stage
// writes.
func checkBound(t *testing.T, ctx context.Context, p *testbed.Plane, c *corev1.PersistentVolumeClaim) {
	t.Helper()
	name := "pvc-" + string(c.UID)
	pv, err := p.Client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("claim %s: %v", c.Name, err)
	}
	var problems []string
	check := func(ok bool, what string, args ...any) {
		if !ok {
			problems = append(problems, fmt.Sprintf(what, args...))
		}
	}
	gib := resource.MustParse("1Gi")
	check(c.Spec.VolumeName == name, "claim's volumeName %q", c.Spec.VolumeName)
	check(c.Status.Capacity.Storage().Equal(gib), "claim's capacity %v", c.Status.Capacity)
	check(len(c.Status.AccessModes) == 1 && c.Status.AccessModes[0] == corev1.ReadWriteOnce, "claim's access modes %v", c.Status.AccessModes)
	for _, ann := range []string{provisioner.AnnBindCompleted, provisioner.AnnBoundByController} {
		check(c.Annotations[ann] == "yes", "claim's %s %q", ann, c.Annotations[ann])
	}
	for _, ann := range []string{provisioner.AnnStorageProvisioner, provisioner.AnnBetaStorageProvisioner} {
		check(c.Annotations[ann] == testbed.Provisioner, "claim's %s %q", ann, c.Annotations[ann])
	}
	check(pv.Annotations[provisioner.AnnProvisionedBy] == testbed.Provisioner, "volume's %s %q", provisioner.AnnProvisionedBy, pv.Annotations[provisioner.AnnProvisionedBy])
	check(pv.Status.Phase == corev1.VolumeBound, "volume's phase %q", pv.Status.Phase)
	check(pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.UID == c.UID && pv.Spec.ClaimRef.Name == c.Name &&
		pv.Spec.ClaimRef.Namespace == c.Namespace && pv.Spec.ClaimRef.Kind == "PersistentVolumeClaim", "volume's claimRef %+v", pv.Spec.ClaimRef)
	check(pv.Spec.Capacity.Storage().Equal(gib), "volume's capacity %v", pv.Spec.Capacity)
	check(pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete, "volume's reclaim policy %q", pv.Spec.PersistentVolumeReclaimPolicy)
	check(pv.Spec.StorageClassName == testbed.StorageClassName, "volume's class %q", pv.Spec.StorageClassName)
	check(pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == corev1.PersistentVolumeFilesystem, "volume's mode %v", pv.Spec.VolumeMode)
	check(pv.Spec.HostPath != nil && pv.Spec.HostPath.Path == "/tmp/kwok-local-path-provisioner/"+name, "volume's hostPath %+v", pv.Spec.HostPath)
	if len(problems) > 0 {
		t.Errorf("claim %s: %s", c.Name, strings.Join(problems, "; "))
	}
}

// checkKwokStages checks that kwok was given its volume stages, or not
// when the provisioner does their work.
func checkKwokStages(t *testing.T, p *testbed.Plane, provisioned bool) {
	t.Helper()
	for _, proc := range p.Processes() {
		if proc.Name != "kwok" {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(proc.PID), "cmdline"))
		if err != nil {
			t.Fatal(err)
		}
		args := string(cmdline)
		for _, stage := range []string{"pvc-provision.yaml", "pv-bind.yaml", "pvc-delete.yaml", "pv-delete.yaml"} {
			if given := strings.Contains(args, "/"+stage); given == provisioned {
				t.Errorf("kwok given %s: %v, with the provisioner: %v", stage, given, provisioned)
			}
		}
		if !strings.Contains(args, "/pod-ready.yaml") {
			t.Error("kwok not given its pod stages")
		}
		return
	}
	t.Fatal("no kwok process")
}

// poll calls cond every 100ms until it holds; on timeout the test fails
// with cond's last word.
func poll(t *testing.T, ctx context.Context, what string, cond func() (string, bool)) {
	t.Helper()
	var last string
	for {
		var ok bool
		if last, ok = cond(); ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last: %s)", what, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
