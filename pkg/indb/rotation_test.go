package indb

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/pgsql"
)

func secretOf(username, password string, extra map[string]string) *corev1.Secret {
	s := &corev1.Secret{Data: map[string][]byte{cluster.SecretUsernameKey: []byte(username), cluster.SecretPasswordKey: []byte(password)}}
	for k, v := range extra {
		s.Data[k] = []byte(v)
	}
	return s
}

func TestUserRoles(t *testing.T) {
	flags := []string{"CREATEDB"}
	for _, tt := range []struct {
		name   string
		secret *corev1.Secret
		want   []pgsql.Role
		next   bool
	}{
		{"the user itself", secretOf("app", "p0", nil), []pgsql.Role{{Name: "app", Flags: flags, Password: "p0"}}, false},
		{"in place, pending", secretOf("app", "p0", map[string]string{cluster.SecretNextPasswordKey: "p1", cluster.SecretNextUsernameKey: "app"}),
			[]pgsql.Role{{Name: "app", Flags: flags, Password: "p1"}}, true},
		{"a new role, pending", secretOf("app", "p0", map[string]string{cluster.SecretNextPasswordKey: "p1", cluster.SecretNextUsernameKey: "app261203"}),
			[]pgsql.Role{{Name: "app", Flags: flags}, {Name: "app261203", Flags: flags, Password: "p1", MemberOf: "app"}}, true},
		{"a rotation role in the Secret", secretOf("app261203", "p1", nil),
			[]pgsql.Role{{Name: "app", Flags: flags}, {Name: "app261203", Flags: flags, Password: "p1", MemberOf: "app"}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, next := userRoles("app", flags, tt.secret)
			if next != tt.next || len(got) != len(tt.want) {
				t.Fatalf("got %+v %v, want %+v %v", got, next, tt.want, tt.next)
			}
			for i := range got {
				g, w := got[i], tt.want[i]
				if g.Name != w.Name || g.Password != w.Password || g.MemberOf != w.MemberOf || len(g.Flags) != len(w.Flags) {
					t.Errorf("role %d: %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

// TestScheduledRotationSecret: the rotation under way writes the new
// credentials as next-username and next-password once, and its end moves
// them to username and password, with the rotation's ID and the next date.
func TestScheduledRotationSecret(t *testing.T) {
	pg := testCluster(t)
	next := metav1.NewTime(time.Date(2026, 12, 3, 13, 0, 0, 0, time.UTC))
	pg.Status.PasswordRotation = &v1.PasswordRotationStatus{NextRotation: &next, Last: &v1.PasswordRotation{ID: "r1",
		Users: []v1.RotatedUser{{Name: "app", Mode: v1.RotationNewRole, Role: "app261203"}}}}
	name := cluster.SecretName("app", pg.Name)
	sec := secretOf("app", "p0", nil)
	sec.Name, sec.Namespace = name, pg.Namespace
	h := newHarness(t, []*v1.Postgresql{pg}, sec)
	r, err := h.a.run(keyOf(pg))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := r.startScheduledRotation(ctx, pg, "app", sec)
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Data[cluster.SecretNextUsernameKey]) != "app261203" || len(s.Data[cluster.SecretNextPasswordKey]) == 0 {
		t.Fatalf("started: %v", s.Data)
	}
	// Again: the pending credentials stay.
	again, err := r.startScheduledRotation(ctx, pg, "app", s)
	if err != nil || string(again.Data[cluster.SecretNextPasswordKey]) != string(s.Data[cluster.SecretNextPasswordKey]) {
		t.Fatalf("started again: %v %v", again.Data, err)
	}
	// A user the rotation does not name is left alone.
	if other, err := r.startScheduledRotation(ctx, pg, "reader", sec); err != nil || other != sec {
		t.Fatalf("another user: %v", err)
	}
	if err := r.finishRotation(ctx, pg, "app", s); err != nil {
		t.Fatal(err)
	}
	done, err := h.kube.CoreV1().Secrets(pg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(done.Data[cluster.SecretUsernameKey]) != "app261203" || string(done.Data[cluster.SecretPasswordKey]) != string(s.Data[cluster.SecretNextPasswordKey]) ||
		done.Data[cluster.SecretNextPasswordKey] != nil || done.Data[cluster.SecretNextUsernameKey] != nil {
		t.Errorf("finished: %v", done.Data)
	}
	if done.Annotations[v1.AnnotationPasswordRotated] != "r1" || string(done.Data[v1.SecretNextRotationKey]) != "2026-12-03T13:00:00Z" {
		t.Errorf("finished: annotations %v, nextRotation %q", done.Annotations, done.Data[v1.SecretNextRotationKey])
	}
	// Taken: a later sync starts nothing.
	if s2, err := r.startScheduledRotation(ctx, pg, "app", done); err != nil || s2 != done {
		t.Errorf("after the end: %v", err)
	}
}
