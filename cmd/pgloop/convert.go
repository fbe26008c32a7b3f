package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// The zalando postgres-operator's API, which `pgloop convert` reads.
const (
	zalandoAPIVersion = "acid.zalan.do/v1"
	zalandoKind       = "postgresql"
	zalandoListKind   = "postgresqlList"
	// zalandoSecretSuffix follows <user>.<cluster> in the name of a
	// zalando credentials Secret.
	zalandoSecretSuffix = ".credentials.postgresql.acid.zalan.do"
)

// zalandoFields are the reasons pgloop drops the zalando fields it does not
// have. They only explain: whether a field is dropped is decided by pgloop's
// Go type (pgloopHas), so a field added to pkg/apis/pgloop/v1 is kept from
// then on; TestZalandoFieldsUnsupported then asks for its line here to go. Keys
// are paths below spec with "*" for a map key; list indices are left out.
var zalandoFields = map[string]string{
	"enableMasterPoolerLoadBalancer":   "pgloop does not make the connection poolers' Services load balancers yet (the master and replica Services, yes)",
	"enableReplicaPoolerLoadBalancer":  "pgloop does not make the connection poolers' Services load balancers yet (the master and replica Services, yes)",
	"enableMasterNodePort":             "pgloop creates no NodePort Services (a load balancer, or ClusterIP)",
	"masterNodePort":                   "pgloop creates no NodePort Services (a load balancer, or ClusterIP)",
	"enableReplicaNodePort":            "pgloop creates no NodePort Services (a load balancer, or ClusterIP)",
	"replicaNodePort":                  "pgloop creates no NodePort Services (a load balancer, or ClusterIP)",
	"enableMasterPoolerNodePort":       "pgloop creates no NodePort Services (a load balancer, or ClusterIP)",
	"masterPoolerNodePort":             "pgloop creates no NodePort Services (a load balancer, or ClusterIP)",
	"enableReplicaPoolerNodePort":      "pgloop creates no NodePort Services (a load balancer, or ClusterIP)",
	"replicaPoolerNodePort":            "pgloop creates no NodePort Services (a load balancer, or ClusterIP)",
	"masterServiceAnnotations":         "pgloop has one serviceAnnotations for both Services; merge these into it by hand",
	"replicaServiceAnnotations":        "pgloop has one serviceAnnotations for both Services; merge these into it by hand",
	"usersIgnoringSecretRotation":      "pgloop rotates a password on demand (annotation pgloop.dev/rotate-password on its Secret), never on a schedule",
	"usersWithSecretRotation":          "pgloop rotates a password on demand (annotation pgloop.dev/rotate-password on its Secret), never on a schedule",
	"usersWithInPlaceSecretRotation":   "pgloop rotates a password on demand (annotation pgloop.dev/rotate-password on its Secret), never on a schedule",
	"clone":                            "pgloop does not clone clusters yet",
	"standby":                          "pgloop does not run standby clusters yet",
	"tls":                              "pgloop does not configure custom TLS certificates yet",
	"additionalVolumes":                "pgloop does not mount additional volumes yet",
	"env":                              "pgloop does not pass extra environment variables to Spilo yet",
	"envFrom":                          "pgloop does not pass extra environment variables to Spilo yet",
	"streams":                          "pgloop does not create change data capture streams",
	"logicalBackupRetention":           "pgloop does not delete old logical backups: the bucket's lifecycle rules can",
	"spiloRunAsUser":                   "pgloop sets the pods' user and groups itself (Spilo's 101/103)",
	"spiloRunAsGroup":                  "pgloop sets the pods' user and groups itself (Spilo's 101/103)",
	"spiloFSGroup":                     "pgloop sets the pods' user and groups itself (Spilo's 101/103)",
	"podPriorityClassName":             "pgloop does not set a pod priority class yet",
	"schedulerName":                    "pgloop does not set a scheduler name: the default scheduler places the pods",
	"topologySpreadConstraints":        "pgloop does not set topology spread constraints yet",
	"livenessProbe":                    "pgloop does not take a custom liveness probe",
	"volume.selector":                  "pgloop does not select persistent volumes by label",
	"volume.subPath":                   "pgloop mounts the volume's root as the data directory",
	"volume.isSubPathExpr":             "pgloop mounts the volume's root as the data directory",
	"volume.iops":                      "pgloop does not tune EBS volumes: set iops in the StorageClass",
	"volume.throughput":                "pgloop does not tune EBS volumes: set throughput in the StorageClass",
	"volume.type":                      "pgloop does not tune EBS volumes: choose the type by the StorageClass",
	"resources.requests.hugepages-2Mi": "pgloop does not request huge pages yet",
	"resources.requests.hugepages-1Gi": "pgloop does not request huge pages yet",
	"resources.limits.hugepages-2Mi":   "pgloop does not request huge pages yet",
	"resources.limits.hugepages-1Gi":   "pgloop does not request huge pages yet",
	"connectionPooler.resources.requests.hugepages-2Mi": "pgloop does not request huge pages yet",
	"connectionPooler.resources.requests.hugepages-1Gi": "pgloop does not request huge pages yet",
	"connectionPooler.resources.limits.hugepages-2Mi":   "pgloop does not request huge pages yet",
	"connectionPooler.resources.limits.hugepages-1Gi":   "pgloop does not request huge pages yet",
}

