package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// TestRunBackup: `pgloop backup` patches the two annotations of the
// cluster, and refuses a type pgBackRest does not take before it calls
// the API.
func TestRunBackup(t *testing.T) {
	var got map[string]map[string]map[string]string
	var path, method string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method, path = r.Method, r.URL.Path
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &got); err != nil {
			t.Errorf("patch %s: %v", body, err)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"pgloop.dev/v1","kind":"Postgresql","metadata":{"name":"db","namespace":"prod"}}`))
	}))
	defer srv.Close()
	conn := genericclioptions.NewConfigFlags(false)
	conn.APIServer, conn.Namespace = ptr.To(srv.URL), ptr.To("prod")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var out bytes.Buffer
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	if err := runBackup(ctx, &out, conn, "db", v1.BackupDifferential, at); err != nil {
		t.Fatal(err)
	}
	if method != http.MethodPatch || path != "/apis/pgloop.dev/v1/namespaces/prod/postgresqls/db" {
		t.Errorf("%s %s", method, path)
	}
	a := got["metadata"]["annotations"]
	if a[v1.AnnotationBackupRequestedAt] != "2026-12-03T10:00:00Z" || a[v1.AnnotationBackupType] != "diff" {
		t.Errorf("annotations %v", a)
	}
	if !strings.Contains(out.String(), "diff backup of prod/db requested at 2026-12-03T10:00:00Z") {
		t.Errorf("output %q", out.String())
	}

	method = ""
	if err := runBackup(ctx, &out, conn, "db", "weekly", at); err == nil || !strings.Contains(err.Error(), "must be one of full, diff, incr") {
		t.Errorf("type weekly: %v", err)
	}
	if method != "" {
		t.Error("a bad type reached the API")
	}
}
