package effects

import (
	"context"
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/pgloop/pgloop/pkg/act"
	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

func TestReplacePod(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pod := func(name string, uid types.UID) *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "db", UID: uid}}
		}
		claim := func(name string, uid types.UID) *corev1.PersistentVolumeClaim {
			return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "db", UID: uid}}
		}
		const p0, p1, c1 = "acid-minimal-cluster-0", "acid-minimal-cluster-1", "pgdata-acid-minimal-cluster-1"
		tests := []struct {
			name     string
			existing []runtime.Object
			replace  []act.Pod
			// wantGone and wantKept name the objects deleted and left.
			wantGone, wantKept []string
		}{
			{name: "deletes the pod", existing: []runtime.Object{pod(p1, "u1")},
				replace: []act.Pod{{Name: p1, UID: "u1"}}, wantGone: []string{p1}},
			{name: "stale UID: already replaced", existing: []runtime.Object{pod(p1, "u2")},
				replace: []act.Pod{{Name: p1, UID: "u1"}}, wantKept: []string{p1}},
			{name: "pod gone", replace: []act.Pod{{Name: p1, UID: "u1"}}},
			{name: "several pods at once", existing: []runtime.Object{pod(p0, "u0"), pod(p1, "u1")},
				replace: []act.Pod{{Name: p0, UID: "u0"}, {Name: p1, UID: "u1"}}, wantGone: []string{p0, p1}},
			{name: "a pod and its claim", existing: []runtime.Object{pod(p1, "u1"), claim(c1, "c1")},
				replace: []act.Pod{{Name: p1, UID: "u1", Claim: c1, ClaimUID: "c1"}}, wantGone: []string{p1, c1}},
			{name: "a claim already replaced is left", existing: []runtime.Object{pod(p1, "u1"), claim(c1, "c2")},
				replace: []act.Pod{{Name: p1, UID: "u1", Claim: c1, ClaimUID: "c1"}}, wantGone: []string{p1}, wantKept: []string{c1}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				pg := testCluster(t)
				h := newHarness(t, []*v1.Postgresql{pg}, tt.existing...)
				// The fake clientset ignores preconditions; the apiserver
				// answers Conflict when the UID differs.
				for _, res := range []string{"pods", "persistentvolumeclaims"} {
					h.kube.PrependReactor("delete", res, func(a k8stesting.Action) (bool, runtime.Object, error) {
						d := a.(k8stesting.DeleteActionImpl)
						obj, err := h.kube.Tracker().Get(corev1.SchemeGroupVersion.WithResource(res), d.Namespace, d.Name)
						if err != nil {
							return true, nil, err
						}
						if pre := d.DeleteOptions.Preconditions; pre != nil && pre.UID != nil && *pre.UID != obj.(metav1.Object).GetUID() {
							return true, nil, apierrors.NewConflict(corev1.Resource(res), d.Name, errors.New("precondition failed"))
						}
						return false, nil, nil
					})
				}
				if err := h.eff.ReplacePods(context.Background(), keyOf(pg), tt.replace); err != nil {
					t.Fatal(err)
				}
				exists := func(name string) bool {
					_, errPod := h.kube.CoreV1().Pods("db").Get(context.Background(), name, metav1.GetOptions{})
					_, errClaim := h.kube.CoreV1().PersistentVolumeClaims("db").Get(context.Background(), name, metav1.GetOptions{})
					return errPod == nil || errClaim == nil
				}
				for _, name := range tt.wantGone {
					if exists(name) {
						t.Errorf("%s not deleted", name)
					}
				}
				for _, name := range tt.wantKept {
					if !exists(name) {
						t.Errorf("%s deleted", name)
					}
				}
			})
		}
	})
}

// TestNudge: the nudge annotates the StatefulSet with the quota version,
// which is all it takes for its controller to sync it again.
func TestNudge(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := testCluster(t)
		h := newHarness(t, []*v1.Postgresql{pg})
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		h.kube.ClearActions()
		if err := h.eff.Nudge(context.Background(), keyOf(pg), "q7"); err != nil {
			t.Fatal(err)
		}
		if got, want := h.kubeWrites(), []string{"patch statefulsets acid-minimal-cluster"}; !slices.Equal(got, want) {
			t.Errorf("writes %v, want %v", got, want)
		}
		sts, err := h.kube.AppsV1().StatefulSets("db").Get(context.Background(), cluster.StatefulSetName(pg.Name), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := sts.Annotations[cluster.AnnotationQuotaSeen]; got != "q7" {
			t.Errorf("annotation %s = %q, want q7", cluster.AnnotationQuotaSeen, got)
		}
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		if got := h.kubeWrites(); len(got) != 0 {
			t.Errorf("an ensure after the nudge wrote %v: the annotation is no difference", got)
		}
		gone := testCluster(t)
		gone.Name = "gone"
		if err := newHarness(t, []*v1.Postgresql{gone}).eff.Nudge(context.Background(), keyOf(gone), "q7"); err != nil {
			t.Errorf("nudge of a StatefulSet that is gone: %v", err)
		}
	})
}
