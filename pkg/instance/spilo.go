package instance

// Spilo's configure_spilo.py, for pgloop's image: the pod's environment,
// which pgloop writes for Spilo, becomes Patroni's configuration.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Values pgloop's pod spec and Spilo's image have in common.
const (
	// spiloLeaderLabelValue is the role label value Patroni 3.0.2 writes on
	// the leader's pod; it cannot be configured before Patroni 3.1.
	spiloLeaderLabelValue = "master"
	// fallbackLocale is used when the image lacks Spilo's initdb locale
	// (pgloop's has none but C.UTF-8).
	fallbackLocale = "C.UTF-8"
)

// spiloExtensions are the libraries Spilo adds to shared_preload_libraries
// for the PostgreSQL versions given, unless SPILO_CONFIGURATION sets it
// (spilo_commons.py: timescaledb, pg_cron and pg_stat_kcache).
var spiloExtensions = []struct {
	name     string
	min, max float64
}{
	{"timescaledb", 9.6, 16},
	{"pg_cron", 9.5, 16},
	{"pg_stat_kcache", 9.4, 16},
}

// spiloLibraries are the libraries Spilo's configuration may load, with the
// prefix of their settings. Those not in the image take their settings
// with them, whether shared_preload_libraries names them or not (Spilo's
// template sets bg_mon.* and extwlist.* even when SPILO_CONFIGURATION
// replaces the list).
var spiloLibraries = map[string]string{
	"bg_mon":         "bg_mon",
	"pgextwlist":     "extwlist",
	"pg_auth_mon":    "pg_auth_mon",
	"set_user":       "set_user",
	"timescaledb":    "timescaledb",
	"pg_cron":        "cron",
	"pg_stat_kcache": "pg_stat_kcache",
	"pg_mon":         "pg_mon",
}

// PatroniConfig returns the Patroni configuration for a pod whose
// environment is env on machine m, and what it left out of Spilo's (one
// line each, for the container's log).
//
// It follows configure_spilo.py: Spilo's template filled from env, the
// kubernetes section from the KUBERNETES_* variables, SPILO_CONFIGURATION
// deep-merged over it (maps key by key, its other values win, including
// lists), then bin_dir and shared_preload_libraries chosen. It then adapts
// the result to pgloop's image and to m:
//  1. outside a container (m.ListenOnPodIP), PostgreSQL and the REST API
//     listen on the pod IP only, never *;
//  2. outside a container, container paths (PGROOT, PGDATA, TLS files)
//     map to this machine's through m.Mounts; sockets and pgpass go to
//     m.SocketDir;
//  3. initdb's locale becomes C.UTF-8 when the image lacks Spilo's
//     (en_US.UTF-8);
//  4. what pgloop's image has not goes: Spilo's image scripts (post_init,
//     callbacks, basebackup_fast_xlog, WAL-E), libraries not installed in
//     <bin_dir>/../lib with their settings, kubernetes.leader_label_value
//     (Patroni 3.0 always labels the leader master);
//  5. what Patroni 3.0's --validate-config requires and Patroni itself
//     derives anyway: a rewind user equal to the superuser, and
//     bootstrap.pg_hba equal to postgresql.pg_hba.
//
// TLS is Spilo's: the certificate of SSL_CERTIFICATE_FILE and
// SSL_PRIVATE_KEY_FILE, which Certificate makes when the pod mounts none,
// and pg_hba's hostssl lines. Timings (ttl, loop_wait...) are Spilo's
// unless SPILO_CONFIGURATION changes them. The output is JSON, which
// Patroni reads as YAML, with sorted keys.
func PatroniConfig(env map[string]string, m Machine) (config []byte, dropped []string, err error) {
	cfg, dropped, err := patroniConfig(env, m)
	if err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cfg); err != nil {
		return nil, nil, fmt.Errorf("encode patroni config: %w", err)
	}
	return buf.Bytes(), dropped, nil
}

