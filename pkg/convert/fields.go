package convert

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// zalandoFields are the reasons pgloop drops the zalando fields it does not
// have. They only explain: whether a field is dropped is decided by pgloop's
// Go type (pgloopHas), so a field added to pkg/apis/pgloop/v1 is kept from
// then on; TestZalandoFieldsUnsupported then asks for its line here to go. Keys
// are paths below spec with "*" for a map key; list indices are left out.
var zalandoFields = map[string]string{
	"streams":           "pgloop does not create change data capture streams",
	"volume.iops":       "pgloop does not tune EBS volumes: set iops in the StorageClass",
	"volume.throughput": "pgloop does not tune EBS volumes: set throughput in the StorageClass",
	"volume.type":       "pgloop does not tune EBS volumes: choose the type by the StorageClass",
}

// cloneS3Reason is why convert drops clone's s3_* fields.
const cloneS3Reason = "pgloop restores a clone from a pgBackRest repository (the clone's spec.backup.s3, else the operator's) at the source's path; WAL-G archives cannot be read by pgBackRest (docs/migrating.md, Move the data)"

// refusedFields are zalando fields pgloop's type has only so that its
// validation refuses them with a reason (a zalando manifest applied as it
// is gets that error): convert drops them, with the same reason. Keys as
// in zalandoFields.
var refusedFields = map[string]string{
	"clone.s3_wal_path":          cloneS3Reason,
	"clone.s3_endpoint":          cloneS3Reason,
	"clone.s3_access_key_id":     cloneS3Reason,
	"clone.s3_secret_access_key": cloneS3Reason,
	"clone.s3_force_path_style":  cloneS3Reason,
}

// unknownFieldReason is the reason for a spec field neither pgloop nor the
// table above knows.
const unknownFieldReason = "not a zalando field pgloop knows"

var (
	quantityType    = reflect.TypeOf(resource.Quantity{})
	unmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
)

// prune returns v without the object keys that t, the pgloop Go type v
// decodes into, does not have, recursively. path names v in messages;
// key is its path below spec in zalandoFields' form. A nil t means the
// field is unknown. Values of leaf types are kept as they are, but
// quantities are checked.
func (c *Conversion) prune(path, key string, v any, t reflect.Type) any {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || v == nil {
		return v
	}
	if t == quantityType {
		var s string
		switch q := v.(type) {
		case string:
			s = q
		case json.Number:
			s = q.String()
		default:
			c.errs = append(c.errs, fmt.Sprintf("%s: %v is not a quantity", path, v))
			return v
		}
		if _, err := resource.ParseQuantity(s); err != nil {
			c.errs = append(c.errs, fmt.Sprintf("%s: %q is not a quantity (such as 500m, 2 or 1Gi)", path, s))
		}
		return v
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return v // decodes itself: a leaf
	}
	join := func(k string) string {
		if key == "" {
			return k
		}
		return key + "." + k
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return v // the strict decoding reports it
		}
		fields := jsonFields(t)
		out := map[string]any{}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if reason, refused := refusedFields[join(k)]; refused {
				c.drop(path+"."+k, reason)
				continue
			}
			ft, ok := fields[k]
			if !ok {
				reason, known := zalandoFields[join(k)]
				if !known {
					reason = unknownFieldReason
				}
				c.drop(path+"."+k, reason)
				continue
			}
			out[k] = c.prune(path+"."+k, join(k), m[k], ft)
		}
		return out
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return v
		}
		out := map[string]any{}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			out[k] = c.prune(path+"."+k, join("*"), m[k], t.Elem())
		}
		return out
	case reflect.Slice, reflect.Array:
		l, ok := v.([]any)
		if !ok {
			return v
		}
		out := make([]any, len(l))
		for i := range l {
			out[i] = c.prune(fmt.Sprintf("%s[%d]", path, i), key, l[i], t.Elem())
		}
		return out
	}
	return v
}

// jsonFields maps the JSON names of a struct's fields to their types, as
// encoding/json sees them: embedded structs without a name are inlined,
// fields tagged "-" are left out.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if name == "" && f.Anonymous && ft.Kind() == reflect.Struct {
			for k, v := range jsonFields(ft) {
				fields[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

// pgloopHas says whether pgloop's spec type has the field at key, a path
// in zalandoFields' form.
func pgloopHas(key string) bool {
	t := reflect.TypeOf(v1.PostgresqlSpec{})
	for _, seg := range strings.Split(key, ".") {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		switch {
		case seg == "*" && t.Kind() == reflect.Map:
			t = t.Elem()
		case t.Kind() == reflect.Struct:
			ft, ok := jsonFields(t)[seg]
			if !ok {
				return false
			}
			t = ft
		default:
			return false
		}
	}
	return true
}

// unsupportedFieldsMarkdown is the table of the zalando fields pgloop drops,
// with the reasons, for docs/migrating.md.
func unsupportedFieldsMarkdown() string {
	var b strings.Builder
	b.WriteString("| zalando field | why `pgloop convert` drops it |\n|---|---|\n")
	reasons := map[string]string{}
	for k, r := range zalandoFields {
		if !pgloopHas(k) {
			reasons[k] = r
		}
	}
	for k, r := range refusedFields {
		reasons[k] = r
	}
	for _, k := range slices.Sorted(maps.Keys(reasons)) {
		fmt.Fprintf(&b, "| `spec.%s` | %s |\n", k, reasons[k])
	}
	return b.String()
}
