package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Limits of the API. They bound what a cluster may ask for, and they also
// bound the estimated cost of the CRD's CEL rules: the apiserver refuses a
// CRD whose rules it cannot prove cheap, so every map and list that a rule
// walks has a maximum size.
const (
	// MaxInstances is the largest numberOfInstances. Every replica holds a
	// WAL sender and a replication slot on the primary and a member key in
	// Patroni's DCS; beyond a handful of replicas a single-primary cluster
	// gains little, and 16 leaves ample room.
	MaxInstances = 16
	// MaxUsers is the largest number of entries in users.
	MaxUsers = 64
	// MaxDatabases is the largest number of entries in databases.
	MaxDatabases = 64
	// MaxIdentifierLength is PostgreSQL's limit on role and database names
	// (NAMEDATALEN - 1); longer names would be truncated silently.
	MaxIdentifierLength = 63
	// MaxClusterNameLength bounds metadata.name. pgloop names the
	// StatefulSet after the cluster, and the StatefulSet controller labels
	// pods with "<name>-<10-character revision hash>", a label value of at
	// most 63 characters.
	MaxClusterNameLength = 52
)

// Postgresql is one PostgreSQL cluster: a primary and its streaming
// replicas, run by Patroni in Spilo pods of one StatefulSet. The spec is
// what the user asks for; the status is the operator's persisted state
// machine for the cluster.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=postgresqls,singular=postgresql,shortName=pg,scope=Namespaced,categories=all
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`,description="State of the cluster's state machine"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.ready`,description="Ready instances / desired instances"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,description="Why the cluster is in its state: the concrete cause of stuck pods as soon as pgloop observes it"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 52",message="metadata.name must be at most 52 characters: the StatefulSet, its pods and Services are named after it"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS-1035 label (lower case letters, digits and '-', starting with a letter): the cluster's Services are named after it"
type Postgresql struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired cluster.
	// +required
	Spec PostgresqlSpec `json:"spec"`
	// Status is the cluster's state machine as the operator last wrote it.
	// +optional
	Status PostgresqlStatus `json:"status,omitempty"`
}

// PostgresqlList is a list of Postgresql clusters.
//
// +kubebuilder:object:root=true
type PostgresqlList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the clusters.
	Items []Postgresql `json:"items"`
}

