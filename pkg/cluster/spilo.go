package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Paths and ports inside the Spilo image.
const (
	// DataMountPath is where the data volume is mounted.
	DataMountPath = "/home/postgres/pgdata"
	// PGRoot is Spilo's PGROOT, on the data volume: the data directory
	// Spilo creates under it survives pod replacement with its volume.
	PGRoot = DataMountPath + "/pgroot"
	// PostgresPort is PostgreSQL's port in every pod.
	PostgresPort = 5432
	// PatroniPort is Patroni's REST API port in every pod.
	PatroniPort = 8008
)

// Roles Spilo creates itself: Patroni connects as the superuser and
// replicas stream as the replication user. Their names are fixed because
// Validate reserves them.
const (
	SuperuserName       = "postgres"
	ReplicationUserName = "standby"
)

// spiloLocalParameters are the settings Spilo's own Patroni configuration
// sets per instance (in postgresql.parameters, not in the DCS). Patroni lets
// a local setting win over the DCS one, so a user's value for one of these
// must be local too, or Spilo's default would silently override it. Every
// other parameter goes to the DCS, shared by all members. The list is
// Spilo's configure_spilo.py template, as the zalando operator keeps it.
var spiloLocalParameters = map[string]bool{
	"archive_command":                  true,
	"shared_buffers":                   true,
	"logging_collector":                true,
	"log_destination":                  true,
	"log_directory":                    true,
	"log_filename":                     true,
	"log_file_mode":                    true,
	"log_rotation_age":                 true,
	"log_truncate_on_rotation":         true,
	"ssl":                              true,
	"ssl_ca_file":                      true,
	"ssl_crl_file":                     true,
	"ssl_cert_file":                    true,
	"ssl_key_file":                     true,
	"shared_preload_libraries":         true,
	"bg_mon.listen_address":            true,
	"bg_mon.history_buckets":           true,
	"pg_stat_statements.track_utility": true,
	"extwlist.extensions":              true,
	"extwlist.custom_path":             true,
}

// spiloConfiguration is the SPILO_CONFIGURATION document. Spilo deep-merges
// it over the Patroni configuration it generates: maps merge key by key
// with these values winning, lists (pg_hba) replace Spilo's.
//
// Its bootstrap.dcs is the dynamic configuration (Dynamic), which Patroni
// writes to its store once, when it initialises the cluster, and ignores
// ever after: a new cluster starts with the spec's settings, and pgloop
// applies later changes to the running cluster through Patroni's PATCH
// /config. So the bootstrap section is left out of the pod template's hash
// (StatefulSet): a change of it replaces no pod, and the StatefulSet keeps
// the one it was created with until something else changes its template.
type spiloConfiguration struct {
	Bootstrap  *spiloBootstrap  `json:"bootstrap,omitempty"`
	PostgreSQL *localPostgreSQL `json:"postgresql,omitempty"`
}

type spiloBootstrap struct {
	DCS map[string]any `json:"dcs"`
	// InitDB, when the spec sets initdb options, replaces Spilo's list
	// (Spilo's merge replaces lists), so it repeats Spilo's defaults that
	// the spec does not override.
	InitDB []any `json:"initdb,omitempty"`
	// Method is a clone's custom bootstrap method (restore.go): Patroni
	// runs Restore instead of initdb on the first member.
	Method  string         `json:"method,omitempty"`
	Restore *restoreMethod `json:"pgloop_restore,omitempty"`
}

// spiloInitDB are the initdb options of Spilo's template, in its order:
// a flag as a string, an option with a value as a one-key map.
var spiloInitDB = []struct{ name, value string }{
	{"encoding", "UTF8"},
	{"locale", "en_US.UTF-8"},
	{"data-checksums", "true"},
}

// initdbOptions returns Patroni's bootstrap.initdb list for the spec's
// options: Spilo's defaults first, in Spilo's order, with the spec's value
// where it sets one, then the spec's other options, sorted. A flag is its
// name when "true" and left out when "false"; an option with a value is a
// one-key map.
func initdbOptions(spec map[string]string) []any {
	var out []any
	add := func(name, value string) {
		switch {
		case value == "false":
		case value == "true":
			out = append(out, name)
		default:
			out = append(out, map[string]string{name: value})
		}
	}
	for _, d := range spiloInitDB {
		v, ok := spec[d.name]
		if !ok {
			v = d.value
		}
		add(d.name, v)
	}
	for _, name := range slices.Sorted(maps.Keys(spec)) {
		if name != "encoding" && name != "locale" && name != "data-checksums" {
			add(name, spec[name])
		}
	}
	return out
}