func patroniConfig(env map[string]string, m Machine) (map[string]any, []string, error) {
	if err := m.validate(); err != nil {
		return nil, nil, err
	}
	if err := checkSpiloEnv(env, m); err != nil {
		return nil, nil, err
	}
	cfg, err := spiloTemplate(env, m)
	if err != nil {
		return nil, nil, err
	}
	if m.SharedBuffers != "" {
		// Spilo's, which SPILO_CONFIGURATION still overrides.
		cfg["postgresql"].(map[string]any)["parameters"].(map[string]any)["shared_buffers"] = m.SharedBuffers
	}
	user, err := spiloUserConfig(env)
	if err != nil {
		return nil, nil, err
	}
	// Two maps merge into the first.
	merged := deepUpdate(deepCopyJSON(user), cfg).(map[string]any)
	if err := afterMerge(merged, user, env, m); err != nil {
		return nil, nil, err
	}
	dropped, err := adapt(merged, m)
	if err != nil {
		return nil, nil, err
	}
	return merged, dropped, nil
}

// checkSpiloEnv rejects the Spilo features pgloop's image does not have,
// so a pod spec that uses one fails with the cause rather than running as
// something else.
func checkSpiloEnv(env map[string]string, m Machine) error {
	if env["DCS_ENABLE_KUBERNETES_API"] == "" {
		return errors.New("DCS_ENABLE_KUBERNETES_API is empty: Spilo would use etcd or a callback script; pgloop's image keeps Patroni's state in the Kubernetes API only")
	}
	if cm := env["CLONE_METHOD"]; cm != "" {
		return fmt.Errorf("CLONE_METHOD=%s is Spilo's clone (WAL-E, pg_basebackup scripts), which pgloop's image has not: pgloop clones through pgBackRest (spec.clone)", cm)
	}
	for _, name := range slices.Sorted(maps.Keys(env)) {
		if strings.HasPrefix(name, "STANDBY_") && env[name] != "" {
			return fmt.Errorf("%s is set: Spilo's standby scripts are not in pgloop's image (pgloop's standby clusters restore from pgBackRest)", name)
		}
	}
	if ip := env["POD_IP"]; ip != "" && ip != m.PodIP {
		return fmt.Errorf("POD_IP=%s differs from the pod IP %s", ip, m.PodIP)
	}
	for _, name := range slices.Sorted(maps.Keys(env)) {
		suffix, ok := strings.CutPrefix(name, "KUBERNETES_")
		if !ok {
			continue
		}
		switch {
		case suffix == "SCOPE_LABEL", suffix == "ROLE_LABEL", suffix == "LABELS", suffix == "USE_CONFIGMAPS",
			suffix == "BYPASS_API_SERVICE":
		case suffix == "LEADER_LABEL_VALUE":
			if env[name] != spiloLeaderLabelValue {
				return fmt.Errorf("%s=%s: Patroni 3.0 always labels the leader %s", name, env[name], spiloLeaderLabelValue)
			}
		case strings.HasPrefix(suffix, "SERVICE_"), strings.HasPrefix(suffix, "PORT"):
			// The kubelet's own service links: Spilo copies them into the
			// kubernetes section, where Patroni ignores them.
		default:
			return fmt.Errorf("%s: Spilo would pass kubernetes.%s to Patroni, which pgloop's image does not", name, strings.ToLower(suffix))
		}
	}
	if env["KUBERNETES_USE_CONFIGMAPS"] == "" {
		if ip, err := netip.ParseAddr(m.PodIP); err == nil && ip.IsLoopback() {
			return fmt.Errorf("KUBERNETES_USE_CONFIGMAPS is empty: Patroni would store pod IP %s in Endpoints, which the API server rejects for loopback addresses", m.PodIP)
		}
	}
	return nil
}

// envOr returns env[name], or def when name is not set at all, like
// Python's dict.setdefault on os.environ.
func envOr(env map[string]string, name, def string) string {
	if v, ok := env[name]; ok {
		return v
	}
	return def
}

