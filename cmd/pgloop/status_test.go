package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/status"
)

// fakeAPI answers the few requests `pgloop status` makes, so the command's
// wiring (kubectl flags, REST config, clients, exit errors) is tested
// without a control plane. The views themselves are tested in pkg/status.
func fakeAPI(t *testing.T, crd bool, forbidden bool) *httptest.Server {
	t.Helper()
	since := metav1.NewTime(time.Now().Add(-3 * time.Hour))
	pg := v1.Postgresql{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.SchemeGroupVersion.String(), Kind: v1.PostgresqlKind},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db-a", ResourceVersion: "5"},
		Spec:       v1.PostgresqlSpec{NumberOfInstances: 1},
		Status: v1.PostgresqlStatus{State: "Running", StateSince: &since, Epoch: 2, ReadyInstances: 1,
			DesiredInstances: 1, Primary: "db-a-0", Reason: "AllInstancesReady"},
	}
	reply := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if err := json.NewEncoder(w).Encode(v); err != nil {
			t.Error(err)
		}
	}
	mux := http.NewServeMux()
	base := "/apis/pgloop.dev/v1/namespaces/default/postgresqls"
	if crd {
		mux.HandleFunc(base, func(w http.ResponseWriter, r *http.Request) {
			if forbidden {
				reply(w, http.StatusForbidden, &metav1.Status{
					TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
					Status:   metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
					Message: `postgresqls.pgloop.dev is forbidden: User "jane" cannot list resource "postgresqls" in API group "pgloop.dev" in the namespace "default"`,
					Details: &metav1.StatusDetails{Group: v1.GroupName, Kind: v1.PostgresqlResource},
				})
				return
			}
			reply(w, http.StatusOK, &v1.PostgresqlList{
				TypeMeta: metav1.TypeMeta{APIVersion: v1.SchemeGroupVersion.String(), Kind: v1.PostgresqlListKind},
				ListMeta: metav1.ListMeta{ResourceVersion: "5"},
				Items:    []v1.Postgresql{pg},
			})
		})
		mux.HandleFunc(base+"/db-a", func(w http.ResponseWriter, r *http.Request) { reply(w, http.StatusOK, &pg) })
	}
	mux.HandleFunc("/api/v1/namespaces/default/pods", func(w http.ResponseWriter, r *http.Request) {
		if got, want := r.URL.Query().Get("labelSelector"), "application=spilo,cluster-name=db-a"; got != want {
			t.Errorf("pods selected by %q, want %q", got, want)
		}
		reply(w, http.StatusOK, &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	// No kubeconfig of the machine running the tests may leak in.
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	return srv
}

func TestStatusCommand(t *testing.T) {
	tests := []struct {
		name      string
		crd, deny bool
		args      []string
		want      []string // substrings of the output
		wantErr   string
		kind      error
	}{
		{name: "list", crd: true, args: []string{"status"},
			want: []string{"NAME   STATE     SINCE   READY   NEXT   REASON\n", "db-a   Running   3h      1/1     -      AllInstancesReady\n"}},
		{name: "wide", crd: true, args: []string{"status", "-o", "wide"},
			want: []string{"EPOCH   PRIMARY   MESSAGE\n", "2       db-a-0    -\n"}},
		{name: "json", crd: true, args: []string{"status", "-o", "json"},
			want: []string{`"name": "db-a"`, `"state": "Running"`}},
		{name: "detail", crd: true, args: []string{"status", "db-a"},
			want: []string{"Name:         db-a\n", "Primary:      db-a-0\n", "  > Running\n"}},
		{name: "detail yaml", crd: true, args: []string{"status", "db-a", "-o", "yaml"},
			want: []string{"apiVersion: pgloop.dev/v1\nkind: Postgresql\n", "state: Running\n"}},
		{name: "mermaid", crd: true, args: []string{"status", "db-a", "--mermaid"},
			want: []string{"stateDiagram-v2\n", "    class Running current\n"}},
		{name: "no such cluster", crd: true, args: []string{"status", "db-x"},
			wantErr: "postgresql default/db-x not found", kind: status.ErrClusterNotFound},
		{name: "no CRD", args: []string{"status"},
			wantErr: "the Postgresql CRD (postgresqls.pgloop.dev) is not installed in this cluster", kind: status.ErrCRDNotInstalled},
		{name: "no CRD, detail", args: []string{"status", "db-a"},
			wantErr: "the Postgresql CRD (postgresqls.pgloop.dev) is not installed in this cluster", kind: status.ErrCRDNotInstalled},
		{name: "forbidden", crd: true, deny: true, args: []string{"status"},
			wantErr: `cannot list postgresqls.pgloop.dev in namespace "default": ask for list on postgresqls (API group pgloop.dev)`, kind: status.ErrForbidden},
		{name: "bad output", crd: true, args: []string{"status", "-o", "table"}, wantErr: `unknown output format "table"`},
		{name: "name and -A", crd: true, args: []string{"status", "db-a", "-A"}, wantErr: "cannot be combined with -A"},
		{name: "mermaid without name", crd: true, args: []string{"status", "--mermaid"}, wantErr: "--mermaid needs a cluster NAME"},
		{name: "watch json", crd: true, args: []string{"status", "-w", "-o", "json"}, wantErr: "cannot be combined with -o json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakeAPI(t, tc.crd, tc.deny)
			out, err := run(t, append(tc.args, "--server", srv.URL)...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				if tc.kind != nil && !errors.Is(err, tc.kind) {
					t.Errorf("error %v is not %v", err, tc.kind)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestStatusUnreachable(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	// Nothing listens on port 1: the connection is refused at once.
	_, err := run(t, "status", "--server", "http://127.0.0.1:1")
	want := "cannot reach the Kubernetes API at http://127.0.0.1:1: "
	if err == nil || !strings.HasPrefix(err.Error(), want) || !errors.Is(err, status.ErrUnreachable) {
		t.Fatalf("error %v, want %q...", err, want)
	}
}

func TestStatusEmptyList(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&v1.PostgresqlList{TypeMeta: metav1.TypeMeta{APIVersion: "pgloop.dev/v1", Kind: v1.PostgresqlListKind}})
	}))
	defer srv.Close()
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	out, err := run(t, "status", "-n", "prod", "--server", srv.URL)
	if err != nil || out != "No Postgresql clusters found in prod namespace.\n" {
		t.Fatalf("output %q, %v", out, err)
	}
}

func TestKubectlPluginName(t *testing.T) {
	for _, tc := range []struct{ arg0, want string }{
		{"/usr/local/bin/kubectl-pgloop", "kubectl pgloop status [NAME] [flags]"},
		{"kubectl-pgloop.exe", "kubectl pgloop status [NAME] [flags]"},
		{"/usr/local/bin/pgloop", "pgloop status [NAME] [flags]"},
	} {
		t.Run(tc.arg0, func(t *testing.T) {
			root := newRootCmd()
			asKubectlPlugin(root, tc.arg0)
			cmd, _, err := root.Find([]string{"status"})
			if err != nil {
				t.Fatal(err)
			}
			if got := cmd.UseLine(); got != tc.want {
				t.Errorf("usage %q, want %q", got, tc.want)
			}
			if strings.HasPrefix(tc.want, "kubectl") && !strings.Contains(cmd.Example, "  kubectl pgloop status -A") {
				t.Errorf("examples do not say kubectl pgloop:\n%s", cmd.Example)
			}
		})
	}
}
