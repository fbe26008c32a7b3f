package indb

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/patroni"
)

// TestSwitchoverUnderWay: a switchover asked again while no member
// publishes as the primary succeeds without a call once the primary it
// moves away from has left the role (its member data say so, or its pod
// is terminating or gone): a plan made while Patroni answered the first
// request carries it again, after the same plan replaced that pod. While
// the primary may still hold the role, it waits. No Patroni answers here:
// a call would fail.
func TestSwitchoverUnderWay(t *testing.T) {
	pg := testCluster(t)
	pod := func(name, role string, terminating bool) runtime.Object {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pg.Namespace, Name: name, Labels: cluster.Selector(pg.Name)}}
		if role != "" {
			p.Annotations = map[string]string{patroni.StatusAnnotation: `{"conn_url":"postgres://127.0.0.1:1/postgres",` +
				`"api_url":"http://127.0.0.1:1/patroni","state":"running","role":"` + role + `"}`}
		}
		if terminating {
			now := metav1.Now()
			p.DeletionTimestamp, p.Finalizers = &now, []string{"test"}
		}
		return p
	}
	tests := []struct {
		name string
		pods []runtime.Object
		// waits: the switchover still waits (ErrWaiting); else it is done.
		waits bool
	}{
		{name: "the former primary's member data say replica",
			pods: []runtime.Object{pod(pg.Name+"-0", patroni.RoleReplica, false), pod(pg.Name+"-1", patroni.RoleReplica, false)}},
		{name: "the former primary's pod terminating",
			pods: []runtime.Object{pod(pg.Name+"-0", patroni.RoleMaster, true), pod(pg.Name+"-1", patroni.RoleReplica, false)}},
		{name: "the former primary's pod gone",
			pods: []runtime.Object{pod(pg.Name+"-1", patroni.RoleReplica, false)}},
		{name: "the primary publishes no member data: it may still lead",
			pods: []runtime.Object{pod(pg.Name+"-0", "", false), pod(pg.Name+"-1", patroni.RoleReplica, false)}, waits: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, []*v1.Postgresql{pg}, tt.pods...)
			err := h.a.Switchover(context.Background(), keyOf(pg), pg.Name+"-0", pg.Name+"-1")
			if tt.waits != isWaiting(err) || !tt.waits && err != nil {
				t.Errorf("switchover: %v, want waiting %v", err, tt.waits)
			}
		})
	}
}
