package status

import (
	"bytes"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// TestDetailPatroniStore: a cluster that names Patroni's store shows it
// and where the leader lock is; one that does not (ConfigMaps, the
// default) shows no line.
func TestDetailPatroniStore(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        string // "" for no line
	}{
		{"default", nil, ""},
		{"endpoints", map[string]string{v1.AnnotationPatroniStore: "endpoints"},
			"Patroni store:   endpoints (pgloop.dev/patroni-store): leader lock in Endpoints db, the master Service's, which has no selector"},
		{"configmaps", map[string]string{v1.AnnotationPatroniStore: "configmaps"},
			"Patroni store:   configmaps (pgloop.dev/patroni-store): leader lock in ConfigMap db-leader"},
		{"unknown", map[string]string{v1.AnnotationPatroniStore: "etcd"},
			`Patroni store:   "etcd" (pgloop.dev/patroni-store): not a store pgloop knows`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pg := &v1.Postgresql{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default", Annotations: tc.annotations},
				Status: v1.PostgresqlStatus{State: "Running", Primary: "db-0"}}
			var out bytes.Buffer
			if err := PrintDetail(&out, &View{Cluster: pg}, PrintOptions{Now: now}); err != nil {
				t.Fatal(err)
			}
			got := out.String()
			switch {
			case tc.want == "" && strings.Contains(got, "Patroni store:"):
				t.Errorf("the detail of a cluster on the default store shows one:\n%s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("the detail lacks %q:\n%s", tc.want, got)
			}
		})
	}
}
