package cluster

import (
	"encoding/json"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

func TestSpiloEnv(t *testing.T) {
	pg := loadSample(t, "minimal")
	env := StatefulSet(pg, Options{}).Spec.Template.Spec.Containers[0].Env

	var names []string
	byName := map[string]corev1.EnvVar{}
	for _, e := range env {
		names = append(names, e.Name)
		byName[e.Name] = e
	}
	wantNames := []string{"SCOPE", "PGROOT", "POD_IP", "POD_NAMESPACE",
		"PGUSER_SUPERUSER", "PGPASSWORD_SUPERUSER", "PGUSER_STANDBY", "PGPASSWORD_STANDBY",
		"PGVERSION", "DCS_ENABLE_KUBERNETES_API", "KUBERNETES_SCOPE_LABEL", "KUBERNETES_ROLE_LABEL",
		"KUBERNETES_LEADER_LABEL_VALUE", "KUBERNETES_LABELS", "KUBERNETES_USE_CONFIGMAPS", "SPILO_CONFIGURATION"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("env names = %v\nwant %v", names, wantNames)
	}

	values := []struct{ name, value string }{
		{"SCOPE", "acid-minimal-cluster"},
		{"PGROOT", "/home/postgres/pgdata/pgroot"},
		{"PGUSER_SUPERUSER", "postgres"},
		{"PGUSER_STANDBY", "standby"},
		{"PGVERSION", "17"},
		{"DCS_ENABLE_KUBERNETES_API", "true"},
		{"KUBERNETES_SCOPE_LABEL", "cluster-name"},
		{"KUBERNETES_ROLE_LABEL", "spilo-role"},
		{"KUBERNETES_LEADER_LABEL_VALUE", "master"},
		{"KUBERNETES_LABELS", `{"application":"spilo"}`},
		{"KUBERNETES_USE_CONFIGMAPS", "true"},
	}
	for _, c := range values {
		if got := byName[c.name]; got.Value != c.value || got.ValueFrom != nil {
			t.Errorf("%s = %q (from %v), want %q", c.name, got.Value, got.ValueFrom, c.value)
		}
	}

	fields := []struct{ name, path string }{
		{"POD_IP", "status.podIP"},
		{"POD_NAMESPACE", "metadata.namespace"},
	}
	for _, c := range fields {
		want := &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: c.path}}
		if got := byName[c.name]; got.Value != "" || !apiequality.Semantic.DeepEqual(got.ValueFrom, want) {
			t.Errorf("%s = %+v, want the downward API field %s", c.name, got, c.path)
		}
	}

	secrets := []struct{ name, secret string }{
		{"PGPASSWORD_SUPERUSER", "postgres.acid-minimal-cluster.credentials.postgresql.pgloop.dev"},
		{"PGPASSWORD_STANDBY", "standby.acid-minimal-cluster.credentials.postgresql.pgloop.dev"},
	}
	for _, c := range secrets {
		got := byName[c.name]
		if got.Value != "" || got.ValueFrom == nil || got.ValueFrom.SecretKeyRef == nil ||
			got.ValueFrom.SecretKeyRef.Name != c.secret || got.ValueFrom.SecretKeyRef.Key != "password" {
			t.Errorf("%s = %+v, want key password of secret %s", c.name, got, c.secret)
		}
	}

	// The referenced Secrets are the ones Secrets builds, with the user
	// names the env gives.
	built, err := Secrets(pg, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	for i, user := range []string{"PGUSER_SUPERUSER", "PGUSER_STANDBY"} {
		s := built[i]
		if s.Name != secrets[i].secret || string(s.Data["username"]) != byName[user].Value {
			t.Errorf("secret %d is %s for %q; env wants %s for %q", i, s.Name, s.Data["username"], secrets[i].secret, byName[user].Value)
		}
	}

	if got, want := byName["SPILO_CONFIGURATION"].Value, SpiloConfiguration(pg); got != want {
		t.Errorf("SPILO_CONFIGURATION = %s, want %s", got, want)
	}
}

