package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"

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
		{"PGVERSION", "15"},
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
			name: "nothing set: Spilo's defaults, written out",
			want: `{"bootstrap":{"dcs":{"loop_wait":10,"maximum_lag_on_failover":33554432,"retry_timeout":10,"synchronous_mode":false,"ttl":30}}}`,
		},
		{
			name:    "Patroni's timings: bootstrap only",
			patroni: &v1.Patroni{TTL: 60, LoopWait: 5, RetryTimeout: 20, MaximumLagOnFailover: 1048576, SynchronousMode: true},
			want:    `{"bootstrap":{"dcs":{"loop_wait":5,"maximum_lag_on_failover":1048576,"retry_timeout":20,"synchronous_mode":true,"ttl":60}}}`,
		},
		{
			name:    "pg_hba is local",
			patroni: &v1.Patroni{PgHba: []string{"local all all trust", "host all all 0.0.0.0/0 md5"}},
			want:    `{"bootstrap":{"dcs":{"loop_wait":10,"maximum_lag_on_failover":33554432,"retry_timeout":10,"synchronous_mode":false,"ttl":30}},"postgresql":{"pg_hba":["local all all trust","host all all 0.0.0.0/0 md5"]}}`,
		},
		{
			name: "shared parameters bootstrap the DCS, Spilo's local ones stay local, names lower-cased",
			parameters: map[string]string{
				"max_connections":          "100",
				"Work_Mem":                 "8MB",
				"shared_buffers":           "1GB",
				"SHARED_PRELOAD_LIBRARIES": "pg_stat_statements",
				"pg_stat_statements.max":   "5000",
			},
			want: `{"bootstrap":{"dcs":{"loop_wait":10,"maximum_lag_on_failover":33554432,"postgresql":{"parameters":{"max_connections":"100","pg_stat_statements.max":"5000","work_mem":"8MB"}},"retry_timeout":10,"synchronous_mode":false,"ttl":30}},` +
				`"postgresql":{"parameters":{"shared_buffers":"1GB","shared_preload_libraries":"pg_stat_statements"}}}`,
		},
		{
			name: "initdb over Spilo's defaults; new dynamic settings in bootstrap.dcs",
			patroni: &v1.Patroni{
				InitDB:       map[string]string{"locale": "C.UTF-8", "data-checksums": "false", "wal-segsize": "32", "allow-group-access": "true"},
				FailsafeMode: ptr.To(true), Slots: map[string]map[string]string{"keep": {"type": "physical"}},
			},
			want: `{"bootstrap":{"dcs":{"failsafe_mode":true,"loop_wait":10,"maximum_lag_on_failover":33554432,"retry_timeout":10,"slots":{"keep":{"type":"physical"}},"synchronous_mode":false,"ttl":30},` +
				`"initdb":[{"encoding":"UTF8"},{"locale":"C.UTF-8"},"allow-group-access",{"wal-segsize":"32"}]}}`,
		},
		{
			name:    "initdb flags only",
			patroni: &v1.Patroni{InitDB: map[string]string{"data-checksums": "true"}},
			want: `{"bootstrap":{"dcs":{"loop_wait":10,"maximum_lag_on_failover":33554432,"retry_timeout":10,"synchronous_mode":false,"ttl":30},` +
				`"initdb":[{"encoding":"UTF8"},{"locale":"en_US.UTF-8"},"data-checksums"]}}`,
		},
		{
			name:       "names equal but for case: the one sorting last wins",
			parameters: map[string]string{"shared_buffers": "4MB", "SHARED_BUFFERS": "8MB"},
			want:       `{"bootstrap":{"dcs":{"loop_wait":10,"maximum_lag_on_failover":33554432,"retry_timeout":10,"synchronous_mode":false,"ttl":30}},"postgresql":{"parameters":{"shared_buffers":"4MB"}}}`,
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

// TestBootstrapConfig checks that the dynamic configuration a StatefulSet
// bootstraps with reads back as Dynamic writes it.
func TestBootstrapConfig(t *testing.T) {
	pg := loadSample(t, "full")
	sts := StatefulSet(pg, Options{})
	if got, want := BootstrapConfig(sts), Dynamic(pg).JSON(); got != want || got == "" {
		t.Errorf("BootstrapConfig = %s, want %s", got, want)
	}
	edited := pg.DeepCopy()
	edited.Spec.PostgreSQL.Parameters["work_mem"] = "64MB"
	if BootstrapConfig(sts) == Dynamic(edited).JSON() {
		t.Errorf("an edited parameter must differ from the StatefulSet's bootstrap")
	}
	if PodTemplateHash(StatefulSet(edited, Options{})) != PodTemplateHash(sts) {
		t.Errorf("a shared parameter must not change the pod template hash")
	}
}

func TestDynamic(t *testing.T) {
	cases := []struct {
		name       string
		patroni    *v1.Patroni
		parameters map[string]string
		want       string
		bootstrap  bool
	}{
		{
			name:      "nothing set: Spilo's bootstrap values",
			want:      `{"loop_wait":10,"maximum_lag_on_failover":33554432,"retry_timeout":10,"synchronous_mode":false,"ttl":30}`,
			bootstrap: true,
		},
		{
			name:    "every timing",
			patroni: &v1.Patroni{TTL: 60, LoopWait: 5, RetryTimeout: 20, MaximumLagOnFailover: 1048576, SynchronousMode: true},
			want:    `{"loop_wait":5,"maximum_lag_on_failover":1048576,"retry_timeout":20,"synchronous_mode":true,"ttl":60}`,
		},
		{
			name:       "shared parameters, lower-cased; local ones left out",
			parameters: map[string]string{"max_connections": "100", "Work_Mem": "8MB", "shared_buffers": "1GB"},
			want: `{"loop_wait":10,"maximum_lag_on_failover":33554432,"postgresql":{"parameters":{"max_connections":"100","work_mem":"8MB"}},` +
				`"retry_timeout":10,"synchronous_mode":false,"ttl":30}`,
		},
		{
			name: "synchronous and failsafe settings, slots",
			patroni: &v1.Patroni{SynchronousMode: true, SynchronousModeStrict: true, SynchronousNodeCount: 2, FailsafeMode: ptr.To(false),
				Slots: map[string]map[string]string{"cdc": {"type": "logical", "database": "foo", "plugin": "pgoutput"}, "standby": {"type": "physical"}}},
			want: `{"failsafe_mode":false,"loop_wait":10,"maximum_lag_on_failover":33554432,"retry_timeout":10,` +
				`"slots":{"cdc":{"database":"foo","plugin":"pgoutput","type":"logical"},"standby":{"type":"physical"}},` +
				`"synchronous_mode":true,"synchronous_mode_strict":true,"synchronous_node_count":2,"ttl":30}`,
		},
		{
			name:      "initdb alone: still the bootstrap",
			patroni:   &v1.Patroni{InitDB: map[string]string{"encoding": "LATIN1"}},
			want:      `{"loop_wait":10,"maximum_lag_on_failover":33554432,"retry_timeout":10,"synchronous_mode":false,"ttl":30}`,
			bootstrap: true,
		},
		{
			name:       "only local parameters: still the bootstrap",
			parameters: map[string]string{"shared_buffers": "1GB"},
			want:       `{"loop_wait":10,"maximum_lag_on_failover":33554432,"retry_timeout":10,"synchronous_mode":false,"ttl":30}`,
			bootstrap:  true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pg := &v1.Postgresql{Spec: v1.PostgresqlSpec{Patroni: c.patroni, PostgreSQL: v1.PostgresqlParam{Version: "17", Parameters: c.parameters}}}
			d := Dynamic(pg)
			got, err := json.Marshal(withoutNil(d.Settings))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
			if d.Bootstrap != c.bootstrap {
				t.Errorf("Bootstrap = %v, want %v", d.Bootstrap, c.bootstrap)
			}
			if d.Hash == "" || d.Hash != Dynamic(pg).Hash {
				t.Errorf("hash %q is not stable", d.Hash)
			}
		})
	}
	// The keys left to Patroni's defaults are not hashed: a cluster that
	// sets none of them keeps the hash of the keys it sets, as before
	// pgloop knew them, and is not configured again.
	plain := Dynamic(&v1.Postgresql{Spec: v1.PostgresqlSpec{Patroni: &v1.Patroni{TTL: 40}}})
	sum := sha256.Sum256([]byte(`{"loop_wait":10,"maximum_lag_on_failover":33554432,"retry_timeout":10,"synchronous_mode":false,"ttl":40}`))
	if want := hex.EncodeToString(sum[:8]); plain.Hash != want {
		t.Errorf("hash %s, want %s: the hash of the keys set", plain.Hash, want)
	}
	a := Dynamic(&v1.Postgresql{Spec: v1.PostgresqlSpec{PostgreSQL: v1.PostgresqlParam{Parameters: map[string]string{"work_mem": "8MB"}}}})
	b := Dynamic(&v1.Postgresql{Spec: v1.PostgresqlSpec{PostgreSQL: v1.PostgresqlParam{Parameters: map[string]string{"work_mem": "16MB"}}}})
	if a.Hash == b.Hash {
		t.Errorf("a parameter change must change the hash")
	}
}

