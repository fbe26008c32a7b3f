package v1

import (
	"k8s.io/utils/ptr"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// samplesDir holds the sample manifests users copy; they must decode
// strictly and validate.
const samplesDir = "../../../../manifests/samples"

func quantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

// validCluster is a small valid cluster that each case below breaks in one
// way.
func validCluster() *Postgresql {
	return &Postgresql{
		Spec: PostgresqlSpec{
			TeamID:            "acid",
			NumberOfInstances: 3,
			PostgreSQL:        PostgresqlParam{Version: "17"},
			Volume:            Volume{Size: resource.MustParse("10Gi")},
			Users: map[string]UserFlags{
				"app":    {"createdb", "LOGIN"},
				"reader": {},
			},
			Databases: map[string]string{"app": "app"},
		},
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(p *Postgresql)
		// want are substrings of the aggregated error, one per expected
		// error; none means valid.
		want []string
	}{
		{name: "valid", mutate: func(p *Postgresql) {}},
		{name: "zero instances stop the cluster", mutate: func(p *Postgresql) { p.Spec.NumberOfInstances = 0 }},
		{
			name:   "maintenance window backwards",
			mutate: func(p *Postgresql) { p.Spec.MaintenanceWindows = []MaintenanceWindow{"01:00-06:00", "Sat:06:00-01:00"} },
			want:   []string{`spec.maintenanceWindows[1]: Invalid value: "Sat:06:00-01:00": "Sat:06:00-01:00": the start must be before the end`},
		},
		{
			name: "prepared database among databases",
			mutate: func(p *Postgresql) {
				p.Spec.Databases = map[string]string{"foo": "zalando"}
				p.Spec.PreparedDatabases = map[string]PreparedDatabase{"foo": {}}
			},
			want: []string{`spec.preparedDatabases[foo]: Duplicate value: "is one of databases too"`},
		},
		{
			name: "prepared role among users",
			mutate: func(p *Postgresql) {
				p.Spec.Users["foo_data_reader"] = UserFlags{}
				p.Spec.PreparedDatabases = map[string]PreparedDatabase{"foo": {}}
			},
			want: []string{"its role foo_data_reader is one of users too"},
		},
		{
			name: "prepared role of two databases",
			mutate: func(p *Postgresql) {
				p.Spec.PreparedDatabases = map[string]PreparedDatabase{"foo": {}, "foo_data": {Schemas: map[string]PreparedSchema{"x": {}}}}
			},
			want: []string{"its role foo_data_owner is one of prepared database foo's too",
				"its role foo_data_reader is one of prepared database foo's too", "its role foo_data_writer is one of prepared database foo's too"},
		},
		{
			name: "prepared user with another user's Secret",
			mutate: func(p *Postgresql) {
				p.Spec.Users["shop-owner-user"] = UserFlags{}
				p.Spec.PreparedDatabases = map[string]PreparedDatabase{"shop": {DefaultUsers: true}}
			},
			want: []string{"its user shop_owner_user would share its Secret with user shop-owner-user"},
		},
		{
			name:   "prepared databases empty",
			mutate: func(p *Postgresql) { p.Spec.PreparedDatabases = map[string]PreparedDatabase{} },
			want:   []string{"spec.preparedDatabases: Required value"},
		},
		{
			name: "pooler user among users",
			mutate: func(p *Postgresql) {
				p.Spec.EnableReplicaConnectionPooler = ptr.To(true)
				p.Spec.Users["pooler"] = UserFlags{}
			},
			want: []string{`spec.connectionPooler.user: Invalid value: "pooler": must not be one of users`},
		},
		{
			name: "pooler fields out of range",
			mutate: func(p *Postgresql) {
				p.Spec.ConnectionPooler = &ConnectionPooler{NumberOfInstances: ptr.To[int32](0), Mode: "statement",
					Schema: "pg_x", User: "App", MaxDBConnections: ptr.To[int32](0)}
			},
			want: []string{"spec.connectionPooler.user: Invalid value", "spec.connectionPooler.schema: Forbidden",
				"spec.connectionPooler.numberOfInstances", "spec.connectionPooler.maxDBConnections", "spec.connectionPooler.mode: Unsupported value"},
		},
		{
			name: "load balancers and containers",
			mutate: func(p *Postgresql) {
				p.Spec.EnableMasterLoadBalancer = ptr.To(true)
				p.Spec.AllowedSourceRanges = []string{"10.0.0.0/8", "fd01::/48", "192.168.1.7/32"}
				p.Spec.EnableShmVolume = ptr.To(false)
				p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}
				p.Spec.Sidecars = []Sidecar{{Name: "exporter", Image: "exporter:1", Env: []corev1.EnvVar{{Name: "DATA_SOURCE", Value: "x"}}}}
			},
		},
		{
			name: "source ranges not CIDRs",
			mutate: func(p *Postgresql) {
				p.Spec.AllowedSourceRanges = []string{"10.0.0.0/8", "10.0.0.1", "010.0.0.0/8", "10.0.0.0/33"}
			},
			want: []string{"spec.allowedSourceRanges[1]", "spec.allowedSourceRanges[2]", "spec.allowedSourceRanges[3]"},
		},
		{
			name: "container names",
			mutate: func(p *Postgresql) {
				p.Spec.InitContainers = []corev1.Container{{Name: "a", Image: "x"}, {Name: "postgres", Image: "x"}, {Name: "Bad_Name", Image: "x"}}
				p.Spec.Sidecars = []Sidecar{{Name: "a", Image: "x"}, {Name: "", Image: "x"}}
			},
			want: []string{"spec.initContainers[1].name: Invalid value: \"postgres\"", "spec.initContainers[2].name: Invalid value: \"Bad_Name\"",
				"spec.sidecars[0].name: Duplicate value: \"a\"", "spec.sidecars[1].name: Required value"},
		},
		{
			name: "container images and sidecar fields",
			mutate: func(p *Postgresql) {
				p.Spec.InitContainers = []corev1.Container{{Name: "i"}}
				p.Spec.Sidecars = []Sidecar{{Name: "s", Image: " x", Env: []corev1.EnvVar{{Name: "1A"}},
					Ports: []corev1.ContainerPort{{ContainerPort: 0}},
					Resources: &Resources{Requests: &ResourceDescription{Memory: ptr.To(resource.MustParse("2Gi"))},
						Limits: &ResourceDescription{Memory: ptr.To(resource.MustParse("1Gi"))}}}}
			},
			want: []string{"spec.initContainers[0].image: Required value", "spec.sidecars[0].image: Invalid value",
				"spec.sidecars[0].env[0].name", "spec.sidecars[0].ports[0].containerPort", "spec.sidecars[0].resources.requests.memory"},
		},
		{
			name:   "too many instances",
			mutate: func(p *Postgresql) { p.Spec.NumberOfInstances = MaxInstances + 1 },
			want:   []string{"spec.numberOfInstances: Invalid value: 17: must be between 0 and 16"},
		},
		{
			name:   "negative instances",
			mutate: func(p *Postgresql) { p.Spec.NumberOfInstances = -1 },
			want:   []string{"spec.numberOfInstances"},
		},
		{
			name:   "missing team",
			mutate: func(p *Postgresql) { p.Spec.TeamID = "" },
			want:   []string{"spec.teamId: Required value"},
		},
		{
			name:   "team is not a label value",
			mutate: func(p *Postgresql) { p.Spec.TeamID = "team a" },
			want:   []string{"spec.teamId: Invalid value"},
		},
		{
			name:   "cluster name too long",
			mutate: func(p *Postgresql) { p.Name = strings.Repeat("a", MaxClusterNameLength+1) },
			want:   []string{"metadata.name: Too long"},
		},
		{
			name:   "cluster name starts with a digit",
			mutate: func(p *Postgresql) { p.Name = "1cluster" },
			want:   []string{"metadata.name: Invalid value: \"1cluster\""},
		},
		{
			name:   "unsupported version",
			mutate: func(p *Postgresql) { p.Spec.PostgreSQL.Version = "12" },
			want:   []string{`spec.postgresql.version: Unsupported value: "12"`},
		},
		{
			name:   "missing version",
			mutate: func(p *Postgresql) { p.Spec.PostgreSQL.Version = "" },
			want:   []string{"spec.postgresql.version: Required value"},
		},
		{
			name: "ordinary parameters pass",
			mutate: func(p *Postgresql) {
				p.Spec.PostgreSQL.Parameters = map[string]string{
					"shared_buffers": "1GB", "pg_stat_statements.max": "10000",
					"max_connections": "100", "wal_level": "logical", "track_commit_timestamp": "ON",
				}
			},
		},
		{
			name:   "parameter owned by Patroni",
			mutate: func(p *Postgresql) { p.Spec.PostgreSQL.Parameters = map[string]string{"Port": "5433"} },
			want:   []string{"spec.postgresql.parameters[Port]: Forbidden: is set by Patroni"},
		},
		{
			name: "synchronous_standby_names points to synchronous_mode",
			mutate: func(p *Postgresql) {
				p.Spec.PostgreSQL.Parameters = map[string]string{"synchronous_standby_names": "*"}
			},
			want: []string{"use patroni.synchronous_mode"},
		},
		{
			name:   "cluster-wide parameter with units",
			mutate: func(p *Postgresql) { p.Spec.PostgreSQL.Parameters = map[string]string{"max_connections": "1k"} },
			want:   []string{`spec.postgresql.parameters[max_connections]: Invalid value: "1k": must be a plain integer`},
		},
		{
			name:   "cluster-wide parameter below its minimum",
			mutate: func(p *Postgresql) { p.Spec.PostgreSQL.Parameters = map[string]string{"max_connections": "0"} },
			want:   []string{"must be at least 1"},
		},
		{
			name:   "fewer WAL senders than replicas",
			mutate: func(p *Postgresql) { p.Spec.PostgreSQL.Parameters = map[string]string{"max_wal_senders": "1"} },
			want:   []string{"must be at least the number of replicas (2"},
		},
		{
			name: "fewer slots than replicas",
			mutate: func(p *Postgresql) {
				p.Spec.PostgreSQL.Parameters = map[string]string{"max_replication_slots": "0"}
			},
			want: []string{"spec.postgresql.parameters[max_replication_slots]"},
		},
		{
			name:   "wal_level minimal cannot replicate",
			mutate: func(p *Postgresql) { p.Spec.PostgreSQL.Parameters = map[string]string{"wal_level": "minimal"} },
			want:   []string{`spec.postgresql.parameters[wal_level]: Unsupported value: "minimal"`},
		},
		{
			name:   "boolean parameter",
			mutate: func(p *Postgresql) { p.Spec.PostgreSQL.Parameters = map[string]string{"wal_log_hints": "sure"} },
			want:   []string{"must be a boolean"},
		},
		{
			name:   "malformed parameter name",
			mutate: func(p *Postgresql) { p.Spec.PostgreSQL.Parameters = map[string]string{"shared buffers": "1GB"} },
			want:   []string{"is not a PostgreSQL setting name"},
		},
		{
			name:   "volume below the minimum",
			mutate: func(p *Postgresql) { p.Spec.Volume.Size = resource.MustParse("500Mi") },
			want:   []string{`spec.volume.size: Invalid value: "500Mi": must be at least 1Gi`},
		},
		{
			name:   "volume of exactly the minimum",
			mutate: func(p *Postgresql) { p.Spec.Volume.Size = resource.MustParse("1024Mi") },
		},
		{
			name:   "storage class is not a name",
			mutate: func(p *Postgresql) { p.Spec.Volume.StorageClass = "Fast SSD" },
			want:   []string{"spec.volume.storageClass"},
		},
		{
			name: "request above limit",
			mutate: func(p *Postgresql) {
				p.Spec.Resources = &Resources{
					Requests: &ResourceDescription{CPU: quantity("2"), Memory: quantity("1Gi")},
					Limits:   &ResourceDescription{CPU: quantity("1500m"), Memory: quantity("1Gi")},
				}
			},
			want: []string{`spec.resources.requests.cpu: Invalid value: "2": must not exceed resources.limits.cpu (1500m)`},
		},
		{
			name: "memory request above limit in other units",
			mutate: func(p *Postgresql) {
				p.Spec.Resources = &Resources{
					Requests: &ResourceDescription{Memory: quantity("2Gi")},
					Limits:   &ResourceDescription{Memory: quantity("2000Mi")},
				}
			},
			want: []string{"spec.resources.requests.memory"},
		},
		{
			name: "requests without limits",
			mutate: func(p *Postgresql) {
				p.Spec.Resources = &Resources{Requests: &ResourceDescription{CPU: quantity("8")}}
			},
		},
		{
			name: "zero memory",
			mutate: func(p *Postgresql) {
				p.Spec.Resources = &Resources{Limits: &ResourceDescription{Memory: quantity("0")}}
			},
			want: []string{"spec.resources.limits.memory: Invalid value: \"0\": must be greater than zero"},
		},
		{
			name:   "superuser and nosuperuser",
			mutate: func(p *Postgresql) { p.Spec.Users["app"] = UserFlags{"superuser", "NOSUPERUSER"} },
			want:   []string{`spec.users[app][1]: Invalid value: "NOSUPERUSER": contradicts SUPERUSER`},
		},
		{
			name:   "login and nologin",
			mutate: func(p *Postgresql) { p.Spec.Users["app"] = UserFlags{"nologin", "login"} },
			want:   []string{"contradicts NOLOGIN"},
		},
		{
			name:   "same flag in two cases",
			mutate: func(p *Postgresql) { p.Spec.Users["app"] = UserFlags{"createdb", "CREATEDB"} },
			want:   []string{`spec.users[app][1]: Duplicate value: "CREATEDB"`},
		},
		{
			name:   "unknown flag",
			mutate: func(p *Postgresql) { p.Spec.Users["app"] = UserFlags{"admin"} },
			want:   []string{`spec.users[app][0]: Unsupported value: "admin"`},
		},
		{
			name:   "reserved user",
			mutate: func(p *Postgresql) { p.Spec.Users["standby"] = UserFlags{} },
			want:   []string{"spec.users[standby]: Forbidden: is reserved"},
		},
		{
			name:   "a role name PostgreSQL reserves",
			mutate: func(p *Postgresql) { p.Spec.Users["current_user"] = UserFlags{} },
			want:   []string{"spec.users[current_user]: Forbidden: is reserved: PostgreSQL refuses it as a role name"},
		},
		{
			name:   "pg_ prefix",
			mutate: func(p *Postgresql) { p.Spec.Users["pg_app"] = UserFlags{} },
			want:   []string{"spec.users[pg_app]: Forbidden"},
		},
		{
			name:   "upper case user",
			mutate: func(p *Postgresql) { p.Spec.Users["App"] = UserFlags{} },
			want:   []string{`spec.users[App]: Invalid value: "App": must be lower case`},
		},
		{
			name:   "user name too long",
			mutate: func(p *Postgresql) { p.Spec.Users[strings.Repeat("u", 64)] = UserFlags{} },
			want:   []string{"Too long"},
		},
		{
			name:   "dotted and dashed user names are zalando's",
			mutate: func(p *Postgresql) { p.Spec.Users["team.app-user"] = UserFlags{} },
		},
		{
			name:   "database owner not declared",
			mutate: func(p *Postgresql) { p.Spec.Databases["reports"] = "analyst" },
			want:   []string{`spec.databases[reports]: Invalid value: "analyst": owner "analyst" of database "reports" must be declared in spec.users`},
		},
		{
			name:   "reserved database",
			mutate: func(p *Postgresql) { p.Spec.Databases["template1"] = "app" },
			want:   []string{"spec.databases[template1]: Forbidden"},
		},
		{
			name:   "database name with a dash",
			mutate: func(p *Postgresql) { p.Spec.Databases["my-db"] = "app" },
			want:   []string{`spec.databases[my-db]: Invalid value: "my-db"`},
		},
		{
			name:   "patroni defaults",
			mutate: func(p *Postgresql) { p.Spec.Patroni = &Patroni{SynchronousMode: true} },
		},
		{
			name:   "patroni timings that lose the leader lock",
			mutate: func(p *Postgresql) { p.Spec.Patroni = &Patroni{TTL: 20, LoopWait: 10, RetryTimeout: 10} },
			want:   []string{"spec.patroni.ttl: Invalid value: 20: must be at least loop_wait + 2 * retry_timeout (30)"},
		},
		{
			name:   "patroni ttl below Patroni's minimum",
			mutate: func(p *Postgresql) { p.Spec.Patroni = &Patroni{TTL: 10, LoopWait: 1, RetryTimeout: 3} },
			want:   []string{"spec.patroni.ttl: Invalid value: 10: must be between 20 and 3600 seconds"},
		},
		{
			name: "pg_hba line break",
			mutate: func(p *Postgresql) {
				p.Spec.Patroni = &Patroni{PgHba: []string{"local all all trust\nhost all all 0.0.0.0/0 trust"}}
			},
			want: []string{"spec.patroni.pg_hba[0]: Invalid value", "must be a single line"},
		},
		{
			name: "patroni initdb options",
			mutate: func(p *Postgresql) {
				p.Spec.Patroni = &Patroni{InitDB: map[string]string{"encoding": "UTF8", "data-checksums": "true", "locale": "C.UTF-8", "wal-segsize": "32"}}
			},
		},
		{
			name: "patroni initdb: owned, unknown, a flag's value",
			mutate: func(p *Postgresql) {
				p.Spec.Patroni = &Patroni{InitDB: map[string]string{"pgdata": "/tmp", "username": "me", "nosync": "true",
					"frobnicate": "1", "data-checksums": "yes", "encoding": ""}}
			},
			want: []string{
				`spec.patroni.initdb[data-checksums]: Invalid value: "yes": initdb flag: must be "true" or "false"`,
				`spec.patroni.initdb[encoding]: Invalid value: "": must be a non-empty single line`,
				`spec.patroni.initdb[frobnicate]: Unsupported value: "frobnicate"`,
				`spec.patroni.initdb[nosync]: Forbidden: initdb option nosync is not allowed: Patroni refuses it`,
				`spec.patroni.initdb[pgdata]: Forbidden: initdb option pgdata is not allowed: Patroni passes the data directory`,
				`spec.patroni.initdb[username]: Forbidden: initdb option username is not allowed`,
			},
		},
		{
			name: "patroni synchronous settings without synchronous_mode",
			mutate: func(p *Postgresql) {
				p.Spec.Patroni = &Patroni{SynchronousModeStrict: true, SynchronousNodeCount: 2}
			},
			want: []string{
				"spec.patroni.synchronous_mode_strict: Invalid value: true: needs synchronous_mode: true",
				"spec.patroni.synchronous_node_count: Invalid value: 2: needs synchronous_mode: true",
			},
		},
		{
			name: "patroni synchronous settings",
			mutate: func(p *Postgresql) {
				p.Spec.Patroni = &Patroni{SynchronousMode: true, SynchronousModeStrict: true, SynchronousNodeCount: 2, FailsafeMode: ptr.To(true)}
			},
		},
		{
			name: "patroni slots",
			mutate: func(p *Postgresql) {
				p.Spec.Patroni = &Patroni{Slots: map[string]map[string]string{
					"cdc":     {"type": "logical", "database": "foo", "plugin": "pgoutput"},
					"standby": {"type": "physical"},
				}}
			},
		},
		{
			name: "patroni slots refused",
			mutate: func(p *Postgresql) {
				p.Spec.Patroni = &Patroni{Slots: map[string]map[string]string{
					"Bad-Name": {"type": "physical", "plugin": "pgoutput"},
					"cdc":      {"type": "logical", "database": "foo"},
					"notype":   {},
					"odd":      {"type": "temporary", "size": "1"},
				}}
			},
			want: []string{
				`spec.patroni.slots[Bad-Name]: Invalid value: "Bad-Name": a slot name has 1 to 63 lower case letters`,
				`spec.patroni.slots[Bad-Name].plugin: Forbidden: only a logical slot has a plugin`,
				`spec.patroni.slots[cdc].plugin: Required value: a logical slot needs a plugin`,
				`spec.patroni.slots[notype].type: Required value: physical or logical`,
				`spec.patroni.slots[odd].type: Unsupported value: "temporary"`,
				`spec.patroni.slots[odd].size: Unsupported value: "size"`,
			},
		},
		{
			name:   "bad annotation key",
			mutate: func(p *Postgresql) { p.Spec.PodAnnotations = map[string]string{"not a key": "x"} },
			want:   []string{"spec.podAnnotations: Invalid value: \"not a key\""},
		},
		{
			name:   "image with surrounding whitespace",
			mutate: func(p *Postgresql) { p.Spec.DockerImage = " ghcr.io/zalando/spilo-17:4.0-p2" },
			want:   []string{"spec.dockerImage: Invalid value", "whitespace"},
		},
		{
			name: "tolerations the apiserver takes",
			mutate: func(p *Postgresql) {
				p.Spec.Tolerations = []corev1.Toleration{
					{Operator: corev1.TolerationOpExists},
					{Key: "postgres", Value: "yes", Effect: corev1.TaintEffectNoSchedule},
					{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(int64)},
				}
			},
		},
		{
			name: "tolerations the apiserver refuses",
			mutate: func(p *Postgresql) {
				p.Spec.Tolerations = []corev1.Toleration{
					{Key: "postgres", Operator: "Sometimes"},
					{Key: "bad key", Operator: corev1.TolerationOpExists},
					{Key: "postgres", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule, TolerationSeconds: new(int64)},
					{Operator: corev1.TolerationOpEqual},
					{Key: "postgres", Operator: corev1.TolerationOpExists, Value: "x"},
					{Key: "postgres", Effect: "Never"},
				}
			},
			want: []string{
				"spec.tolerations[0].operator: Unsupported value: \"Sometimes\"",
				"spec.tolerations[1].key: Invalid value: \"bad key\"",
				"spec.tolerations[2].effect: Invalid value: \"NoSchedule\": must be NoExecute when tolerationSeconds is set",
				"spec.tolerations[3].operator: Invalid value: \"Equal\": must be Exists when key is empty",
				"spec.tolerations[4].value: Invalid value: \"x\"",
				"spec.tolerations[5].effect: Unsupported value: \"Never\"",
			},
		},
		{
			name: "node affinity the apiserver takes",
			mutate: func(p *Postgresql) {
				p.Spec.NodeAffinity = &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchExpressions: []corev1.NodeSelectorRequirement{
							{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}},
							{Key: "cores", Operator: corev1.NodeSelectorOpGt, Values: []string{"4"}},
						},
						MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-1"}}},
					}}},
					PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
						Weight:     100,
						Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpExists}}},
					}},
				}
			},
		},
		{
			name: "node affinity the apiserver refuses",
			mutate: func(p *Postgresql) {
				p.Spec.NodeAffinity = &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchExpressions: []corev1.NodeSelectorRequirement{
							{Key: "disk", Operator: corev1.NodeSelectorOpIn},
							{Key: "cores", Operator: corev1.NodeSelectorOpGt, Values: []string{"four"}},
							{Key: "zone", Operator: "Near"},
						},
						MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.labels", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}}},
					}}},
					PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
						Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpExists, Values: []string{"a"}}}},
					}},
				}
			},
			want: []string{
				"matchExpressions[0].values: Required value",
				"matchExpressions[1].values[0]: Invalid value: \"four\"",
				"matchExpressions[2].operator: Unsupported value: \"Near\"",
				"matchFields[0].key: Unsupported value: \"metadata.labels\"",
				"matchFields[0].values: Required value: exactly one node name",
				"preferredDuringSchedulingIgnoredDuringExecution[0].weight: Invalid value: 0",
				"preference.matchExpressions[0].values: Forbidden",
			},
		},
		{
			name: "no node selector term",
			mutate: func(p *Postgresql) {
				p.Spec.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{}}
			},
			want: []string{"spec.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: Required value"},
		},
		{
			name: "pod annotations leave no room for pgloop's and Patroni's",
			mutate: func(p *Postgresql) {
				p.Spec.PodAnnotations = map[string]string{"k": strings.Repeat("a", 256<<10-PodAnnotationsReserve)}
			},
			want: []string{"spec.podAnnotations: Too long"},
		},
		{
			name: "errors accumulate",
			mutate: func(p *Postgresql) {
				p.Spec.NumberOfInstances = 20
				p.Spec.PostgreSQL.Version = "9.6"
				p.Spec.Databases["x"] = "nobody"
			},
			want: []string{"spec.numberOfInstances", "spec.postgresql.version", "spec.databases[x]"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkValidate(t, tt.mutate, tt.want) })
	}
}

