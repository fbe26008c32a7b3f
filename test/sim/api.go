package sim

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	pgfake "github.com/pgloop/pgloop/pkg/generated/clientset/versioned/fake"
)

// objKey names one object of the simulated API: its resource (plural, as
// in a URL), namespace and name.
type objKey struct{ res, ns, name string }

func (k objKey) String() string { return k.res + "/" + k.ns + "/" + k.name }

// change is one committed write, in resourceVersion order: what a watch
// delivers. obj is nil for a deletion.
type change struct {
	rv  int64
	key objKey
	obj runtime.Object
	at  time.Time
}

// caller is who makes an API call: the operator's plan of a cluster (key
// set, through a job), or the simulated world (nil caller).
type caller interface {
	// intercept decides the call's fate before it reaches the store, and
	// may park the calling goroutine (a slow call). It returns the error to
	// answer instead, and whether the write should still commit (a reply
	// lost after the write).
	intercept(verb string, key objKey) (err error, commit bool)
	// committed tells the caller a write of it was stored (after
	// intercept let it through).
	committed(verb string, key objKey, before, after runtime.Object)
}

// apiServer is the simulated Kubernetes API: one store behind the kube and
// the pgloop fake clientsets, with what the operator relies on from a real
// apiserver: resourceVersions that increase with every write, a generation
// bumped when the spec changes, the status subresource (an update of the
// resource keeps its status, an update of status keeps the rest),
// optimistic concurrency (Conflict on a stale resourceVersion),
// AlreadyExists, finalizers that hold a deletion (deletionTimestamp), and
// JSON and merge patches. Calls are serialised by mu.
type apiServer struct {
	mu      sync.Mutex
	now     func() time.Time
	rv      int64
	uid     int64
	objs    map[objKey]runtime.Object
	changes []change
	// caller answers for the call being made: the job the simulator runs
	// (only one runs at a time) or nil for the world.
	caller func() caller
	// gone, when set, is told of every object removed, under mu.
	gone func(objKey)
}

func newAPIServer(now func() time.Time, who func() caller) *apiServer {
	return &apiServer{now: now, objs: map[objKey]runtime.Object{}, caller: who}
}

// scheme knows the built-in kinds and pgloop's, to build typed lists.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := kubescheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// clients returns the kube and pgloop clientsets the operator uses, both
// answered by the store.
func (a *apiServer) clients() (*kubefake.Clientset, *pgfake.Clientset) {
	kube := kubefake.NewClientset()
	kube.PrependReactor("*", "*", a.react)
	pg := pgfake.NewSimpleClientset()
	pg.PrependReactor("*", "*", a.react)
	return kube, pg
}

// react answers one call of a fake clientset.
func (a *apiServer) react(action k8stesting.Action) (bool, runtime.Object, error) {
	key := objKey{res: action.GetResource().Resource, ns: action.GetNamespace()}
	verb := action.GetVerb()
	if sub := action.GetSubresource(); sub != "" {
		verb += "/" + sub
	}
	// Implementation types, not interfaces: some interfaces are identical
	// (as client-go's ObjectReaction notes).
	switch act := action.(type) {
	case k8stesting.GetActionImpl:
		key.name = act.GetName()
	case k8stesting.CreateActionImpl:
		key.name = nameOf(act.GetObject())
	case k8stesting.UpdateActionImpl:
		key.name = nameOf(act.GetObject())
	case k8stesting.PatchActionImpl:
		key.name = act.GetName()
	case k8stesting.DeleteActionImpl:
		key.name = act.GetName()
	}
	c := a.caller()
	if c != nil {
		if ferr, commit := c.intercept(verb, key); ferr != nil {
			if commit {
				// The write lands; its reply is lost.
				_, _ = a.serve(c, verb, key, action)
			}
			return true, nil, ferr
		}
	}
	obj, err := a.serve(c, verb, key, action)
	return true, obj, err
}

