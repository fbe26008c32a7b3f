package main

import (
	"maps"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/pgloop/pgloop/test/testbed"
)

// The store's settings ConfigMap holds pgloop's variables for it, and is
// applied after the namespaces, before the Deployment that reads it.
func TestStoreSettings(t *testing.T) {
	s3 := testbed.S3{Endpoint: "127.0.0.1:4321", Bucket: "pgloop", Region: "us-east-1"}
	cm, err := storeSettings(s3, "pgloop-system/"+operatorSettings, "default/pgloop-backup")
	if err != nil {
		t.Fatal(err)
	}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	want := map[string]string{
		"PGLOOP_BACKUP_S3_ENDPOINT": "127.0.0.1:4321",
		"PGLOOP_BACKUP_S3_BUCKET":   "pgloop",
		"PGLOOP_BACKUP_S3_REGION":   "us-east-1",
		"PGLOOP_BACKUP_S3_SECRET":   "pgloop-backup",
		"PGLOOP_BACKUP_S3_CA_KEY":   "ca.crt",
	}
	if !maps.Equal(want, data) {
		t.Errorf("data %v, want %v", data, want)
	}
	if cm.GetNamespace() != "pgloop-system" || cm.GetName() != operatorSettings || cm.GetKind() != "ConfigMap" {
		t.Errorf("%s %s/%s", cm.GetKind(), cm.GetNamespace(), cm.GetName())
	}
	if _, err := storeSettings(s3, "nonamespace", "default/pgloop-backup"); err == nil {
		t.Error("a ref without a namespace was taken")
	}

	obj := func(kind, name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		if kind == "Deployment" {
			u.SetAPIVersion("apps/v1")
		}
		u.SetKind(kind)
		u.SetName(name)
		return u
	}
	objs := insertAfterNamespaces([]*unstructured.Unstructured{obj("Secret", "sample"), obj("Namespace", "pgloop-system"),
		obj("ServiceAccount", "sa"), obj("Deployment", "op")}, cm)
	var got []string
	for _, o := range objs {
		got = append(got, o.GetKind())
	}
	if want := []string{"Secret", "Namespace", "ConfigMap", "ServiceAccount", "Deployment"}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}
