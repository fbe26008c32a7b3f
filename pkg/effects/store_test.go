package effects

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// TestEnsureNewClusterOnEndpoints: a new cluster whose manifest names
// Endpoints gets pods without KUBERNETES_USE_CONFIGMAPS and a master
// Service without a selector; pgloop writes no Endpoints (Patroni's
// leader makes <cluster> and keeps it).
func TestEnsureNewClusterOnEndpoints(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := testCluster(t)
		pg.Annotations = map[string]string{v1.AnnotationPatroniStore: string(v1.PatroniStoreEndpoints)}
		h := newHarness(t, []*v1.Postgresql{pg})
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		writes := h.kubeWrites()
		if slices.ContainsFunc(writes, func(w string) bool { return strings.Contains(w, " endpoints ") }) {
			t.Errorf("the ensure wrote endpoints: %v", writes)
		}
		ctx := context.Background()
		svc, err := h.kube.CoreV1().Services(pg.Namespace).Get(ctx, cluster.MasterServiceName(pg.Name), metav1.GetOptions{})
		if err != nil || svc.Spec.Selector != nil {
			t.Errorf("master service %v, selector %v; want none", err, svc.Spec.Selector)
		}
		if _, err := h.kube.CoreV1().Services(pg.Namespace).Get(ctx, cluster.ConfigServiceName(pg.Name), metav1.GetOptions{}); err != nil {
			t.Errorf("config service: %v", err)
		}
		sts, err := h.kube.AppsV1().StatefulSets(pg.Namespace).Get(ctx, pg.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if store, ok := cluster.TemplatePatroniStore(sts); !ok || store != v1.PatroniStoreEndpoints {
			t.Errorf("the pods run Patroni on %q (%v), want endpoints", store, ok)
		}
		for _, c := range sts.Spec.Template.Spec.Containers {
			if slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "KUBERNETES_USE_CONFIGMAPS" }) {
				t.Errorf("container %s of a cluster on Endpoints gets KUBERNETES_USE_CONFIGMAPS", c.Name)
			}
		}
	})
}