// PostgresqlSpec is the desired shape of a cluster. Field names follow the
// zalando postgres-operator's `postgresql` manifest.
//
// +kubebuilder:validation:XValidation:rule="!has(self.databases) || self.databases.all(db, has(self.users) && self.databases[db] in self.users)",message="every database owner must be declared in users",fieldPath=".databases"
// +kubebuilder:validation:XValidation:rule="!has(self.users) || !(((has(self.connectionPooler) && has(self.connectionPooler.user)) ? self.connectionPooler.user : 'pooler') in self.users) || !((has(self.enableConnectionPooler) && self.enableConnectionPooler) || (has(self.enableReplicaConnectionPooler) && self.enableReplicaConnectionPooler))",message="the connection pooler's user (connectionPooler.user, default pooler) must not be one of users: it is a role of its own",fieldPath=".connectionPooler"
type PostgresqlSpec struct {
	// TeamID is the team that owns the cluster. It labels every object of
	// the cluster (label `team`) and cannot change once set.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="teamId is immutable"
	TeamID string `json:"teamId"`

	// NumberOfInstances is how many PostgreSQL instances (pods) to run: one
	// primary and numberOfInstances-1 streaming replicas. 0 stops the
	// cluster and keeps its volumes.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16
	NumberOfInstances int32 `json:"numberOfInstances"`

	// DockerImage is the Spilo image to run. Empty means the operator's
	// default image.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	DockerImage string `json:"dockerImage,omitempty"`

	// PostgreSQL holds the PostgreSQL major version and server parameters.
	// +required
	PostgreSQL PostgresqlParam `json:"postgresql"`

	// Volume is the persistent volume each instance keeps its data
	// directory on.
	// +required
	Volume Volume `json:"volume"`

	// Resources are the CPU and memory requests and limits of the
	// PostgreSQL container. Unset values take the operator's defaults.
	// +optional
	Resources *Resources `json:"resources,omitempty"`

	// Users are the database roles the operator creates, each with its role
	// flags; each gets a generated password in a Secret. Write `name: []`
	// for a role without flags: a null value is dropped by the apiserver.
	// Names are lower case letters, digits, '_', '-' and '.', at most 63
	// characters; postgres, standby and the pg_ prefix are reserved, and so
	// are the names PostgreSQL refuses for a role (public, none,
	// current_user, current_role, session_user).
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(u, size(u) <= 63 && u.matches('^[a-z0-9]([-_a-z0-9]*[a-z0-9])?([.][a-z0-9]([-_a-z0-9]*[a-z0-9])?)*$'))",message="user names must be at most 63 lower case letters, digits, '_', '-' or '.', starting and ending with a letter or digit"
	// +kubebuilder:validation:XValidation:rule="self.all(u, u != 'postgres' && u != 'standby' && !u.startsWith('pg_'))",message="user names postgres and standby, and the prefix pg_, are reserved"
	// +kubebuilder:validation:XValidation:rule="self.all(u, !(u in ['public', 'none', 'current_user', 'current_role', 'session_user']))",message="user names public, none, current_user, current_role and session_user are reserved by PostgreSQL"
	Users map[string]UserFlags `json:"users,omitempty"`

	// Databases maps each database to create to its owner, which must be
	// declared in users. Names are letters, digits and '_', not starting
	// with a digit, at most 63 characters; postgres, template0 and template1
	// are reserved.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(db, size(db) <= 63 && db.matches('^[a-zA-Z_][a-zA-Z0-9_]*$'))",message="database names must be at most 63 letters, digits or '_', not starting with a digit"
	// +kubebuilder:validation:XValidation:rule="self.all(db, !(db in ['postgres', 'template0', 'template1']))",message="database names postgres, template0 and template1 are reserved"
	Databases map[string]string `json:"databases,omitempty"`

	// PreparedDatabases are databases pgloop prepares as zalando's
	// postgres-operator does: each owned by the NOLOGIN role <db>_owner,
	// with NOLOGIN roles <db>_reader and <db>_writer (owner ⊃ writer ⊃
	// reader) and default privileges so that what the owner creates is
	// readable by readers and writable by writers; per schema (default: one
	// schema, data) the same roles <db>_<schema>_owner, _reader, _writer;
	// extensions created in a schema; with defaultUsers, LOGIN roles with
	// the suffix _user and a Secret each. Names are lower case letters,
	// digits and '_', not starting with a digit or pg_; a database must not
	// be one of databases, nor its roles ones of users.
	// +optional
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(db, size(db) <= 51 && db.matches('^[a-z_][a-z0-9_]*$') && !db.startsWith('pg_'))",message="prepared database names must be at most 51 lower case letters, digits or '_', not starting with a digit or pg_ (their roles add up to 12 characters)"
	// +kubebuilder:validation:XValidation:rule="self.all(db, !(db in ['postgres', 'template0', 'template1']))",message="prepared database names postgres, template0 and template1 are reserved"
	// +kubebuilder:validation:XValidation:rule="self.all(db, !has(self[db].schemas) || self[db].schemas.all(s, size(db) + size(s) <= 50))",message="a prepared schema's roles <db>_<schema>_writer_user must fit in 63 characters: database and schema names together at most 50"
	PreparedDatabases map[string]PreparedDatabase `json:"preparedDatabases,omitempty"`

	// Patroni holds the Patroni settings of the cluster. Unset, Spilo's
	// defaults apply (the same values as the defaults below).
	// +optional
	Patroni *Patroni `json:"patroni,omitempty"`

	// MaintenanceWindows are when pgloop may restart PostgreSQL for a
	// change that is not urgent, in UTC, zalando's format: "01:00-06:00"
	// (every day) or "Sat:01:00-06:00". A rollout of pods that run
	// PostgreSQL (a new image or pod template, a switchover for it) and a
	// restart for a parameter wait for the next window; everything else
	// (a new cluster, a scale, pods that run nothing, users, databases,
	// reloadable parameters) is done at once. Empty means any time.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	MaintenanceWindows []MaintenanceWindow `json:"maintenanceWindows,omitempty"`

	// Tolerations let the cluster's pods schedule onto tainted nodes.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// NodeAffinity constrains the nodes the cluster's pods may run on.
	// +optional
	NodeAffinity *corev1.NodeAffinity `json:"nodeAffinity,omitempty"`

	// PodAnnotations are added to the cluster's pods.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	PodAnnotations map[string]string `json:"podAnnotations,omitempty"`

	// ServiceAnnotations are added to the cluster's Services.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	ServiceAnnotations map[string]string `json:"serviceAnnotations,omitempty"`

	// EnableMasterLoadBalancer makes the master Service of type
	// LoadBalancer, reachable from outside the Kubernetes cluster by the
	// networks in allowedSourceRanges. Unset, the operator's
	// --enable-master-load-balancer decides (default false).
	// +optional
	EnableMasterLoadBalancer *bool `json:"enableMasterLoadBalancer,omitempty"`
	// EnableReplicaLoadBalancer does the same for the replica Service.
	// Unset, the operator's --enable-replica-load-balancer decides
	// (default false).
	// +optional
	EnableReplicaLoadBalancer *bool `json:"enableReplicaLoadBalancer,omitempty"`
	// AllowedSourceRanges are the networks (CIDRs, IPv4 or IPv6) a load
	// balancer admits: the Services' loadBalancerSourceRanges. Empty while
	// a load balancer is enabled means 127.0.0.1/32, as in the zalando
	// operator: the load balancer is closed to everyone outside the
	// Kubernetes cluster until ranges are given.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.all(r, isCIDR(r))",message="allowedSourceRanges must be CIDRs, e.g. 10.0.0.0/8 or fd01::/48"
	AllowedSourceRanges []string `json:"allowedSourceRanges,omitempty"`

	// MasterServiceAnnotations are added to the master Service, and to the
	// master pooler's, over serviceAnnotations: a key in both takes this
	// value, as in zalando's operator.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	MasterServiceAnnotations map[string]string `json:"masterServiceAnnotations,omitempty"`
	// ReplicaServiceAnnotations do the same for the replica Service and
	// the replica pooler's.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	ReplicaServiceAnnotations map[string]string `json:"replicaServiceAnnotations,omitempty"`
	// EnableMasterNodePort makes the master Service of type NodePort,
	// reachable on every node's port masterNodePort; it overrides
	// enableMasterLoadBalancer, as in zalando's operator. Unset means
	// false (zalando's operator default).
	// +optional
	EnableMasterNodePort *bool `json:"enableMasterNodePort,omitempty"`
	// MasterNodePort is the master Service's node port while
	// enableMasterNodePort is true; unset or 0 lets the apiserver pick one,
	// which then stays. It must be in the apiserver's node port range
	// (30000-32767 by default) and free.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	MasterNodePort *int32 `json:"masterNodePort,omitempty"`
	// EnableReplicaNodePort does the same for the replica Service.
	// +optional
	EnableReplicaNodePort *bool `json:"enableReplicaNodePort,omitempty"`
	// ReplicaNodePort is the replica Service's node port, as
	// masterNodePort.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	ReplicaNodePort *int32 `json:"replicaNodePort,omitempty"`
	// EnableMasterPoolerLoadBalancer makes the master pooler's Service of
	// type LoadBalancer, open to allowedSourceRanges as the master
	// Service's. Unset means false (zalando's operator default).
	// +optional
	EnableMasterPoolerLoadBalancer *bool `json:"enableMasterPoolerLoadBalancer,omitempty"`
	// EnableReplicaPoolerLoadBalancer does the same for the replica
	// pooler's Service.
	// +optional
	EnableReplicaPoolerLoadBalancer *bool `json:"enableReplicaPoolerLoadBalancer,omitempty"`
	// EnableMasterPoolerNodePort makes the master pooler's Service of
	// type NodePort; it overrides enableMasterPoolerLoadBalancer.
	// +optional
	EnableMasterPoolerNodePort *bool `json:"enableMasterPoolerNodePort,omitempty"`
	// MasterPoolerNodePort is the master pooler Service's node port, as
	// masterNodePort.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	MasterPoolerNodePort *int32 `json:"masterPoolerNodePort,omitempty"`
	// EnableReplicaPoolerNodePort does the same for the replica pooler's
	// Service.
	// +optional
	EnableReplicaPoolerNodePort *bool `json:"enableReplicaPoolerNodePort,omitempty"`
	// ReplicaPoolerNodePort is the replica pooler Service's node port, as
	// masterNodePort.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	ReplicaPoolerNodePort *int32 `json:"replicaPoolerNodePort,omitempty"`

	// EnableShmVolume mounts a memory-backed emptyDir at /dev/shm in the
	// PostgreSQL container: the container runtime's 64 MiB default is too
	// small for parallel queries. Unset, the operator's
	// --enable-shm-volume decides (default true); false leaves /dev/shm
	// to the runtime.
	// +optional
	EnableShmVolume *bool `json:"enableShmVolume,omitempty"`

	// InitContainers run in each pod before PostgreSQL starts, taken as
	// they are. Their names must differ from each other, from the
	// sidecars' and from "postgres".
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(c, c.name != 'postgres')",message="initContainers must not be named postgres: that is pgloop's PostgreSQL container"
	InitContainers []corev1.Container `json:"initContainers,omitempty"`
	// Sidecars run beside PostgreSQL in each pod. As in the zalando
	// operator, each gets POD_NAME, POD_NAMESPACE, POSTGRES_USER and
	// POSTGRES_PASSWORD (the superuser's) in its environment, the data
	// volume mounted at /home/postgres/pgdata, and the operator's default
	// resources where it sets none.
	//
	// At most 6: the CEL rules of each sidecar's resources compare
	// quantities, and with more the apiserver's cost estimate of them
	// exceeds its budget.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=6
	// +kubebuilder:validation:XValidation:rule="self.all(c, c.name != 'postgres')",message="sidecars must not be named postgres: that is pgloop's PostgreSQL container"
	Sidecars []Sidecar `json:"sidecars,omitempty"`

	// EnableConnectionPooler runs a connection pooler (PgBouncer) in front
	// of the primary: a Deployment and a Service named <cluster>-pooler.
	// Turning it off deletes them.
	// +optional
	EnableConnectionPooler *bool `json:"enableConnectionPooler,omitempty"`
	// EnableReplicaConnectionPooler runs a connection pooler in front of
	// the replicas: a Deployment and a Service named
	// <cluster>-pooler-repl.
	// +optional
	EnableReplicaConnectionPooler *bool `json:"enableReplicaConnectionPooler,omitempty"`
	// ConnectionPooler configures the connection poolers of both roles.
	// It has no effect while neither is enabled.
	// +optional
	ConnectionPooler *ConnectionPooler `json:"connectionPooler,omitempty"`

	// EnableLogicalBackup runs a logical backup of the cluster on
	// logicalBackupSchedule, as zalando's operator does: a CronJob named
	// logical-backup-<cluster> whose pod dumps every database with
	// pg_dumpall (from a replica when there is one) and uploads the
	// compressed dump to the bucket the operator is configured with.
	// Turning it off deletes the CronJob; the dumps uploaded stay.
	// +optional
	EnableLogicalBackup bool `json:"enableLogicalBackup,omitempty"`
	// LogicalBackupSchedule is when the logical backup runs: five cron
	// fields (minute, hour, day of month, month, day of week), each a
	// number or *, optionally followed by /step, as zalando's CRD admits.
	// Empty means the operator's --logical-backup-schedule ("30 00 * * *"
	// unless set).
	// +optional
	// +kubebuilder:validation:MaxLength=100
	// +kubebuilder:validation:Pattern=`^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$`
	LogicalBackupSchedule string `json:"logicalBackupSchedule,omitempty"`
	// LogicalBackupRetention is how long logical backups are kept, as
	// zalando's: after each upload to S3 the backup job deletes the
	// cluster's dumps last modified before the day that long ago, all but
	// the newest of those. One "<number> <unit>" (year, month, fortnight,
	// week, day, hour, minute, second, or their plurals), e.g. "3 months"
	// or "2 weeks": the job computes the day with `date -d "<value> ago"`,
	// which would read a second item forward in time. Empty means the
	// operator's --logical-backup-s3-retention-time (none unless set: every
	// dump is kept). Only the s3 provider deletes.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^\s*[0-9]{1,4}\s*(years?|months?|fortnights?|weeks?|days?|hours?|minutes?|mins?|seconds?|secs?)\s*$`
	LogicalBackupRetention string `json:"logicalBackupRetention,omitempty"`

	// Backup is the cluster's pgBackRest repository: where its WAL is
	// archived continuously. Unset means the operator's default
	// repository (--backup-s3-*), if it has one. pgloop's own field, not
	// zalando's (whose clusters archive with WAL-G through Spilo).
	// +optional
	Backup *Backup `json:"backup,omitempty"`

	// Standby makes the cluster a standby of another primary (zalando's
	// field): removing it promotes the cluster.
	// +optional
	Standby *StandbyDescription `json:"standby,omitempty"`

	// Env are environment variables of the PostgreSQL (Spilo) container,
	// after pgloop's own (zalando's order): Spilo reads its settings
	// there, and a value may refer to an earlier variable as $(NAME).
	// Names pgloop sets are refused (podtemplate.go).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Env []corev1.EnvVar `json:"env,omitempty"`
	// EnvFrom are ConfigMaps and Secrets whose keys become environment
	// variables of the PostgreSQL container. As in any container, a
	// variable of env (pgloop's included) wins over one of envFrom.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	EnvFrom []corev1.EnvFromSource `json:"envFrom,omitempty"`
	// AdditionalVolumes are volumes added to the pods and mounted in the
	// PostgreSQL container, or in the containers targetContainers names.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	AdditionalVolumes []AdditionalVolume `json:"additionalVolumes,omitempty"`
	// TopologySpreadConstraints spread the cluster's pods over nodes,
	// zones or other topology domains. A constraint without a
	// labelSelector counts the cluster's own pods.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
	// PodPriorityClassName is the PriorityClass of the cluster's pods;
	// it must exist. Empty means the cluster's default priority.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PodPriorityClassName string `json:"podPriorityClassName,omitempty"`
	// SchedulerName is the scheduler that places the cluster's pods.
	// Empty means the default scheduler.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SchedulerName string `json:"schedulerName,omitempty"`
	// SpiloRunAsUser is the user the pods' containers run as. Unset
	// means Spilo's postgres user, 101. It must not be 0: pgloop's pods
	// run as non-root.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2147483647
	SpiloRunAsUser *int64 `json:"spiloRunAsUser,omitempty"`
	// SpiloRunAsGroup is the primary group of the pods' containers.
	// Unset means Spilo's group, 103.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	SpiloRunAsGroup *int64 `json:"spiloRunAsGroup,omitempty"`
	// SpiloFSGroup is the group that owns the pods' volumes. Unset means
	// Spilo's group, 103.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	SpiloFSGroup *int64 `json:"spiloFSGroup,omitempty"`
	// LivenessProbe is a liveness probe of the PostgreSQL container.
	// Unset means none (pgloop's default: Patroni restarts PostgreSQL
	// itself).
	// +optional
	LivenessProbe *corev1.Probe `json:"livenessProbe,omitempty"`

	// Clone makes a new cluster a copy of another cluster's data at a
	// point in time, restored from the source's pgBackRest repository, as
	// zalando's spec.clone (its s3_* fields are refused: pgBackRest cannot
	// read WAL-G archives). Read when the first member bootstraps only.
	// +optional
	Clone *CloneSpec `json:"clone,omitempty"`

	// TLS is the server certificate PostgreSQL and the connection pooler
	// serve, from a Secret (zalando's field); unset means Spilo's
	// self-signed one.
	// +optional
	TLS *TLS `json:"tls,omitempty"`

	// UsersWithSecretRotation are users whose password pgloop rotates
	// every --password-rotation-interval with a new role, a member of the
	// user, that their Secret then names (zalando's field).
	// +optional
	// +kubebuilder:validation:MaxItems=100
	UsersWithSecretRotation []string `json:"usersWithSecretRotation,omitempty"`
	// UsersWithInPlaceSecretRotation are users whose password pgloop
	// changes every --password-rotation-interval (zalando's field).
	// +optional
	// +kubebuilder:validation:MaxItems=100
	UsersWithInPlaceSecretRotation []string `json:"usersWithInPlaceSecretRotation,omitempty"`
	// UsersIgnoringSecretRotation are users never rotated on schedule,
	// even with --password-rotation (zalando's field).
	// +optional
	// +kubebuilder:validation:MaxItems=100
	UsersIgnoringSecretRotation []string `json:"usersIgnoringSecretRotation,omitempty"`
}

