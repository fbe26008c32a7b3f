package convert

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// The zalando postgres-operator's API, which `pgloop convert` reads.
const (
	zalandoAPIVersion = cluster.ZalandoGroup + "/v1"
	zalandoKind       = "postgresql"
	zalandoListKind   = "postgresqlList"
)

// serverMetadata are the metadata fields the apiserver set on the zalando
// object; a new object gets its own.
var serverMetadata = []string{"creationTimestamp", "deletionGracePeriodSeconds", "deletionTimestamp",
	"generation", "managedFields", "resourceVersion", "selfLink", "uid"}

// lastApplied is kubectl's copy of the manifest it last applied: the
// zalando one.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// Convert converts every document read from r, zalando postgresql
// manifests alone or in a List, to pgloop's. name names r in messages and
// in the manifests' comments: a file's path, or "stdin". When a document
// cannot be converted, Convert returns no manifest and an error naming each
// such document by its number, counting only documents that are not empty.
// Values that pgloop's validation refuses do not fail Convert: they are
// kept, for Render to mark and report.
func Convert(name string, r io.Reader) ([]*Conversion, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var convs []*Conversion
	var errs []error
	for index := 1; ; {
		data, err := reader.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s, document %d: %w", name, index, err))
			break
		}
		obj, err := decodeObject(data)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s, document %d: %w", name, index, err))
			index++
			continue
		}
		if obj == nil {
			continue // only comments or blank lines
		}
		source := fmt.Sprintf("%s, document %d", name, index)
		index++
		if obj["apiVersion"] == "v1" && obj["kind"] == "List" || obj["apiVersion"] == zalandoAPIVersion && obj["kind"] == zalandoListKind {
			items, _ := obj["items"].([]any)
			for i, item := range items {
				src := fmt.Sprintf("%s, item %d", source, i+1)
				m, ok := item.(map[string]any)
				if !ok {
					errs = append(errs, fmt.Errorf("%s: not an object", src))
					continue
				}
				c, err := convertObject(m, src)
				errs = append(errs, err)
				if c != nil {
					convs = append(convs, c)
				}
			}
			continue
		}
		c, err := convertObject(obj, source)
		errs = append(errs, err)
		if c != nil {
			convs = append(convs, c)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return convs, nil
}

// decodeObject decodes one YAML document into JSON values, numbers kept as
// written. It returns nil for an empty document.
func decodeObject(data []byte) (map[string]any, error) {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	if string(bytes.TrimSpace(j)) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not an object")
	}
	return m, nil
}

// Conversion is one converted manifest with what was done to it: the
// fields dropped or changed, and the values pgloop's validation refuses.
// Render turns it into YAML.
type Conversion struct {
	source string // file and document, for messages
	name   string // metadata.name
	object map[string]any
	// users are the roles pgloop makes a credentials Secret for.
	users []string
	// adopt is set by Adopt: the manifest takes over the running cluster.
	adopt bool
	notes
	refused []string
}

// notes are what a conversion dropped or changed, and the values it cannot
// convert.
type notes struct {
	dropped []string
	changed []string
	errs    []string
}

func (n *notes) drop(path, reason string) {
	n.dropped = append(n.dropped, path+": "+reason)
}