// spiloTemplate is configure_spilo.py's TEMPLATE and get_dcs_config for env,
// in container paths, before SPILO_CONFIGURATION is merged. Only the
// branches pgloop's environment can reach are kept, plus the ones cheap to
// keep (PAM_OAUTH2, ALLOW_NOSSL, an admin user).
func spiloTemplate(env map[string]string, m Machine) (map[string]any, error) {
	pghome := envOr(env, "PGHOME", "/home/postgres")
	pgroot := envOr(env, "PGROOT", path.Join(pghome, "pgroot"))
	pgdata := envOr(env, "PGDATA", path.Join(pgroot, "pgdata"))
	apiPort := envOr(env, "APIPORT", "8008")
	pgPort := envOr(env, "PGPORT", "5432")
	humanRole := envOr(env, "HUMAN_ROLE", "zalandos")
	standby := envOr(env, "PGUSER_STANDBY", "standby")
	rwDir := envOr(env, "RW_DIR", "/run")
	ip := m.PodIP
	pam := env["PAM_OAUTH2"] != ""
	allowNoSSL := env["ALLOW_NOSSL"] != ""

	memMB := m.MemoryMB
	maxConnections := min(max(100, int(memMB/30)), 1000)

	hba := []any{"local all all trust"}
	if pam {
		hba = append(hba, "hostssl all +"+humanRole+" 127.0.0.1/32 pam")
	}
	hba = append(hba, "host all all 127.0.0.1/32 md5")
	if pam {
		hba = append(hba, "hostssl all +"+humanRole+" ::1/128 pam")
	}
	hba = append(hba, "host all all ::1/128 md5",
		"local replication "+standby+" trust",
		"hostssl replication "+standby+" all md5")
	if !allowNoSSL {
		hba = append(hba, "hostnossl all all all reject")
	}
	if pam {
		hba = append(hba, "hostssl all +"+humanRole+" all pam")
	}
	if allowNoSSL {
		hba = append(hba, "host all all all md5")
	} else {
		hba = append(hba, "hostssl all all all md5")
	}

	callbacks := map[string]any{"on_role_change": "/scripts/on_role_change.sh " + humanRole + " true"}
	if script := env["CALLBACK_SCRIPT"]; script != "" {
		callbacks = map[string]any{
			"on_start":       script,
			"on_stop":        script,
			"on_role_change": "/scripts/on_role_change.sh " + humanRole + " " + script,
		}
	}

	bootstrap := map[string]any{
		"post_init": `/scripts/post_init.sh "` + humanRole + `"`,
		"dcs": map[string]any{
			"ttl":                     30,
			"loop_wait":               10,
			"retry_timeout":           10,
			"maximum_lag_on_failover": 33554432,
			"postgresql": map[string]any{
				"use_pg_rewind": true,
				"use_slots":     true,
				"parameters": map[string]any{
					"archive_mode":                    "on",
					"archive_timeout":                 "1800s",
					"wal_level":                       "hot_standby",
					"wal_log_hints":                   "on",
					"wal_compression":                 "on",
					"max_wal_senders":                 10,
					"max_connections":                 maxConnections,
					"max_replication_slots":           10,
					"hot_standby":                     "on",
					"tcp_keepalives_idle":             900,
					"tcp_keepalives_interval":         100,
					"log_line_prefix":                 "%t [%p]: [%l-1] %c %x %d %u %a %h ",
					"log_checkpoints":                 "on",
					"log_lock_waits":                  "on",
					"log_min_duration_statement":      500,
					"log_autovacuum_min_duration":     0,
					"log_connections":                 "on",
					"log_disconnections":              "on",
					"log_statement":                   "ddl",
					"log_temp_files":                  0,
					"track_functions":                 "all",
					"checkpoint_completion_target":    0.9,
					"autovacuum_max_workers":          5,
					"autovacuum_vacuum_scale_factor":  0.05,
					"autovacuum_analyze_scale_factor": 0.02,
				},
			},
		},
		"initdb": []any{
			map[string]any{"encoding": "UTF8"},
			map[string]any{"locale": envOr(env, "INITDB_LOCALE", "en_US") + ".UTF-8"},
			"data-checksums",
		},
	}
	useAdmin := env["PGPASSWORD_ADMIN"] != ""
	if v, ok := env["USE_ADMIN"]; ok {
		useAdmin = v != ""
	}
	if useAdmin {
		bootstrap["users"] = map[string]any{
			envOr(env, "PGUSER_ADMIN", "admin"): map[string]any{
				"password": envOr(env, "PGPASSWORD_ADMIN", "cola"),
				"options":  []any{"createrole", "createdb"},
			},
		}
	}

	cfg := map[string]any{
		"bootstrap": bootstrap,
		"scope":     envOr(env, "SCOPE", "dummy"),
		"restapi": map[string]any{
			"listen":          ":" + apiPort,
			"connect_address": envOr(env, "RESTAPI_CONNECT_ADDRESS", ip) + ":" + apiPort,
		},
		"postgresql": map[string]any{
			"pgpass":               path.Join(DefaultSocketDir, "pgpass"),
			"use_unix_socket":      true,
			"use_unix_socket_repl": true,
			"name":                 m.Name,
			"listen":               "*:" + pgPort,
			"connect_address":      ip + ":" + pgPort,
			"data_dir":             pgdata,
			"parameters": map[string]any{
				"archive_command":                  "/bin/true",
				"shared_buffers":                   fmt.Sprintf("%dMB", int(memMB/5)),
				"logging_collector":                "on",
				"log_destination":                  "csvlog",
				"log_directory":                    "../pg_log",
				"log_filename":                     "postgresql-%u.log",
				"log_file_mode":                    "0644",
				"log_rotation_age":                 "1d",
				"log_truncate_on_rotation":         "on",
				"ssl":                              "on",
				"ssl_cert_file":                    envOr(env, "SSL_CERTIFICATE_FILE", path.Join(rwDir, "certs", "server.crt")),
				"ssl_key_file":                     envOr(env, "SSL_PRIVATE_KEY_FILE", path.Join(rwDir, "certs", "server.key")),
				"shared_preload_libraries":         "bg_mon,pg_stat_statements,pgextwlist,pg_auth_mon,set_user",
				"bg_mon.listen_address":            "0.0.0.0",
				"bg_mon.history_buckets":           120,
				"pg_stat_statements.track_utility": "off",
				"extwlist.extensions":              "btree_gin,btree_gist,citext,extra_window_functions,first_last_agg,hll,hstore,hypopg,intarray,ltree,pgcrypto,pgq,pgq_node,pg_trgm,postgres_fdw,tablefunc,uuid-ossp",
				"extwlist.custom_path":             "/scripts",
			},
			"pg_hba": hba,
			"authentication": map[string]any{
				"superuser": map[string]any{
					"username": envOr(env, "PGUSER_SUPERUSER", "postgres"),
					"password": envOr(env, "PGPASSWORD_SUPERUSER", "zalando"),
				},
				"replication": map[string]any{
					"username": standby,
					"password": envOr(env, "PGPASSWORD_STANDBY", "standby"),
				},
			},
			"callbacks":             callbacks,
			"create_replica_method": []any{"basebackup_fast_xlog"},
			"basebackup_fast_xlog":  map[string]any{"command": "/scripts/basebackup.sh", "retries": 2},
		},
	}

	// get_dcs_config: the kubernetes section from KUBERNETES_*.
	var labels map[string]any
	raw := envOr(env, "KUBERNETES_LABELS", `{"application": "spilo"}`)
	if err := json.Unmarshal([]byte(raw), &labels); err != nil || labels == nil {
		// Spilo logs a warning and falls back to its default labels,
		// with which pgloop would not find the pods: an error says why.
		return nil, fmt.Errorf("KUBERNETES_LABELS %q is not a JSON object", raw)
	}
	k8s := map[string]any{
		"role_label":  envOr(env, "KUBERNETES_ROLE_LABEL", "spilo-role"),
		"scope_label": envOr(env, "KUBERNETES_SCOPE_LABEL", "version"),
		"labels":      labels,
	}
	if v, ok := env["KUBERNETES_LEADER_LABEL_VALUE"]; ok {
		k8s["leader_label_value"] = v
	}
	// Spilo tests the string: any non-empty value, even "false", means
	// ConfigMaps.
	if env["KUBERNETES_USE_CONFIGMAPS"] == "" {
		k8s["use_endpoints"] = true
		k8s["pod_ip"] = ip
		k8s["ports"] = []any{map[string]any{"port": 5432, "name": "postgresql"}}
	}
	if strings.ToLower(envOr(env, "KUBERNETES_BYPASS_API_SERVICE", "true")) == "true" {
		k8s["bypass_api_service"] = true
	}
	cfg["kubernetes"] = k8s
	namespace := envOr(env, "NAMESPACE", envOr(env, "POD_NAMESPACE", "default"))
	if namespace != "default" && namespace != "" {
		// Patroni copies the top-level namespace into its kubernetes
		// settings.
		cfg["namespace"] = namespace
	}
	// Spilo's template adds ssl_ca_file from SSL_CA_FILE only when set.
	if ca := env["SSL_CA_FILE"]; ca != "" {
		cfg["postgresql"].(map[string]any)["parameters"].(map[string]any)["ssl_ca_file"] = ca
	}
	return cfg, nil
}

