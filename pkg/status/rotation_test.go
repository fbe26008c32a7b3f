package status

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// TestDetailPasswordRotation: a cluster with a rotation schedule shows
// it, the last rotation and the roles kept.
func TestDetailPasswordRotation(t *testing.T) {
	next := metav1.NewTime(now.Add(45 * time.Second))
	started := metav1.NewTime(now.Add(-time.Minute))
	finished := metav1.NewTime(now.Add(-59 * time.Second))
	pg := &v1.Postgresql{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"}, Status: v1.PostgresqlStatus{
		State: "Running",
		PasswordRotation: &v1.PasswordRotationStatus{
			NextRotation: &next,
			Last: &v1.PasswordRotation{ID: "20260504T115900Z", StartedAt: started, FinishedAt: &finished,
				Users: []v1.RotatedUser{{Name: "app", Mode: v1.RotationNewRole, Role: "app260504"}, {Name: "flyway", Mode: v1.RotationInPlace, Role: "flyway"}}},
			Roles: []v1.RotationRole{{Name: "app260504", User: "app", CreatedAt: started}},
		},
	}}
	var out bytes.Buffer
	if err := PrintDetail(&out, &View{Cluster: pg}, PrintOptions{Now: now}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Password rotation:", "Next:", "in 45s",
		"20260504T115900Z, started", "app -> app260504, flyway -> flyway", "Roles kept:", "app260504"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the detail lacks %q:\n%s", want, out.String())
		}
	}
}

// TestDetailRequests: the users' requests show, each with what became of
// it; a cluster without any shows no section.
func TestDetailRequests(t *testing.T) {
	seen := metav1.NewTime(now.Add(-2 * time.Minute))
	pg := &v1.Postgresql{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"}, Status: v1.PostgresqlStatus{
		State: "Running",
		Requests: []v1.RequestStatus{
			{Kind: v1.RequestBackup, Value: "2026-05-04T11:58:00Z", SeenAt: seen, Phase: v1.RequestFailed,
				Message: "the cluster has no backup repository"},
			{Kind: v1.RequestSync, Value: "2026-05-04T11:57:00Z", SeenAt: seen, Phase: v1.RequestPending},
		},
	}}
	var out bytes.Buffer
	if err := PrintDetail(&out, &View{Cluster: pg}, PrintOptions{Now: now}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Requests:", "backup", "Failed", "the cluster has no backup repository", "sync", "Pending", "2m"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the detail lacks %q:\n%s", want, out.String())
		}
	}
	pg.Status.Requests = nil
	out.Reset()
	if err := PrintDetail(&out, &View{Cluster: pg}, PrintOptions{Now: now}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "Requests:") {
		t.Errorf("a cluster without requests shows the section:\n%s", out.String())
	}
}
