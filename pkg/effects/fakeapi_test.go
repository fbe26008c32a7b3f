package effects

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	pgfake "github.com/pgloop/pgloop/pkg/generated/clientset/versioned/fake"
)

// pgAPI is the API server's side of the Postgresql resources, which the
// effects reach through the fake clientset that clientset returns. Update
// and UpdateStatus check the resourceVersion like the apiserver (a stale
// one is a Conflict); Update keeps the stored status and UpdateStatus the
// stored spec and metadata; a resource being deleted goes once its last
// finalizer is removed. Hooks inject errors by call number (1-based).
type pgAPI struct {
	mu      sync.Mutex
	objs    map[string]*v1.Postgresql
	rv      int
	calls   map[string]int
	failGet func(n int) error
	failUpd func(n int) error
	failSt  func(n int) error
	// failPatch injects errors into patches.
	failPatch func(n int) error
}

func newPGAPI(pgs ...*v1.Postgresql) *pgAPI {
	f := &pgAPI{objs: map[string]*v1.Postgresql{}, calls: map[string]int{}}
	for _, pg := range pgs {
		f.put(pg)
	}
	return f
}

// clientset returns a fake clientset that f serves: every request for
// postgresqls reaches f, never the clientset's own object tracker.
func (f *pgAPI) clientset() *pgfake.Clientset {
	cs := pgfake.NewSimpleClientset()
	cs.PrependReactor("*", v1.PostgresqlResource, f.react)
	return cs
}

// react serves a get, a list, an update, an update of the status
// subresource and a JSON patch of the finalizers, counted as Get, List,
// Update, UpdateStatus and Patch; the effects need nothing else.
func (f *pgAPI) react(a k8stesting.Action) (bool, runtime.Object, error) {
	switch {
	case a.GetVerb() == "get":
		obj, err := f.getCall(a.GetNamespace(), a.(k8stesting.GetAction).GetName())
		return true, obj, err
	case a.GetVerb() == "list":
		return true, f.list(a.GetNamespace()), nil
	case a.GetVerb() == "patch" && a.GetSubresource() == "":
		p := a.(k8stesting.PatchAction)
		obj, err := f.patch(a.GetNamespace(), p.GetName(), p.GetPatchType(), p.GetPatch())
		return true, obj, err
	case a.GetVerb() == "update" && a.GetSubresource() == "":
		obj, err := f.update(a.(k8stesting.UpdateAction).GetObject().(*v1.Postgresql))
		return true, obj, err
	case a.GetVerb() == "update" && a.GetSubresource() == "status":
		obj, err := f.updateStatus(a.(k8stesting.UpdateAction).GetObject().(*v1.Postgresql))
		return true, obj, err
	}
	return true, nil, fmt.Errorf("%s %s: not implemented", a.GetVerb(), a.GetResource().Resource)
}

// put stores pg as it is (test setup), with a new resourceVersion.
func (f *pgAPI) put(pg *v1.Postgresql) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	pg = pg.DeepCopy()
	pg.ResourceVersion = fmt.Sprint(f.rv)
	f.objs[pg.Namespace+"/"+pg.Name] = pg
}

// get returns a copy of the stored resource, nil when there is none.
func (f *pgAPI) get(ns, name string) *v1.Postgresql {
	f.mu.Lock()
	defer f.mu.Unlock()
	if pg := f.objs[ns+"/"+name]; pg != nil {
		return pg.DeepCopy()
	}
	return nil
}

func (f *pgAPI) count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

func (f *pgAPI) writes() int { return f.count("Update") + f.count("UpdateStatus") + f.count("Patch") }

func (f *pgAPI) getCall(ns, name string) (*v1.Postgresql, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["Get"]++
	if f.failGet != nil {
		if err := f.failGet(f.calls["Get"]); err != nil {
			return nil, err
		}
	}
	pg := f.objs[ns+"/"+name]
	if pg == nil {
		return nil, apierrors.NewNotFound(v1.Resource(v1.PostgresqlResource), name)
	}
	return pg.DeepCopy(), nil
}

