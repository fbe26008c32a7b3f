package v1

import (
	"context"
	"fmt"
	"k8s.io/utils/ptr"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsinstall "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	schemavalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// crdFile is the CRD controller-gen generates from these types.
const crdFile = "../../../../manifests/crds/pgloop.dev_postgresqls.yaml"

func loadCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(crdFile)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		t.Fatalf("decode %s: %v", crdFile, err)
	}
	return &crd
}

// TestCRDBasics checks what users and the operator rely on in the
// generated CRD, so a marker lost in a refactor fails a test and not a
// deployment.
func TestCRDBasics(t *testing.T) {
	crd := loadCRD(t)
	if crd.Name != PostgresqlResource+"."+GroupName || crd.Spec.Group != GroupName {
		t.Errorf("name %q group %q", crd.Name, crd.Spec.Group)
	}
	n := crd.Spec.Names
	if n.Kind != PostgresqlKind || n.ListKind != PostgresqlListKind || n.Plural != PostgresqlResource ||
		n.Singular != PostgresqlSingular || !slices.Equal(n.ShortNames, []string{PostgresqlShortName}) {
		t.Errorf("names = %+v", n)
	}
	if crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
		t.Errorf("scope = %s", crd.Spec.Scope)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("want one version, got %d", len(crd.Spec.Versions))
	}
	v := crd.Spec.Versions[0]
	if v.Name != Version || !v.Served || !v.Storage {
		t.Errorf("version %s served=%v storage=%v", v.Name, v.Served, v.Storage)
	}
	if v.Subresources == nil || v.Subresources.Status == nil {
		t.Error("status subresource missing: the operator's status writes would bump the generation")
	}

	var columns []string
	for _, c := range v.AdditionalPrinterColumns {
		columns = append(columns, c.Name+"="+c.JSONPath)
	}
	wantColumns := []string{"State=.status.state", "Ready=.status.ready", "Reason=.status.reason", "Age=.metadata.creationTimestamp"}
	if !slices.Equal(columns, wantColumns) {
		t.Errorf("printer columns = %q, want %q", columns, wantColumns)
	}

	root := v.Schema.OpenAPIV3Schema
	spec := root.Properties["spec"]
	if !slices.Contains(root.Required, "spec") {
		t.Error("spec is not required")
	}
	for _, f := range []string{"teamId", "postgresql", "volume"} {
		if !slices.Contains(spec.Required, f) {
			t.Errorf("spec.%s is not required", f)
		}
	}
	if d := spec.Properties["numberOfInstances"].Default; d == nil || string(d.Raw) != "1" {
		t.Errorf("numberOfInstances default = %v, want 1", d)
	}
	if max := spec.Properties["numberOfInstances"].Maximum; max == nil || *max != MaxInstances {
		t.Errorf("numberOfInstances maximum = %v, want %d", max, MaxInstances)
	}
	for name, want := range map[string]int64{"users": MaxUsers, "databases": MaxDatabases, "preparedDatabases": MaxPreparedDatabases} {
		if got := spec.Properties[name].MaxProperties; got == nil || *got != want {
			t.Errorf("spec.%s maxProperties = %v, want %d", name, got, want)
		}
	}
	var enum []string
	for _, e := range spec.Properties["postgresql"].Properties["version"].Enum {
		enum = append(enum, strings.Trim(string(e.Raw), `"`))
	}
	if !slices.Equal(enum, SupportedVersions) {
		t.Errorf("version enum %q differs from SupportedVersions %q", enum, SupportedVersions)
	}

	// Every CEL rule, by where it sits. A rule dropped or moved fails here.
	rules := map[string][]string{}
	var walk func(path string, s apiextensionsv1.JSONSchemaProps)
	walk = func(path string, s apiextensionsv1.JSONSchemaProps) {
		for _, r := range s.XValidations {
			rules[path] = append(rules[path], r.Rule)
		}
		for name, p := range s.Properties {
			walk(path+"."+name, p)
		}
		if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
			walk(path+"[*]", *s.AdditionalProperties.Schema)
		}
		if s.Items != nil && s.Items.Schema != nil {
			walk(path+"[]", *s.Items.Schema)
		}
	}
	walk("", *root)
	want := map[string][]string{
		"":                                      {"size(self.metadata.name)", "self.metadata.name.matches("},
		".spec":                                 {"self.databases[db] in self.users", "self.connectionPooler.user : 'pooler') in self.users"},
		".spec.teamId":                          {"self == oldSelf"},
		".spec.postgresql.version":              {"int(self) >= int(oldSelf)"},
		".spec.volume.size":                     {"quantity(string(self)).compareTo(quantity(string(oldSelf))) >= 0"},
		".spec.volume":                          {"self.subPath == oldSelf.subPath"},
		".spec.users":                           {"u.matches(", "u.startsWith('pg_')", "'session_user'"},
		".spec.databases":                       {"db.matches(", "'template0'"},
		".spec.preparedDatabases":               {"db.matches(", "'template0'", "size(db) + size(s) <= 50"},
		".spec.preparedDatabases[*].extensions": {"e.matches("},
		".spec.preparedDatabases[*].schemas":    {"s.matches("},
		".spec.preparedDatabases[*].schemas[*]": {"self.defaultUsers && has(self.defaultRoles)"},
		".spec.patroni":                         {"(has(self.initdb) ? self.initdb : {}) == (has(oldSelf.initdb)", "<= (has(self.ttl) ? self.ttl : 30)"},
		".spec.resources":                       {"self.limits.cpu)", "self.limits.memory)"},
		".spec.connectionPooler":                {"self.user.startsWith('pg_')", "self.schema.startsWith('pg_')"},
		".spec.connectionPooler.resources":      {"self.limits.cpu)", "self.limits.memory)"},
		".spec.allowedSourceRanges":             {"isCIDR(r)"},
		".spec.initContainers":                  {"c.name != 'postgres'"},
		".spec.sidecars":                        {"c.name != 'postgres'"},
		".spec.sidecars[].resources":            {"self.limits.cpu)", "self.limits.memory)"},
	}
	for path, fragments := range want {
		for i, frag := range fragments {
			if i >= len(rules[path]) || !strings.Contains(rules[path][i], frag) {
				t.Errorf("rule %d at %q: want one containing %q, have %q", i, path, frag, rules[path])
			}
		}
		if fragments != nil && len(rules[path]) != len(fragments) {
			t.Errorf("rules at %q = %q, want %d", path, rules[path], len(fragments))
		}
	}
	for path := range rules {
		if _, ok := want[path]; !ok {
			t.Errorf("unexpected rules at %q: %q (add them to this test)", path, rules[path])
		}
	}
}

