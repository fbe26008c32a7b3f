package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/test/pgtest"
	"github.com/pgloop/pgloop/test/testbed"
)

// The CRD's schema and CEL rules on a real apiserver: what they admit, what
// they refuse and with which message, and the status subresource. No
// operator runs here.

const crdDeadline = time.Minute

// The samples shipped in manifests/samples are accepted as they are.
func TestCRDAcceptsSamples(t *testing.T) {
	t.Parallel()
	ctx, ns := Context(t, crdDeadline), env.Namespace(t)
	for name, version := range map[string]string{"minimal.yaml": "15", "full.yaml": "17"} {
		t.Run(name, func(t *testing.T) {
			objs, err := testbed.ReadManifests(filepath.Join(env.Repo, "manifests", "samples", name))
			if err != nil {
				t.Fatal(err)
			}
			for _, obj := range objs {
				obj.SetNamespace(ns)
				created, err := env.Dyn.Resource(v1.SchemeGroupVersionResource).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
				if err != nil {
					t.Fatalf("sample %s refused: %v", name, err)
				}
				// Read back through the typed client: the stored object
				// decodes into pgloop's types.
				pg, err := env.PG.Postgresqls(ns).Get(ctx, created.GetName(), metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if pg.Spec.TeamID != "acid" || pg.Spec.PostgreSQL.Version != version {
					t.Errorf("sample %s read back as %+v", name, pg.Spec)
				}
			}
		})
	}
}

// numberOfInstances defaults to 1 when left out.
func TestCRDDefaultsInstances(t *testing.T) {
	t.Parallel()
	ctx, ns := Context(t, crdDeadline), env.Namespace(t)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1.SchemeGroupVersion.String(),
		"kind":       v1.PostgresqlKind,
		"metadata":   map[string]any{"name": "defaults"},
		"spec": map[string]any{
			"teamId":     "acid",
			"postgresql": map[string]any{"version": "16"},
			"volume":     map[string]any{"size": "1Gi"},
		},
	}}
	if _, err := env.Dyn.Resource(v1.SchemeGroupVersionResource).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pg, err := env.PG.Postgresqls(ns).Get(ctx, "defaults", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pg.Spec.NumberOfInstances != 1 {
		t.Errorf("numberOfInstances = %d, want the default 1", pg.Spec.NumberOfInstances)
	}
}

