package cluster

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func TestRole(t *testing.T) {
	pg := loadSample(t, "minimal")
	role := Role(pg)
	granted := map[string][]string{}
	for _, r := range role.Rules {
		for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.ResourceNames} {
			if slices.Contains(list, "*") {
				t.Errorf("wildcard in rule %+v", r)
			}
		}
		if !slices.Equal(r.APIGroups, []string{""}) || len(r.NonResourceURLs) > 0 {
			t.Errorf("rule %+v outside the core group", r)
		}
		for _, res := range r.Resources {
			granted[res] = append(granted[res], r.Verbs...)
		}
	}
	all := []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	want := map[string][]string{
		"configmaps": all,
		"endpoints":  all,
		"pods":       {"get", "list", "patch", "update", "watch"},
		"services":   {"create"},
	}
	if len(granted) != len(want) {
		t.Errorf("granted on %v, want exactly %v", granted, want)
	}
	for res, verbs := range want {
		got := slices.Sorted(slices.Values(granted[res]))
		if !slices.Equal(got, verbs) {
			t.Errorf("%s: verbs %v, want %v", res, got, verbs)
		}
	}
}

func TestRoleBinding(t *testing.T) {
	pg := loadSample(t, "minimal")
	rb := RoleBinding(pg)
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != Role(pg).Name || rb.RoleRef.APIGroup != "rbac.authorization.k8s.io" {
		t.Errorf("roleRef %+v does not name the pods' Role", rb.RoleRef)
	}
	sa := ServiceAccount(pg)
	if len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != sa.Name || rb.Subjects[0].Namespace != pg.Namespace {
		t.Errorf("subjects %+v, want the ServiceAccount %s/%s", rb.Subjects, pg.Namespace, sa.Name)
	}
}

func TestSharedObjectsHaveNoOwner(t *testing.T) {
	pg := loadSample(t, "minimal")
	for _, o := range []Object{ServiceAccount(pg), Role(pg), RoleBinding(pg)} {
		if refs := o.GetOwnerReferences(); len(refs) != 0 {
			t.Errorf("%s: owner references %v, want none: it belongs to the namespace", o.GetName(), refs)
		}
	}
}

func TestWithoutClusterOwnerReferences(t *testing.T) {
	a := metav1.OwnerReference{APIVersion: "pgloop.dev/v1", Kind: "Postgresql", Name: "a", UID: types.UID("ua"), Controller: ptr.To(false)}
	b := metav1.OwnerReference{APIVersion: "pgloop.dev/v1", Kind: "Postgresql", Name: "b", UID: types.UID("ub"), Controller: ptr.To(false)}
	other := metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "Postgresql", Name: "x", UID: types.UID("ux")}
	cm := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "y", UID: types.UID("uy")}
	cases := []struct {
		name    string
		refs    []metav1.OwnerReference
		want    []metav1.OwnerReference
		changed bool
	}{
		{"none", nil, nil, false},
		{"legacy", []metav1.OwnerReference{a, b}, nil, true},
		{"others kept", []metav1.OwnerReference{cm, a, other, b}, []metav1.OwnerReference{cm, other}, true},
		{"others only", []metav1.OwnerReference{cm, other}, []metav1.OwnerReference{cm, other}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := slices.Clone(c.refs)
			got, changed := WithoutClusterOwnerReferences(in)
			if changed != c.changed || !slices.EqualFunc(got, c.want, func(x, y metav1.OwnerReference) bool { return x.UID == y.UID }) {
				t.Errorf("got %v, %v; want %v, %v", got, changed, c.want, c.changed)
			}
			if !slices.EqualFunc(in, c.refs, func(x, y metav1.OwnerReference) bool { return x.UID == y.UID }) {
				t.Errorf("input modified")
			}
		})
	}
}