// crdHarness runs the apiserver's own CRD code: the checks it makes when a
// CRD is created (schema structural, CEL rules compile, estimated cost in
// budget), and the decoding and validation it applies to each create and
// update of a Postgresql (pruning, defaulting, OpenAPI schema, list types,
// CEL rules with oldSelf).
type crdHarness struct {
	structural *structuralschema.Structural
	schema     schemavalidation.SchemaValidator
	cel        *cel.Validator
}

func newCRDHarness(t *testing.T) *crdHarness {
	t.Helper()
	scheme := runtime.NewScheme()
	apiextensionsinstall.Install(scheme)
	crd := loadCRD(t)
	scheme.Default(crd)
	var internal apiextensions.CustomResourceDefinition
	if err := scheme.Convert(crd, &internal, nil); err != nil {
		t.Fatal(err)
	}
	if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), &internal); len(errs) != 0 {
		t.Fatalf("the apiserver would refuse the CRD:\n%v", strings.ReplaceAll(errs.ToAggregate().Error(), ", ", "\n"))
	}
	// The internal version hoists a schema shared by all versions to
	// spec.validation.
	validation := internal.Spec.Validation
	if validation == nil {
		validation = internal.Spec.Versions[0].Schema
	}
	openAPI := validation.OpenAPIV3Schema
	s, err := structuralschema.NewStructural(openAPI)
	if err != nil {
		t.Fatal(err)
	}
	validator, _, err := schemavalidation.NewSchemaValidator(openAPI)
	if err != nil {
		t.Fatal(err)
	}
	return &crdHarness{
		structural: s,
		schema:     validator,
		cel:        cel.NewValidator(s, true, celconfig.PerCallLimit),
	}
}

// decode does what the apiserver does to a request body before validation.
func (h *crdHarness) decode(obj map[string]any) {
	structuralpruning.Prune(obj, h.structural, true)
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, h.structural)
	structuraldefaulting.Default(obj, h.structural)
}