// convertObject converts one zalando postgresql. A nil conversion comes
// with an error.
func convertObject(obj map[string]any, source string) (*Conversion, error) {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	if apiVersion != zalandoAPIVersion || kind != zalandoKind {
		hint := ""
		if apiVersion == v1.SchemeGroupVersion.String() && kind == v1.PostgresqlKind {
			hint = " (it is a pgloop manifest already)"
		}
		return nil, fmt.Errorf("%s: apiVersion %q, kind %q is not a zalando postgresql (apiVersion %s, kind %s)%s",
			source, apiVersion, kind, zalandoAPIVersion, zalandoKind, hint)
	}
	c := &Conversion{source: source}
	out := map[string]any{"apiVersion": v1.SchemeGroupVersion.String(), "kind": v1.PostgresqlKind}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		switch k {
		case "apiVersion", "kind":
		case "metadata":
			out[k] = c.metadata(obj[k])
		case "spec":
			spec, ok := obj[k].(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s: spec is not an object", source)
			}
			out[k] = c.spec(spec)
		case "status":
			c.drop("status", "the zalando operator's status; pgloop writes its own")
		default:
			c.drop(k, "not a field of a Postgresql")
		}
	}
	if _, ok := out["spec"]; !ok {
		return nil, fmt.Errorf("%s: no spec", source)
	}
	c.object = out
	if len(c.errs) > 0 {
		return nil, fmt.Errorf("%s: %s", source, strings.Join(c.errs, "; "))
	}

	// The output must decode into pgloop's type with no field left over:
	// what the type does not know was dropped above, so an error here is a
	// value of the wrong type (a string for a number, say).
	data, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	var pg v1.Postgresql
	if err := yaml.UnmarshalStrict(data, &pg); err != nil {
		return nil, fmt.Errorf("%s: the converted manifest does not decode as a pgloop Postgresql: %w", source, err)
	}
	c.name = pg.Name
	for _, e := range pg.Validate() {
		c.refused = append(c.refused, e.Error())
	}
	c.users = cluster.SecretUsers(&pg)
	return c, nil
}

// metadata keeps what the user wrote: name, namespace, labels,
// annotations, and the other fields of ObjectMeta but those the apiserver
// sets and the finalizers.
func (c *Conversion) metadata(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := map[string]any{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch {
		case slices.Contains(serverMetadata, k):
			c.drop("metadata."+k, "set by the apiserver on the zalando object")
		case k == "finalizers":
			c.drop("metadata.finalizers", "the zalando operator's; pgloop adds its own")
		case k == "annotations":
			ann, ok := m[k].(map[string]any)
			if !ok {
				out[k] = m[k]
				continue
			}
			kept := map[string]any{}
			for a, val := range ann {
				if a == lastApplied {
					c.drop("metadata.annotations."+lastApplied, "kubectl's copy of the zalando manifest; kubectl apply writes a new one")
					continue
				}
				kept[a] = val
			}
			if len(kept) > 0 {
				out[k] = kept
			}
		case objectMetaField(k) == nil:
			c.drop("metadata."+k, "not a field of metadata")
		default:
			out[k] = c.prune("metadata."+k, "metadata."+k, m[k], objectMetaField(k))
		}
	}
	return out
}

// objectMetaField is the type of a metadata field, or nil when ObjectMeta
// has no such field.
func objectMetaField(name string) reflect.Type {
	f, ok := jsonFields(reflect.TypeOf(v1.Postgresql{}.ObjectMeta))[name]
	if !ok {
		return nil
	}
	return f
}

func (c *Conversion) spec(spec map[string]any) map[string]any {
	out := c.prune("spec", "", spec, reflect.TypeOf(v1.PostgresqlSpec{})).(map[string]any)
	// A user with null flags is valid for zalando, but the apiserver drops
	// a null map value, and with it the user.
	if users, ok := out["users"].(map[string]any); ok {
		for _, u := range slices.Sorted(maps.Keys(users)) {
			if users[u] == nil {
				users[u] = []any{}
				c.changed = append(c.changed, "spec.users."+u+": null flags written as [] (the apiserver drops a null value, and the user with it)")
			}
		}
	}
	if clone, ok := out["clone"].(map[string]any); ok {
		c.changed = append(c.changed, fmt.Sprintf("spec.clone: restored with pgBackRest from the repository at /pgloop/<namespace>/%v/<uid> (the clone's spec.backup.s3, else the operator's), "+
			"so the source must be a pgloop cluster that archived there, and clone.uid its metadata.uid; a zalando source's WAL-G backups cannot be read (docs/migrating.md)", clone["cluster"]))
	}
	return out
}