// spiloUserConfig decodes SPILO_CONFIGURATION (or, when it is not set,
// PATRONI_CONFIGURATION). Spilo reads YAML; this reads the JSON pgloop
// writes (JSON is YAML, but not the other way), keeping numbers as written.
func spiloUserConfig(env map[string]string) (map[string]any, error) {
	name := "SPILO_CONFIGURATION"
	raw, ok := env[name]
	if !ok {
		name = "PATRONI_CONFIGURATION"
		raw = env[name]
	}
	if strings.TrimSpace(raw) == "" {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%s is not JSON (pgloop instance reads the JSON pgloop writes): %w", name, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s has data after its JSON document", name)
	}
	if v == nil {
		return map[string]any{}, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s should contain a map, yet it is a %T", name, v)
	}
	return m, nil
}

// deepUpdate is Spilo's deep_update(a, b): maps are merged key by key; for
// anything else a wins unless it is null (two lists: a's list).
func deepUpdate(a, b any) any {
	am, aMap := a.(map[string]any)
	bm, bMap := b.(map[string]any)
	if aMap && bMap {
		for k, bv := range bm {
			if av, ok := am[k]; ok {
				am[k] = deepUpdate(av, bv)
			} else {
				am[k] = bv
			}
		}
		return am
	}
	if a != nil {
		return a
	}
	return b
}

