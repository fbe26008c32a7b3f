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

func TestAddOwnerReference(t *testing.T) {
	a := metav1.OwnerReference{APIVersion: "pgloop.dev/v1", Kind: "Postgresql", Name: "a", UID: types.UID("ua"), Controller: ptr.To(false)}
	b := metav1.OwnerReference{APIVersion: "pgloop.dev/v1", Kind: "Postgresql", Name: "b", UID: types.UID("ub"), Controller: ptr.To(false)}
	renamed := a
	renamed.Name = "a-renamed"
	cases := []struct {
		name    string
		refs    []metav1.OwnerReference
		add     metav1.OwnerReference
		want    []metav1.OwnerReference
		changed bool
	}{
		{"first", nil, a, []metav1.OwnerReference{a}, true},
		{"second cluster", []metav1.OwnerReference{a}, b, []metav1.OwnerReference{a, b}, true},
		{"already there", []metav1.OwnerReference{a, b}, b, []metav1.OwnerReference{a, b}, false},
		{"same UID is the same owner", []metav1.OwnerReference{a}, renamed, []metav1.OwnerReference{a}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := slices.Clone(c.refs)
			got, changed := AddOwnerReference(in, c.add)
			if changed != c.changed || !slices.EqualFunc(got, c.want, func(x, y metav1.OwnerReference) bool { return x.UID == y.UID && x.Name == y.Name }) {
				t.Errorf("got %v, %v; want %v, %v", got, changed, c.want, c.changed)
			}
			if !slices.EqualFunc(in, c.refs, func(x, y metav1.OwnerReference) bool { return x.UID == y.UID }) {
				t.Errorf("input modified")
			}
		})
	}
}
