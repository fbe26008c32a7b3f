package status

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

var (
	pgResource = v1.Resource(v1.PostgresqlResource)
	forbidden  = func(verb, name string) error {
		return apierrors.NewForbidden(pgResource, name, errors.New(`User "jane" cannot `+verb+` resource "postgresqls"`))
	}
	// noSuchResource is what client-go makes of the apiserver's plain
	// "404 page not found" for a group it does not serve.
	noSuchResource = apierrors.NewGenericServerResponse(404, "GET", pgResource, "", "404 page not found", 0, true)
	refused        = &url.Error{Op: "Get", URL: "https://10.0.0.1:6443/apis/pgloop.dev/v1/namespaces/x/postgresqls",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	timedOut = &url.Error{Op: "Get", URL: "https://api.example.com:443/apis/pgloop.dev/v1/postgresqls?limit=500",
		Err: context.DeadlineExceeded}
)

func TestErrors(t *testing.T) {
	list := func(ns string, all bool) func(*fakeAPI) error {
		return func(pg *fakeAPI) error { _, err := List(context.Background(), pg.client(), ns, all); return err }
	}
	detail := func(ns, name string) func(*fakeAPI) error {
		return func(pg *fakeAPI) error {
			_, err := Detail(context.Background(), pg.client(), fake.NewClientset(), ns, name)
			return err
		}
	}
	watchOne := func(ns, name string) func(*fakeAPI) error {
		return func(pg *fakeAPI) error {
			return Watch(context.Background(), pg.client(), &bytes.Buffer{}, WatchOptions{Namespace: ns, Name: name})
		}
	}
	tests := []struct {
		name string
		pg   *fakeAPI
		call func(*fakeAPI) error
		kind error
		want string
	}{
		{"list forbidden", &fakeAPI{listErrs: []error{forbidden("list", "")}}, list("x", false), ErrForbidden,
			`cannot list postgresqls.pgloop.dev in namespace "x": ask for list on postgresqls (API group pgloop.dev)`},
		{"list all forbidden", &fakeAPI{listErrs: []error{forbidden("list", "")}}, list("x", true), ErrForbidden,
			`cannot list postgresqls.pgloop.dev in all namespaces: ask for list on postgresqls (API group pgloop.dev) in a ClusterRole`},
		{"list without the CRD", &fakeAPI{listErrs: []error{noSuchResource}}, list("x", false), ErrCRDNotInstalled,
			`the Postgresql CRD (postgresqls.pgloop.dev) is not installed in this cluster`},
		{"list refused", &fakeAPI{listErrs: []error{refused}}, list("x", false), ErrUnreachable,
			`cannot reach the Kubernetes API at https://10.0.0.1:6443: dial tcp: connect: connection refused`},
		{"list timed out", &fakeAPI{listErrs: []error{timedOut}}, list("x", true), ErrUnreachable,
			`cannot reach the Kubernetes API at https://api.example.com:443: context deadline exceeded`},
		{"list other error", &fakeAPI{listErrs: []error{apierrors.NewInternalError(errors.New("etcd is sad"))}}, list("x", false), nil,
			`list postgresqls.pgloop.dev in namespace "x": Internal error occurred: etcd is sad`},
		{"get forbidden", &fakeAPI{getErr: forbidden("get", "db")}, detail("x", "db"), ErrForbidden,
			`cannot get postgresqls.pgloop.dev "db" in namespace "x": ask for get on postgresqls (API group pgloop.dev)`},
		{"no such cluster", &fakeAPI{}, detail("x", "db"), ErrClusterNotFound,
			`postgresql x/db not found`},
		{"no such cluster, list forbidden", &fakeAPI{listErrs: []error{forbidden("list", "")}}, detail("x", "db"), ErrClusterNotFound,
			`postgresql x/db not found`},
		{"get without the CRD", &fakeAPI{getErr: noSuchResource, listErrs: []error{noSuchResource}}, detail("x", "db"), ErrCRDNotInstalled,
			`the Postgresql CRD (postgresqls.pgloop.dev) is not installed in this cluster`},
		{"get refused", &fakeAPI{getErr: refused}, detail("x", "db"), ErrUnreachable,
			`cannot reach the Kubernetes API at https://10.0.0.1:6443: dial tcp: connect: connection refused`},
		{"watch forbidden", &fakeAPI{watchErr: forbidden("watch", "")}, watchOne("x", ""), ErrForbidden,
			`cannot watch postgresqls.pgloop.dev in namespace "x": ask for watch on postgresqls (API group pgloop.dev)`},
		{"watch without the CRD", &fakeAPI{listErrs: []error{noSuchResource}}, watchOne("x", ""), ErrCRDNotInstalled,
			`the Postgresql CRD (postgresqls.pgloop.dev) is not installed in this cluster`},
		{"watch a missing cluster", &fakeAPI{}, watchOne("x", "db"), ErrClusterNotFound,
			`postgresql x/db not found`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(tc.pg)
			if err == nil {
				t.Fatal("no error")
			}
			if err.Error() != tc.want {
				t.Errorf("error\n  %s\nwant\n  %s", err, tc.want)
			}
			for _, k := range []error{ErrForbidden, ErrCRDNotInstalled, ErrClusterNotFound, ErrUnreachable} {
				if got := errors.Is(err, k); got != (k == tc.kind) {
					t.Errorf("errors.Is(err, %v) = %v", k, got)
				}
			}
		})
	}
}

// TestPodsForbidden: the cluster is shown without its pods, and the error
// still reaches the caller for a non-zero exit.
func TestPodsForbidden(t *testing.T) {
	kube := fake.NewClientset()
	kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no"))
	})
	pg := &fakeAPI{items: items(clusters())}
	v, err := Detail(context.Background(), pg.client(), kube, "default", "db-running")
	want := `cannot list pods in namespace "default": ask for list on pods`
	if err == nil || err.Error() != want || !errors.Is(err, ErrForbidden) {
		t.Fatalf("error %v, want %q", err, want)
	}
	if v == nil || v.Cluster.Name != "db-running" {
		t.Fatalf("view %+v, want db-running without pods", v)
	}
	var out bytes.Buffer
	if err := PrintDetail(&out, v, PrintOptions{Now: now}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Pods:\n  ("+want+")\n") {
		t.Errorf("detail does not say why the pods are missing:\n%s", out.String())
	}
}