// ConnectionPooler is the connection pooler of a cluster, as in zalando's
// manifest: PgBouncer pods that authenticate clients through an auth query
// run as the pooler's own role.
//
// +kubebuilder:validation:XValidation:rule="!has(self.user) || !(self.user in ['postgres', 'standby', 'public', 'none', 'current_user', 'current_role', 'session_user'] || self.user.startsWith('pg_'))",message="connectionPooler.user must not be postgres, standby, a name PostgreSQL reserves, or start with pg_: the pooler has a role of its own",fieldPath=".user"
// +kubebuilder:validation:XValidation:rule="!has(self.schema) || !(self.schema in ['public', 'information_schema'] || self.schema.startsWith('pg_'))",message="connectionPooler.schema must not be public, information_schema or start with pg_: it holds only the pooler's lookup function",fieldPath=".schema"
type ConnectionPooler struct {
	// NumberOfInstances is how many PgBouncer pods run per role. Unset
	// means 2.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32
	NumberOfInstances *int32 `json:"numberOfInstances,omitempty"`
	// Mode is PgBouncer's pool_mode: session or transaction. Unset means
	// transaction.
	// +optional
	// +kubebuilder:validation:Enum=session;transaction
	Mode string `json:"mode,omitempty"`
	// Schema holds the pooler's auth lookup function (user_lookup),
	// created in every database. Unset means pooler.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	Schema string `json:"schema,omitempty"`
	// User is the role PgBouncer connects as to look up the clients'
	// passwords; it gets a Secret like the manifest's users. It must not
	// be one of users. Unset means pooler.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_]*$`
	User string `json:"user,omitempty"`
	// DockerImage is the pooler image. Empty means the operator's
	// --connection-pooler-image.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	DockerImage string `json:"dockerImage,omitempty"`
	// MaxDBConnections is how many connections to PostgreSQL the poolers
	// of one role open in all, shared among their pods. Unset means 60.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxDBConnections *int32 `json:"maxDBConnections,omitempty"`
	// Resources are the CPU and memory of each PgBouncer container. Unset
	// values take the pooler's defaults (requests 500m and 100Mi, limits
	// 1 and 100Mi, as zalando).
	// +optional
	Resources *Resources `json:"resources,omitempty"`
}

