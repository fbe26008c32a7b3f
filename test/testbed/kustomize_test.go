package testbed

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// manifests/operator builds into the objects `kubectl apply -k` applies,
// whose maps unstructured's helpers can copy (kustomize's own hold Go ints).
func TestKustomizeOperatorManifests(t *testing.T) {
	objs, err := Kustomize("../../manifests/operator")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, ok, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if err != nil || !ok || len(containers) != 1 {
			t.Fatalf("the Deployment's containers: %v, %v, %v", containers, ok, err)
		}
		ports, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "ports")
		if len(ports) != 1 || ports[0].(map[string]any)["containerPort"] != int64(8080) {
			t.Errorf("the operator's ports: %v; want containerPort 8080 (int64)", ports)
		}
	}
	for _, want := range []string{"CustomResourceDefinition", "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("kustomize build manifests/operator: no %s in %v", want, kinds)
		}
	}
}