// Specs the schema or a CEL rule refuses never get stored, and the error
// names the field.
func TestCRDRejectsInvalidSpecs(t *testing.T) {
	t.Parallel()
	ctx, ns := Context(t, crdDeadline), env.Namespace(t)
	q := resource.MustParse
	for _, tc := range []struct {
		name   string
		mutate func(*v1.Postgresql)
		// want are substrings of the error: the field, and the reason.
		want []string
	}{
		{"too many instances", func(pg *v1.Postgresql) { pg.Spec.NumberOfInstances = 17 },
			[]string{"spec.numberOfInstances", "less than or equal to 16"}},
		{"negative instances", func(pg *v1.Postgresql) { pg.Spec.NumberOfInstances = -1 },
			[]string{"spec.numberOfInstances", "greater than or equal to 0"}},
		{"unknown postgres version", func(pg *v1.Postgresql) { pg.Spec.PostgreSQL.Version = "12" },
			[]string{"spec.postgresql.version", `Unsupported value: "12"`}},
		{"database owner not a user", func(pg *v1.Postgresql) { pg.Spec.Databases = map[string]string{"appdb": "nobody"} },
			[]string{"spec.databases", "every database owner must be declared in users"}},
		{"database owner without users", func(pg *v1.Postgresql) { pg.Spec.Users = nil },
			[]string{"spec.databases", "every database owner must be declared in users"}},
		{"reserved user postgres", func(pg *v1.Postgresql) { pg.Spec.Users["postgres"] = v1.UserFlags{} },
			[]string{"spec.users", "reserved"}},
		{"reserved user prefix pg_", func(pg *v1.Postgresql) { pg.Spec.Users["pg_monitor"] = v1.UserFlags{} },
			[]string{"spec.users", "reserved"}},
		{"a role name PostgreSQL reserves", func(pg *v1.Postgresql) { pg.Spec.Users["public"] = v1.UserFlags{} },
			[]string{"spec.users", "reserved"}},
		{"bad user name", func(pg *v1.Postgresql) { pg.Spec.Users["Bad User"] = v1.UserFlags{} },
			[]string{"spec.users", "user names must be"}},
		{"bad user flag", func(pg *v1.Postgresql) { pg.Spec.Users["app"] = v1.UserFlags{"superduper"} },
			[]string{"spec.users.app[0]", `Unsupported value: "superduper"`}},
		{"reserved database", func(pg *v1.Postgresql) { pg.Spec.Databases["template1"] = "app" },
			[]string{"spec.databases", "reserved"}},
		{"cpu request above limit", func(pg *v1.Postgresql) { pg.Spec.Resources.Requests.CPU = ptrTo(q("2")) },
			[]string{"spec.resources.requests.cpu", "must not exceed resources.limits.cpu"}},
		{"memory request above limit", func(pg *v1.Postgresql) { pg.Spec.Resources.Requests.Memory = ptrTo(q("1Gi")) },
			[]string{"spec.resources.requests.memory", "must not exceed resources.limits.memory"}},
		{"patroni ttl below loop_wait + 2 retry_timeout", func(pg *v1.Postgresql) {
			pg.Spec.Patroni = &v1.Patroni{TTL: 25, LoopWait: 10, RetryTimeout: 10}
		}, []string{"spec.patroni", "loop_wait + 2 * retry_timeout must not exceed ttl"}},
		{"patroni ttl below its minimum", func(pg *v1.Postgresql) { pg.Spec.Patroni = &v1.Patroni{TTL: 10, LoopWait: 2, RetryTimeout: 3} },
			[]string{"spec.patroni.ttl", "greater than or equal to 20"}},
		{"missing teamId", func(pg *v1.Postgresql) { pg.Spec.TeamID = "" },
			[]string{"spec.teamId"}},
		{"name starting with a digit", func(pg *v1.Postgresql) { pg.Name = "1db" },
			[]string{"metadata.name must be a DNS-1035 label"}},
		{"name with a dot", func(pg *v1.Postgresql) { pg.Name = "db.one" },
			[]string{"metadata.name must be a DNS-1035 label"}},
		{"name too long", func(pg *v1.Postgresql) { pg.Name = strings.Repeat("a", 53) },
			[]string{"metadata.name must be at most 52 characters"}},
		{"name not a DNS subdomain", func(pg *v1.Postgresql) { pg.Name = "Bad_Name" },
			[]string{"metadata.name", "RFC 1123"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pg := NewCluster(ns, "db", 2)
			pgtest.WithApp(pg)
			tc.mutate(pg)
			_, err := env.PG.Postgresqls(pg.Namespace).Create(ctx, pg, metav1.CreateOptions{})
			if err == nil {
				t.Fatalf("accepted; want an error mentioning %q", tc.want)
			}
			t.Logf("refused: %v", err)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("error %v (reason %s), want Invalid", err, apierrors.ReasonForError(err))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
			if _, err := env.PG.Postgresqls(ns).Get(ctx, pg.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("after the refusal, Get = %v, want NotFound", err)
			}
		})
	}
}