// deepCopyJSON copies a decoded JSON value.
func deepCopyJSON[T any](v T) T {
	var out any
	switch x := any(v).(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopyJSON(e)
		}
		out = m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = deepCopyJSON(e)
		}
		out = l
	default:
		return v
	}
	return out.(T)
}

// section returns m[key] as a map, creating it when absent.
func section(m map[string]any, key string) (map[string]any, error) {
	switch v := m[key].(type) {
	case map[string]any:
		return v, nil
	case nil:
		s := map[string]any{}
		m[key] = s
		return s, nil
	default:
		return nil, fmt.Errorf("%s is a %T, not a map", key, v)
	}
}

// sections walks a path of sections, creating them.
func sections(m map[string]any, keys ...string) (map[string]any, error) {
	for i, k := range keys {
		s, err := section(m, k)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", strings.Join(keys[:i], "."), err)
		}
		m = s
	}
	return m, nil
}

// afterMerge plays what configure_spilo.py does after the merge: bin_dir
// from the data directory's PG_VERSION, SPILO_CONFIGURATION's bin_dir or
// PGVERSION, which must all be the version of the binaries
// (Machine.BinDir, else the version's directory); Spilo's extra
// shared_preload_libraries unless SPILO_CONFIGURATION sets them; a
// replication line in a bootstrap.pg_hba that has none.
func afterMerge(cfg, user map[string]any, env map[string]string, m Machine) error {
	pg, err := section(cfg, "postgresql")
	if err != nil {
		return err
	}
	want, source := "", ""
	dataDir, _ := pg["data_dir"].(string)
	if local, err := m.local(dataDir); err == nil {
		if b, err := os.ReadFile(filepath.Join(local, "PG_VERSION")); err == nil {
			want, source = strings.TrimSpace(string(b)), "the data directory's PG_VERSION"
		}
	}
	if want == "" {
		if binDir, ok := pg["bin_dir"].(string); ok && binDir != "" {
			sm := spiloBinDir.FindStringSubmatch(binDir)
			if sm == nil {
				return fmt.Errorf("SPILO_CONFIGURATION postgresql.bin_dir %s is not a Spilo binary directory", binDir)
			}
			want, source = sm[1], "SPILO_CONFIGURATION's postgresql.bin_dir"
		} else if v := env["PGVERSION"]; v != "" {
			want, source = v, "PGVERSION"
		}
	}
	binDir := m.BinDir
	if binDir == "" {
		if want == "" {
			return errors.New("no PostgreSQL version: neither PGVERSION, SPILO_CONFIGURATION's postgresql.bin_dir nor the data directory's PG_VERSION says one")
		}
		binDir = "/usr/lib/postgresql/" + want + "/bin"
		if _, err := os.Stat(filepath.Join(binDir, "postgres")); err != nil {
			return fmt.Errorf("%s asks for PostgreSQL %s, which this image does not have (%s: %w)", source, want, binDir, err)
		}
	}
	have, err := binVersion(binDir)
	if err != nil {
		return err
	}
	if want != "" && want != have {
		return fmt.Errorf("%s asks for PostgreSQL %s, but the binaries in %s are PostgreSQL %s", source, want, binDir, have)
	}
	pg["bin_dir"] = binDir

	params, err := section(pg, "parameters")
	if err != nil {
		return fmt.Errorf("postgresql: %w", err)
	}
	userParams, _ := sectionValue(user, "postgresql", "parameters").(map[string]any)
	if _, set := userParams["shared_preload_libraries"]; !set {
		version, _ := strconv.ParseFloat(have, 64)
		libs := splitLibraries(fmt.Sprint(params["shared_preload_libraries"]))
		for _, e := range spiloExtensions {
			if e.min <= version && version <= e.max && !slices.Contains(libs, e.name) {
				libs = append(libs, e.name)
			}
		}
		params["shared_preload_libraries"] = strings.Join(libs, ",")
	}

	if boot, ok := cfg["bootstrap"].(map[string]any); ok {
		if hba, ok := boot["pg_hba"].([]any); ok {
			if !slices.ContainsFunc(hba, func(l any) bool { return strings.Contains(fmt.Sprint(l), "replication") }) {
				repl, _ := sectionValue(pg, "authentication", "replication", "username").(string)
				boot["pg_hba"] = append([]any{"hostssl replication " + repl + " all md5"}, hba...)
			}
		}
	}
	return nil
}