// MaintenanceWindow is a time range in UTC, every day ("01:00-06:00") or
// on one weekday ("Sat:01:00-06:00", also "Sat:01:00-Sat:06:00"); the
// start must be before the end.
//
// +kubebuilder:validation:Pattern=`^\s*((Mon|Tue|Wed|Thu|Fri|Sat|Sun):)?([01]?[0-9]|2[0-3]):[0-5][0-9]-((Mon|Tue|Wed|Thu|Fri|Sat|Sun):)?([01]?[0-9]|2[0-3]):[0-5][0-9]\s*$`
// +kubebuilder:validation:MaxLength=32
type MaintenanceWindow string

// Defaults of ConnectionPooler, zalando's.
const (
	DefaultPoolerInstances        = 2
	DefaultPoolerMode             = "transaction"
	DefaultPoolerSchema           = "pooler"
	DefaultPoolerUser             = "pooler"
	DefaultPoolerMaxDBConnections = 60
)

// PostgresqlParam is the PostgreSQL server of the cluster.
type PostgresqlParam struct {
	// Version is the PostgreSQL major version, as a string ("17"). It can
	// be raised (a major upgrade) but never lowered: a data directory
	// cannot be downgraded.
	// +required
	// +kubebuilder:validation:Enum="13";"14";"15";"16";"17";"18"
	// +kubebuilder:validation:XValidation:rule="int(self) >= int(oldSelf)",message="postgresql.version may not decrease: a data directory cannot be downgraded"
	Version string `json:"version"`

	// Parameters are postgresql.conf settings, name to value. Patroni
	// applies those that must match across the cluster (max_connections,
	// wal_level, ...) through its DCS, the others per instance. Settings
	// that Patroni or pgloop own (listen_addresses, port, hba_file,
	// synchronous_standby_names, ...) are refused.
	// +optional
	// +kubebuilder:validation:MaxProperties=256
	Parameters map[string]string `json:"parameters,omitempty"`
}

