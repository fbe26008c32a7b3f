package status

import (
	"context"
	"errors"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/client"
)

// fakePG is an in-memory client.Interface: it serves items, or the error
// set for a verb, and hands out the watchers it was given in order.
type fakePG struct {
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

var _ client.Interface = (*fakePG)(nil)

var errNotImplemented = errors.New("not implemented by fakePG")

func (f *fakePG) Get(_ context.Context, ns, name string) (*v1.Postgresql, error) {
	if f.getErr != nil {
		return nil, f.getErr
	}
	for i := range f.items {
		if f.items[i].Namespace == ns && f.items[i].Name == name {
			return f.items[i].DeepCopy(), nil
		}
	}
	return nil, apierrors.NewNotFound(v1.Resource(v1.PostgresqlResource), name)
}

func (f *fakePG) List(_ context.Context, ns string, opts metav1.ListOptions) (*v1.PostgresqlList, error) {
	f.listOpts = append(f.listOpts, opts)
	if len(f.listErrs) > 0 {
		err := f.listErrs[0]
		f.listErrs = f.listErrs[1:]
		if err != nil {
			return nil, err
		}
	}
	sel := fields.Everything()
	if opts.FieldSelector != "" {
		var err error
		if sel, err = fields.ParseSelector(opts.FieldSelector); err != nil {
			return nil, err
		}
	}
	out := &v1.PostgresqlList{ListMeta: metav1.ListMeta{ResourceVersion: f.rv}}
	for i := range f.items {
		p := &f.items[i]
		if (ns == "" || p.Namespace == ns) && sel.Matches(fields.Set{"metadata.name": p.Name, "metadata.namespace": p.Namespace}) {
			out.Items = append(out.Items, *p.DeepCopy())
		}
	}
	return out, nil
}

func (f *fakePG) Watch(_ context.Context, _ string, opts metav1.ListOptions) (watch.Interface, error) {
	f.watchOpts = append(f.watchOpts, opts)
	if f.watchErr != nil {
		return nil, f.watchErr
	}
	if len(f.watchers) == 0 {
		if f.exhausted != nil {
			f.exhausted()
		}
		return watch.NewEmptyWatch(), nil
	}
	w := f.watchers[0]
	f.watchers = slices.Delete(f.watchers, 0, 1)
	return w, nil
}

func (f *fakePG) Create(context.Context, *v1.Postgresql) (*v1.Postgresql, error) {
	return nil, errNotImplemented
}

func (f *fakePG) Update(context.Context, *v1.Postgresql) (*v1.Postgresql, error) {
	return nil, errNotImplemented
}

func (f *fakePG) UpdateStatus(context.Context, *v1.Postgresql) (*v1.Postgresql, error) {
	return nil, errNotImplemented
}

func (f *fakePG) Delete(context.Context, string, string, metav1.DeleteOptions) error {
	return errNotImplemented
}
