package informers

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

func TestPodsAndKeys(t *testing.T) {
	a, b := newPG("b", 2), newPG("a", 1)
	c := newPG("c", 1)
	c.Namespace = "other"
	objs := []runtime.Object{pod(a, 1), pod(a, 0, terminating), pod(b, 0), pod(c, 0)}

	t.Run("all namespaces", func(t *testing.T) {
		inf, _, _ := start(t, Options{}, discard{}, []*v1.Postgresql{a, b, c}, objs...)
		if got, want := strings.Join(inf.Keys(), ","), "db/a,db/b,other/c"; got != want {
			t.Errorf("keys %s, want %s", got, want)
		}
		var names []string
		for _, p := range inf.Pods("db/b") {
			names = append(names, p.Name)
		}
		if got, want := strings.Join(names, ","), "b-0,b-1"; got != want {
			t.Errorf("pods %s, want %s", got, want)
		}
		if _, ok := inf.Postgresql("other/c"); !ok {
			t.Error("other/c not found")
		}
	})
	t.Run("one namespace", func(t *testing.T) {
		inf, _, _ := start(t, Options{Namespaces: []string{"db", "db"}}, discard{}, []*v1.Postgresql{a, b, c}, objs...)
		if got, want := strings.Join(inf.Keys(), ","), "db/a,db/b"; got != want {
			t.Errorf("keys %s, want %s", got, want)
		}
		if _, ok := inf.Postgresql("other/c"); ok {
			t.Error("other/c found outside the watched namespace")
		}
		if got := inf.Pods("other/c"); got != nil {
			t.Errorf("pods of other/c: %v", got)
		}
		if _, ok := inf.Objects("other/c"); ok {
			t.Error("objects of other/c read outside the watched namespace")
		}
	})
	t.Run("several namespaces", func(t *testing.T) {
		inf, _, _ := start(t, Options{Namespaces: []string{"other", "db"}}, discard{}, []*v1.Postgresql{a, b, c}, objs...)
		if got, want := strings.Join(inf.Keys(), ","), "db/a,db/b,other/c"; got != want {
			t.Errorf("keys %s, want %s", got, want)
		}
		if got := inf.Pods("other/c"); len(got) != 1 {
			t.Errorf("pods of other/c: %v", got)
		}
	})
}

func TestSlim(t *testing.T) {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Data:       map[string][]byte{"password": []byte("hunter2")},
		StringData: map[string]string{"password": "hunter2"},
	}
	if _, err := slim(s); err != nil {
		t.Fatal(err)
	}
	if s.Data != nil || s.StringData != nil || s.ManagedFields != nil {
		t.Errorf("secret kept %+v", s)
	}
	cm := lock(newPG("c1", 1), "c1-0")
	cm.Data, cm.BinaryData = map[string]string{"big": "x"}, map[string][]byte{"blob": {1}}
	if _, err := slim(cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data != nil || cm.BinaryData != nil || cm.Annotations[cluster.AnnotationLeader] != "c1-0" {
		t.Errorf("configmap kept %+v: want its annotations only", cm)
	}
}