// admit validates obj as a create (old nil) or an update of old.
func (h *crdHarness) admit(obj, old map[string]any) field.ErrorList {
	var errs field.ErrorList
	if old == nil {
		errs = schemavalidation.ValidateCustomResource(nil, obj, h.schema)
	} else {
		errs = schemavalidation.ValidateCustomResourceUpdate(nil, obj, old, h.schema)
	}
	errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, h.structural, obj)...)
	for _, e := range errs {
		// The apiserver skips the CEL rules after these (see
		// hasBlockingErr in its customresource strategy).
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong,
			field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return errs
		}
	}
	celErrs, _ := h.cel.Validate(context.Background(), nil, h.structural, obj, old, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

func toUnstructured(t *testing.T, p *Postgresql) map[string]any {
	t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		t.Fatal(err)
	}
	delete(obj["metadata"].(map[string]any), "creationTimestamp")
	return obj
}

func TestCRDAcceptedByAPIServer(t *testing.T) {
	newCRDHarness(t)
}

func TestCRDDefaults(t *testing.T) {
	h := newCRDHarness(t)
	obj := map[string]any{
		"apiVersion": "pgloop.dev/v1", "kind": "Postgresql",
		"metadata": map[string]any{"name": "defaults"},
		"spec": map[string]any{
			"teamId":     "acid",
			"postgresql": map[string]any{"version": "17"},
			"volume":     map[string]any{"size": "1Gi"},
			"patroni":    map[string]any{},
			"users":      map[string]any{"app": nil, "owner": []any{}},
			"unknown":    "pruned",
		},
	}
	h.decode(obj)
	if errs := h.admit(obj, nil); len(errs) != 0 {
		t.Fatalf("refused: %v", errs.ToAggregate())
	}
	spec := obj["spec"].(map[string]any)
	if spec["numberOfInstances"] != int64(1) {
		t.Errorf("numberOfInstances = %#v, want 1", spec["numberOfInstances"])
	}
	patroni := spec["patroni"].(map[string]any)
	for k, want := range map[string]int64{"ttl": 30, "loop_wait": 10, "retry_timeout": 10, "maximum_lag_on_failover": 33554432} {
		if patroni[k] != want {
			t.Errorf("patroni.%s = %#v, want %d", k, patroni[k], want)
		}
	}
	if _, ok := spec["unknown"]; ok {
		t.Error("unknown field not pruned")
	}
	// Documented on UserFlags: a null flag list is dropped with its user.
	users := spec["users"].(map[string]any)
	if _, ok := users["app"]; ok {
		t.Error("null user kept; update the UserFlags doc comment")
	}
	if _, ok := users["owner"]; !ok {
		t.Error("user with [] dropped")
	}
}

