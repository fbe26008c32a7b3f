package indb

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// routesTo reads where the master Service routes: its ready EndpointSlice
// addresses when it has any, else the Ready, running pods its selector
// matches (a plane whose pod IPs get no EndpointSlices).
func TestRoutesTo(t *testing.T) {
	pg := &v1.Postgresql{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{cluster.LabelRole: cluster.RoleMaster, cluster.LabelClusterName: "db"}},
	}
	pod := func(name, role, ip string, ready, deleting bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{cluster.LabelRole: role, cluster.LabelClusterName: "db"}},
			Status:     corev1.PodStatus{PodIP: ip},
		}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
			p.Finalizers = []string{"test"}
		}
		return p
	}
	slice := func(name string, ready bool, addrs ...string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: addrs, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}},
		}
	}
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		want string
	}{
		{"endpoint slices, ready only", []runtime.Object{svc, slice("a", true, "10.0.0.2"), slice("b", false, "10.0.0.1"),
			pod("db-0", cluster.RoleMaster, "10.0.0.1", true, false)}, "10.0.0.2"},
		{"endpoint slices, both primaries still listed", []runtime.Object{svc, slice("a", true, "10.0.0.2", "10.0.0.1")}, "10.0.0.1,10.0.0.2"},
		{"no endpoint slices: the selected pods, Ready and running", []runtime.Object{svc,
			pod("db-0", cluster.RoleMaster, "10.0.0.1", false, false),
			pod("db-1", cluster.RoleMaster, "10.0.0.2", true, false),
			pod("db-2", cluster.RoleMaster, "10.0.0.3", true, true),
			pod("db-3", cluster.RoleReplica, "10.0.0.4", true, false)}, "10.0.0.2"},
		{"no endpoint slices, no pod", []runtime.Object{svc}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, []*v1.Postgresql{pg}, tc.objs...)
			r, err := h.a.run("ns/db")
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.routesTo(context.Background(), pg)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("routes to %q, want %q", got, tc.want)
			}
		})
	}
}

// ResumePoolers of a cluster whose pooler runs no pod, or has no Secret,
// has nothing to resume.
func TestResumePoolersNothingToResume(t *testing.T) {
	pg := &v1.Postgresql{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"},
		Spec: v1.PostgresqlSpec{EnableConnectionPooler: ptr.To(true)}}
	starting := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-pooler-x",
		Labels: cluster.PoolerSelector("db", cluster.RoleMaster)}}
	for name, objs := range map[string][]runtime.Object{"no pod": nil, "a pod without IP": {starting}} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, []*v1.Postgresql{pg}, objs...)
			if err := h.a.ResumePoolers(context.Background(), "ns/db"); err != nil {
				t.Errorf("ResumePoolers: %v", err)
			}
		})
	}
}