// Volume is the persistent volume of each instance.
//
// +kubebuilder:validation:XValidation:rule="has(self.subPath) == has(oldSelf.subPath) && (!has(self.subPath) || self.subPath == oldSelf.subPath) && (has(self.isSubPathExpr) && self.isSubPathExpr) == (has(oldSelf.isSubPathExpr) && oldSelf.isSubPathExpr)",message="volume.subPath and volume.isSubPathExpr are immutable: the data directory is on that path of each volume"
type Volume struct {
	// Size is the capacity of each instance's volume, a quantity such as
	// "10Gi". It may grow (the volumes are expanded) but never shrink.
	// +required
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity(string(oldSelf))) >= 0",message="volume.size may not shrink: volumes can only be expanded"
	Size resource.Quantity `json:"size"`

	// StorageClass is the StorageClass of the volumes. Empty means the
	// cluster's default class. A change applies to new volumes and to
	// those that never bound (they hold no data, and are made anew with
	// their pods); a volume that holds data keeps its class.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClass string `json:"storageClass,omitempty"`

	// Retention says what happens to the volume claims when the cluster
	// is deleted, and with them to its credentials Secrets, so that data
	// and passwords go together: Retain keeps both (a cluster created
	// again with the same name mounts the data and finds the passwords
	// that match it), Delete deletes both. Empty means the operator's
	// --volume-retention (default Retain).
	// +optional
	// +kubebuilder:validation:Enum=Retain;Delete
	Retention VolumeRetention `json:"retention,omitempty"`

	// Selector selects the PersistentVolumes the claims may bind, by
	// their labels (the claim template's selector).
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// SubPath is the directory of the volume mounted as the data
	// directory's root, instead of the volume's root. Immutable: the data
	// is there.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	SubPath string `json:"subPath,omitempty"`
	// IsSubPathExpr makes subPath an expression: $(NAME) references to
	// the container's environment variables are expanded (subPathExpr).
	// +optional
	IsSubPathExpr *bool `json:"isSubPathExpr,omitempty"`
}