// serve carries out a call on the store.
func (a *apiServer) serve(c caller, verb string, key objKey, action k8stesting.Action) (runtime.Object, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	gr := action.GetResource().GroupResource()
	switch act := action.(type) {
	case k8stesting.GetActionImpl:
		obj, ok := a.objs[key]
		if !ok {
			return nil, apierrors.NewNotFound(gr, key.name)
		}
		return obj.DeepCopyObject(), nil
	case k8stesting.ListActionImpl:
		return a.list(act)
	case k8stesting.CreateActionImpl:
		return a.create(c, verb, key, gr, act.GetObject())
	case k8stesting.UpdateActionImpl:
		return a.update(c, verb, key, gr, act.GetObject(), strings.HasSuffix(verb, "/status"))
	case k8stesting.PatchActionImpl:
		return a.patch(c, verb, key, gr, act)
	case k8stesting.DeleteCollectionActionImpl:
		sel := act.GetListRestrictions().Labels
		for _, k := range a.keys(key.res, key.ns, sel) {
			a.remove(c, "delete", k)
		}
		return nil, nil
	case k8stesting.DeleteActionImpl:
		cur, ok := a.objs[key]
		if !ok {
			return nil, apierrors.NewNotFound(gr, key.name)
		}
		if err := preconditions(gr, key.name, objMeta(cur), act.DeleteOptions.Preconditions); err != nil {
			return nil, err
		}
		a.remove(c, verb, key)
		return nil, nil
	}
	return nil, fmt.Errorf("simulated API: %s not served", action)
}

// preconditions checks a delete's preconditions on the object m, as the
// apiserver does: a UID or resourceVersion that is not the object's is a
// Conflict.
func preconditions(gr schema.GroupResource, name string, m metav1.Object, p *metav1.Preconditions) error {
	switch {
	case p == nil:
		return nil
	case p.UID != nil && *p.UID != m.GetUID():
		return apierrors.NewConflict(gr, name, fmt.Errorf("precondition failed: UID in precondition: %s, UID in object meta: %s", *p.UID, m.GetUID()))
	case p.ResourceVersion != nil && *p.ResourceVersion != m.GetResourceVersion():
		return apierrors.NewConflict(gr, name, fmt.Errorf("precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s", *p.ResourceVersion, m.GetResourceVersion()))
	}
	return nil
}

// keys returns the keys of res in ns ("" for all) whose labels sel selects,
// sorted.
func (a *apiServer) keys(res, ns string, sel labels.Selector) []objKey {
	var out []objKey
	for k, obj := range a.objs {
		if k.res != res || (ns != "" && k.ns != ns) {
			continue
		}
		if sel != nil && !sel.Matches(labels.Set(objMeta(obj).GetLabels())) {
			continue
		}
		out = append(out, k)
	}
	slices.SortFunc(out, func(x, y objKey) int { return strings.Compare(x.String(), y.String()) })
	return out
}

func (a *apiServer) list(act k8stesting.ListActionImpl) (runtime.Object, error) {
	kind := act.GetKind()
	kind.Kind = strings.TrimSuffix(kind.Kind, "List") + "List"
	list, err := scheme.New(kind)
	if err != nil {
		return nil, fmt.Errorf("simulated API: list %s: %w", kind, err)
	}
	var items []runtime.Object
	for _, k := range a.keys(act.GetResource().Resource, act.GetNamespace(), act.GetListRestrictions().Labels) {
		items = append(items, a.objs[k].DeepCopyObject())
	}
	if err := meta.SetList(list, items); err != nil {
		return nil, err
	}
	if lm, err := meta.ListAccessor(list); err == nil {
		lm.SetResourceVersion(fmt.Sprint(a.rv))
	}
	return list, nil
}