// checkValidate validates a valid cluster changed by mutate: want are
// substrings of the aggregated error, one per expected error; none means
// valid.
func checkValidate(t *testing.T, mutate func(p *Postgresql), want []string) {
	t.Helper()
	p := validCluster()
	p.Name = "acid-test"
	mutate(p)
	errs := p.Validate()
	if len(want) == 0 {
		if len(errs) != 0 {
			t.Fatalf("want valid, got %v", errs.ToAggregate())
		}
		return
	}
	if len(errs) == 0 {
		t.Fatalf("want errors %q, got none", want)
	}
	got := errs.ToAggregate().Error()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("error %q does not contain %q", got, w)
		}
	}
}

func TestUserFlagNegation(t *testing.T) {
	for _, f := range allFlags {
		neg := f.negation()
		if !strings.HasPrefix(string(neg), "NO") || neg.negation() != f {
			t.Errorf("negation of %s is %s, whose negation is %s", f, neg, neg.negation())
		}
		if !neg.known() || !UserFlag(strings.ToLower(string(f))).Normalize().known() {
			t.Errorf("%s or %s not known", f, neg)
		}
	}
}

// TestSamples decodes every sample manifest strictly (an unknown or
// misspelt field fails) and validates it.
func TestSamples(t *testing.T) {
	for _, name := range []string{"minimal.yaml", "full.yaml"} {
		t.Run(name, func(t *testing.T) {
			p := decodeSample(t, name)
			if p.APIVersion != SchemeGroupVersion.String() || p.Kind != PostgresqlKind {
				t.Errorf("apiVersion/kind = %s/%s, want %s/%s", p.APIVersion, p.Kind, SchemeGroupVersion, PostgresqlKind)
			}
			if errs := p.Validate(); len(errs) != 0 {
				t.Errorf("sample is invalid: %v", errs.ToAggregate())
			}
		})
	}

	// The full sample sets every spec field, so a field added to the
	// type without a sample shows up here.
	t.Run("full sets every field", func(t *testing.T) {
		p := decodeSample(t, "full.yaml")
		s := p.Spec
		if s.DockerImage == "" || s.PostgreSQL.Parameters == nil || s.Volume.StorageClass == "" ||
			s.Resources == nil || s.Resources.Requests == nil || s.Resources.Limits == nil ||
			s.Users == nil || s.Databases == nil || s.Patroni == nil || !s.Patroni.SynchronousMode ||
			s.Patroni.PgHba == nil || s.Patroni.InitDB == nil || s.Patroni.FailsafeMode == nil ||
			s.Patroni.SynchronousNodeCount == 0 || s.Patroni.Slots == nil || s.Tolerations == nil || s.NodeAffinity == nil ||
			s.PodAnnotations == nil || s.ServiceAnnotations == nil || s.Volume.Retention == "" || s.MaintenanceWindows == nil ||
			!s.PoolerEnabled(false) || !s.PoolerEnabled(true) || s.ConnectionPooler == nil ||
			s.ConnectionPooler.NumberOfInstances == nil || s.ConnectionPooler.Mode == "" || s.ConnectionPooler.Schema == "" ||
			s.ConnectionPooler.User == "" || s.ConnectionPooler.DockerImage == "" || s.ConnectionPooler.MaxDBConnections == nil ||
			s.ConnectionPooler.Resources == nil || !s.EnableLogicalBackup || s.LogicalBackupSchedule == "" || s.PreparedDatabases == nil ||

			s.EnableMasterLoadBalancer == nil || s.EnableReplicaLoadBalancer == nil ||
			s.AllowedSourceRanges == nil || s.EnableShmVolume == nil || s.InitContainers == nil || s.Sidecars == nil ||
			s.Sidecars[0].Resources == nil || s.Sidecars[0].Ports == nil || s.Sidecars[0].Env == nil || s.Sidecars[0].Command == nil {
			t.Errorf("full.yaml leaves a spec field unset: %+v", s)
		}
	})
}

func yamlToJSON(t *testing.T, name string) ([]byte, error) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(samplesDir, name))
	if err != nil {
		return nil, err
	}
	return yaml.YAMLToJSON(data)
}

func decodeSample(t *testing.T, name string) *Postgresql {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(samplesDir, name))
	if err != nil {
		t.Fatal(err)
	}
	var p Postgresql
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		t.Fatalf("decode %s: %v", name, err)
	}
	return &p
}

func TestDecodeStrictRejectsUnknownFields(t *testing.T) {
	manifest := `
apiVersion: pgloop.dev/v1
kind: Postgresql
metadata: {name: x}
spec:
  teamId: acid
  numberOfInstance: 2
`
	var p Postgresql
	err := yaml.UnmarshalStrict([]byte(manifest), &p)
	if err == nil || !strings.Contains(err.Error(), "numberOfInstance") {
		t.Fatalf("want an unknown field error naming numberOfInstance, got %v", err)
	}
}
