package v1

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// TestScheme decodes a sample through a scheme built with AddToScheme, as
// clients and informers will.
func TestScheme(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []runtime.Object{&Postgresql{}, &PostgresqlList{}} {
		gvks, _, err := scheme.ObjectKinds(obj)
		if err != nil || len(gvks) != 1 || gvks[0].GroupVersion() != SchemeGroupVersion {
			t.Errorf("%T: kinds %v, err %v", obj, gvks, err)
		}
	}

	data, err := yamlToJSON(t, "full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	codecs := serializer.NewCodecFactory(scheme, serializer.EnableStrict)
	obj, gvk, err := codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if *gvk != SchemeGroupVersionKind {
		t.Errorf("gvk = %v", gvk)
	}
	p := obj.(*Postgresql)
	cp := p.DeepCopy()
	cp.Spec.Users["app_owner"][0] = FlagSuperuser
	if p.Spec.Users["app_owner"][0] == FlagSuperuser {
		t.Error("DeepCopy shares the users' flag lists")
	}
}