// unknownFieldReason is the reason for a spec field neither pgloop nor the
// table above knows.
const unknownFieldReason = "not a zalando field pgloop knows"

// serverMetadata are the metadata fields the apiserver set on the zalando
// object; a new object gets its own.
var serverMetadata = []string{"creationTimestamp", "deletionGracePeriodSeconds", "deletionTimestamp",
	"generation", "managedFields", "resourceVersion", "selfLink", "uid"}

// lastApplied is kubectl's copy of the manifest it last applied: the
// zalando one.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

func newConvertCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "convert [FILE...]",
		Short: "Convert zalando postgres-operator manifests (acid.zalan.do/v1 postgresql) to pgloop's",
		Long: "Read zalando postgres-operator manifests (acid.zalan.do/v1, kind postgresql, or a List of\n" +
			"them as `kubectl get -o yaml` prints) from the FILEs, or from standard input when there is none\n" +
			"or FILE is -, and print pgloop ones (pgloop.dev/v1, kind Postgresql) as YAML documents. A\n" +
			"comment block above each says which fields were dropped or changed and why, and the names of\n" +
			"the cluster's credentials Secrets, which differ from zalando's.\n\n" +
			"Exit status: 0 when every manifest converted. 1 and nothing printed when a document is not a\n" +
			"zalando postgresql or cannot be read (each error names the file and document number). 1 with\n" +
			"the output printed when pgloop's validation refuses values that were kept: each is marked\n" +
			"REFUSED in its manifest's comments; fix them before applying.",
		Example: "  pgloop convert acid-db.yaml > db.yaml\n" +
			"  kubectl get postgresql -n prod -o yaml | pgloop convert > prod.yaml",
		RunE: func(cmd *cobra.Command, args []string) error {
			return runConvert(cmd.OutOrStdout(), cmd.InOrStdin(), args)
		},
	}
}

// errRefused is wrapped by the error of a conversion whose output pgloop's
// validation refuses.
var errRefused = errors.New("pgloop would refuse values of the converted manifests")