func (f *pgAPI) list(ns string) *v1.PostgresqlList {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["List"]++
	out := &v1.PostgresqlList{}
	for _, pg := range f.objs {
		if pg.Namespace == ns {
			out.Items = append(out.Items, *pg.DeepCopy())
		}
	}
	return out
}

// patch applies a JSON patch of the finalizers, the only one the effects
// send: its operations test and add /metadata/finalizers. As the
// apiserver, it answers a failed test with 422 (Invalid), and refuses a new
// finalizer on a resource being deleted.
func (f *pgAPI) patch(ns, name string, pt types.PatchType, data []byte) (*v1.Postgresql, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["Patch"]++
	if f.failPatch != nil {
		if err := f.failPatch(f.calls["Patch"]); err != nil {
			return nil, err
		}
	}
	if pt != types.JSONPatchType {
		return nil, fmt.Errorf("patch type %s: not implemented", pt)
	}
	stored := f.objs[ns+"/"+name]
	if stored == nil {
		return nil, apierrors.NewNotFound(v1.Resource(v1.PostgresqlResource), name)
	}
	var ops []struct {
		Op    string    `json:"op"`
		Path  string    `json:"path"`
		Value *[]string `json:"value"`
	}
	if err := json.Unmarshal(data, &ops); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	invalid := func(msg string) error {
		return apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch",
			v1.Resource(v1.PostgresqlResource), name, msg, 0, false)
	}
	out := stored.DeepCopy()
	for _, op := range ops {
		if op.Path != "/metadata/finalizers" {
			return nil, fmt.Errorf("patch of %s: not implemented", op.Path)
		}
		switch op.Op {
		case "test":
			if op.Value == nil && len(out.Finalizers) > 0 || op.Value != nil && !slices.Equal(*op.Value, out.Finalizers) {
				return nil, invalid("testing value /metadata/finalizers failed")
			}
		case "add":
			if op.Value == nil {
				return nil, invalid("add of null")
			}
			out.Finalizers = slices.Clone(*op.Value)
		default:
			return nil, fmt.Errorf("patch op %s: not implemented", op.Op)
		}
	}
	if out.DeletionTimestamp != nil && slices.ContainsFunc(out.Finalizers, func(fin string) bool { return !slices.Contains(stored.Finalizers, fin) }) {
		return nil, invalid("metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted")
	}
	f.rv++
	out.ResourceVersion = fmt.Sprint(f.rv)
	f.objs[ns+"/"+name] = out
	return out.DeepCopy(), nil
}

func (f *pgAPI) write(method string, in *v1.Postgresql, fail func(int) error, apply func(stored, in *v1.Postgresql)) (*v1.Postgresql, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[method]++
	if fail != nil {
		if err := fail(f.calls[method]); err != nil {
			return nil, err
		}
	}
	key := in.Namespace + "/" + in.Name
	stored := f.objs[key]
	if stored == nil {
		return nil, apierrors.NewNotFound(v1.Resource(v1.PostgresqlResource), in.Name)
	}
	if in.ResourceVersion != stored.ResourceVersion {
		return nil, apierrors.NewConflict(v1.Resource(v1.PostgresqlResource), in.Name, errors.New("the object has been modified"))
	}
	out := stored.DeepCopy()
	apply(out, in.DeepCopy())
	f.rv++
	out.ResourceVersion = fmt.Sprint(f.rv)
	if out.DeletionTimestamp != nil && len(out.Finalizers) == 0 {
		delete(f.objs, key)
	} else {
		f.objs[key] = out
	}
	return out.DeepCopy(), nil
}

func (f *pgAPI) update(pg *v1.Postgresql) (*v1.Postgresql, error) {
	return f.write("Update", pg, f.failUpd, func(stored, in *v1.Postgresql) {
		status := stored.Status
		*stored = *in
		stored.Status = status
	})
}

func (f *pgAPI) updateStatus(pg *v1.Postgresql) (*v1.Postgresql, error) {
	return f.write("UpdateStatus", pg, f.failSt, func(stored, in *v1.Postgresql) { stored.Status = in.Status })
}