// TestCRDAdmission runs creates and updates through the apiserver's
// validation of the generated CRD. Where the CRD refuses a create, Validate
// must refuse it too, so an object that bypassed the CRD (or predates it)
// is judged the same way.
func TestCRDAdmission(t *testing.T) {
	h := newCRDHarness(t)
	tests := []struct {
		name string
		// old, when set, makes the case an update from the minimal sample
		// changed by old to the minimal sample changed by mutate.
		old    func(p *Postgresql)
		mutate func(p *Postgresql)
		// raw edits the unstructured object, for what the Go type cannot
		// express.
		raw func(obj map[string]any)
		// want is a substring of the apiserver's error; empty means
		// admitted.
		want string
	}{
		{name: "minimal sample", mutate: func(p *Postgresql) {}},
		{name: "full sample", mutate: func(p *Postgresql) { *p = *decodeSample(t, "full.yaml") }},
		{name: "zero instances", mutate: func(p *Postgresql) { p.Spec.NumberOfInstances = 0 }},
		{name: "16 instances", mutate: func(p *Postgresql) { p.Spec.NumberOfInstances = 16 }},
		{name: "maintenance windows", mutate: func(p *Postgresql) {
			p.Spec.MaintenanceWindows = []MaintenanceWindow{"01:00-06:00", "Sat:00:00-04:00", "Sun:01:00-Sun:02:00"}
		}},
		{
			name:   "maintenance window malformed",
			mutate: func(p *Postgresql) { p.Spec.MaintenanceWindows = []MaintenanceWindow{"Saturday 1am"} },
			want:   "spec.maintenanceWindows[0]",
		},
		{name: "connection poolers", mutate: func(p *Postgresql) {
			p.Spec.EnableConnectionPooler, p.Spec.EnableReplicaConnectionPooler = ptr.To(true), ptr.To(true)
			p.Spec.ConnectionPooler = &ConnectionPooler{NumberOfInstances: ptr.To[int32](1), Mode: "session",
				Schema: "bouncer", User: "bouncer", MaxDBConnections: ptr.To[int32](20)}
		}},
		{
			name: "pooler user among users",
			mutate: func(p *Postgresql) {
				p.Spec.EnableConnectionPooler = ptr.To(true)
				p.Spec.Users["pooler"] = UserFlags{}
			},
			want: "the connection pooler's user (connectionPooler.user, default pooler) must not be one of users",
		},
		{
			name: "pooler user among users, pooler off",
			mutate: func(p *Postgresql) {
				p.Spec.EnableConnectionPooler = ptr.To(false)
				p.Spec.Users["pooler"] = UserFlags{}
			},
		},
		{
			name:   "pooler user reserved",
			mutate: func(p *Postgresql) { p.Spec.ConnectionPooler = &ConnectionPooler{User: "postgres"} },
			want:   "spec.connectionPooler.user: Invalid value",
		},
		{
			name:   "pooler mode unknown",
			mutate: func(p *Postgresql) { p.Spec.ConnectionPooler = &ConnectionPooler{Mode: "statement"} },
			want:   `spec.connectionPooler.mode: Unsupported value: "statement"`,
		},
		{
			name:   "pooler instances zero",
			mutate: func(p *Postgresql) { p.Spec.ConnectionPooler = &ConnectionPooler{NumberOfInstances: ptr.To[int32](0)} },
			want:   "spec.connectionPooler.numberOfInstances",
		},
		{name: "logical backup", mutate: func(p *Postgresql) {
			p.Spec.EnableLogicalBackup, p.Spec.LogicalBackupSchedule = true, "*/30 2 * * 0"
		}},
		{
			name:   "logical backup schedule with a range",
			mutate: func(p *Postgresql) { p.Spec.LogicalBackupSchedule = "0 0 * * 1-5" },
			want:   "spec.logicalBackupSchedule: Invalid value",
		},
		{
			name:   "logical backup schedule of four fields",
			mutate: func(p *Postgresql) { p.Spec.LogicalBackupSchedule = "0 0 * *" },
			want:   "spec.logicalBackupSchedule: Invalid value",
		},
		{name: "logical backup retention", mutate: func(p *Postgresql) { p.Spec.LogicalBackupRetention = "3 months" }},
		{
			name:   "logical backup retention of two items",
			mutate: func(p *Postgresql) { p.Spec.LogicalBackupRetention = "1 month 2 days" },
			want:   "spec.logicalBackupRetention: Invalid value",
		},
		{name: "node ports", mutate: func(p *Postgresql) {
			p.Spec.EnableMasterNodePort, p.Spec.MasterNodePort = ptr.To(true), ptr.To[int32](30432)
			p.Spec.EnableReplicaPoolerNodePort, p.Spec.ReplicaPoolerNodePort = ptr.To(true), ptr.To[int32](0)
			p.Spec.MasterServiceAnnotations = map[string]string{"example.com/dns": "rw.example.com"}
		}},
		{
			name:   "node port beyond 65535",
			mutate: func(p *Postgresql) { p.Spec.ReplicaNodePort = ptr.To[int32](70000) },
			want:   "spec.replicaNodePort",
		},
		{
			name:   "pooler schema with a capital",
			mutate: func(p *Postgresql) { p.Spec.ConnectionPooler = &ConnectionPooler{Schema: "Pooler"} },
			want:   "spec.connectionPooler.schema",
		},
		{name: "load balancers, ranges, no shm, containers", mutate: func(p *Postgresql) {
			p.Spec.EnableMasterLoadBalancer, p.Spec.EnableReplicaLoadBalancer = ptr.To(true), ptr.To(false)
			p.Spec.AllowedSourceRanges = []string{"10.0.0.0/8", "fd01::/48"}
			p.Spec.EnableShmVolume = ptr.To(false)
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}
			p.Spec.Sidecars = []Sidecar{{Name: "exporter", Image: "exporter:1", Command: []string{"run"},
				Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9187}}, Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}}
		}},
		{
			name:   "source range not a CIDR",
			mutate: func(p *Postgresql) { p.Spec.AllowedSourceRanges = []string{"10.0.0.0"} },
			want:   "allowedSourceRanges must be CIDRs",
		},
		{
			name:   "sidecar named postgres",
			mutate: func(p *Postgresql) { p.Spec.Sidecars = []Sidecar{{Name: "postgres", Image: "x"}} },
			want:   "sidecars must not be named postgres",
		},
		{
			name:   "init container named postgres",
			mutate: func(p *Postgresql) { p.Spec.InitContainers = []corev1.Container{{Name: "postgres", Image: "x"}} },
			want:   "initContainers must not be named postgres",
		},
		{
			name:   "sidecar without image",
			mutate: func(p *Postgresql) { p.Spec.Sidecars = []Sidecar{{Name: "x"}} },
			want:   "spec.sidecars[0].image",
		},
		{
			name: "seven sidecars",
			mutate: func(p *Postgresql) {
				for i := range 7 {
					p.Spec.Sidecars = append(p.Spec.Sidecars, Sidecar{Name: fmt.Sprintf("s%d", i), Image: "x"})
				}
			},
			want: "spec.sidecars: Too many: 7: must have at most 6 items",
		},
		{
			name: "sidecar request above its limit",
			mutate: func(p *Postgresql) {
				p.Spec.Sidecars = []Sidecar{{Name: "x", Image: "x", Resources: &Resources{
					Requests: &ResourceDescription{CPU: ptr.To(resource.MustParse("2"))},
					Limits:   &ResourceDescription{CPU: ptr.To(resource.MustParse("1"))}}}}
			},
			want: "resources.requests.cpu must not exceed resources.limits.cpu",
		},
		{
			name:   "17 instances",
			mutate: func(p *Postgresql) { p.Spec.NumberOfInstances = 17 },
			want:   "spec.numberOfInstances: Invalid value: 17: spec.numberOfInstances in body should be less than or equal to 16",
		},
		{
			name:   "negative instances",
			mutate: func(p *Postgresql) { p.Spec.NumberOfInstances = -1 },
			want:   "should be greater than or equal to 0",
		},
		{
			name:   "unknown major version",
			mutate: func(p *Postgresql) { p.Spec.PostgreSQL.Version = "12" },
			want:   `spec.postgresql.version: Unsupported value: "12"`,
		},
		{
			name:   "missing team",
			mutate: func(p *Postgresql) { p.Spec.TeamID = "" },
			want:   "spec.teamId",
		},
		{
			name:   "volume size not a quantity",
			mutate: func(p *Postgresql) {},
			raw:    func(obj map[string]any) { spec(obj)["volume"].(map[string]any)["size"] = "ten gigs" },
			want:   "spec.volume.size",
		},
		{
			name:   "volume size as a plain number",
			mutate: func(p *Postgresql) {},
			raw:    func(obj map[string]any) { spec(obj)["volume"].(map[string]any)["size"] = int64(10737418240) },
		},
		{
			name:   "unknown user flag",
			mutate: func(p *Postgresql) { p.Spec.Users["zalando"] = UserFlags{"admin"} },
			want:   `spec.users.zalando[0]: Unsupported value: "admin"`,
		},
		{
			name:   "flag given twice",
			mutate: func(p *Postgresql) { p.Spec.Users["zalando"] = UserFlags{"login", "login"} },
			want:   `spec.users[zalando][1]: Duplicate value: "login"`,
		},
		{
			name:   "upper case user name",
			mutate: func(p *Postgresql) { p.Spec.Users["Foo"] = UserFlags{} },
			want:   "spec.users: Invalid value: user names must be at most 63 lower case letters",
		},
		{
			name:   "user name of 64 characters",
			mutate: func(p *Postgresql) { p.Spec.Users[strings.Repeat("u", 64)] = UserFlags{} },
			want:   "user names must be at most 63",
		},
		{
			name:   "dotted user name",
			mutate: func(p *Postgresql) { p.Spec.Users["team.app-user"] = UserFlags{} },
		},
		{
			name:   "reserved user",
			mutate: func(p *Postgresql) { p.Spec.Users["postgres"] = UserFlags{} },
			want:   "user names postgres and standby, and the prefix pg_, are reserved",
		},
		{
			name:   "pg_ user",
			mutate: func(p *Postgresql) { p.Spec.Users["pg_monitor"] = UserFlags{} },
			want:   "are reserved",
		},
		{
			name:   "database name with a dash",
			mutate: func(p *Postgresql) { p.Spec.Databases["my-db"] = "zalando" },
			want:   "spec.databases: Invalid value: database names must be",
		},
		{
			name:   "reserved database",
			mutate: func(p *Postgresql) { p.Spec.Databases["postgres"] = "zalando" },
			want:   "database names postgres, template0 and template1 are reserved",
		},
		{
			name:   "database owner not a user",
			mutate: func(p *Postgresql) { p.Spec.Databases["bar"] = "nobody" },
			want:   "spec.databases: Invalid value: every database owner must be declared in users",
		},
		{
			name: "databases without users",
			mutate: func(p *Postgresql) {
				p.Spec.Users = nil
			},
			want: "every database owner must be declared in users",
		},
		{
			name: "prepared databases",
			mutate: func(p *Postgresql) {
				p.Spec.PreparedDatabases = map[string]PreparedDatabase{
					"foo": {DefaultUsers: true, Extensions: map[string]ExtensionSchema{"uuid-ossp": "public", "pg_partman": "data"},
						Schemas: map[string]PreparedSchema{"data": {}, "history": {DefaultRoles: ptr.To(true), DefaultUsers: true},
							"public": {DefaultRoles: ptr.To(false)}}},
					"bar": {},
				}
			},
		},
		{
			name:   "prepared databases empty",
			mutate: func(p *Postgresql) {},
			raw:    func(obj map[string]any) { spec(obj)["preparedDatabases"] = map[string]any{} },
			want:   "spec.preparedDatabases: Invalid value: 0: spec.preparedDatabases in body should have at least 1 properties",
		},
		{
			name:   "prepared database with a capital",
			mutate: func(p *Postgresql) { p.Spec.PreparedDatabases = map[string]PreparedDatabase{"Foo": {}} },
			want:   "spec.preparedDatabases: Invalid value: prepared database names must be at most 51 lower case letters",
		},
		{
			name:   "prepared database pg_",
			mutate: func(p *Postgresql) { p.Spec.PreparedDatabases = map[string]PreparedDatabase{"pg_foo": {}} },
			want:   "not starting with a digit or pg_",
		},
		{
			name:   "prepared database reserved",
			mutate: func(p *Postgresql) { p.Spec.PreparedDatabases = map[string]PreparedDatabase{"template1": {}} },
			want:   "prepared database names postgres, template0 and template1 are reserved",
		},
		{
			name: "prepared database name of 52 characters",
			mutate: func(p *Postgresql) {
				p.Spec.PreparedDatabases = map[string]PreparedDatabase{strings.Repeat("d", 52): {}}
			},
			want: "prepared database names must be at most 51",
		},
		{
			name: "prepared schema too long for its roles",
			mutate: func(p *Postgresql) {
				p.Spec.PreparedDatabases = map[string]PreparedDatabase{strings.Repeat("d", 30): {
					Schemas: map[string]PreparedSchema{strings.Repeat("s", 21): {}}}}
			},
			want: "database and schema names together at most 50",
		},
		{
			name: "prepared schema with a dash",
			mutate: func(p *Postgresql) {
				p.Spec.PreparedDatabases = map[string]PreparedDatabase{"foo": {Schemas: map[string]PreparedSchema{"my-data": {}}}}
			},
			want: "schema names must be at most 63 lower case letters",
		},
		{
			name: "prepared schema users without roles",
			mutate: func(p *Postgresql) {
				p.Spec.PreparedDatabases = map[string]PreparedDatabase{"foo": {
					Schemas: map[string]PreparedSchema{"data": {DefaultRoles: ptr.To(false), DefaultUsers: true}}}}
			},
			want: "defaultUsers needs defaultRoles",
		},
		{
			name: "prepared extension in a schema with a dash",
			mutate: func(p *Postgresql) {
				p.Spec.PreparedDatabases = map[string]PreparedDatabase{"foo": {Extensions: map[string]ExtensionSchema{"pgcrypto": "my-data"}}}
			},
			want: `spec.preparedDatabases.foo.extensions.pgcrypto: Invalid value: "my-data"`,
		},
		{
			name: "prepared extension with a capital",
			mutate: func(p *Postgresql) {
				p.Spec.PreparedDatabases = map[string]PreparedDatabase{"foo": {Extensions: map[string]ExtensionSchema{"PgCrypto": "data"}}}
			},
			want: "extension names must be",
		},
		{
			name:   "patroni timings",
			mutate: func(p *Postgresql) { p.Spec.Patroni = &Patroni{TTL: 25, LoopWait: 10, RetryTimeout: 10} },
			want:   "spec.patroni: Invalid value: patroni: loop_wait + 2 * retry_timeout must not exceed ttl",
		},
		{
			name:   "patroni timings with defaults",
			mutate: func(p *Postgresql) { p.Spec.Patroni = &Patroni{LoopWait: 11} },
			want:   "loop_wait + 2 * retry_timeout must not exceed ttl",
		},
		{
			name:   "patroni ttl below Patroni's minimum",
			mutate: func(p *Postgresql) { p.Spec.Patroni = &Patroni{TTL: 19} },
			want:   "spec.patroni.ttl",
		},
		{
			name: "cpu request above limit",
			mutate: func(p *Postgresql) {
				p.Spec.Resources = &Resources{
					Requests: &ResourceDescription{CPU: quantity("1500m"), Memory: quantity("1Gi")},
					Limits:   &ResourceDescription{CPU: quantity("1"), Memory: quantity("1Gi")},
				}
			},
			want: "spec.resources.requests.cpu: Invalid value: resources.requests.cpu must not exceed resources.limits.cpu",
		},
		{
			name:   "memory request above limit, given as a plain number",
			mutate: func(p *Postgresql) {},
			raw: func(obj map[string]any) {
				spec(obj)["resources"] = map[string]any{
					"requests": map[string]any{"memory": int64(2 << 30)},
					"limits":   map[string]any{"memory": "1Gi", "cpu": "1"},
				}
			},
			want: "resources.requests.memory must not exceed resources.limits.memory",
		},
		{
			name: "requests equal to limits in other units",
			mutate: func(p *Postgresql) {
				p.Spec.Resources = &Resources{
					Requests: &ResourceDescription{CPU: quantity("1"), Memory: quantity("1024Mi")},
					Limits:   &ResourceDescription{CPU: quantity("1000m"), Memory: quantity("1Gi")},
				}
			},
		},
		{
			name: "requests without limits",
			mutate: func(p *Postgresql) {
				p.Spec.Resources = &Resources{Requests: &ResourceDescription{CPU: quantity("64")}}
			},
		},
		{
			name:   "cluster name too long",
			mutate: func(p *Postgresql) { p.Name = strings.Repeat("a", 53) },
			want:   "metadata.name must be at most 52 characters",
		},
		{
			name:   "cluster name starting with a digit",
			mutate: func(p *Postgresql) { p.Name = "9lives" },
			want:   "metadata.name must be a DNS-1035 label",
		},

		// Updates.
		{
			name:   "volume grows",
			mutate: func(p *Postgresql) { p.Spec.Volume.Size = resource.MustParse("2Gi") },
			old:    func(p *Postgresql) {},
		},
		{
			name:   "volume same size in other units",
			mutate: func(p *Postgresql) { p.Spec.Volume.Size = resource.MustParse("1024Mi") },
			old:    func(p *Postgresql) {},
		},
		{
			name:   "volume shrinks",
			old:    func(p *Postgresql) { p.Spec.Volume.Size = resource.MustParse("10Gi") },
			mutate: func(p *Postgresql) { p.Spec.Volume.Size = resource.MustParse("9.5Gi") },
			want:   `spec.volume.size: Invalid value: "9728Mi": volume.size may not shrink`,
		},
		{
			name:   "volume shrinks from a plain number",
			old:    func(p *Postgresql) {},
			mutate: func(p *Postgresql) {},
			raw:    func(obj map[string]any) { spec(obj)["volume"].(map[string]any)["size"] = int64(1000) },
			want:   "volume.size may not shrink",
		},
		{
			name:   "version raised",
			old:    func(p *Postgresql) { p.Spec.PostgreSQL.Version = "16" },
			mutate: func(p *Postgresql) { p.Spec.PostgreSQL.Version = "17" },
		},
		{
			name:   "version lowered",
			old:    func(p *Postgresql) { p.Spec.PostgreSQL.Version = "17" },
			mutate: func(p *Postgresql) { p.Spec.PostgreSQL.Version = "13" },
			want:   "postgresql.version may not decrease",
		},
		{
			name:   "team changed",
			old:    func(p *Postgresql) {},
			mutate: func(p *Postgresql) { p.Spec.TeamID = "other" },
			want:   `spec.teamId: Invalid value: "other": teamId is immutable`,
		},
		{
			name:   "volume subPath changed",
			old:    func(p *Postgresql) { p.Spec.Volume.SubPath = "a" },
			mutate: func(p *Postgresql) { p.Spec.Volume.SubPath = "b" },
			want:   "volume.subPath and volume.isSubPathExpr are immutable",
		},
		{
			name:   "volume subPath added",
			old:    func(p *Postgresql) {},
			mutate: func(p *Postgresql) { p.Spec.Volume.SubPath = "b" },
			want:   "volume.subPath and volume.isSubPathExpr are immutable",
		},
		{
			name:   "volume subPath kept, the size grown",
			old:    func(p *Postgresql) { p.Spec.Volume.SubPath = "a" },
			mutate: func(p *Postgresql) { p.Spec.Volume.SubPath = "a"; p.Spec.Volume.Size = resource.MustParse("20Gi") },
		},
		{
			name:   "initdb changed",
			old:    func(p *Postgresql) { p.Spec.Patroni = &Patroni{InitDB: map[string]string{"encoding": "UTF8"}} },
			mutate: func(p *Postgresql) { p.Spec.Patroni = &Patroni{InitDB: map[string]string{"encoding": "LATIN1"}} },
			want:   "patroni.initdb is immutable: initdb runs once, when a cluster is created",
		},
		{
			name: "initdb added to a cluster",
			old:  func(p *Postgresql) { p.Spec.Patroni = &Patroni{TTL: 30} },
			mutate: func(p *Postgresql) {
				p.Spec.Patroni = &Patroni{TTL: 30, InitDB: map[string]string{"data-checksums": "true"}}
			},
			want: "patroni.initdb is immutable",
		},
		{
			name:   "initdb removed",
			old:    func(p *Postgresql) { p.Spec.Patroni = &Patroni{InitDB: map[string]string{"encoding": "UTF8"}} },
			mutate: func(p *Postgresql) { p.Spec.Patroni = &Patroni{TTL: 30} },
			want:   "patroni.initdb is immutable",
		},
		{
			name: "initdb kept, the dynamic settings edited",
			old:  func(p *Postgresql) { p.Spec.Patroni = &Patroni{InitDB: map[string]string{"encoding": "UTF8"}} },
			mutate: func(p *Postgresql) {
				p.Spec.Patroni = &Patroni{InitDB: map[string]string{"encoding": "UTF8"}, SynchronousMode: true,
					SynchronousModeStrict: true, SynchronousNodeCount: 1, FailsafeMode: ptr.To(true),
					Slots: map[string]map[string]string{"cdc": {"type": "logical", "database": "foo", "plugin": "pgoutput"}}}
			},
		},
		{
			name:   "synchronous_node_count 0",
			mutate: func(p *Postgresql) {},
			raw: func(obj map[string]any) {
				spec(obj)["patroni"] = map[string]any{"synchronous_mode": true, "synchronous_node_count": int64(0)}
			},
			want: "spec.patroni.synchronous_node_count: Invalid value: 0",
		},
		// A class that does not exist is fixed by an edit: pgloop
		// replaces the claims that never bound (docs/user-guide.md).
		{
			name:   "storage class set later",
			old:    func(p *Postgresql) {},
			mutate: func(p *Postgresql) { p.Spec.Volume.StorageClass = "fast" },
		},
		{
			name:   "storage class changed",
			old:    func(p *Postgresql) { p.Spec.Volume.StorageClass = "standard" },
			mutate: func(p *Postgresql) { p.Spec.Volume.StorageClass = "fast" },
		},
		{
			name: "storage class kept while the volume grows",
			old:  func(p *Postgresql) { p.Spec.Volume.StorageClass = "standard" },
			mutate: func(p *Postgresql) {
				p.Spec.Volume.StorageClass = "standard"
				p.Spec.Volume.Size = resource.MustParse("5Gi")
			},
		},
		{
			name:   "scale and add users",
			old:    func(p *Postgresql) {},
			mutate: func(p *Postgresql) { p.Spec.NumberOfInstances = 5; p.Spec.Users["new_user"] = UserFlags{"nologin"} },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := decodeSample(t, "minimal.yaml")
			tt.mutate(p)
			obj := toUnstructured(t, p)
			if tt.raw != nil {
				tt.raw(obj)
			}
			h.decode(obj)

			var old map[string]any
			if tt.old != nil {
				o := decodeSample(t, "minimal.yaml")
				tt.old(o)
				old = toUnstructured(t, o)
				h.decode(old)
				if errs := h.admit(old, nil); len(errs) != 0 {
					t.Fatalf("old object refused: %v", errs.ToAggregate())
				}
			}

			errs := h.admit(obj, old)
			switch {
			case tt.want == "" && len(errs) != 0:
				t.Fatalf("refused: %v", errs.ToAggregate())
			case tt.want != "" && len(errs) == 0:
				t.Fatalf("admitted, want an error containing %q", tt.want)
			case tt.want != "" && !strings.Contains(errs.ToAggregate().Error(), tt.want):
				t.Fatalf("error %q does not contain %q", errs.ToAggregate(), tt.want)
			}

			// Validate must agree with the CRD on every create it
			// refuses; it cannot judge transitions (no old object).
			if tt.want != "" && tt.old == nil && tt.raw == nil {
				if goErrs := p.Validate(); len(goErrs) == 0 {
					t.Errorf("the CRD refuses this (%v) but Validate accepts it", errs.ToAggregate())
				}
			}
		})
	}
}

func spec(obj map[string]any) map[string]any {
	return obj["spec"].(map[string]any)
}
