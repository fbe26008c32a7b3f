package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/test/testbed"
)

// TestConvertedCompleteManifest takes a zalando user's complete manifest
// (testdata/zalando-complete.yaml: the fields of zalando's
// complete-postgres-manifest.yaml) through `pgloop convert`, applies the
// result with strict field validation, and waits until the cluster runs
// its spec on real PostgreSQL 15; then it looks at what runs for the
// fields issue 17 added: the Service type, the pod template, the prepared
// database's schemas and extension, the pooler, the CronJob and Patroni's
// configuration. The manifest has no sidecar: the process kubelet runs
// only the postgres container (TestZalandoFields runs one on KWOK).
func TestConvertedCompleteManifest(t *testing.T) {
	ns := env.Namespace(t)
	env.StartOperator(t, "convert", []string{ns})
	ctx := Context(t, 10*time.Minute)
	const name = "complete"

	raw, err := os.ReadFile("testdata/zalando-complete.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tol, err := json.Marshal(testbed.DataPlaneToleration())
	if err != nil {
		t.Fatal(err)
	}
	in := strings.NewReplacer("name: NAME", "name: "+name,
		"- TOLERATION", "- "+string(tol),
		"- AFFINITY", fmt.Sprintf("- {key: %s, operator: In, values: [%s]}", testbed.NodeLabel, testbed.ProcessNodeLabelValue)).Replace(string(raw))
	convert := exec.CommandContext(ctx, env.operatorBinary(t), "convert")
	convert.Stdin = strings.NewReader(in)
	var stderr strings.Builder
	convert.Stderr = &stderr
	out, err := convert.Output()
	if err != nil {
		t.Fatalf("pgloop convert: %v\n%s", err, stderr.String())
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "# dropped:") || strings.HasPrefix(line, "# changed:") {
			t.Log(line)
		}
	}

	// Strict: an unknown field is an error, not a warning.
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(out, &obj.Object); err != nil {
		t.Fatalf("the converted manifest: %v\n%s", err, out)
	}
	obj.SetNamespace(ns)
	began := time.Now()
	if _, err := env.Dyn.Resource(v1.SchemeGroupVersionResource).Namespace(ns).Create(ctx, obj,
		metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
		t.Fatalf("apply the converted manifest with strict field validation: %v", err)
	}
	pg := inEffect(ctx, t, ns, name, 2)
	t.Logf("Running, roles, databases and configuration applied after %v", time.Since(began).Round(time.Millisecond))

	t.Run("what runs", func(t *testing.T) {
		master, err := env.Kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || string(master.Spec.Type) != "LoadBalancer" || strings.Join(master.Spec.LoadBalancerSourceRanges, ",") != "127.0.0.1/32" {
			t.Errorf("master Service: %v, type %v, ranges %v; want LoadBalancer open to 127.0.0.1/32", err, master.Spec.Type, master.Spec.LoadBalancerSourceRanges)
		}
		sts, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		spec := sts.Spec.Template.Spec
		var names []string
		for _, c := range spec.InitContainers {
			names = append(names, "init:"+c.Name)
		}
		for _, c := range spec.Containers {
			names = append(names, c.Name)
		}
		if got := strings.Join(names, ","); got != "init:date,postgres" {
			t.Errorf("pod template containers %s, want init:date,postgres", got)
		}
		if _, err := env.Kube.AppsV1().Deployments(ns).Get(ctx, cluster.PoolerName(name, cluster.RoleMaster), metav1.GetOptions{}); err != nil {
			t.Errorf("the pooler's Deployment: %v", err)
		}
		cj, err := env.Kube.BatchV1().CronJobs(ns).Get(ctx, "logical-backup-"+name, metav1.GetOptions{})
		if err != nil || cj.Spec.Schedule != "30 00 * * *" {
			t.Errorf("the logical backup CronJob: %v (schedule %q)", err, cj.Spec.Schedule)
		}

		conn := env.SQL(ctx, t, env.Pod(ctx, t, ns, pg.Status.Primary))
		var checksums, schemas, extSchema string
		if err := conn.QueryRow(ctx, "SHOW data_checksums").Scan(&checksums); err != nil || checksums != "on" {
			t.Errorf("data_checksums %q, %v; want on (patroni.initdb)", checksums, err)
		}
		if err := conn.QueryRow(ctx, "SELECT slot_type FROM pg_replication_slots WHERE slot_name = 'permanent_physical_1'").Scan(new(string)); err != nil {
			t.Errorf("the permanent slot: %v", err)
		}
		bar := env.SQLDatabase(ctx, t, env.Pod(ctx, t, ns, pg.Status.Primary), "bar")
		if err := bar.QueryRow(ctx, "SELECT string_agg(nspname || ':' || pg_get_userbyid(nspowner), ',' ORDER BY nspname) FROM pg_namespace WHERE nspname IN ('data', 'history')").Scan(&schemas); err != nil ||
			schemas != "data:bar_data_owner,history:bar_history_owner" {
			t.Errorf("schemas of bar %q, %v; want data and history owned by their owner roles", schemas, err)
		}
		if err := bar.QueryRow(ctx, "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pgcrypto'").Scan(&extSchema); err != nil || extSchema != "public" {
			t.Errorf("pgcrypto in %q, %v; want public", extSchema, err)
		}
	})
}