// VolumeRetention is what a deleted cluster leaves of its data.
type VolumeRetention string

// Values of Volume.Retention and of the operator's --volume-retention.
const (
	// RetainVolumes keeps the volume claims and the credentials Secrets.
	RetainVolumes VolumeRetention = "Retain"
	// DeleteVolumes deletes the volume claims and the credentials Secrets.
	DeleteVolumes VolumeRetention = "Delete"
)

// Resources are the compute resources of the PostgreSQL container. They are
// quantities (CPU "500m", memory "1Gi") rather than zalando's plain strings,
// so a malformed value is refused by the apiserver and consumers need not
// parse them; the YAML a zalando user writes is the same.
//
// +kubebuilder:validation:XValidation:rule="!has(self.requests) || !has(self.limits) || !has(self.requests.cpu) || !has(self.limits.cpu) || quantity(string(self.requests.cpu)).compareTo(quantity(string(self.limits.cpu))) <= 0",message="resources.requests.cpu must not exceed resources.limits.cpu",fieldPath=".requests.cpu"
// +kubebuilder:validation:XValidation:rule="!has(self.requests) || !has(self.limits) || !has(self.requests.memory) || !has(self.limits.memory) || quantity(string(self.requests.memory)).compareTo(quantity(string(self.limits.memory))) <= 0",message="resources.requests.memory must not exceed resources.limits.memory",fieldPath=".requests.memory"
type Resources struct {
	// Requests are the resources the scheduler reserves for each pod.
	// +optional
	Requests *ResourceDescription `json:"requests,omitempty"`
	// Limits are the most each pod may use; each must be at least the
	// matching request.
	// +optional
	Limits *ResourceDescription `json:"limits,omitempty"`
}

