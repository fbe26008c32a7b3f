package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/testbed"
)

// TestVolumeResize grows a cluster's volumes from 1Gi to 2Gi by editing
// spec.volume.size, as `kubectl patch` does: the claims are patched, the
// plane's resizer (test/resizer) expands them, and the cluster is Running
// for generation 2 only once every claim has 2Gi, with no pod replaced. A
// cluster whose StorageClass does not allow expansion shows the cause and
// keeps its claims and pods, while a neighbour is created meanwhile. (A
// shrink is refused by the apiserver: TestCRDUpdateRules.)
func TestVolumeResize(t *testing.T) {
	ns := env.Namespace(t)
	env.StartLabeller(t, ns)
	env.StartOperator(t, "operator", []string{ns})

	t.Run("grow", func(t *testing.T) {
		const name = "grow"
		ctx := Context(t, 2*stepDeadline)
		env.CreateCluster(t, ns, name, 2)
		env.MustState(ctx, t, ns, name, fsm.Running)
		mustPods(ctx, t, ns, name, ReadyPods(2))
		before := podUIDs(ctx, t, ns, name)

		began := time.Now()
		edited, err := env.MergePatchCluster(ctx, ns, name, `{"spec":{"volume":{"size":"2Gi"}}}`)
		if err != nil {
			t.Fatal(err)
		}
		// Running for the new generation only once every claim has 2Gi:
		// status.volumes is gone then.
		var early *v1.Postgresql // Running for generation 2 while a claim grew
		running, err := env.WaitCluster(ctx, ns, name, "Running with 2Gi volumes", func(pg *v1.Postgresql) bool {
			current := pg.Status.State == fsm.Running && pg.Status.ObservedGeneration >= edited.Generation
			if current && pg.Status.Volumes != nil && early == nil {
				early = pg.DeepCopy()
			}
			return current && pg.Status.Volumes == nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("edit -> Running with 2Gi volumes in %v; history %s", time.Since(began).Round(time.Millisecond), historyOf(running))
		if early != nil {
			t.Errorf("Running for generation %d while claims grew: %s, volumes %+v", edited.Generation, Summary(early), early.Status.Volumes)
		}
		if !hasTransition(running, fsm.Running, fsm.Updating) {
			t.Errorf("the cluster never went Updating while its volumes grew: %s", Summary(running))
		}
		for ord := range int32(2) {
			claim := mustClaim(ctx, t, ns, cluster.PersistentVolumeClaimName(name, ord))
			requested, capacity := claim.Spec.Resources.Requests[corev1.ResourceStorage], claim.Status.Capacity[corev1.ResourceStorage]
			if requested.String() != "2Gi" || capacity.String() != "2Gi" {
				t.Errorf("claim %s asks for %s and has %s, want 2Gi both", claim.Name, requested.String(), capacity.String())
			}
			pv, err := env.Kube.CoreV1().PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if q := pv.Spec.Capacity[corev1.ResourceStorage]; q.String() != "2Gi" {
				t.Errorf("volume %s of claim %s has %s, want 2Gi", pv.Name, claim.Name, q.String())
			}
		}
		mustPods(ctx, t, ns, name, ReadyPods(2))
		after := podUIDs(ctx, t, ns, name)
		if fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("pods replaced by the resize: %v before, %v after", before, after)
		}
	})

	t.Run("class that does not allow expansion", func(t *testing.T) {
		const name, neighbour = "fixed", "neighbour"
		ctx := Context(t, 2*stepDeadline)
		env.CreateCluster(t, ns, name, 1, func(pg *v1.Postgresql) { pg.Spec.Volume.StorageClass = testbed.FixedStorageClassName })
		env.MustState(ctx, t, ns, name, fsm.Running)
		mustPods(ctx, t, ns, name, ReadyPods(1))
		before := podUIDs(ctx, t, ns, name)

		if _, err := env.MergePatchCluster(ctx, ns, name, `{"spec":{"volume":{"size":"2Gi"}}}`); err != nil {
			t.Fatal(err)
		}
		stuck, err := env.WaitCluster(ctx, ns, name, "showing "+fsm.ReasonVolumeNotExpandable, func(pg *v1.Postgresql) bool {
			return pg.Status.Reason == fsm.ReasonVolumeNotExpandable && pg.Status.Volumes != nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s %s: %s", name, stuck.Status.State, stuck.Status.Reason, stuck.Status.Message)
		if stuck.Status.State != fsm.Updating || len(stuck.Status.Volumes.Claims) != 1 || stuck.Status.Volumes.Claims[0].Phase != v1.ClaimNotExpandable {
			t.Errorf("want Updating with the claim NotExpandable: %s, volumes %+v", Summary(stuck), stuck.Status.Volumes)
		}

		// A neighbour is created meanwhile, as fast as ever.
		began := time.Now()
		env.CreateCluster(t, ns, neighbour, 1)
		env.MustState(ctx, t, ns, neighbour, fsm.Running)
		t.Logf("neighbour create -> Running in %v while %s waits for its StorageClass", time.Since(began).Round(time.Millisecond), name)

		// The claim and the pod are left alone.
		claim := mustClaim(ctx, t, ns, cluster.PersistentVolumeClaimName(name, 0))
		if q := claim.Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse("1Gi")) != 0 {
			t.Errorf("claim %s of a class that does not allow expansion asks for %s, want 1Gi as before", claim.Name, q.String())
		}
		mustPods(ctx, t, ns, name, ReadyPods(1))
		if after := podUIDs(ctx, t, ns, name); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("pods replaced: %v before, %v after", before, after)
		}
		if pg, err := env.PG.Postgresqls(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		} else if pg.Status.Reason != fsm.ReasonVolumeNotExpandable || pg.Status.ObservedGeneration < pg.Generation {
			t.Errorf("after the neighbour: %s", Summary(pg))
		}
	})
}

// TestVolumeRetention deletes a cluster under each choice of
// spec.volume.retention and checks what is left, as docs/user-guide.md
// says: Retain (the default) keeps the volume claims and the credentials
// Secrets, the Secrets no longer owned by the deleted resource, and a
// cluster created again with the same name uses them as they are; Delete
// deletes both.
func TestVolumeRetention(t *testing.T) {
	ns := env.Namespace(t)
	env.StartLabeller(t, ns)
	env.StartOperator(t, "operator", []string{ns})

	for _, retention := range []v1.VolumeRetention{"", v1.DeleteVolumes} {
		t.Run("retention="+string(retention), func(t *testing.T) {
			name := "keep"
			if retention == v1.DeleteVolumes {
				name = "drop"
			}
			ctx := Context(t, 3*stepDeadline)
			pg := env.CreateCluster(t, ns, name, 1, func(pg *v1.Postgresql) { pg.Spec.Volume.Retention = retention })
			env.MustState(ctx, t, ns, name, fsm.Running)
			sel := metav1.ListOptions{LabelSelector: cluster.LabelClusterName + "=" + name}
			secrets, err := env.Kube.CoreV1().Secrets(ns).List(ctx, sel)
			if err != nil {
				t.Fatal(err)
			}
			if len(secrets.Items) == 0 {
				t.Fatalf("cluster %s has no credentials Secrets", name)
			}
			before := map[string]string{} // name -> password
			for _, s := range secrets.Items {
				before[s.Name] = string(s.Data["password"])
			}
			claim := mustClaim(ctx, t, ns, cluster.PersistentVolumeClaimName(name, 0))

			if err := env.PG.Postgresqls(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := env.WaitGone(ctx, ns, name); err != nil {
				t.Fatal(err)
			}
			secrets, err = env.Kube.CoreV1().Secrets(ns).List(ctx, sel)
			if err != nil {
				t.Fatal(err)
			}
			c, err := env.Kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
			if retention == v1.DeleteVolumes {
				if len(secrets.Items) != 0 {
					t.Errorf("retention Delete left %d Secrets", len(secrets.Items))
				}
				// The claim goes once the kubelet let go of it: gone,
				// or deleted and waiting for its protection finalizer.
				if err == nil && c.DeletionTimestamp == nil {
					t.Errorf("retention Delete left claim %s", c.Name)
				}
				return
			}
			if err != nil || c.UID != claim.UID {
				t.Fatalf("retention Retain: claim %s not kept (%v)", claim.Name, err)
			}
			if len(secrets.Items) != len(before) {
				t.Errorf("retention Retain kept %d of %d Secrets", len(secrets.Items), len(before))
			}
			for _, s := range secrets.Items {
				for _, ref := range s.OwnerReferences {
					if ref.UID == pg.UID {
						t.Errorf("Secret %s kept with an owner reference to the deleted cluster: the garbage collector deletes it", s.Name)
					}
				}
			}
			// Still there once the garbage collector has seen the
			// resource go: it is gone, and the Secrets were not its.
			// A cluster created again with the same name uses the kept
			// Secrets as they are (the passwords its data knows) and its
			// claim.
			env.CreateCluster(t, ns, name, 1)
			env.MustState(ctx, t, ns, name, fsm.Running)
			secrets, err = env.Kube.CoreV1().Secrets(ns).List(ctx, sel)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range secrets.Items {
				if pw, ok := before[s.Name]; !ok || pw == "" || pw != string(s.Data["password"]) {
					t.Errorf("Secret %s after the cluster was created again: not the kept password", s.Name)
				}
			}
			if c := mustClaim(ctx, t, ns, claim.Name); c.UID != claim.UID {
				t.Errorf("claim %s made anew (UID %s, was %s)", c.Name, c.UID, claim.UID)
			}
		})
	}
}

// mustClaim reads the claim ns/name from the API.
func mustClaim(ctx context.Context, t *testing.T, ns, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	c, err := env.Kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("while reading claim %s/%s: %v", ns, name, err)
	}
	return c
}

// hasTransition reports whether pg's history has a transition from one
// state to another.
func hasTransition(pg *v1.Postgresql, from, to string) bool {
	for _, h := range pg.Status.History {
		if h.From == from && h.To == to {
			return true
		}
	}
	return false
}