// localPostgreSQL is the per-instance postgresql section; Patroni reads it
// at every start. pg_hba is here, not in the dynamic configuration, because
// Spilo's own template sets postgresql.pg_hba per instance, and Patroni lets
// a local pg_hba win over the dynamic one: a change of it needs new pods.
type localPostgreSQL struct {
	Parameters map[string]string `json:"parameters,omitempty"`
	PgHba      []string          `json:"pg_hba,omitempty"`
	// StandbyRestore is the replica method of a standby cluster that
	// follows a repository only (standbyRestoreMethod).
	StandbyRestore *replicaMethod `json:"pgloop_standby_restore,omitempty"`
}

// SpiloConfiguration returns the SPILO_CONFIGURATION of the cluster: the
// dynamic configuration to bootstrap with (Dynamic), the PostgreSQL
// parameters Spilo sets per instance (see spiloLocalParameters) and pg_hba.
// Parameter names are lower-cased, as PostgreSQL treats them, so that
// Patroni recognises the settings it manages; should two names differ only
// in case, the one that sorts last wins. The output is deterministic.
func SpiloConfiguration(pg *v1.Postgresql) string {
	return spiloConfigurationJSON(pg, Options{}, true)
}

// spiloConfigurationJSON is SpiloConfiguration, without the bootstrap
// section unless bootstrap: what the pod template hash covers.
func spiloConfigurationJSON(pg *v1.Postgresql, opts Options, bootstrap bool) string {
	local := localPostgreSQL{}
	if p := pg.Spec.Patroni; p != nil && len(p.PgHba) > 0 {
		local.PgHba = append([]string(nil), p.PgHba...)
	}
	perInstance := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(pg.Spec.PostgreSQL.Parameters)) {
		if lower := strings.ToLower(name); spiloLocalParameters[lower] {
			perInstance[lower] = pg.Spec.PostgreSQL.Parameters[name]
		}
	}
	for name, v := range archiveParameters(pg, opts) {
		perInstance[name] = v
	}
	if len(perInstance) > 0 {
		local.Parameters = perInstance
	}
	cfg := spiloConfiguration{}
	if bootstrap {
		cfg.Bootstrap = &spiloBootstrap{DCS: withoutNil(Dynamic(pg).Settings)}
		if p := pg.Spec.Patroni; p != nil && len(p.InitDB) > 0 {
			cfg.Bootstrap.InitDB = initdbOptions(p.InitDB)
		}
		if m := restoreBootstrap(pg, opts); m != nil {
			cfg.Bootstrap.Method, cfg.Bootstrap.Restore = RestoreMethod, m
		}
		// Read by a standby leader's first copy only, as the bootstrap
		// section: out of the template's hash, so that promoting the
		// cluster rolls no pod.
		local.StandbyRestore = standbyRestoreMethod(pg)
	}
	if local.Parameters != nil || local.PgHba != nil || local.StandbyRestore != nil {
		cfg.PostgreSQL = &local
	}
	return mustJSON(cfg)
}

// SpiloConfigurationVar is the environment variable of the Spilo
// container that holds SPILO_CONFIGURATION.
const SpiloConfigurationVar = "SPILO_CONFIGURATION"

// BootstrapConfig returns the dynamic configuration the StatefulSet's pod
// template bootstraps a new cluster with (its SPILO_CONFIGURATION's
// bootstrap.dcs), as JSON with sorted keys; "" when it has none. It reads
// only the containers' SpiloConfigurationVar, which is what the informers'
// cache keeps of a template besides its hash (pkg/informers).
func BootstrapConfig(sts *appsv1.StatefulSet) string {
	for _, c := range sts.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name != SpiloConfigurationVar {
				continue
			}
			var cfg struct {
				Bootstrap struct {
					DCS map[string]any `json:"dcs"`
				} `json:"bootstrap"`
			}
			if json.Unmarshal([]byte(e.Value), &cfg) != nil || cfg.Bootstrap.DCS == nil {
				return ""
			}
			return mustJSON(cfg.Bootstrap.DCS)
		}
	}
	return ""
}