// Sidecar is a container that runs beside PostgreSQL in each pod, with the
// fields and JSON names of zalando's Sidecar.
type Sidecar struct {
	// Name of the container: a DNS label, not "postgres".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Image of the container.
	// +required
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
	// Resources of the container. Unset values take the operator's
	// defaults, as for PostgreSQL.
	// +optional
	Resources *Resources `json:"resources,omitempty"`
	// Ports the container exposes.
	// +optional
	// +listType=atomic
	Ports []corev1.ContainerPort `json:"ports,omitempty"`
	// Env are environment variables added after the four pgloop sets.
	// +optional
	// +listType=atomic
	Env []corev1.EnvVar `json:"env,omitempty"`
	// Command replaces the image's entrypoint.
	// +optional
	// +listType=atomic
	Command []string `json:"command,omitempty"`
}

// ResourceDescription is an amount of CPU and memory.
type ResourceDescription struct {
	// CPU is an amount of CPU, e.g. "500m" or "2".
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory is an amount of memory, e.g. "512Mi".
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// HugePages2Mi is an amount of 2 MiB huge pages, a multiple of 2Mi.
	// +optional
	HugePages2Mi *resource.Quantity `json:"hugepages-2Mi,omitempty"`
	// HugePages1Gi is an amount of 1 GiB huge pages, a multiple of 1Gi.
	// +optional
	HugePages1Gi *resource.Quantity `json:"hugepages-1Gi,omitempty"`
}

// UserFlag is a role attribute of CREATE ROLE, in upper or lower case as in
// zalando manifests. Each attribute has a NO-variant that negates it; giving
// both is refused.
//
// +kubebuilder:validation:Enum=superuser;SUPERUSER;nosuperuser;NOSUPERUSER;inherit;INHERIT;noinherit;NOINHERIT;login;LOGIN;nologin;NOLOGIN;createrole;CREATEROLE;nocreaterole;NOCREATEROLE;createdb;CREATEDB;nocreatedb;NOCREATEDB;replication;REPLICATION;noreplication;NOREPLICATION;bypassrls;BYPASSRLS;nobypassrls;NOBYPASSRLS
type UserFlag string

// Role attributes, in the upper case that CREATE ROLE uses. Manifests may
// spell them in lower case too; UserFlag.Normalize maps them here.
const (
	FlagSuperuser     UserFlag = "SUPERUSER"
	FlagNoSuperuser   UserFlag = "NOSUPERUSER"
	FlagInherit       UserFlag = "INHERIT"
	FlagNoInherit     UserFlag = "NOINHERIT"
	FlagLogin         UserFlag = "LOGIN"
	FlagNoLogin       UserFlag = "NOLOGIN"
	FlagCreateRole    UserFlag = "CREATEROLE"
	FlagNoCreateRole  UserFlag = "NOCREATEROLE"
	FlagCreateDB      UserFlag = "CREATEDB"
	FlagNoCreateDB    UserFlag = "NOCREATEDB"
	FlagReplication   UserFlag = "REPLICATION"
	FlagNoReplication UserFlag = "NOREPLICATION"
	FlagBypassRLS     UserFlag = "BYPASSRLS"
	FlagNoBypassRLS   UserFlag = "NOBYPASSRLS"
)

