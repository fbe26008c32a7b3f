package patroni

import (
	"encoding/json"
	"reflect"
	"testing"
)

// currentConfig is a dynamic configuration as GET /config returns it (the
// JSON Spilo bootstraps), decoded as Config decodes it: numbers float64.
const currentConfig = `{"ttl":30,"loop_wait":10,"retry_timeout":10,"maximum_lag_on_failover":33554432,` +
	`"postgresql":{"use_pg_rewind":true,"use_slots":true,"parameters":{"archive_mode":"on","max_connections":100,` +
	`"shared_buffers":"128MB","hot_standby":"on","wal_level":"hot_standby","random_page_cost":1.1}},` +
	`"synchronous_mode":false}`

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestConfigPatch(t *testing.T) {
	params := func(kv ...any) map[string]any {
		p := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			p[kv[i].(string)] = kv[i+1]
		}
		return map[string]any{"postgresql": map[string]any{"parameters": p}}
	}
	merge := func(ms ...map[string]any) map[string]any {
		out := map[string]any{}
		for _, m := range ms {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	tests := []struct {
		name    string
		current string
		desired map[string]any
		remove  []string
		want    map[string]any
	}{
		{
			name:    "nothing differs",
			current: currentConfig,
			desired: merge(map[string]any{"ttl": 30, "loop_wait": "10", "synchronous_mode": false},
				params("max_connections", "100", "shared_buffers", "128MB", "random_page_cost", "1.10")),
		},
		{
			name:    "int against float64",
			current: currentConfig,
			desired: map[string]any{"ttl": 30, "retry_timeout": int64(10), "maximum_lag_on_failover": 33554432.0},
		},
		{
			name:    "top-level value changed",
			current: currentConfig,
			desired: map[string]any{"ttl": 45, "loop_wait": 10, "synchronous_mode": true},
			want:    map[string]any{"ttl": 45, "synchronous_mode": true},
		},
		{
			name:    "top-level key added",
			current: currentConfig,
			desired: map[string]any{"ttl": 30, "failsafe_mode": true},
			want:    map[string]any{"failsafe_mode": true},
		},
		{
			name:    "parameter added",
			current: currentConfig,
			desired: params("max_connections", "100", "work_mem", "8MB"),
			want:    params("work_mem", "8MB"),
		},
		{
			name:    "parameter changed",
			current: currentConfig,
			desired: params("max_connections", "200", "shared_buffers", "256MB"),
			want:    params("max_connections", "200", "shared_buffers", "256MB"),
		},
		{
			name:    "parameter removed via null",
			current: currentConfig,
			desired: params("max_connections", "100"),
			remove:  []string{"archive_mode"},
			want:    params("archive_mode", nil),
		},
		{
			name:    "removal of a parameter not present gives nothing",
			current: currentConfig,
			desired: params("max_connections", "100"),
			remove:  []string{"work_mem"},
		},
		{
			name:    "removal with no parameters at all gives nothing",
			current: `{"ttl":30}`,
			remove:  []string{"work_mem"},
		},
		{
			name:    "removal of a parameter desired keeps it",
			current: currentConfig,
			desired: params("archive_mode", "on"),
			remove:  []string{"archive_mode"},
		},
		{
			name:    "added, changed and removed at once",
			current: currentConfig,
			desired: merge(map[string]any{"loop_wait": 5}, params("max_connections", "150", "work_mem", "8MB")),
			remove:  []string{"archive_mode", "wal_keep_size"},
			want: merge(map[string]any{"loop_wait": 5},
				params("max_connections", "150", "work_mem", "8MB", "archive_mode", nil)),
		},
		{
			name:    "strings compare exactly",
			current: currentConfig,
			desired: params("shared_buffers", "128mb", "archive_mode", "ON"),
			want:    params("shared_buffers", "128mb", "archive_mode", "ON"),
		},
		{
			name:    "boolean against a string PostgreSQL reads as it",
			current: `{"synchronous_mode":"true","postgresql":{"parameters":{"hot_standby":true,"fsync":false}}}`,
			desired: merge(map[string]any{"synchronous_mode": true}, params("hot_standby", "on", "fsync", "on")),
			want:    params("fsync", "on"),
		},
		{
			name:    "number against a non-number string",
			current: currentConfig,
			desired: params("max_connections", "lots"),
			want:    params("max_connections", "lots"),
		},
		{
			name:    "no configuration yet",
			current: `{}`,
			desired: merge(map[string]any{"ttl": 30}, params("max_connections", "100")),
			want:    merge(map[string]any{"ttl": 30}, params("max_connections", "100")),
		},
		{
			name:    "empty desired parameters add nothing",
			current: `{}`,
			desired: params(),
		},
		{
			name:    "null in current is absent",
			current: `{"ttl":null,"postgresql":{"parameters":{"work_mem":null}}}`,
			desired: map[string]any{"ttl": 30},
			remove:  []string{"work_mem"},
			want:    map[string]any{"ttl": 30},
		},
		{
			name:    "nil in desired removes a key",
			current: currentConfig,
			desired: map[string]any{"maximum_lag_on_failover": nil, "master_start_timeout": nil},
			want:    map[string]any{"maximum_lag_on_failover": nil},
		},
		{
			name:    "object replaces a scalar",
			current: `{"postgresql":"broken"}`,
			desired: params("max_connections", "100"),
			want:    params("max_connections", "100"),
		},
		{
			name:    "lists element by element",
			current: `{"postgresql":{"pg_hba":["host all all 0.0.0.0/0 md5"]},"slots":{"a":{"type":"physical"}}}`,
			desired: map[string]any{
				"postgresql": map[string]any{"pg_hba": []string{"host all all 0.0.0.0/0 md5"}},
				"slots":      map[string]any{"a": map[string]any{"type": "physical"}},
			},
		},
		{
			name:    "slots: one removed, an option removed, one added",
			current: `{"slots":{"gone":{"type":"physical"},"cdc":{"type":"logical","database":"foo","plugin":"wal2json"},"keep":{"type":"physical"}}}`,
			desired: map[string]any{"slots": map[string]any{
				"cdc":  map[string]any{"type": "logical", "database": "foo", "plugin": "pgoutput"},
				"keep": map[string]any{"type": "physical"},
				"new":  map[string]any{"type": "physical"},
			}},
			want: map[string]any{"slots": map[string]any{
				"gone": nil,
				"cdc":  map[string]any{"plugin": "pgoutput"},
				"new":  map[string]any{"type": "physical"},
			}},
		},
		{
			name:    "slots: an option dropped from a slot",
			current: `{"slots":{"s":{"type":"logical","database":"foo","plugin":"pgoutput"}}}`,
			desired: map[string]any{"slots": map[string]any{"s": map[string]any{"type": "physical"}}},
			want:    map[string]any{"slots": map[string]any{"s": map[string]any{"type": "physical", "database": nil, "plugin": nil}}},
		},
		{
			name:    "slots: all removed",
			current: `{"slots":{"gone":{"type":"physical"}}}`,
			desired: map[string]any{"slots": nil},
			want:    map[string]any{"slots": nil},
		},
		{
			name:    "slots: the same",
			current: `{"slots":{"keep":{"type":"physical"}}}`,
			desired: map[string]any{"slots": map[string]any{"keep": map[string]any{"type": "physical"}}},
		},
		{
			name:    "list changed",
			current: `{"postgresql":{"pg_hba":["host all all 0.0.0.0/0 md5"]}}`,
			desired: map[string]any{"postgresql": map[string]any{"pg_hba": []string{"host all all 0.0.0.0/0 scram-sha-256"}}},
			want:    map[string]any{"postgresql": map[string]any{"pg_hba": []string{"host all all 0.0.0.0/0 scram-sha-256"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			current := decode(t, tt.current)
			before := decode(t, tt.current)
			got := ConfigPatch(current, tt.desired, tt.remove)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ConfigPatch() = %#v\nwant %#v", got, tt.want)
			}
			if tt.want == nil && got != nil {
				t.Errorf("ConfigPatch() = %#v, want nil (not an empty map)", got)
			}
			if !reflect.DeepEqual(current, before) {
				t.Errorf("ConfigPatch modified current: %v", current)
			}
		})
	}
}

// TestConfigPatchConverges applies each patch as Patroni's patch_config
// would and checks the next ConfigPatch is nil: a difference Patroni does
// not apply would otherwise be sent forever.
func TestConfigPatchConverges(t *testing.T) {
	desired := map[string]any{
		"ttl": 45, "loop_wait": "10", "synchronous_mode": true,
		"postgresql": map[string]any{"parameters": map[string]any{
			"max_connections": "200", "hot_standby": "on", "work_mem": "8MB", "random_page_cost": "1.1",
		}},
	}
	current := decode(t, currentConfig)
	for round := 0; round < 3; round++ {
		patch := ConfigPatch(current, desired, []string{"archive_mode"})
		if patch == nil {
			if round == 0 {
				t.Fatal("first ConfigPatch is nil, want changes")
			}
			return
		}
		// Round-trip through JSON, as PATCH sends it, then merge it.
		b, err := json.Marshal(patch)
		if err != nil {
			t.Fatal(err)
		}
		patchConfig(current, decode(t, string(b)))
	}
	t.Errorf("ConfigPatch still not nil after two patches: %v", ConfigPatch(current, desired, []string{"archive_mode"}))
}

// patchConfig is Patroni's utils.patch_config without its str()
// comparison, which changes nothing that matters here: a value sent is
// stored.
func patchConfig(config, data map[string]any) {
	for k, v := range data {
		switch v := v.(type) {
		case nil:
			delete(config, k)
		case map[string]any:
			if c, ok := config[k].(map[string]any); ok {
				patchConfig(c, v)
			} else {
				config[k] = v
			}
		default:
			config[k] = v
		}
	}
}