func (a *apiServer) create(c caller, verb string, key objKey, gr schema.GroupResource, in runtime.Object) (runtime.Object, error) {
	if _, ok := a.objs[key]; ok {
		return nil, apierrors.NewAlreadyExists(gr, key.name)
	}
	obj := in.DeepCopyObject()
	m := objMeta(obj)
	m.SetNamespace(key.ns)
	a.uid++
	m.SetUID(types.UID(fmt.Sprintf("uid-%d", a.uid)))
	m.SetCreationTimestamp(metav1.NewTime(a.now()))
	m.SetGeneration(1)
	m.SetDeletionTimestamp(nil)
	m.SetManagedFields(nil)
	a.store(c, verb, key, nil, obj)
	return obj.DeepCopyObject(), nil
}

// update stores in over the object key. status says the status
// subresource is written: only the status changes. Otherwise the status is
// kept and the generation bumped when the spec changed. A resourceVersion
// that is set and not the current one is a Conflict.
func (a *apiServer) update(c caller, verb string, key objKey, gr schema.GroupResource, in runtime.Object, status bool) (runtime.Object, error) {
	cur, ok := a.objs[key]
	if !ok {
		return nil, apierrors.NewNotFound(gr, key.name)
	}
	cm := objMeta(cur)
	if rv := objMeta(in).GetResourceVersion(); rv != "" && rv != cm.GetResourceVersion() {
		return nil, apierrors.NewConflict(gr, key.name,
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	var obj runtime.Object
	if status {
		obj = cur.DeepCopyObject()
		setField(obj, in, "Status")
	} else {
		obj = in.DeepCopyObject()
		setField(obj, cur, "Status")
		m := objMeta(obj)
		m.SetGeneration(cm.GetGeneration())
		if !reflect.DeepEqual(field(cur, "Spec"), field(obj, "Spec")) {
			m.SetGeneration(cm.GetGeneration() + 1)
		}
	}
	m := objMeta(obj)
	m.SetUID(cm.GetUID())
	m.SetCreationTimestamp(cm.GetCreationTimestamp())
	m.SetDeletionTimestamp(cm.GetDeletionTimestamp())
	m.SetManagedFields(nil)
	if m.GetDeletionTimestamp() != nil && len(m.GetFinalizers()) == 0 {
		a.drop(c, verb, key)
		return obj, nil
	}
	a.store(c, verb, key, cur, obj)
	return obj.DeepCopyObject(), nil
}

func (a *apiServer) patch(c caller, verb string, key objKey, gr schema.GroupResource, act k8stesting.PatchActionImpl) (runtime.Object, error) {
	cur, ok := a.objs[key]
	if !ok {
		return nil, apierrors.NewNotFound(gr, key.name)
	}
	old, err := json.Marshal(cur)
	if err != nil {
		return nil, err
	}
	var patched []byte
	switch act.GetPatchType() {
	case types.JSONPatchType:
		p, err := jsonpatch.DecodePatch(act.GetPatch())
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		if patched, err = p.Apply(old); err != nil {
			// The apiserver answers a failed test operation 422.
			return nil, apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: key.res}, key.name, nil)
		}
	case types.MergePatchType:
		if patched, err = jsonpatch.MergePatch(old, act.GetPatch()); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
	default:
		return nil, fmt.Errorf("simulated API: patch type %s not served", act.GetPatchType())
	}
	obj := reflect.New(reflect.TypeOf(cur).Elem()).Interface().(runtime.Object)
	if err := json.Unmarshal(patched, obj); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	return a.update(c, verb, key, gr, obj, strings.HasSuffix(verb, "/status"))
}

// remove deletes key, or marks it deleted while finalizers hold it.
func (a *apiServer) remove(c caller, verb string, key objKey) {
	cur := a.objs[key]
	if m := objMeta(cur); len(m.GetFinalizers()) > 0 {
		if m.GetDeletionTimestamp() != nil {
			return
		}
		obj := cur.DeepCopyObject()
		now := metav1.NewTime(a.now())
		objMeta(obj).SetDeletionTimestamp(&now)
		a.store(c, verb, key, cur, obj)
		return
	}
	a.drop(c, verb, key)
}