// Transition rules: what may change once a cluster exists.
func TestCRDUpdateRules(t *testing.T) {
	t.Parallel()
	ctx, ns := Context(t, crdDeadline), env.Namespace(t)
	for _, tc := range []struct {
		name   string
		create func(*v1.Postgresql) // before creation; nil keeps NewCluster's
		update func(*v1.Postgresql)
		want   []string // nil: accepted
	}{
		{"volume grows", nil, func(pg *v1.Postgresql) { pg.Spec.Volume.Size = resource.MustParse("2Gi") }, nil},
		{"volume shrinks", func(pg *v1.Postgresql) { pg.Spec.Volume.Size = resource.MustParse("2Gi") },
			func(pg *v1.Postgresql) { pg.Spec.Volume.Size = resource.MustParse("1Gi") },
			[]string{"spec.volume.size", "volume.size may not shrink"}},
		{"version upgrade", nil, func(pg *v1.Postgresql) { pg.Spec.PostgreSQL.Version = "18" }, nil},
		{"version downgrade", nil, func(pg *v1.Postgresql) { pg.Spec.PostgreSQL.Version = "16" },
			[]string{"spec.postgresql.version", "may not decrease"}},
		{"teamId change", nil, func(pg *v1.Postgresql) { pg.Spec.TeamID = "other" },
			[]string{"spec.teamId", "teamId is immutable"}},
		// A storage class may change: it fixes a class that does not
		// exist (claims that never bound are made anew, see
		// docs/user-guide.md).
		{"storageClass change", func(pg *v1.Postgresql) { pg.Spec.Volume.StorageClass = "standard" },
			func(pg *v1.Postgresql) { pg.Spec.Volume.StorageClass = "fast" }, nil},
		{"storageClass set later", nil, func(pg *v1.Postgresql) { pg.Spec.Volume.StorageClass = "fast" }, nil},
		{"storageClass removed", func(pg *v1.Postgresql) { pg.Spec.Volume.StorageClass = "standard" },
			func(pg *v1.Postgresql) { pg.Spec.Volume.StorageClass = "" }, nil},
		{"scale and edit parameters", nil, func(pg *v1.Postgresql) {
			pg.Spec.NumberOfInstances = 3
			pg.Spec.PostgreSQL.Parameters = map[string]string{"work_mem": "8MB"}
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := testbedName(tc.name)
			pg := NewCluster(ns, name, 2)
			if tc.create != nil {
				tc.create(pg)
			}
			created, err := env.PG.Postgresqls(pg.Namespace).Create(ctx, pg, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			changed := created.DeepCopy()
			tc.update(changed)
			updated, err := env.PG.Postgresqls(changed.Namespace).Update(ctx, changed, metav1.UpdateOptions{})
			if tc.want == nil {
				if err != nil {
					t.Fatalf("update refused: %v", err)
				}
				if updated.Generation <= created.Generation {
					t.Errorf("generation %d after a spec change, was %d", updated.Generation, created.Generation)
				}
				return
			}
			if err == nil {
				t.Fatalf("update accepted; want an error mentioning %q", tc.want)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("error %v (reason %s), want Invalid", err, apierrors.ReasonForError(err))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
			stored, err := env.PG.Postgresqls(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if stored.ResourceVersion != created.ResourceVersion {
				t.Errorf("refused update changed the object: resourceVersion %s -> %s", created.ResourceVersion, stored.ResourceVersion)
			}
		})
	}
}

// testbedName turns a subtest name into a cluster name.
func testbedName(s string) string {
	s = strings.ToLower(strings.NewReplacer(" ", "-", "_", "-").Replace(s))
	if len(s) > 40 {
		s = strings.TrimRight(s[:40], "-")
	}
	return s
}

// The status subresource: status and spec are written through separate
// endpoints, and optimistic concurrency holds on both.
func TestCRDStatusSubresource(t *testing.T) {
	t.Parallel()
	ctx, ns := Context(t, crdDeadline), env.Namespace(t)
	created, err := env.PG.Postgresqls(ns).Create(ctx, NewCluster(ns, "db", 2), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// 1. UpdateStatus writes status and ignores the spec it carries.
	withStatus := created.DeepCopy()
	withStatus.Status.State = "Running"
	withStatus.Status.Reason = "AllInstancesReady"
	withStatus.Status.Ready = "2/2"
	withStatus.Status.Timers = []v1.Timer{{Name: "resync", Deadline: metav1.NewTime(time.Now().Add(time.Minute).Truncate(time.Second)), Epoch: 3}}
	withStatus.Spec.NumberOfInstances = 5
	afterStatus, err := env.PG.Postgresqls(withStatus.Namespace).UpdateStatus(ctx, withStatus, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if afterStatus.Status.State != "Running" || afterStatus.Status.Ready != "2/2" || len(afterStatus.Status.Timers) != 1 {
		t.Errorf("status after UpdateStatus: %+v", afterStatus.Status)
	}
	if afterStatus.Spec.NumberOfInstances != 2 || afterStatus.Generation != created.Generation {
		t.Errorf("UpdateStatus changed the spec: numberOfInstances %d, generation %d -> %d",
			afterStatus.Spec.NumberOfInstances, created.Generation, afterStatus.Generation)
	}

	// 2. Update writes the spec and ignores the status it carries.
	withSpec := afterStatus.DeepCopy()
	withSpec.Spec.NumberOfInstances = 3
	withSpec.Status.State = "Degraded"
	afterSpec, err := env.PG.Postgresqls(withSpec.Namespace).Update(ctx, withSpec, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if afterSpec.Spec.NumberOfInstances != 3 || afterSpec.Generation != afterStatus.Generation+1 {
		t.Errorf("after Update: numberOfInstances %d, generation %d (was %d)",
			afterSpec.Spec.NumberOfInstances, afterSpec.Generation, afterStatus.Generation)
	}
	if afterSpec.Status.State != "Running" {
		t.Errorf("Update changed status.state to %q", afterSpec.Status.State)
	}

	// 3. A stale resourceVersion is a Conflict, on both endpoints.
	stale := afterStatus.DeepCopy() // older than afterSpec
	stale.Spec.NumberOfInstances = 4
	if _, err := env.PG.Postgresqls(stale.Namespace).Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("Update with a stale resourceVersion: %v, want Conflict", err)
	}
	stale.Status.State = "Creating"
	if _, err := env.PG.Postgresqls(stale.Namespace).UpdateStatus(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("UpdateStatus with a stale resourceVersion: %v, want Conflict", err)
	}
	final, err := env.PG.Postgresqls(ns).Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if final.Spec.NumberOfInstances != 3 || final.Status.State != "Running" {
		t.Errorf("after the refused writes: numberOfInstances %d, state %q; want 3, Running",
			final.Spec.NumberOfInstances, final.Status.State)
	}

	// 4. The status schema holds too: timers are a map keyed by name.
	bad := final.DeepCopy()
	bad.Status.Timers = []v1.Timer{{Name: "timeout", Deadline: metav1.Now()}, {Name: "timeout", Deadline: metav1.Now()}}
	if _, err := env.PG.Postgresqls(bad.Namespace).UpdateStatus(ctx, bad, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.timers") {
		t.Errorf("UpdateStatus with two timers named timeout: %v, want Invalid naming status.timers", err)
	}
}

// `kubectl get pg` shows State, Ready and Age from the CRD's printer
// columns, served by the apiserver as a Table.
func TestCRDPrinterColumns(t *testing.T) {
	t.Parallel()
	ctx, ns := Context(t, crdDeadline), env.Namespace(t)

	crd, err := env.Dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).
		Get(ctx, v1.PostgresqlResource+"."+v1.GroupName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if len(versions) != 1 {
		t.Fatalf("CRD has %d versions, want 1", len(versions))
	}
	cols, _, _ := unstructured.NestedSlice(versions[0].(map[string]any), "additionalPrinterColumns")
	got := map[string]string{}
	for _, c := range cols {
		m := c.(map[string]any)
		got[m["name"].(string)] = m["jsonPath"].(string)
	}
	for name, path := range map[string]string{"State": ".status.state", "Ready": ".status.ready", "Reason": ".status.reason", "Age": ".metadata.creationTimestamp"} {
		if got[name] != path {
			t.Errorf("printer column %s = %q, want %q (all: %v)", name, got[name], path, got)
		}
	}
	shortNames, _, _ := unstructured.NestedStringSlice(crd.Object, "spec", "names", "shortNames")
	if !slices.Contains(shortNames, v1.PostgresqlShortName) {
		t.Errorf("shortNames %v lack %q", shortNames, v1.PostgresqlShortName)
	}

	const kubectl = "/usr/bin/kubectl"
	if _, err := os.Stat(kubectl); err != nil {
		t.Skipf("no %s to check the output: %v", kubectl, err)
	}
	created, err := env.PG.Postgresqls(ns).Create(ctx, NewCluster(ns, "shown", 2), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.State, created.Status.Ready, created.Status.Reason = "Creating", "1/2", "Unschedulable"
	if _, err := env.PG.Postgresqls(created.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err := runKubectl(ctx, kubectl, "get", "pg", "-n", ns, "-o", "wide")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("kubectl get pg printed %d lines, want a header and one row:\n%s", len(lines), out)
	}
	if h := strings.Fields(lines[0]); !slices.Equal(h, []string{"NAME", "STATE", "READY", "REASON", "AGE"}) {
		t.Errorf("header %q, want NAME STATE READY REASON AGE", lines[0])
	}
	if row := strings.Fields(lines[1]); len(row) != 5 || row[0] != "shown" || row[1] != "Creating" || row[2] != "1/2" || row[3] != "Unschedulable" {
		t.Errorf("row %q, want shown Creating 1/2 Unschedulable <age>", lines[1])
	}
}

func runKubectl(ctx context.Context, kubectl string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", env.Plane.Kubeconfig}, args...)...)
	cmd.Env = operatorEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", &kubectlError{args: args, err: err, stderr: stderr.String()}
	}
	return string(out), nil
}

type kubectlError struct {
	args   []string
	err    error
	stderr string
}

func (e *kubectlError) Error() string {
	return "kubectl " + strings.Join(e.args, " ") + ": " + e.err.Error() + ": " + e.stderr
}

func ptrTo[T any](v T) *T { return &v }