// JSON returns the dynamic configuration as BootstrapConfig does.
func (d DynamicConfig) JSON() string {
	var m map[string]any
	_ = json.Unmarshal([]byte(mustJSON(withoutNil(d.Settings))), &m)
	return mustJSON(m)
}

// LocalParameter reports whether the PostgreSQL parameter name (any case)
// is set per instance, in the pod template: a change of it replaces the
// pods. Every other parameter is in Patroni's dynamic configuration.
func LocalParameter(name string) bool { return spiloLocalParameters[strings.ToLower(name)] }

// spiloEnv is the environment of the Spilo container, in a fixed order.
// Spilo turns the KUBERNETES_* variables into Patroni's kubernetes section
// (KUBERNETES_SCOPE_LABEL becomes kubernetes.scope_label, and so on).
func spiloEnv(pg *v1.Postgresql) []corev1.EnvVar {
	env := []corev1.EnvVar{
		// Patroni's scope: its DCS objects are named <scope>-leader, ...
		{Name: "SCOPE", Value: pg.Name},
		{Name: "PGROOT", Value: PGRoot},
		{Name: "POD_IP", ValueFrom: fieldRef("status.podIP")},
		{Name: "POD_NAMESPACE", ValueFrom: fieldRef("metadata.namespace")},
		{Name: "PGUSER_SUPERUSER", Value: SuperuserName},
		{Name: "PGPASSWORD_SUPERUSER", ValueFrom: passwordRef(SecretName(SuperuserName, pg.Name))},
		{Name: "PGUSER_STANDBY", Value: ReplicationUserName},
		{Name: "PGPASSWORD_STANDBY", ValueFrom: passwordRef(SecretName(ReplicationUserName, pg.Name))},
		// Spilo picks the binaries of this major version for a new data
		// directory; an existing one keeps the version of its PG_VERSION.
		{Name: "PGVERSION", Value: pg.Spec.PostgreSQL.Version},
		{Name: envKubernetesAPI, Value: "true"},
		{Name: "KUBERNETES_SCOPE_LABEL", Value: LabelClusterName},
		{Name: "KUBERNETES_ROLE_LABEL", Value: LabelRole},
		{Name: "KUBERNETES_LEADER_LABEL_VALUE", Value: RoleMaster},
		// Spilo parses KUBERNETES_LABELS as JSON. Patroni lists its members
		// with these labels plus scope_label=SCOPE.
		{Name: "KUBERNETES_LABELS", Value: mustJSON(map[string]string{LabelApplication: ApplicationSpilo})},
	}
	// ConfigMaps unless the cluster keeps its state in Endpoints
	// (patroni.go): then the variable is left out, as zalando's
	// StatefulSet leaves it out, and Spilo has Patroni write the leader's
	// address into the master Service's Endpoints. An adopted cluster's
	// members and the pods pgloop replaces them with share one store.
	if pg.PatroniStore() != v1.PatroniStoreEndpoints {
		env = append(env, corev1.EnvVar{Name: envUseConfigMaps, Value: kubernetesConfigMaps})
	}
	// Its value is set by StatefulSet: one without the bootstrap section
	// for the hash, then the whole.
	return append(env, corev1.EnvVar{Name: SpiloConfigurationVar})
}

func fieldRef(path string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}
}

func passwordRef(secret string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret},
		Key:                  SecretPasswordKey,
	}}
}

// jsonHash is the hash pgloop names a built value by: the first 8 bytes
// of the SHA-256 of its JSON encoding (see mustJSON), in hex.
func jsonHash(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic("cluster: encode " + strconv.Quote(err.Error()))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// mustJSON encodes v, which is built here from strings, numbers, booleans,
// maps with string keys and slices only: encoding cannot fail.
func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic("cluster: encode " + strconv.Quote(err.Error()))
	}
	return string(b)
}
