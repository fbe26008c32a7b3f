package scale

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/pgloop/pgloop/pkg/cluster"
	pgfake "github.com/pgloop/pgloop/pkg/generated/clientset/versioned/fake"
	"github.com/pgloop/pgloop/test/pgtest"
)

// requestLog records the requests of two fake clientsets in the order
// they were made, as "verb resource[/subresource]", the Event writes
// apart.
type requestLog struct {
	mu           sync.Mutex
	seen, events []string
}

func (l *requestLog) watch(f *k8stesting.Fake) {
	f.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.GetVerb() + " " + a.GetResource().Resource
		if sub := a.GetSubresource(); sub != "" {
			name += "/" + sub
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if a.GetResource().Resource == eventsResource {
			l.events = append(l.events, name)
		} else {
			l.seen = append(l.seen, name)
		}
		return false, nil, nil
	})
}

// take returns the requests recorded since the last take, Events apart.
func (l *requestLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := l.seen
	l.seen = nil
	return seen
}

// TestObjectWriter runs the writes of two clusters of one namespace
// against fake clientsets: the requests, in order, are those pgloop makes
// to create a cluster (its create's requests on the idle operator,
// docs/scale.md), and the second cluster writes none of the namespace's
// shared objects.
func TestObjectWriter(t *testing.T) {
	ctx := context.Background()
	kube, pg := kubefake.NewClientset(), pgfake.NewSimpleClientset()
	log := &requestLog{}
	log.watch(&kube.Fake)
	log.watch(&pg.Fake)
	rec := newRecorder(kube)
	w := newObjectWriter(kube, pg, cluster.Options{}, rec)

	for _, tc := range []struct {
		name   string
		shared []string
	}{
		{name: "a", shared: []string{"create serviceaccounts", "create roles", "create rolebindings"}},
		{name: "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := pgtest.Cluster("ns", tc.name, 1)
			in.Generation = 1 // as the API server sets it
			c, err := w.create(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			writes := log.take()
			// The resource, the create plan's status, then its objects at
			// once (checked below for their order), then the status once
			// the objects are written.
			if len(writes) < 3 || writes[0] != "create postgresqls" || writes[1] != "update postgresqls/status" || writes[len(writes)-1] != "update postgresqls/status" {
				t.Fatalf("writes of the create = %q, want the resource, its status, its objects, its status", writes)
			}
			ensure := writes[2 : len(writes)-1]
			want := append([]string{"patch postgresqls", "create services", "create services", "create services",
				"create poddisruptionbudgets", "create secrets", "create secrets", "create statefulsets"}, tc.shared...)
			if got := slices.Sorted(slices.Values(ensure)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
				t.Errorf("objects written = %q, want %q", got, want)
			}
			// The shared objects one after another, then the Secrets; the
			// StatefulSet after the Secrets and the finalizer.
			before := func(a, b string) {
				t.Helper()
				if i, j := slices.Index(ensure, a), slices.Index(ensure, b); i < 0 || j < 0 || i > j {
					t.Errorf("%s not before %s in %q", a, b, ensure)
				}
			}
			if len(tc.shared) > 0 {
				before("create serviceaccounts", "create roles")
				before("create roles", "create rolebindings")
				before("create rolebindings", "create secrets")
			}
			if last := slices.Index(ensure, "create statefulsets"); slices.ContainsFunc(ensure[last+1:], func(s string) bool {
				return s == "create secrets" || s == "patch postgresqls"
			}) {
				t.Errorf("the StatefulSet written before a Secret or the finalizer: %q", ensure)
			}
			got, err := pg.PgloopV1().Postgresqls("ns").Get(ctx, tc.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			log.take() // the test's own Get
			if got.Status.State != "Creating" || len(got.Status.Timers) == 0 || !slices.Contains(got.Finalizers, cluster.Finalizer) {
				t.Errorf("after the create: state %q, timers %v, finalizers %q; want Creating with its timeout and pgloop's finalizer",
					got.Status.State, got.Status.Timers, got.Finalizers)
			}

			if err := w.running(ctx, c); err != nil {
				t.Fatal(err)
			}
			if writes := log.take(); !slices.Equal(writes, []string{"update postgresqls/status"}) {
				t.Errorf("writes once labelled = %q, want one status write", writes)
			}
			got, err = pg.PgloopV1().Postgresqls("ns").Get(ctx, tc.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			log.take() // the test's own Get
			if got.Status.State != "Running" || got.Status.Primary != tc.name+"-0" {
				t.Errorf("after the pod was labelled: state %q, primary %q; want Running, %s-0", got.Status.State, got.Status.Primary, tc.name)
			}
		})
	}
	// The recorder writes in the background: two Events per cluster,
	// Creating and Running.
	rec.Shutdown(10 * time.Second)
	if !slices.Equal(log.events, []string{"create events", "create events", "create events", "create events"}) {
		t.Errorf("Event writes = %q, want 4 creates", log.events)
	}
	var reasons []string
	list, err := kube.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range list.Items {
		reasons = append(reasons, ev.InvolvedObject.Name+" "+ev.Reason)
	}
	slices.Sort(reasons)
	if want := []string{"a Creating", "a Running", "b Creating", "b Running"}; !slices.Equal(reasons, want) {
		t.Errorf("Events = %q, want %q", reasons, want)
	}
}

func TestCallOf(t *testing.T) {
	for _, tc := range []struct {
		method, url, code string
		want              Call
	}{
		{"POST", "/api/v1/namespaces/ns/secrets", "201", Call{"create", "secrets", ""}},
		{"PUT", "/apis/pgloop.io/v1/namespaces/ns/postgresqls/a/status", "200", Call{"update", "postgresqls/status", ""}},
		{"PATCH", "/apis/pgloop.io/v1/namespaces/ns/postgresqls/a", "422", Call{"patch", "postgresqls", "422"}},
		{"POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles", "409", Call{"create", "roles", "409"}},
		{"GET", "/api/v1/namespaces/ns/pods?watch=true", "200", Call{"watch", "pods", ""}},
		{"GET", "/api/v1/namespaces/ns", "200", Call{"get", "namespaces", ""}},
		{"GET", "/api/v1/nodes", "200", Call{"list", "nodes", ""}},
		{"DELETE", "/apis/apps/v1/namespaces/ns/statefulsets/a", "error", Call{"delete", "statefulsets", "error"}},
	} {
		t.Run(tc.method+" "+tc.url, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, "https://127.0.0.1:6443"+tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := callOf(req, tc.code); got != tc.want {
				t.Errorf("callOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}
