package informers

import (
	"reflect"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// transform is what every cache keeps of an object: slim's part of it,
// its strings and label maps shared.
func transform(obj any) (any, error) {
	obj, err := slim(obj)
	if err != nil {
		return nil, err
	}
	share(obj)
	return obj, nil
}

// share replaces every string of obj, a freshly decoded object, with the
// canonical copy of its value (package unique), and its label maps with
// the caches' map of their content (labelMaps), so that equal strings and
// label maps are held once however many objects hold them: a watch
// decodes each object's strings anew, while most of them are the same in
// every cluster (label and annotation keys, label values, the pod
// template's images, environment and paths, condition types, node names)
// or in every object of one cluster (its name, namespace and UID in labels
// and owner references). Only resourceVersion is left as it is: no two
// objects share one, and it changes with every update. Unexported fields
// (resource.Quantity's cache, time.Time's) are left too.
//
// Package unique forgets a canonical copy at the first collection after
// its last handle is dropped, even while strings made from it live on, so
// an object decoded after a collection may hold a copy of its own of a
// string held before (at most one copy per collection, for the strings
// every cluster has). Keeping the handles longer was measured and cost
// more than it saved (BenchmarkCacheMemory, 2026-12-04: about 100 bytes
// per distinct string, most of them a cluster's own).
func share(obj any) {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return
	}
	m, _ := obj.(metav1.Object)
	var rv string
	if m != nil {
		rv = m.GetResourceVersion()
		m.SetResourceVersion("")
	}
	shareValue(v.Elem())
	if m != nil {
		m.SetResourceVersion(rv)
	}
}

// shareValue shares the strings and label maps of v, which is settable.
func shareValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if s := v.String(); s != "" {
			v.SetString(unique.Make(s).Value())
		}
	case reflect.Pointer:
		if !v.IsNil() {
			shareValue(v.Elem())
		}
	case reflect.Struct:
		labels, hasLabels := labelMapFields[v.Type()]
		for i := range v.NumField() {
			f := v.Field(i)
			switch {
			case !f.CanSet():
			case hasLabels && v.Type().Field(i).Name == labels:
				shareLabels(f)
			default:
				shareValue(f)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return // bytes: managed fields' and a Secret's, dropped by slim
		}
		for i := range v.Len() {
			shareValue(v.Index(i))
		}
	case reflect.Map:
		shareMap(v)
	}
}

// shareMap shares the keys and the values of map v: its entries are
// replaced, a map's keys and values being unaddressable.
func shareMap(v reflect.Value) {
	if v.IsNil() || v.Len() == 0 {
		return
	}
	kt, vt := v.Type().Key(), v.Type().Elem()
	if kt.Kind() != reflect.String {
		return
	}
	out := reflect.MakeMapWithSize(v.Type(), v.Len())
	for it := v.MapRange(); it.Next(); {
		k := reflect.New(kt).Elem()
		k.Set(it.Key())
		shareValue(k)
		val := reflect.New(vt).Elem()
		val.Set(it.Value())
		shareValue(val)
		out.SetMapIndex(k, val)
	}
	v.Set(out)
}

// shareLabels makes v, a settable map[string]string of a labelMapFields
// field, the table's map of its content (labelMaps), adding its shared
// form when the table has none.
func shareLabels(v reflect.Value) {
	if v.IsNil() || v.Len() == 0 {
		return
	}
	if c := labelMaps.lookup(v.Interface().(map[string]string)); c != nil {
		v.Set(reflect.ValueOf(c))
		return
	}
	shareMap(v)
	labelMaps.add(v.Interface().(map[string]string))
}