func TestSpiloConfiguration(t *testing.T) {
	cases := []struct {
		name       string
		patroni    *v1.Patroni
		parameters map[string]string
		want       string
	}{
		{
			name: "nothing set: Patroni's defaults, written out",
			want: `{"bootstrap":{"dcs":{"ttl":30,"loop_wait":10,"retry_timeout":10,"maximum_lag_on_failover":33554432,"synchronous_mode":false}}}`,
		},
		{
			name:    "patroni set, zero fields take defaults",
			patroni: &v1.Patroni{SynchronousMode: true},
			want:    `{"bootstrap":{"dcs":{"ttl":30,"loop_wait":10,"retry_timeout":10,"maximum_lag_on_failover":33554432,"synchronous_mode":true}}}`,
		},
		{
			name:    "every patroni field",
			patroni: &v1.Patroni{TTL: 60, LoopWait: 5, RetryTimeout: 20, MaximumLagOnFailover: 1048576, PgHba: []string{"local all all trust", "host all all 0.0.0.0/0 md5"}},
			want:    `{"bootstrap":{"dcs":{"ttl":60,"loop_wait":5,"retry_timeout":20,"maximum_lag_on_failover":1048576,"synchronous_mode":false}},"postgresql":{"pg_hba":["local all all trust","host all all 0.0.0.0/0 md5"]}}`,
		},
		{
			name: "cluster-wide parameters go to the DCS, Spilo's local ones stay local, names lower-cased",
			parameters: map[string]string{
				"max_connections":          "100",
				"Work_Mem":                 "8MB",
				"shared_buffers":           "1GB",
				"SHARED_PRELOAD_LIBRARIES": "pg_stat_statements",
				"pg_stat_statements.max":   "5000",
			},
			want: `{"bootstrap":{"dcs":{"ttl":30,"loop_wait":10,"retry_timeout":10,"maximum_lag_on_failover":33554432,"synchronous_mode":false,` +
				`"postgresql":{"parameters":{"max_connections":"100","pg_stat_statements.max":"5000","work_mem":"8MB"}}}},` +
				`"postgresql":{"parameters":{"shared_buffers":"1GB","shared_preload_libraries":"pg_stat_statements"}}}`,
		},
		{
			name:       "names equal but for case: the one sorting last wins",
			parameters: map[string]string{"work_mem": "4MB", "WORK_MEM": "8MB"},
			want:       `{"bootstrap":{"dcs":{"ttl":30,"loop_wait":10,"retry_timeout":10,"maximum_lag_on_failover":33554432,"synchronous_mode":false,"postgresql":{"parameters":{"work_mem":"4MB"}}}}}`,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pg := &v1.Postgresql{Spec: v1.PostgresqlSpec{Patroni: c.patroni, PostgreSQL: v1.PostgresqlParam{Version: "17", Parameters: c.parameters}}}
			got := SpiloConfiguration(pg)
			if got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
			if !json.Valid([]byte(got)) {
				t.Errorf("not JSON: %s", got)
			}
		})
	}
}

// TestSpiloConfigurationFullSample checks the structure Spilo reads from the
// full sample, decoded rather than as a string.
func TestSpiloConfigurationFullSample(t *testing.T) {
	pg := loadSample(t, "full")
	var cfg struct {
		Bootstrap struct {
			DCS struct {
				TTL, LoopWait, RetryTimeout int
				SynchronousMode             bool `json:"synchronous_mode"`
				PostgreSQL                  struct {
					Parameters map[string]string `json:"parameters"`
				} `json:"postgresql"`
			} `json:"dcs"`
		} `json:"bootstrap"`
		PostgreSQL struct {
			Parameters map[string]string `json:"parameters"`
			PgHba      []string          `json:"pg_hba"`
		} `json:"postgresql"`
	}
	if err := json.Unmarshal([]byte(SpiloConfiguration(pg)), &cfg); err != nil {
		t.Fatal(err)
	}
	all := map[string]string{}
	for k, v := range cfg.Bootstrap.DCS.PostgreSQL.Parameters {
		all[k] = v
	}
	for k, v := range cfg.PostgreSQL.Parameters {
		if _, dup := all[k]; dup {
			t.Errorf("parameter %s is both in the DCS and local", k)
		}
		all[k] = v
	}
	if !apiequality.Semantic.DeepEqual(all, pg.Spec.PostgreSQL.Parameters) {
		t.Errorf("parameters = %v, want %v", all, pg.Spec.PostgreSQL.Parameters)
	}
	if cfg.Bootstrap.DCS.PostgreSQL.Parameters["max_connections"] != "200" {
		t.Errorf("max_connections must be in the DCS: Patroni keeps it equal on every member")
	}
	if cfg.PostgreSQL.Parameters["shared_preload_libraries"] != "pg_stat_statements" {
		t.Errorf("shared_preload_libraries must be local, or Spilo's local default overrides it")
	}
	if !cfg.Bootstrap.DCS.SynchronousMode {
		t.Errorf("synchronous_mode lost")
	}
	if !slices.Equal(cfg.PostgreSQL.PgHba, pg.Spec.Patroni.PgHba) {
		t.Errorf("pg_hba = %v, want %v", cfg.PostgreSQL.PgHba, pg.Spec.Patroni.PgHba)
	}
}
