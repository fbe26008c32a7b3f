package status

import (
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	pgfake "github.com/pgloop/pgloop/pkg/generated/clientset/versioned/fake"
)

// fakeAPI is what the fake clientset of client serves: items, or the error
// set for a verb, and the watchers it was given, in order.
type fakeAPI struct {
	items []v1.Postgresql
	rv    string

	getErr   error
	listErrs []error // one per List call, in order; nil entries succeed
	watchErr error

	// watchers are returned by successive Watch calls. When none is left,
	// exhausted is called (tests cancel their context there) and an empty
	// watcher is returned.
	watchers  []watch.Interface
	exhausted func()

	listOpts  []metav1.ListOptions
	watchOpts []metav1.ListOptions
}

// client returns a fake clientset whose reactors answer from f. Its object
// tracker is never reached: every get, list and watch of postgresqls is
// handled here.
func (f *fakeAPI) client() *pgfake.Clientset {
	cs := pgfake.NewSimpleClientset()
	cs.PrependReactor("get", v1.PostgresqlResource, f.get)
	cs.PrependReactor("list", v1.PostgresqlResource, f.list)
	cs.PrependWatchReactor(v1.PostgresqlResource, f.watch)
	return cs
}

func (f *fakeAPI) get(a k8stesting.Action) (bool, runtime.Object, error) {
	if f.getErr != nil {
		return true, nil, f.getErr
	}
	ns, name := a.GetNamespace(), a.(k8stesting.GetAction).GetName()
	for i := range f.items {
		if f.items[i].Namespace == ns && f.items[i].Name == name {
			return true, f.items[i].DeepCopy(), nil
		}
	}
	return true, nil, apierrors.NewNotFound(v1.Resource(v1.PostgresqlResource), name)
}

func (f *fakeAPI) list(a k8stesting.Action) (bool, runtime.Object, error) {
	ns, opts := a.GetNamespace(), a.(k8stesting.ListActionImpl).ListOptions
	f.listOpts = append(f.listOpts, opts)
	if len(f.listErrs) > 0 {
		err := f.listErrs[0]
		f.listErrs = f.listErrs[1:]
		if err != nil {
			return true, nil, err
		}
	}
	sel := fields.Everything()
	if opts.FieldSelector != "" {
		var err error
		if sel, err = fields.ParseSelector(opts.FieldSelector); err != nil {
			return true, nil, err
		}
	}
	out := &v1.PostgresqlList{ListMeta: metav1.ListMeta{ResourceVersion: f.rv}}
	for i := range f.items {
		p := &f.items[i]
		if (ns == "" || p.Namespace == ns) && sel.Matches(fields.Set{"metadata.name": p.Name, "metadata.namespace": p.Namespace}) {
			out.Items = append(out.Items, *p.DeepCopy())
		}
	}
	return true, out, nil
}

func (f *fakeAPI) watch(a k8stesting.Action) (bool, watch.Interface, error) {
	f.watchOpts = append(f.watchOpts, a.(k8stesting.WatchActionImpl).ListOptions)
	if f.watchErr != nil {
		return true, nil, f.watchErr
	}
	if len(f.watchers) == 0 {
		if f.exhausted != nil {
			f.exhausted()
		}
		return true, watch.NewEmptyWatch(), nil
	}
	w := f.watchers[0]
	f.watchers = slices.Delete(f.watchers, 0, 1)
	return true, w, nil
}