// UserFlags are the role attributes of one user. Empty means a plain role
// that can log in. Go clients must send an empty, non-nil list for a user
// without flags: a nil list encodes as null, and the apiserver drops null
// map values, which would silently remove the user.
//
// +listType=set
// +kubebuilder:validation:MaxItems=14
type UserFlags []UserFlag

// Patroni holds the Patroni settings pgloop exposes; most go to Patroni's
// dynamic (DCS) configuration, shared by all members (pg_hba and initdb to
// Spilo's configuration of each pod). Patroni requires
// loop_wait + 2 * retry_timeout <= ttl, so that a leader whose DCS calls are
// retrying still renews its lock before it expires.
//
// +kubebuilder:validation:XValidation:rule="(has(self.initdb) ? self.initdb : {}) == (has(oldSelf.initdb) ? oldSelf.initdb : {})",message="patroni.initdb is immutable: initdb runs once, when a cluster is created"
// +kubebuilder:validation:XValidation:rule="(has(self.loop_wait) ? self.loop_wait : 10) + 2 * (has(self.retry_timeout) ? self.retry_timeout : 10) <= (has(self.ttl) ? self.ttl : 30)",message="patroni: loop_wait + 2 * retry_timeout must not exceed ttl"
type Patroni struct {
	// TTL is the leader lock's time to live, in seconds: how long a failed
	// primary keeps the lock before a replica may take over.
	// +optional
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=20
	// +kubebuilder:validation:Maximum=3600
	TTL int32 `json:"ttl,omitempty"`
	// LoopWait is the seconds Patroni sleeps between runs of its HA loop.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=600
	LoopWait int32 `json:"loop_wait,omitempty"`
	// RetryTimeout is the seconds Patroni retries DCS and PostgreSQL
	// operations before it demotes the primary.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=3
	// +kubebuilder:validation:Maximum=600
	RetryTimeout int32 `json:"retry_timeout,omitempty"`
	// MaximumLagOnFailover is the most WAL, in bytes, a replica may lag
	// behind to be promoted on failover.
	// +optional
	// +kubebuilder:default=33554432
	// +kubebuilder:validation:Minimum=0
	MaximumLagOnFailover int64 `json:"maximum_lag_on_failover,omitempty"`
	// SynchronousMode makes Patroni keep one replica synchronous, so a
	// failover loses no committed transaction.
	// +optional
	SynchronousMode bool `json:"synchronous_mode,omitempty"`
	// PgHba replaces the pg_hba.conf lines, one entry each, e.g.
	// "hostssl all all 0.0.0.0/0 md5". Empty keeps Spilo's defaults.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=512
	PgHba []string `json:"pg_hba,omitempty"`
	// InitDB are the options of initdb, long option name to value, e.g.
	// encoding: UTF8, locale: en_US.UTF-8, data-checksums: "true" (a flag
	// takes "true", or "false" to drop one of Spilo's defaults). They go
	// to Spilo's bootstrap.initdb over Spilo's own (encoding UTF8, locale
	// en_US.UTF-8, data-checksums), and only a new cluster's initdb runs
	// them: nothing changes a data directory's, so the field is immutable.
	// Options that Patroni or Spilo own (pgdata, username, pwfile, waldir,
	// ...) are refused.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	InitDB map[string]string `json:"initdb,omitempty"`
	// FailsafeMode lets a primary that can reach every other member keep
	// its role while the DCS (the Kubernetes API) is down, instead of
	// demoting itself. Unset leaves Patroni's default (false).
	// +optional
	FailsafeMode *bool `json:"failsafe_mode,omitempty"`
	// SynchronousModeStrict, with SynchronousMode, stops writes on the
	// primary while no synchronous replica is available, rather than
	// letting it run alone.
	// +optional
	SynchronousModeStrict bool `json:"synchronous_mode_strict,omitempty"`
	// SynchronousNodeCount is how many replicas SynchronousMode keeps
	// synchronous. Unset means Patroni's default, 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	SynchronousNodeCount int32 `json:"synchronous_node_count,omitempty"`
	// Slots are permanent replication slots, name to options: type
	// (physical or logical) and, for a logical slot, database and plugin.
	// Patroni keeps them on the primary and re-creates them on a new one
	// after a failover. pgloop owns Patroni's slots: one not listed here is
	// removed from the DCS, and Patroni drops it.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Slots map[string]map[string]string `json:"slots,omitempty"`
}
