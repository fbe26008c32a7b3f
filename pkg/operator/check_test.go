package operator

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/pgloop/pgloop/pkg/informers"
	"github.com/pgloop/pgloop/pkg/internal/fixtures"
)

// forbidList makes every list of resource r by kube fail as RBAC would.
func forbidList(kube *fake.Clientset, r schema.GroupResource) {
	kube.PrependReactor("list", r.Resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetResource().Group != r.Group {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(r, "", errors.New("no"))
	})
}

// TestCheckOwnedNamesTheForbiddenKind: whichever kind the informers watch
// the operator may not list, checkOwned names it, and where.
func TestCheckOwnedNamesTheForbiddenKind(t *testing.T) {
	type test struct {
		kind       string
		namespaces []string
		want       string
	}
	tests := []test{
		{"pods", nil, "not allowed to list pods in all namespaces: check the operator's RBAC"},
		{"cronjobs.batch", []string{"db"}, "not allowed to list cronjobs.batch in namespace db: check the operator's RBAC"},
		{"deployments.apps", []string{"a", "db"}, "not allowed to list deployments.apps in namespace a:"},
		{"resourcequotas", []string{"db"}, "not allowed to list resourcequotas in namespace db:"},
		{"serviceaccounts", nil, "not allowed to list serviceaccounts in all namespaces:"},
		{"roles.rbac.authorization.k8s.io", []string{"db"}, "not allowed to list roles.rbac.authorization.k8s.io in namespace db:"},
		{"rolebindings.rbac.authorization.k8s.io", []string{"db"}, "not allowed to list rolebindings.rbac.authorization.k8s.io in namespace db:"},
		{"storageclasses.storage.k8s.io", []string{"db"}, "not allowed to list storageclasses.storage.k8s.io (cluster-scoped): check the operator's RBAC"},
	}
	// And every other kind checkOwned lists.
	for _, k := range watchedKinds(fake.NewClientset()) {
		if !slices.ContainsFunc(tests, func(c test) bool { return c.kind == k.name }) {
			tests = append(tests, test{k.name, nil, "not allowed to list " + k.name + " in all namespaces:"})
		}
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Namespaces = tt.namespaces
			kube := fake.NewClientset()
			forbidList(kube, schema.ParseGroupResource(tt.kind))
			err := checkOwned(context.Background(), &cfg, kube)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !apierrors.IsForbidden(err) {
				t.Fatalf("error %v, want %q wrapping the Forbidden", err, tt.want)
			}
		})
	}
	t.Run("all allowed", func(t *testing.T) {
		cfg := testConfig(t)
		if err := checkOwned(context.Background(), &cfg, fake.NewClientset()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCheckListsSaysWhy: each cause of a failed list is worded once, for
// checkAPI and checkOwned alike, names the kind and where, and wraps the
// API's error.
func TestCheckListsSaysWhy(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	postgresqls := schema.ParseGroupResource(crdName)
	tests := []struct {
		name       string
		kind       string
		namespaces []string
		failIn     string // the namespace whose list fails
		err        error  // nil: the list waits for its context
		want       string
	}{
		{"CRD missing", crdName, nil, "", apierrors.NewNotFound(postgresqls, ""),
			"CRD postgresqls.pgloop.dev not installed (kubectl apply -f manifests/crds/)"},
		{"built-in kind missing", "pods", []string{"db"}, "db", apierrors.NewNotFound(pods, ""),
			"list pods in namespace db: "},
		{"unauthorized", crdName, []string{"db"}, "db", apierrors.NewUnauthorized("no"),
			"not allowed to list postgresqls.pgloop.dev in namespace db: check the operator's RBAC"},
		{"the second namespace", "pods", []string{"a", "db"}, "db", apierrors.NewForbidden(pods, "", errors.New("no")),
			"not allowed to list pods in namespace db: check the operator's RBAC"},
		{"no answer", "pods", []string{"db"}, "db", nil,
			"the Kubernetes API did not answer a list of pods in namespace db within 50ms"},
		{"anything else", "pods", nil, "", apierrors.NewInternalError(errors.New("etcd")),
			"list pods in all namespaces: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Namespaces = tt.namespaces
			cfg.CacheSyncTimeout = 50 * time.Millisecond
			kind := watchedKind{name: tt.kind, list: func(ctx context.Context, ns string) error {
				switch {
				case ns != tt.failIn:
					return nil
				case tt.err == nil:
					<-ctx.Done()
					return ctx.Err()
				}
				return tt.err
			}}
			err := checkLists(context.Background(), &cfg, []watchedKind{kind})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			if wrapped := tt.err; wrapped != nil && !errors.Is(err, wrapped) {
				t.Errorf("error %v does not wrap %v", err, wrapped)
			}
		})
	}
}

type nopNotifier struct{}

func (nopNotifier) Notify(string, string)       {}
func (nopNotifier) NotifyUrgent(string, string) {}

// TestWatchedKindsAreWhatTheInformersList keeps checkOwned in step with
// pkg/informers: the kinds it lists are those the informers list, so a
// kind the operator may not list is named whichever it is.
func TestWatchedKindsAreWhatTheInformersList(t *testing.T) {
	for _, namespaces := range [][]string{nil, {"a", "b"}} {
		kube := fake.NewClientset()
		inf := informers.New(kube, fixtures.NewPGClient(), informers.Options{Namespaces: namespaces}, nopNotifier{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		inf.Start(ctx)
		err := inf.WaitForCacheSync(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{}
		for _, a := range kube.Actions() {
			if a.GetVerb() == "list" {
				listed[a.GetResource().GroupResource().String()] = true
			}
		}
		checked := map[string]bool{}
		for _, k := range watchedKinds(kube) {
			checked[k.name] = true
			if !listed[k.name] {
				t.Errorf("namespaces %q: checkOwned lists %s, which the informers do not", namespaces, k.name)
			}
		}
		for name := range listed {
			if !checked[name] {
				t.Errorf("namespaces %q: the informers list %s, which checkOwned does not", namespaces, name)
			}
		}
	}
}
