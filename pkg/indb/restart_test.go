package indb

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/patroni"
)

// TestRestartOfThePrimaryAsksPatroniFirst: a plan made from member data
// Patroni published before the restart (a loop behind) carries the
// primary's restart again. Before it pauses the pooler, the effect asks
// the member's Patroni (GET /patroni) whether a restart is still pending:
// when not, it neither pauses nor restarts. When it is, or when Patroni
// does not say, the restart goes on.
func TestRestartOfThePrimaryAsksPatroniFirst(t *testing.T) {
	tests := []struct {
		name        string
		status      func(w http.ResponseWriter)
		wantRestart bool
	}{
		{name: "nothing pending any more", status: func(w http.ResponseWriter) {
			fmt.Fprint(w, `{"state":"running","role":"master","pending_restart":false}`)
		}},
		{name: "still pending", wantRestart: true, status: func(w http.ResponseWriter) {
			fmt.Fprint(w, `{"state":"running","role":"master","pending_restart":true}`)
		}},
		{name: "Patroni does not say", wantRestart: true, status: func(w http.ResponseWriter) {
			http.Error(w, "busy", http.StatusServiceUnavailable)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var statuses, restarts atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.Method + " " + r.URL.Path {
				case "GET /patroni":
					statuses.Add(1)
					tt.status(w)
				case "POST /restart":
					restarts.Add(1)
					fmt.Fprint(w, "restarted successfully")
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			pg := testCluster(t)
			pg.Status.PoolerPause = &v1.PoolerPause{From: pg.Name + "-0", To: pg.Name + "-0"}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pg.Namespace, Name: pg.Name + "-0", Labels: cluster.Selector(pg.Name),
				Annotations: map[string]string{patroni.StatusAnnotation: `{"conn_url":"postgres://127.0.0.1:1/postgres","api_url":"` +
					srv.URL + `/patroni","state":"running","role":"master","pending_restart":true}`}}}
			h := newHarness(t, []*v1.Postgresql{pg}, pod)
			if err := h.a.RestartMembers(context.Background(), keyOf(pg), []string{pod.Name}); err != nil {
				t.Fatalf("restart: %v", err)
			}
			if statuses.Load() != 1 {
				t.Errorf("GET /patroni %d times, want once", statuses.Load())
			}
			if got := restarts.Load() == 1; got != tt.wantRestart || restarts.Load() > 1 {
				t.Errorf("POST /restart %d times, want a restart %v", restarts.Load(), tt.wantRestart)
			}
		})
	}
}
