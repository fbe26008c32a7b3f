package v1

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestValidateClone(t *testing.T) {
	const uid = "0d4a7a52-7f3c-4b8e-9a57-1f0b7d5c2e11"
	clone := func(c CloneSpec) func(p *Postgresql) {
		return func(p *Postgresql) { p.Spec.Clone = &c }
	}
	tests := []struct {
		name   string
		mutate func(p *Postgresql)
		want   []string
	}{
		{name: "to a time", mutate: clone(CloneSpec{Cluster: "acid-source", UID: uid, Timestamp: "2017-12-19T12:40:33+01:00"})},
		{name: "UTC with Z and fractions", mutate: clone(CloneSpec{Cluster: "acid-source", UID: uid, Timestamp: "2017-12-19T11:40:33.25Z"})},
		{name: "from another namespace", mutate: clone(CloneSpec{Cluster: "acid-test", Namespace: "prod", UID: uid, Timestamp: "2017-12-19T12:40:33+01:00"})},
		{name: "of itself", mutate: clone(CloneSpec{Cluster: "acid-test", UID: uid, Timestamp: "2017-12-19T12:40:33+01:00"}),
			want: []string{`spec.clone.cluster: Invalid value: "acid-test": a cluster cannot be a clone of itself`}},
		{name: "of itself, its namespace named", mutate: func(p *Postgresql) {
			p.Namespace = "prod"
			p.Spec.Clone = &CloneSpec{Cluster: "acid-test", Namespace: "prod", UID: uid, Timestamp: "2017-12-19T12:40:33+01:00"}
		}, want: []string{"a cluster cannot be a clone of itself"}},
		{name: "no offset", mutate: clone(CloneSpec{Cluster: "acid-source", UID: uid, Timestamp: "2017-12-19 12:40:33"}),
			want: []string{`spec.clone.timestamp: Invalid value: "2017-12-19 12:40:33": must be RFC 3339 with an offset`}},
		{name: "no uid", mutate: clone(CloneSpec{Cluster: "acid-source", Timestamp: "2017-12-19T12:40:33+01:00"}),
			want: []string{"spec.clone.uid: Required value: the source cluster's metadata.uid"}},
		{name: "a bad uid and source name", mutate: clone(CloneSpec{Cluster: "Acid_Source", UID: "../x", Timestamp: "2017-12-19T12:40:33+01:00"}),
			want: []string{`spec.clone.cluster: Invalid value: "Acid_Source"`, `spec.clone.uid: Invalid value: "../x": must be the source cluster's metadata.uid`}},
		{name: "no timestamp, no uid", mutate: clone(CloneSpec{Cluster: "acid-source"}),
			want: []string{"spec.clone.uid: Required value: the source cluster's metadata.uid"}},
		{name: "no timestamp: the end of the source's archive", mutate: clone(CloneSpec{Cluster: "acid-source", UID: uid})},
		{name: "after the cluster was created", mutate: func(p *Postgresql) {
			p.CreationTimestamp = metav1.NewTime(time.Date(2017, 12, 19, 11, 40, 32, 0, time.UTC))
			p.Spec.Clone = &CloneSpec{Cluster: "acid-source", UID: uid, Timestamp: "2017-12-19T12:40:33+01:00"}
		}, want: []string{"spec.clone.timestamp: Invalid value: \"2017-12-19T12:40:33+01:00\": is in the future: after the cluster was created (2017-12-19T11:40:32Z)"}},
		{name: "the second the cluster was created", mutate: func(p *Postgresql) {
			p.CreationTimestamp = metav1.NewTime(time.Date(2017, 12, 19, 11, 40, 33, 0, time.UTC))
			p.Spec.Clone = &CloneSpec{Cluster: "acid-source", UID: uid, Timestamp: "2017-12-19T12:40:33+01:00"}
		}},
		{name: "zalando's WAL-G location", mutate: clone(CloneSpec{Cluster: "acid-source", UID: uid, Timestamp: "2017-12-19T12:40:33+01:00",
			S3WalPath: "s3://bucket/spilo/acid-source/uid/wal", S3ForcePathStyle: ptr.To(true)}),
			want: []string{"spec.clone.s3_wal_path: Forbidden: pgloop restores from pgBackRest repositories only", "WAL-G archives cannot be read by pgBackRest: see docs/migrating.md",
				"spec.clone.s3_force_path_style: Forbidden"}},
		{name: "archiving off", mutate: func(p *Postgresql) {
			p.Spec.Backup = &Backup{Enabled: ptr.To(false)}
			p.Spec.Clone = &CloneSpec{Cluster: "acid-source", UID: uid, Timestamp: "2017-12-19T12:40:33+01:00"}
		}, want: []string{"spec.backup.enabled: Forbidden: is false, which leaves the cluster no pgBackRest repository"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkValidate(t, tt.mutate, tt.want)
		})
	}
}

func TestCloneSourceNamespace(t *testing.T) {
	if got := (&CloneSpec{}).SourceNamespace("own"); got != "own" {
		t.Errorf("SourceNamespace without namespace = %q, want own", got)
	}
	if got := (&CloneSpec{Namespace: "prod"}).SourceNamespace("own"); got != "prod" {
		t.Errorf("SourceNamespace with namespace = %q, want prod", got)
	}
}
