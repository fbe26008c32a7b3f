package testbed

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Kustomize builds the kustomization in dir, as `kubectl apply -k dir`
// would, and returns its objects, ready for Apply.
func Kustomize(dir string) ([]*unstructured.Unstructured, error) {
	return KustomizeFS(filesys.MakeFsOnDisk(), dir)
}

// KustomizeFS builds the kustomization in dir of fs.
func KustomizeFS(fs filesys.FileSystem, dir string) ([]*unstructured.Unstructured, error) {
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	out := make([]*unstructured.Unstructured, 0, resMap.Size())
	for _, r := range resMap.Resources() {
		// Through JSON: kustomize's maps hold Go ints, which
		// unstructured's deep copies refuse (they want int64).
		data, err := r.MarshalJSON()
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		out = append(out, u)
	}
	return out, nil
}
