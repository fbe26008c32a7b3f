package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// FieldManager owns the fields that Apply sets.
const FieldManager = "pgloop-testbed"

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// ReadManifests decodes the YAML or JSON documents of the files at paths; a
// directory stands for its *.yaml, *.yml and *.json files, in name order.
func ReadManifests(paths ...string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, path := range paths {
		files := []string{path}
		if fi, err := os.Stat(path); err != nil {
			return nil, err
		} else if fi.IsDir() {
			entries, err := os.ReadDir(path)
			if err != nil {
				return nil, err
			}
			files = files[:0]
			for _, e := range entries {
				ext := filepath.Ext(e.Name())
				if !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
					files = append(files, filepath.Join(path, e.Name()))
				}
			}
		}
		for _, file := range files {
			f, err := os.Open(file)
			if err != nil {
				return nil, err
			}
			decoded, err := DecodeManifests(f)
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("while reading %s: %w", file, err)
			}
			objs = append(objs, decoded...)
		}
	}
	return objs, nil
}

// DecodeManifests decodes a stream of YAML or JSON documents, skipping empty
// ones.
func DecodeManifests(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := yaml.NewYAMLOrJSONDecoder(r, 4096)
	var objs []*unstructured.Unstructured
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(doc) == 0 {
			continue
		}
		obj := &unstructured.Unstructured{Object: doc}
		if obj.GetKind() == "" || obj.GetAPIVersion() == "" {
			return nil, fmt.Errorf("document without kind or apiVersion (name %q)", obj.GetName())
		}
		objs = append(objs, obj)
	}
}

// Apply server-side applies objs (a namespaced object without a namespace
// goes to "default"). CustomResourceDefinitions go first, and Apply waits for
// them to be Established, so objects of their kinds may follow in the same
// call.
func Apply(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	cached := memory.NewMemCacheClient(disc)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cached)

	isCRD := func(o *unstructured.Unstructured) bool {
		return o.GroupVersionKind().GroupKind() == schema.GroupKind{Group: crdResource.Group, Kind: "CustomResourceDefinition"}
	}
	crds := slices.DeleteFunc(slices.Clone(objs), func(o *unstructured.Unstructured) bool { return !isCRD(o) })
	others := slices.DeleteFunc(slices.Clone(objs), isCRD)

	for _, crd := range crds {
		if err := applyOne(ctx, dyn, mapper, crd); err != nil {
			return err
		}
	}
	for _, crd := range crds {
		if err := WaitForEstablished(ctx, dyn, crd.GetName()); err != nil {
			return err
		}
	}
	if len(crds) > 0 {
		// The new kinds are unknown to what discovery cached so far.
		cached.Invalidate()
		mapper.Reset()
	}
	for _, obj := range others {
		if err := applyOne(ctx, dyn, mapper, obj); err != nil {
			return err
		}
	}
	return nil
}

func applyOne(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	what := fmt.Sprintf("%s %s", strings.ToLower(gvk.Kind), obj.GetName())
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("while mapping %s: %w", what, err)
	}
	var res dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if obj.GetNamespace() == "" {
			obj = obj.DeepCopy()
			obj.SetNamespace(metav1.NamespaceDefault)
		}
		res = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
	}
	if _, err := res.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return fmt.Errorf("while applying %s: %w", what, err)
	}
	return nil
}

// WaitForEstablished waits until the CustomResourceDefinition name is
// Established, that is, served.
func WaitForEstablished(ctx context.Context, dyn dynamic.Interface, name string) error {
	_, err := WaitFor(ctx, ListWatch(dyn.Resource(crdResource), byName(name)), func(crd *unstructured.Unstructured) (bool, error) {
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("while waiting for CustomResourceDefinition %s: %w", name, err)
	}
	return nil
}