// drop deletes key from the store.
func (a *apiServer) drop(c caller, verb string, key objKey) {
	cur := a.objs[key]
	delete(a.objs, key)
	a.rv++
	a.changes = append(a.changes, change{rv: a.rv, key: key, at: a.now()})
	if c != nil {
		c.committed(verb, key, cur, nil)
	}
	if a.gone != nil {
		a.gone(key)
	}
}

// store commits obj at key with the next resourceVersion.
func (a *apiServer) store(c caller, verb string, key objKey, before, obj runtime.Object) {
	a.rv++
	objMeta(obj).SetResourceVersion(fmt.Sprint(a.rv))
	a.objs[key] = obj
	a.changes = append(a.changes, change{rv: a.rv, key: key, obj: obj.DeepCopyObject(), at: a.now()})
	if c != nil {
		c.committed(verb, key, before, obj)
	}
}

// get returns a copy of the object key, for the world and the checks.
func (a *apiServer) get(key objKey) (runtime.Object, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	obj, ok := a.objs[key]
	if !ok {
		return nil, false
	}
	return obj.DeepCopyObject(), true
}

// write is how the world (users, controllers, kubelet, Patroni) writes:
// create when absent, else update at the current version (no conflict, no
// fault). A nil obj deletes.
func (a *apiServer) write(key objKey, obj runtime.Object) {
	a.mu.Lock()
	defer a.mu.Unlock()
	gr := schema.GroupResource{Resource: key.res}
	cur, ok := a.objs[key]
	switch {
	case obj == nil && ok:
		a.remove(nil, "delete", key)
	case obj == nil:
	case !ok:
		_, _ = a.create(nil, "create", key, gr, obj)
	default:
		in := obj.DeepCopyObject()
		objMeta(in).SetResourceVersion(objMeta(cur).GetResourceVersion())
		if _, err := a.update(nil, "update", key, gr, in, false); err != nil {
			return
		}
		after, ok := a.objs[key]
		if !ok || field(in, "Status") == nil || reflect.DeepEqual(field(in, "Status"), field(after, "Status")) {
			return
		}
		objMeta(in).SetResourceVersion(objMeta(after).GetResourceVersion())
		_, _ = a.update(nil, "update/status", key, gr, in, true)
	}
}

// since returns the changes committed after resourceVersion rv.
func (a *apiServer) since(rv int64) []change {
	a.mu.Lock()
	defer a.mu.Unlock()
	i, _ := slices.BinarySearchFunc(a.changes, rv+1, func(c change, rv int64) int { return int(c.rv - rv) })
	return slices.Clone(a.changes[i:])
}

// snapshot returns a copy of every object and the resourceVersion it is
// at: what a list returns.
func (a *apiServer) snapshot() (map[objKey]runtime.Object, int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[objKey]runtime.Object, len(a.objs))
	for k, obj := range a.objs {
		out[k] = obj.DeepCopyObject()
	}
	return out, a.rv
}

func objMeta(obj runtime.Object) metav1.Object {
	m, err := meta.Accessor(obj)
	if err != nil {
		panic(fmt.Sprintf("simulated API: %T has no metadata: %v", obj, err))
	}
	return m
}

func nameOf(obj runtime.Object) string { return objMeta(obj).GetName() }

// field returns the struct field name of obj (Spec, Status), nil when it
// has none.
func field(obj runtime.Object, name string) any {
	f := reflect.ValueOf(obj).Elem().FieldByName(name)
	if !f.IsValid() {
		return nil
	}
	return f.Interface()
}

// setField sets the struct field name of dst to that of src, when both
// have it.
func setField(dst, src runtime.Object, name string) {
	d := reflect.ValueOf(dst).Elem().FieldByName(name)
	s := reflect.ValueOf(src).Elem().FieldByName(name)
	if d.IsValid() && s.IsValid() {
		d.Set(s)
	}
}