// TestSpiloConfigurationFullSample checks the full sample's parameters end
// up in the pod template (local) or in the dynamic configuration (shared),
// never both, and nothing is lost.
func TestSpiloConfigurationFullSample(t *testing.T) {
	pg := loadSample(t, "full")
	var cfg struct {
		PostgreSQL struct {
			Parameters map[string]string `json:"parameters"`
			PgHba      []string          `json:"pg_hba"`
		} `json:"postgresql"`
	}
	if err := json.Unmarshal([]byte(SpiloConfiguration(pg)), &cfg); err != nil {
		t.Fatal(err)
	}
	dyn := Dynamic(pg)
	shared, _ := dyn.Settings[ConfigPostgreSQL].(map[string]any)[ConfigParameters].(map[string]any)
	all := map[string]string{}
	for k, v := range shared {
		all[k] = v.(string)
	}
	for k, v := range cfg.PostgreSQL.Parameters {
		if _, dup := all[k]; dup {
			t.Errorf("parameter %s is both dynamic and local", k)
		}
		all[k] = v
	}
	if !apiequality.Semantic.DeepEqual(all, pg.Spec.PostgreSQL.Parameters) {
		t.Errorf("parameters = %v, want %v", all, pg.Spec.PostgreSQL.Parameters)
	}
	if shared["max_connections"] != "200" {
		t.Errorf("max_connections must be dynamic: Patroni keeps it equal on every member")
	}
	if cfg.PostgreSQL.Parameters["shared_preload_libraries"] != "pg_stat_statements" {
		t.Errorf("shared_preload_libraries must be local, or Spilo's local default overrides it")
	}
	if dyn.Settings[ConfigSynchronousMode] != true {
		t.Errorf("synchronous_mode lost")
	}
	if !slices.Equal(cfg.PostgreSQL.PgHba, pg.Spec.Patroni.PgHba) {
		t.Errorf("pg_hba = %v, want %v", cfg.PostgreSQL.PgHba, pg.Spec.Patroni.PgHba)
	}
}