// runConvert converts the documents of files (stdin for none or "-") and
// writes them to out. Nothing is written when an input cannot be converted.
func runConvert(out io.Writer, stdin io.Reader, files []string) error {
	if len(files) == 0 {
		files = []string{"-"}
	}
	var convs []*conversion
	var errs []error
	for _, f := range files {
		c, err := convertFile(f, stdin)
		convs = append(convs, c...)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var buf bytes.Buffer
	var refused []string
	for i, c := range convs {
		if i > 0 {
			buf.WriteString("---\n")
		}
		data, err := c.render()
		if err != nil {
			return err
		}
		buf.Write(data)
		for _, r := range c.refused {
			refused = append(refused, fmt.Sprintf("  %s (%s): %s", c.source, c.name, r))
		}
	}
	if _, err := out.Write(buf.Bytes()); err != nil {
		return err
	}
	if len(refused) > 0 {
		return fmt.Errorf("%w (they are kept, marked REFUSED; fix them before applying):\n%s",
			errRefused, strings.Join(refused, "\n"))
	}
	return nil
}

// convertFile converts every document of one input; its errors name the
// file and the document, counting only documents that are not empty.
func convertFile(file string, stdin io.Reader) ([]*conversion, error) {
	name, r := file, stdin
	if file == "-" {
		name = "stdin"
	} else {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var convs []*conversion
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
	return convs, errors.Join(errs...)
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

// conversion is one converted manifest with what was done to it.
type conversion struct {
	source  string // file and document, for messages
	name    string // metadata.name
	object  map[string]any
	secrets []string
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
func convertObject(obj map[string]any, source string) (*conversion, error) {
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
	c := &conversion{source: source}
	out := map[string]any{"apiVersion": v1.SchemeGroupVersion.String(), "kind": v1.PostgresqlKind}
	for _, k := range sortedKeys(obj) {
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
	c.secrets = secretNames(&pg)
	return c, nil
}

// metadata keeps what the user wrote: name, namespace, labels,
// annotations, and the other fields of ObjectMeta but those the apiserver
// sets and the finalizers.
func (c *conversion) metadata(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := map[string]any{}
	for _, k := range sortedKeys(m) {
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

func (c *conversion) spec(spec map[string]any) map[string]any {
	out := c.prune("spec", "", spec, reflect.TypeOf(v1.PostgresqlSpec{})).(map[string]any)
	// A user with null flags is valid for zalando, but the apiserver drops
	// a null map value, and with it the user.
	if users, ok := out["users"].(map[string]any); ok {
		for _, u := range sortedKeys(users) {
			if users[u] == nil {
				users[u] = []any{}
				c.changed = append(c.changed, "spec.users."+u+": null flags written as [] (the apiserver drops a null value, and the user with it)")
			}
		}
	}
	return out
}

var (
	quantityType    = reflect.TypeOf(resource.Quantity{})
	unmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
)

// prune returns v without the object keys that t, the pgloop Go type v
// decodes into, does not have, recursively. path names v in messages;
// key is its path below spec in zalandoFields' form. A nil t means the
// field is unknown. Values of leaf types are kept as they are, but
// quantities are checked.
func (c *conversion) prune(path, key string, v any, t reflect.Type) any {
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
		for _, k := range sortedKeys(m) {
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
		for _, k := range sortedKeys(m) {
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

// secretNames are the names of the credentials Secrets pgloop makes for
// the cluster: the superuser's, the replication user's, the users' and the
// connection pooler's while a pooler is on.
func secretNames(pg *v1.Postgresql) []string {
	users := append([]string{cluster.SuperuserName, cluster.ReplicationUserName}, sortedKeys(pg.Spec.Users)...)
	if pg.Spec.AnyPoolerEnabled() {
		users = append(users, pg.Spec.PoolerUser())
	}
	names := make([]string, len(users))
	for i, u := range users {
		names[i] = cluster.SecretName(u, pg.Name)
	}
	return names
}

// render writes the manifest under its comment block. yaml.Marshal sorts
// the keys, so the output is the same for the same input.
func (c *conversion) render() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Converted by pgloop convert from %s %s (%s).\n", zalandoAPIVersion, zalandoKind, c.source)
	fmt.Fprintf(&b, "# Secrets: pgloop names a role's credentials Secret <user>.<cluster>%s\n", strings.TrimPrefix(cluster.SecretName("u", "c"), "u.c"))
	fmt.Fprintf(&b, "# (zalando: <user>.<cluster>%s) and makes new passwords; this cluster's:\n", zalandoSecretSuffix)
	for _, s := range c.secrets {
		fmt.Fprintf(&b, "#   %s\n", s)
	}
	for _, d := range c.dropped {
		fmt.Fprintf(&b, "# dropped: %s\n", d)
	}
	for _, d := range c.changed {
		fmt.Fprintf(&b, "# changed: %s\n", d)
	}
	for _, r := range c.refused {
		fmt.Fprintf(&b, "# REFUSED by pgloop's validation, kept: %s\n", r)
	}
	data, err := yaml.Marshal(c.object)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.source, err)
	}
	b.Write(data)
	return b.Bytes(), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
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
	for _, k := range sortedKeys(zalandoFields) {
		if !pgloopHas(k) {
			fmt.Fprintf(&b, "| `spec.%s` | %s |\n", k, zalandoFields[k])
		}
	}
	return b.String()
}
