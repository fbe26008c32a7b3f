package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pgloop/pgloop/pkg/operator"
)

// envPrefix prefixes the environment variable of every operator flag.
const envPrefix = "PGLOOP_"

// docsDefault is the flag annotation that the user guide's configuration
// table shows instead of the flag's literal default, for defaults that
// depend on the environment.
const docsDefault = "pgloop/docs-default"

func newOperatorCmd() *cobra.Command {
	return newOperatorCmdWith(os.LookupEnv, operator.Run)
}

// newOperatorCmdWith is newOperatorCmd with the environment and the
// operator's Run replaced, for tests.
func newOperatorCmdWith(lookupEnv func(string) (string, bool), run func(context.Context, operator.Config) error) *cobra.Command {
	cfg := operator.DefaultConfig()
	if ns, ok := lookupEnv("POD_NAMESPACE"); ok && ns != "" {
		cfg.LeaderElectionNamespace = ns
	}
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Run the operator: manage the Postgresql clusters of a Kubernetes cluster",
		Long: `Run the pgloop operator. It watches Postgresql resources (pgloop.dev/v1) and the objects
it creates for them, and drives each cluster's state machine from one event loop.

Every flag can also be set by an environment variable: PGLOOP_ and the flag's name in upper
case with dashes as underscores (PGLOOP_WORKERS=32, PGLOOP_LEADER_ELECT=false,
PGLOOP_NAMESPACE=a,b). A flag given on the command line wins over its variable.
--kubeconfig also falls back to $KUBECONFIG; without either, the operator uses the in-cluster
configuration of its pod's ServiceAccount.

/healthz, /readyz and /metrics (Prometheus) are served on --health-addr. /readyz is OK while
the loop runs, and also while this replica stands by for the leader.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd.Flags(), lookupEnv); err != nil {
				return err
			}
			if !cmd.Flags().Changed("kubeconfig") {
				if v, ok := lookupEnv("KUBECONFIG"); ok {
					cfg.Kubeconfig = v
				}
			}
			cfg.Namespaces = cleanList(cfg.Namespaces)
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("invalid configuration:\n%w", err)
			}
			operator.RedirectKlog(&cfg)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return run(ctx, cfg)
		},
	}

	f := cmd.Flags()
	f.SortFlags = false
	f.StringVar(&cfg.Kubeconfig, "kubeconfig", "",
		"path of the kubeconfig file; also $KUBECONFIG; empty means in-cluster configuration")
	annotate(f, "kubeconfig", "`$KUBECONFIG`, else in-cluster")
	f.StringSliceVar(&cfg.Namespaces, "namespace", nil,
		"namespace to manage clusters in; repeat it or give a comma-separated list; empty means all namespaces")
	annotate(f, "namespace", "all namespaces")
	f.BoolVar(&cfg.LeaderElect, "leader-elect", cfg.LeaderElect,
		"elect a leader among the operator's replicas on a Lease; only the leader manages clusters")
	f.StringVar(&cfg.LeaderElectionNamespace, "leader-election-namespace", cfg.LeaderElectionNamespace,
		"namespace of the leader election Lease; $POD_NAMESPACE when set")
	annotate(f, "leader-election-namespace", "`$POD_NAMESPACE`, else `default`")
	f.StringVar(&cfg.LeaderElectionID, "leader-election-id", cfg.LeaderElectionID,
		"name of the leader election Lease")
	f.DurationVar(&cfg.LeaseDuration, "leader-elect-lease-duration", cfg.LeaseDuration,
		"how long standbys wait after the leader's last renewal before taking over")
	f.DurationVar(&cfg.RenewDeadline, "leader-elect-renew-deadline", cfg.RenewDeadline,
		"how long the leader tries to renew its Lease before it gives up and exits")
	f.DurationVar(&cfg.RetryPeriod, "leader-elect-retry-period", cfg.RetryPeriod,
		"interval between attempts to acquire or renew the Lease")
	f.StringVar(&cfg.HealthAddr, "health-addr", cfg.HealthAddr,
		"address of /healthz, /readyz and /metrics (host:port; port 0 picks a free port, logged at start)")
	f.BoolVar(&cfg.Profiling, "profiling", cfg.Profiling,
		"serve Go's profiles (CPU, heap, goroutines; net/http/pprof) under /debug/pprof/ on --health-addr too; off by default, as they cost CPU while taken and show the operator's internals to whoever reaches the address")
	f.Var(&cfg.MemoryLimit, "memory-limit",
		"memory the operator may use, in bytes or as a quantity (512Mi, 2Gi; 0 or at least 64Mi): Go's soft memory limit is set to 95% of it less the resident pages of the binary (RssFile, read again every 15s), so the collector runs as the heap nears it rather than only when the heap has doubled; the Deployment sets it from its container's limits.memory; 0: none; GOMEMLIMIT in the environment wins over it")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers,
		"effect executor size: plans of effects running at once across all clusters")
	f.IntVar(&cfg.UrgentWorkers, "urgent-workers", cfg.UrgentWorkers,
		"of --workers, how many only urgent plans (a new cluster, a spec change, a delete) may take, so they never wait behind resyncs, retries and rollouts; at most a quarter of --workers; -1: none")
	f.IntVar(&cfg.BackgroundWhileUrgent, "background-requests-while-urgent", cfg.BackgroundWhileUrgent,
		"how many API requests of background work (retries, resyncs, rollouts, Events) may be in flight while a user's action's requests are, so those never queue in the API server behind the fleet's; the others wait in the operator, each at most 2s (then one goes every 250ms while users' requests go on); -1: no limit")
	f.IntVar(&cfg.BackgroundRequests, "background-requests", cfg.BackgroundRequests,
		"most API requests of background work (retries, resyncs, rollouts, Events) in flight at any time, so that a user's action finds the API server with room; 0: as many as the workers send")
	f.BoolVar(&cfg.PaceBackground, "pace-background", cfg.PaceBackground,
		"pace API requests of background work by the API server's latency: at most a window of them in flight, halved when the median of 8 writes is more than twice the least latency seen lately, grown by one per window answered in time, never below one (pgloop_api_background_window)")
	f.BoolVar(&cfg.FairWrites, "fair-writes", cfg.FairWrites,
		"bound the writes of each kind (create services, update postgresqls/status) in flight: while writes of the kind wait, by what the API server answers a second (the smallest window that gets about the most done), else by its latency as --pace-background does; those waiting go by namespace in turns, a user's action's first, so one namespace's burst does not fill the API server's queue ahead of another's writes (pgloop_api_write_window); a write holding its place 1s goes on without it, and a step's deadline does not run while its write waits")
	f.IntVar(&cfg.EventWorkers, "event-workers", cfg.EventWorkers,
		"Kubernetes Events written at once (each a background request, one object's at a time); during a burst the Events of clusters' transitions are kept and others dropped first (pgloop_events_dropped_total)")
	f.DurationVar(&cfg.StepTimeout, "step-timeout", cfg.StepTimeout,
		"deadline of one effect step (API calls); a hung call ends with it")
	f.DurationVar(&cfg.SlowAfter, "slow-after", cfg.SlowAfter,
		"how long a plan of effects may hold a worker: past it the plan goes on off the workers, and the cluster's plans with the step that was this slow run in the hung lane (--hung-workers) until that step answers in time again, so clusters whose calls hang never take the workers healthy ones need; 0: off (a hung call holds its worker until --step-timeout)")
	f.IntVar(&cfg.HungWorkers, "hung-workers", cfg.HungWorkers,
		"plans of clusters whose calls hang (see --slow-after) running at once, beside --workers; 0: as many as --workers")
	f.DurationVar(&cfg.CreateTimeout, "create-timeout", cfg.CreateTimeout,
		"how long a cluster may stay Creating before it is Degraded")
	f.DurationVar(&cfg.UpdateTimeout, "update-timeout", cfg.UpdateTimeout,
		"how long a cluster may stay Updating before it is Degraded")
	f.DurationVar(&cfg.LossGrace, "loss-grace", cfg.LossGrace,
		"how long a Running cluster may miss a Ready pod or its primary (a switchover, a restarting replica) before it is Degraded; 0 means at once")
	f.DurationVar(&cfg.StatusDelay, "status-delay", cfg.StatusDelay,
		"how long a status change that is progress only (ready count, cause, conditions) may wait, so the changes of a few pod events go in one write; state changes and timers are written at once; 0 writes every change")
	f.DurationVar(&cfg.ResyncPeriod, "resync-period", cfg.ResyncPeriod,
		"how often a Running cluster's objects are checked against its spec (nothing is written when they match)")
	f.DurationVar(&cfg.RetryBase, "retry-base", cfg.RetryBase,
		"first delay before failed effects are retried; it doubles on each retry")
	f.DurationVar(&cfg.RetryMax, "retry-max", cfg.RetryMax,
		"longest delay between retries")
	f.StringVar(&cfg.SpiloImage, "spilo-image", cfg.SpiloImage,
		"Spilo image of clusters that set no spec.dockerImage")
	f.StringVar(&cfg.PoolerImage, "connection-pooler-image", cfg.PoolerImage,
		"connection pooler (PgBouncer) image of clusters that set no spec.connectionPooler.dockerImage")
	f.StringVar(&cfg.LogicalBackup.Image, "logical-backup-image", cfg.LogicalBackup.Image,
		"image of the logical backup jobs (spec.enableLogicalBackup): it dumps the cluster with pg_dumpall and uploads the compressed dump")
	f.StringVar(&cfg.LogicalBackup.Schedule, "logical-backup-schedule", cfg.LogicalBackup.Schedule,
		"cron schedule of the logical backups of clusters that set no spec.logicalBackupSchedule")
	f.StringVar(&cfg.LogicalBackup.Provider, "logical-backup-provider", cfg.LogicalBackup.Provider,
		"where the logical backups are uploaded: s3, gcs or az")
	f.StringVar(&cfg.LogicalBackup.S3Bucket, "logical-backup-s3-bucket", cfg.LogicalBackup.S3Bucket,
		"bucket of the logical backups (LOGICAL_BACKUP_S3_BUCKET); dumps go to <bucket>/<prefix>/<cluster>/<cluster's UID>/logical_backups/")
	f.StringVar(&cfg.LogicalBackup.S3BucketPrefix, "logical-backup-s3-bucket-prefix", cfg.LogicalBackup.S3BucketPrefix,
		"first part of the logical backups' keys in the bucket")
	f.StringVar(&cfg.LogicalBackup.S3Region, "logical-backup-s3-region", cfg.LogicalBackup.S3Region,
		"region of the S3 bucket; empty means the aws tool's default")
	f.StringVar(&cfg.LogicalBackup.S3Endpoint, "logical-backup-s3-endpoint", cfg.LogicalBackup.S3Endpoint,
		"endpoint of an S3 service other than AWS (https://minio.example:9000); empty means AWS")
	f.StringVar(&cfg.LogicalBackup.S3SSE, "logical-backup-s3-sse", cfg.LogicalBackup.S3SSE,
		"server side encryption of the uploads (aws s3 cp --sse); empty asks for none")
	f.StringVar(&cfg.LogicalBackup.S3RetentionTime, "logical-backup-s3-retention-time", cfg.LogicalBackup.S3RetentionTime,
		"how long the logical backups of clusters that set no spec.logicalBackupRetention are kept in S3, e.g. \"3 months\": after each upload the job deletes the older dumps but the newest of them; empty keeps every dump")
	f.StringVar(&cfg.LogicalBackup.EnvSecret, "logical-backup-env-secret", cfg.LogicalBackup.EnvSecret,
		"Secret in each cluster's namespace whose keys the logical backup container gets as environment variables: the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, LOGICAL_BACKUP_AZURE_STORAGE_*); empty means none")
	f.BoolVar(&cfg.EnableMasterLoadBalancer, "enable-master-load-balancer", cfg.EnableMasterLoadBalancer,
		"make the master Service of clusters that set no spec.enableMasterLoadBalancer a LoadBalancer (open to spec.allowedSourceRanges, default 127.0.0.1/32)")
	f.BoolVar(&cfg.EnableReplicaLoadBalancer, "enable-replica-load-balancer", cfg.EnableReplicaLoadBalancer,
		"make the replica Service of clusters that set no spec.enableReplicaLoadBalancer a LoadBalancer (open to spec.allowedSourceRanges, default 127.0.0.1/32)")
	f.BoolVar(&cfg.EnableShmVolume, "enable-shm-volume", cfg.EnableShmVolume,
		"mount a memory-backed /dev/shm in the PostgreSQL container of clusters that set no spec.enableShmVolume")
	f.StringVar(&cfg.Backup.Endpoint, "backup-s3-endpoint", cfg.Backup.Endpoint,
		"S3 endpoint (host or host:port, always https) of the default pgBackRest repository, where clusters without spec.backup archive their WAL to <bucket>/pgloop/<namespace>/<cluster>/<uid>")
	f.StringVar(&cfg.Backup.Bucket, "backup-s3-bucket", cfg.Backup.Bucket,
		"bucket of the default pgBackRest repository; empty means no default: only clusters with spec.backup.s3 archive")
	f.StringVar(&cfg.Backup.Region, "backup-s3-region", cfg.Backup.Region,
		"region of the default repository's bucket; empty means us-east-1")
	f.StringVar(&cfg.Backup.SecretName, "backup-s3-secret", cfg.Backup.SecretName,
		"Secret in each cluster's namespace with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for the default repository (and its CA, see --backup-s3-ca-key)")
	f.StringVar(&cfg.Backup.CAKey, "backup-s3-ca-key", cfg.Backup.CAKey,
		"key of that Secret holding the PEM certificate authority of the endpoint; empty means the image's system authorities")
	f.DurationVar(&cfg.ArchiveTimeout, "archive-timeout", cfg.ArchiveTimeout,
		"archive_timeout of the clusters that archive and set none: a primary pushes its WAL at least this often, which bounds what a lost volume loses")
	f.StringSliceVar(&cfg.ArchivingImages, "archiving-images", cfg.ArchivingImages,
		"images known to carry pgBackRest (and keep PGBACKREST_* for Patroni): only clusters running one archive to their repository; others show ContinuousArchiving False")
	f.StringVar(&cfg.BackupSchedule, "backup-schedule", cfg.BackupSchedule,
		"when clusters that set no spec.backup.schedule take a full base backup: five cron fields or @daily..., in UTC; none for never (a new repository still gets its first)")
	f.DurationVar(&cfg.BackupScheduleSpread, "backup-schedule-spread", cfg.BackupScheduleSpread,
		"spread the backups of --backup-schedule over this long, each cluster at its own offset (from its UID), so that a fleet does not start them all at once; 0 for none (a spec.backup.schedule is kept exactly)")
	f.Int32Var(&cfg.BackupRetentionFull, "backup-retention-full", cfg.BackupRetentionFull,
		"how many full backups the repository of a cluster that sets no spec.backup.retention keeps; older ones, and the WAL only they need, are deleted after each backup")
	f.BoolVar(&cfg.BackupVerify, "backup-verify", cfg.BackupVerify,
		"after each base backup that succeeded, verify the whole repository with pgBackRest (every file's checksum, and that the WAL has no gap); status.backup.lastVerification shows the result")
	f.DurationVar(&cfg.BackupTimeout, "backup-timeout", cfg.BackupTimeout,
		"how long a base backup may run before pgloop gives up on it (LastBackupSucceeded False)")
	f.BoolVar(&cfg.PasswordRotation, "password-rotation", cfg.PasswordRotation,
		"rotate the passwords of every user of spec.users and of the prepared databases' default users every --password-rotation-interval, except database owners and usersIgnoringSecretRotation (zalando's enable_password_rotation); a spec's usersWithSecretRotation and usersWithInPlaceSecretRotation are rotated either way")
	f.DurationVar(&cfg.PasswordRotationInterval, "password-rotation-interval", cfg.PasswordRotationInterval,
		"how often passwords are rotated (zalando's password_rotation_interval, 90 days)")
	f.DurationVar(&cfg.PasswordRotationUserRetention, "password-rotation-user-retention", cfg.PasswordRotationUserRetention,
		"how long a role a rotation created is kept before a later rotation drops it, at least twice the interval (zalando's password_rotation_user_retention, 180 days)")
	f.DurationVar(&cfg.ArchiveCheckPeriod, "archive-check-period", cfg.ArchiveCheckPeriod,
		"how often each archiving cluster's primary is asked how its WAL archiving goes (a failure shows in status within this)")
	f.DurationVar(&cfg.ArchiveStatusPeriod, "archive-status-period", cfg.ArchiveStatusPeriod,
		"how often status.backup.archiving is rewritten when only its last segment moved on (a failure or recovery is written at once)")
	f.DurationVar(&cfg.SQLConnectTimeout, "sql-connect-timeout", cfg.SQLConnectTimeout,
		"deadline of a connection to PostgreSQL (dial, authentication)")
	f.DurationVar(&cfg.SQLStatementTimeout, "sql-statement-timeout", cfg.SQLStatementTimeout,
		"deadline of one SQL statement (also the session's statement_timeout)")
	f.DurationVar(&cfg.PatroniTimeout, "patroni-timeout", cfg.PatroniTimeout,
		"deadline of one call of Patroni's REST API (GET and PATCH /config)")
	f.DurationVar(&cfg.RestartTimeout, "restart-timeout", cfg.RestartTimeout,
		"deadline of a member's restart through Patroni (POST /restart)")
	f.DurationVar(&cfg.SwitchoverTimeout, "switchover-timeout", cfg.SwitchoverTimeout,
		"deadline of a switchover through Patroni (POST /switchover)")
	f.DurationVar(&cfg.InDatabaseTimeout, "in-database-timeout", cfg.InDatabaseTimeout,
		"deadline of one step of work inside a cluster (the roles and databases sync, or the configuration's apply and check), every call included")
	f.BoolVar(&cfg.Switchover, "switchover", cfg.Switchover,
		"in a rollout, hand the primary's role to an up-to-date replica (Patroni's switchover) before replacing the primary's pod")
	f.IntVar(&cfg.MaxRollingClusters, "max-rolling-clusters", cfg.MaxRollingClusters,
		"rollout budget: clusters that may replace pods that run PostgreSQL at once, each one pod at a time (an upgrade of pgloop that changes every pod template rolls this many clusters at a time); the others wait with the reason RolloutQueued; pods that run nothing never wait; 0 means no bound")
	f.StringVar(&cfg.VolumeRetention, "volume-retention", cfg.VolumeRetention,
		"what a deleted cluster leaves when its spec.volume.retention is empty: Retain keeps its volume claims and credentials Secrets (a cluster created again with the same name finds its data and the passwords that open it), Delete deletes both")
	f.Float32Var(&cfg.KubeQPS, "kube-qps", cfg.KubeQPS,
		"client-side limit of queries per second to the Kubernetes API, shared by all clusters; 0: none when the API server has Priority and Fairness (it protects itself; at most --workers steps call it at once), 50 otherwise; -1: none")
	f.IntVar(&cfg.KubeBurst, "kube-burst", cfg.KubeBurst,
		"burst of queries to the Kubernetes API above kube-qps (when a limit applies)")
	f.DurationVar(&cfg.CacheSyncTimeout, "cache-sync-timeout", cfg.CacheSyncTimeout,
		"how long to wait for the API's first answers and the informers' initial lists before failing")
	f.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat,
		"log format: text or json")
	f.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel,
		"log level: error, warn, info, debug or trace")
	return cmd
}

func annotate(f *pflag.FlagSet, name, docs string) {
	if err := f.SetAnnotation(name, docsDefault, []string{docs}); err != nil {
		panic(err) // a flag name typo: caught by every test
	}
}

// envName is the environment variable of a flag: PGLOOP_LEADER_ELECT for
// --leader-elect.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnv sets every flag not given on the command line from its
// environment variable, when that is set.
func applyEnv(f *pflag.FlagSet, lookupEnv func(string) (string, bool)) error {
	var err error
	f.VisitAll(func(fl *pflag.Flag) {
		if err != nil || fl.Changed || fl.Name == "help" {
			return
		}
		v, ok := lookupEnv(envName(fl.Name))
		if !ok {
			return
		}
		if serr := f.Set(fl.Name, v); serr != nil {
			err = fmt.Errorf("invalid %s=%q: %w", envName(fl.Name), v, serr)
		}
	})
	return err
}

// cleanList trims the items of a list flag and drops empty ones, so that
// PGLOOP_NAMESPACE="" or "a, b" mean what they look like.
func cleanList(in []string) []string {
	var out []string
	for _, s := range in {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