// sectionValue returns the value at a path of map keys, or nil.
func sectionValue(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

func splitLibraries(s string) []string {
	var libs []string
	for l := range strings.SplitSeq(s, ",") {
		if l = strings.Trim(strings.TrimSpace(l), `"`); l != "" {
			libs = append(libs, l)
		}
	}
	return libs
}

// adapt turns the merged configuration, Spilo's, into one for pgloop's
// image on this machine; see PatroniConfig. It returns what it left out,
// one line each, for the container's log.
func adapt(cfg map[string]any, m Machine) (dropped []string, err error) {
	restapi, err := section(cfg, "restapi")
	if err != nil {
		return nil, err
	}
	pg, err := section(cfg, "postgresql")
	if err != nil {
		return nil, err
	}
	// 1. Addresses. Outside a container, listen on the pod IP only; keep
	// the ports.
	for _, s := range []struct {
		name string
		m    map[string]any
	}{{"restapi", restapi}, {"postgresql", pg}} {
		if !m.ListenOnPodIP {
			break
		}
		listen, _ := s.m["listen"].(string)
		i := strings.LastIndexByte(listen, ':')
		if i < 0 {
			return nil, fmt.Errorf("%s.listen %q has no port", s.name, listen)
		}
		s.m["listen"] = net.JoinHostPort(m.PodIP, listen[i+1:])
	}
	// Members reach each other at the connect addresses: never the
	// wildcard, which would mean every member.
	for _, s := range []struct {
		name string
		m    map[string]any
	}{{"restapi", restapi}, {"postgresql", pg}} {
		addr, _ := s.m["connect_address"].(string)
		host, _, err := net.SplitHostPort(addr)
		if err != nil || host == "" || host == "*" || net.ParseIP(host).IsUnspecified() {
			return nil, fmt.Errorf("%s.connect_address %q is not an address other members can reach", s.name, addr)
		}
	}
	if name, ok := pg["name"]; ok {
		cfg["name"] = name
	}

	// 2. Paths, which outside a container map to this machine's.
	mapPath := func(where string, sec map[string]any, key string) error {
		p, ok := sec[key].(string)
		if !ok || p == "" {
			return nil
		}
		if !path.IsAbs(p) {
			if m.Mounts == nil {
				return nil
			}
			return fmt.Errorf("%s.%s %q is relative, which outside a container means nothing", where, key, p)
		}
		local, err := m.local(p)
		if err != nil {
			return fmt.Errorf("%s.%s: %w", where, key, err)
		}
		sec[key] = local
		return nil
	}
	for _, k := range []string{"data_dir", "config_dir"} {
		if err := mapPath("postgresql", pg, k); err != nil {
			return nil, err
		}
	}
	if p, ok := pg["pgpass"].(string); ok {
		if d := path.Dir(p); d == DefaultSocketDir || d == "/var"+DefaultSocketDir {
			pg["pgpass"] = filepath.Join(m.SocketDir, path.Base(p))
		} else if err := mapPath("postgresql", pg, "pgpass"); err != nil {
			return nil, err
		}
	}
	for _, k := range []string{"certfile", "keyfile", "cafile"} {
		if err := mapPath("restapi", restapi, k); err != nil {
			return nil, err
		}
	}
	params, err := section(pg, "parameters")
	if err != nil {
		return nil, fmt.Errorf("postgresql: %w", err)
	}
	params["unix_socket_directories"] = m.SocketDir
	for _, k := range []string{"log_directory", "hba_file", "ident_file", "external_pid_file", "ssl_cert_file", "ssl_key_file", "ssl_ca_file", "ssl_crl_file"} {
		if p, ok := params[k].(string); ok && path.IsAbs(p) {
			if err := mapPath("postgresql.parameters", params, k); err != nil {
				return nil, err
			}
		}
	}

	// 3. initdb's locale: the image has C.UTF-8 only.
	boot, err := section(cfg, "bootstrap")
	if err != nil {
		return nil, err
	}
	if initdb, ok := boot["initdb"].([]any); ok {
		for _, opt := range initdb {
			if o, ok := opt.(map[string]any); ok {
				if l, ok := o["locale"].(string); ok && !installedLocale(l) {
					dropped = append(dropped, "initdb locale "+l+" (not installed): "+fallbackLocale)
					o["locale"] = fallbackLocale
				}
			}
		}
	}

	// 4. A custom bootstrap method (a clone's restore) runs its command
	// without a shell, in the environment Patroni passes on (PGBACKREST_*
	// mapped). Outside a container its arguments are not mapped: one
	// naming a path of the container's volumes would act on the host's
	// own directory, so it is an error.
	if method, _ := boot["method"].(string); method != "" && method != "initdb" && m.Mounts != nil {
		if bm, ok := boot[method].(map[string]any); ok {
			command, _ := bm["command"].(string)
			for _, arg := range strings.Fields(command) {
				arg = strings.Trim(arg, `"'`)
				if _, v, ok := strings.Cut(arg, "="); ok {
					arg = v
				}
				if _, err := m.local(arg); err == nil && path.IsAbs(arg) {
					return nil, fmt.Errorf("bootstrap.%s.command names %s, a path of the container's volumes, which is not mapped in commands outside a container (give it through the environment)", method, arg)
				}
			}
		}
	}

	// 5. Spilo's image scripts, which pgloop's image has not: pgloop
	// makes roles and databases itself, Patroni labels the pods, and
	// replicas are made by pg_basebackup.
	for _, k := range []string{"post_init"} {
		if _, ok := boot[k]; ok {
			dropped = append(dropped, "bootstrap."+k+" (Spilo's script)")
			delete(boot, k)
		}
	}
	for _, k := range []string{"callbacks", "recovery_conf", "basebackup_fast_xlog", "wal_e", "bootstrap_standby_with_wale"} {
		if _, ok := pg[k]; ok {
			dropped = append(dropped, "postgresql."+k+" (Spilo's scripts)")
			delete(pg, k)
		}
	}
	if methods, ok := pg["create_replica_method"].([]any); ok {
		var kept []any
		for _, cm := range methods {
			switch cm {
			case "basebackup_fast_xlog":
				cm = "basebackup"
			case "wal_e", "bootstrap_standby_with_wale":
				continue
			}
			if !slices.Contains(kept, cm) {
				kept = append(kept, cm)
			}
		}
		pg["create_replica_method"] = kept
	}
	// Libraries the image has not, with their settings, whether
	// shared_preload_libraries names them or not (Spilo's template sets
	// bg_mon.* and extwlist.* even when SPILO_CONFIGURATION replaces the
	// list): PostgreSQL would not start, or would refuse the settings.
	dcsParams, err := sections(boot, "dcs", "postgresql", "parameters")
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	libDir := filepath.Join(pg["bin_dir"].(string), "..", "lib")
	for i, ps := range []map[string]any{params, dcsParams} {
		var gone []string
		if s, ok := ps["shared_preload_libraries"]; ok {
			var kept []string
			for _, lib := range splitLibraries(fmt.Sprint(s)) {
				if libraryInstalled(libDir, lib) {
					kept = append(kept, lib)
				} else {
					gone = append(gone, lib)
					if i == 0 {
						dropped = append(dropped, "shared_preload_libraries: "+lib+" (not in the image)")
					}
				}
			}
			ps["shared_preload_libraries"] = strings.Join(kept, ",")
		}
		for _, lib := range slices.Sorted(maps.Keys(spiloLibraries)) {
			if !libraryInstalled(libDir, lib) {
				gone = append(gone, spiloLibraries[lib])
			}
		}
		for _, prefix := range gone {
			for k := range ps {
				if strings.HasPrefix(k, prefix+".") {
					delete(ps, k)
				}
			}
		}
	}
	if k8s, ok := cfg["kubernetes"].(map[string]any); ok {
		// Patroni 3.0 cannot name the leader's label value (master).
		delete(k8s, "leader_label_value")
		if m.Kubeconfig != "" {
			// There is no kubernetes Service to bypass outside a pod.
			delete(k8s, "bypass_api_service")
		}
		// Patroni's default, spelled out: the ConfigMaps hold the leader.
		if _, ok := k8s["use_endpoints"]; !ok {
			k8s["use_endpoints"] = false
		}
	}

	// 6. What --validate-config of Patroni 3.0 insists on; Patroni uses
	// the superuser for pg_rewind when no rewind user is given, and
	// ignores bootstrap.pg_hba when postgresql.pg_hba is set.
	auth, err := section(pg, "authentication")
	if err != nil {
		return nil, fmt.Errorf("postgresql: %w", err)
	}
	if _, ok := auth["rewind"]; !ok {
		auth["rewind"] = deepCopyJSON(auth["superuser"])
	}
	if _, ok := boot["pg_hba"]; !ok {
		if hba, ok := pg["pg_hba"].([]any); ok {
			boot["pg_hba"] = deepCopyJSON(hba)
		}
	}
	return dropped, nil
}

// libraryInstalled reports whether a shared_preload_libraries entry names
// a library present in libDir (or, given as a path, present there).
func libraryInstalled(libDir, lib string) bool {
	lib = strings.TrimPrefix(lib, "$libdir/")
	if !strings.Contains(lib, "/") {
		lib = filepath.Join(libDir, lib)
	}
	if !strings.HasSuffix(lib, ".so") {
		lib += ".so"
	}
	_, err := os.Stat(lib)
	return err == nil
}
