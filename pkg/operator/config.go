package operator

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/archiving"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/events"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/traffic"
)

// Log formats.
const (
	LogFormatText = "text"
	LogFormatJSON = "json"
)

// Defaults of Config, as the operator command documents them.
const (
	DefaultLeaderElectionID        = "pgloop-operator"
	DefaultLeaderElectionNamespace = "default"
	// DefaultLeaseDuration, DefaultRenewDeadline and DefaultRetryPeriod
	// are kube-controller-manager's: a new leader takes over at most
	// 15s after the old one died, and at once after it stopped cleanly.
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	DefaultHealthAddr    = ":8080"
	// DefaultKubeQPS and DefaultKubeBurst are the client's rate limit,
	// shared by every cluster, against an API server without Priority and
	// Fairness (ratelimit.go). client-go's own default (5/10) would make
	// a few hundred clusters' resyncs queue behind each other.
	DefaultKubeQPS   = 50
	DefaultKubeBurst = 100
	// DefaultCacheSyncTimeout bounds the wait for the informers' initial
	// lists; a healthy API server lists thousands of objects in seconds.
	DefaultCacheSyncTimeout = 2 * time.Minute
	// Deadlines of the calls to PostgreSQL and Patroni (docs/user-guide.md):
	// a primary that does not answer costs its cluster a retry, and
	// holds an executor worker at most InDatabaseTimeout.
	DefaultSQLConnectTimeout   = 5 * time.Second
	DefaultSQLStatementTimeout = 10 * time.Second
	DefaultPatroniTimeout      = 5 * time.Second
	DefaultRestartTimeout      = 60 * time.Second
	DefaultSwitchoverTimeout   = 30 * time.Second
	DefaultInDatabaseTimeout   = 30 * time.Second
	// DefaultMaxRollingClusters bounds the clusters that replace pods
	// that run PostgreSQL at once: an upgrade of pgloop that changes
	// every pod template rolls ten clusters at a time.
	DefaultMaxRollingClusters = 10
)

// Config is everything Run needs. Start from DefaultConfig: Validate
// rejects zero durations and counts rather than guessing.
type Config struct {
	// Kubeconfig is the path of a kubeconfig file (or a list of them,
	// separated like $PATH, as $KUBECONFIG may be). Empty means the
	// in-cluster configuration of the pod's ServiceAccount.
	Kubeconfig string
	// Namespaces to manage clusters in; empty means all namespaces.
	Namespaces []string

	// LeaderElect makes replicas elect one leader on a Lease; only the
	// leader runs the clusters. Without it, run exactly one replica.
	LeaderElect bool
	// LeaderElectionNamespace and LeaderElectionID name the Lease.
	LeaderElectionNamespace string
	LeaderElectionID        string
	// LeaseDuration is how long standbys wait after the last renewal
	// before taking over; RenewDeadline how long the leader keeps trying
	// to renew before it gives up (and exits); RetryPeriod the interval
	// between attempts.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	// HealthAddr is where /healthz, /readyz and /metrics are served
	// ("host:port"; port 0 picks a free one, see OnListen).
	HealthAddr string
	// Profiling serves Go's profiles (net/http/pprof) under /debug/pprof/
	// on HealthAddr too: CPU, heap, goroutines of a running operator.
	Profiling bool
	// MemoryLimit is the memory the operator may use, in bytes, as its
	// container's limit says: Go's soft memory limit is set to
	// MemoryLimitPercent of it less the resident file-backed memory,
	// unless GOMEMLIMIT is set (memory.go).
	// 0: none.
	MemoryLimit Bytes

	// Workers bounds the plans of effects running at once; UrgentWorkers
	// of them take only urgent plans (a user's action), so it never waits
	// behind background work (eventloop.Options.UrgentWorkers: at most a
	// quarter of Workers; negative: none).
	Workers, UrgentWorkers int
	// SlowAfter is how long a plan may hold a worker before it is moved
	// to the hung lane, and HungWorkers how many plans of that lane run
	// at once (eventloop.Options.SlowAfter and HungWorkers; 0: as many as
	// Workers). A SlowAfter of 0 turns the hung lane off.
	SlowAfter   time.Duration
	HungWorkers int
	// BackgroundWhileUrgent is how many API requests of background plans
	// may be in flight while requests of urgent plans are (traffic.Gate;
	// 0, the default: none, each held at most 2 s); negative: no limit,
	// background requests are never held.
	BackgroundWhileUrgent int
	// BackgroundRequests bounds the API requests of background plans in
	// flight at any time (0: as many as the workers send).
	BackgroundRequests int
	// PaceBackground bounds the API requests of background plans in
	// flight by the API server's latency (traffic.Gate.Pacing): a window
	// that halves when a write is answered slowly, and grows back by one
	// per window answered at the baseline latency.
	PaceBackground bool
	// FairWrites bounds the writes of each kind in flight by their
	// latency, and lets those waiting go by namespace in turns
	// (traffic.WriteWindows).
	FairWrites bool
	// EventWorkers is how many Kubernetes Events are written at once
	// (pkg/events: one object's at a time each, as background requests).
	EventWorkers int
	// StepTimeout bounds one effect step (one API call or a short series).
	StepTimeout time.Duration
	// Config is the state machine's part: the timeouts of Creating and
	// Updating, the retries' backoff, the resync period, the loss grace
	// and the status delay (fsm.Config, docs/fsm.md).
	fsm.Config
	// SpiloImage is the image of clusters that set no spec.dockerImage.
	SpiloImage string
	// PoolerImage is the connection pooler image of clusters that set no
	// spec.connectionPooler.dockerImage.
	PoolerImage string
	// LogicalBackup are the settings of the logical backup CronJobs of
	// the clusters that set spec.enableLogicalBackup.
	LogicalBackup cluster.LogicalBackupOptions
	// EnableMasterLoadBalancer and EnableReplicaLoadBalancer make the
	// master and replica Services of clusters that set no
	// enableMasterLoadBalancer or enableReplicaLoadBalancer load balancers.
	EnableMasterLoadBalancer, EnableReplicaLoadBalancer bool
	// EnableShmVolume gives the pods of clusters that set no
	// enableShmVolume a memory-backed /dev/shm.
	EnableShmVolume bool
	// Backup is the default pgBackRest repository, where every cluster
	// without spec.backup archives its WAL; no Bucket means none.
	Backup v1.BackupS3
	// ArchiveTimeout is archive_timeout of the clusters that archive and
	// set none: the bound of what a lost primary loses when it writes
	// little.
	ArchiveTimeout time.Duration
	// ArchiveCheckPeriod is how often each archiving cluster's primary is
	// asked how its archiving goes; ArchiveStatusPeriod how often a report
	// that only moved on is written to status (pkg/archiving).
	ArchiveCheckPeriod, ArchiveStatusPeriod time.Duration
	// ArchivingImages are the images known to carry pgBackRest; only
	// clusters running one of them archive.
	ArchivingImages []string
	// BackupSchedule is when clusters that set no spec.backup.schedule
	// take full backups (cron, UTC; "none" for never);
	// BackupRetentionFull how many full backups clusters that set no
	// spec.backup.retention keep.
	BackupSchedule      string
	BackupRetentionFull int32
	// BackupScheduleSpread spreads the backups of BackupSchedule over
	// this long, each cluster at its own offset.
	BackupScheduleSpread time.Duration

	// SQLConnectTimeout bounds a connection to PostgreSQL (dial, TLS,
	// authentication); SQLStatementTimeout each statement (and is sent as
	// the session's statement_timeout).
	SQLConnectTimeout, SQLStatementTimeout time.Duration
	// PatroniTimeout bounds each call of Patroni's REST API but restarts
	// and switchovers.
	PatroniTimeout time.Duration
	// RestartTimeout bounds a member's restart through Patroni;
	// SwitchoverTimeout a switchover.
	RestartTimeout, SwitchoverTimeout time.Duration
	// InDatabaseTimeout bounds one step of in-database work (the roles
	// sync, or the configuration's apply and check), all its calls
	// included: no step holds an executor worker longer.
	InDatabaseTimeout time.Duration
	// Switchover makes a rollout hand the primary's role to an
	// up-to-date replica before it replaces the primary's pod.
	Switchover bool
	// MaxRollingClusters is the fleet's rollout budget: how many
	// clusters may replace pods that run PostgreSQL at once, each one pod
	// at a time; 0 means no bound. Pods that run nothing are replaced
	// whatever the budget.
	MaxRollingClusters int
	// VolumeRetention is what a deleted cluster whose spec.volume.retention
	// is empty leaves: its volume claims and credentials Secrets kept
	// (Retain) or deleted (Delete).
	VolumeRetention string

	// KubeQPS and KubeBurst rate-limit the Kubernetes client: KubeQPSAuto
	// decides by asking the API server, KubeQPSOff turns the limit off
	// (ratelimit.go).
	KubeQPS   float32
	KubeBurst int
	// CacheSyncTimeout bounds the check that the API answers and the
	// wait for the informers' initial lists.
	CacheSyncTimeout time.Duration

	// LogFormat is LogFormatText or LogFormatJSON; LogLevel a logrus level
	// (panic, fatal, error, warn, info, debug, trace).
	LogFormat, LogLevel string
	// LogOutput receives the logs; nil means os.Stderr.
	LogOutput io.Writer

	// OnListen, when set, is called with the address the health server
	// listens on, once it does (tests listen on port 0).
	OnListen func(addr string)
}

// DefaultConfig returns the documented defaults: all namespaces, in-cluster
// configuration, leader election on.
func DefaultConfig() Config {
	f := fsm.DefaultConfig()
	return Config{
		LeaderElect:             true,
		LeaderElectionNamespace: DefaultLeaderElectionNamespace,
		LeaderElectionID:        DefaultLeaderElectionID,
		LeaseDuration:           DefaultLeaseDuration,
		RenewDeadline:           DefaultRenewDeadline,
		RetryPeriod:             DefaultRetryPeriod,
		HealthAddr:              DefaultHealthAddr,
		Workers:                 eventloop.DefaultWorkers,
		UrgentWorkers:           eventloop.DefaultUrgentWorkers,
		EventWorkers:            events.DefaultWorkers,
		SlowAfter:               eventloop.DefaultSlowAfter,
		BackgroundWhileUrgent:   traffic.DefaultBackgroundWhileUrgent,
		PaceBackground:          true,
		FairWrites:              true,
		StepTimeout:             eventloop.DefaultStepTimeout,
		Config:                  f,
		SpiloImage:              cluster.DefaultImage,
		PoolerImage:             cluster.DefaultPoolerImage,
		LogicalBackup: cluster.LogicalBackupOptions{
			Image:          cluster.DefaultLogicalBackupImage,
			Schedule:       cluster.DefaultLogicalBackupSchedule,
			Provider:       cluster.DefaultLogicalBackupProvider,
			S3BucketPrefix: cluster.DefaultLogicalBackupS3BucketPrefix,
			S3SSE:          cluster.DefaultLogicalBackupS3SSE,
		},
		EnableShmVolume:      true,
		ArchiveTimeout:       cluster.DefaultArchiveTimeout,
		ArchiveCheckPeriod:   archiving.DefaultPeriod,
		ArchivingImages:      []string{cluster.InstanceRepository},
		ArchiveStatusPeriod:  archiving.DefaultStatusPeriod,
		BackupSchedule:       cluster.DefaultBackupSchedule,
		BackupRetentionFull:  cluster.DefaultBackupRetentionFull,
		BackupScheduleSpread: cluster.DefaultBackupScheduleSpread,
		SQLConnectTimeout:    DefaultSQLConnectTimeout,
		SQLStatementTimeout:  DefaultSQLStatementTimeout,
		PatroniTimeout:       DefaultPatroniTimeout,
		RestartTimeout:       DefaultRestartTimeout,
		SwitchoverTimeout:    DefaultSwitchoverTimeout,
		InDatabaseTimeout:    DefaultInDatabaseTimeout,
		Switchover:           true,
		MaxRollingClusters:   DefaultMaxRollingClusters,
		VolumeRetention:      string(v1.RetainVolumes),
		KubeQPS:              KubeQPSAuto,
		KubeBurst:            DefaultKubeBurst,
		CacheSyncTimeout:     DefaultCacheSyncTimeout,
		LogFormat:            LogFormatText,
		LogLevel:             logrus.InfoLevel.String(),
	}
}

// Validate reports every invalid setting at once. Settings are named as
// the operator command's flags are.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			bad("%s must be a positive duration, got %s", name, d)
		}
	}

	for _, ns := range c.Namespaces {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			bad("namespace %q is not a valid namespace name: %s", ns, strings.Join(msgs, "; "))
		}
	}
	if c.LeaderElect {
		if msgs := validation.IsDNS1123Label(c.LeaderElectionNamespace); len(msgs) > 0 {
			bad("leader-election-namespace %q is not a valid namespace name: %s", c.LeaderElectionNamespace, strings.Join(msgs, "; "))
		}
		if msgs := validation.IsDNS1123Subdomain(c.LeaderElectionID); len(msgs) > 0 {
			bad("leader-election-id %q is not a valid Lease name: %s", c.LeaderElectionID, strings.Join(msgs, "; "))
		}
		positive("leader-elect-lease-duration", c.LeaseDuration)
		positive("leader-elect-renew-deadline", c.RenewDeadline)
		positive("leader-elect-retry-period", c.RetryPeriod)
		// client-go's own rules, stated in our terms.
		if c.RenewDeadline > 0 && c.LeaseDuration <= c.RenewDeadline {
			bad("leader-elect-lease-duration (%s) must be greater than leader-elect-renew-deadline (%s)", c.LeaseDuration, c.RenewDeadline)
		}
		if c.RetryPeriod > 0 && float64(c.RenewDeadline) <= 1.2*float64(c.RetryPeriod) {
			bad("leader-elect-renew-deadline (%s) must be greater than 1.2 x leader-elect-retry-period (%s)", c.RenewDeadline, c.RetryPeriod)
		}
	}
	if c.HealthAddr == "" {
		bad("health-addr must not be empty")
	}
	if c.MemoryLimit != 0 && c.MemoryLimit < MinMemoryLimit {
		bad("memory-limit must be 0 (none) or at least %s, got %d bytes", resource.NewQuantity(MinMemoryLimit, resource.BinarySI), c.MemoryLimit)
	}
	if c.Workers < 1 {
		bad("workers must be at least 1, got %d", c.Workers)
	}
	if c.SlowAfter < 0 {
		bad("slow-after must not be negative (0 turns the hung lane off), got %s", c.SlowAfter)
	}
	if c.HungWorkers < 0 {
		bad("hung-workers must not be negative (0: as many as --workers), got %d", c.HungWorkers)
	}
	if c.BackgroundWhileUrgent < -1 {
		bad("background-requests-while-urgent must be at least 0, or -1 for no limit, got %d", c.BackgroundWhileUrgent)
	}
	if c.BackgroundRequests < 0 {
		bad("background-requests must not be negative, got %d", c.BackgroundRequests)
	}
	if c.EventWorkers < 1 {
		bad("event-workers must be at least 1, got %d", c.EventWorkers)
	}
	positive("step-timeout", c.StepTimeout)
	positive("create-timeout", c.CreateTimeout)
	positive("update-timeout", c.UpdateTimeout)
	positive("retry-base", c.RetryBase)
	positive("retry-max", c.RetryMax)
	positive("resync-period", c.ResyncPeriod)
	positive("cache-sync-timeout", c.CacheSyncTimeout)
	positive("sql-connect-timeout", c.SQLConnectTimeout)
	positive("sql-statement-timeout", c.SQLStatementTimeout)
	positive("patroni-timeout", c.PatroniTimeout)
	positive("restart-timeout", c.RestartTimeout)
	positive("switchover-timeout", c.SwitchoverTimeout)
	positive("in-database-timeout", c.InDatabaseTimeout)
	if c.LossGrace < 0 {
		bad("loss-grace must not be negative, got %s", c.LossGrace)
	}
	if c.StatusDelay < 0 {
		bad("status-delay must not be negative, got %s", c.StatusDelay)
	}
	if r := v1.VolumeRetention(c.VolumeRetention); r != v1.RetainVolumes && r != v1.DeleteVolumes {
		bad("volume-retention must be %s or %s, got %q", v1.RetainVolumes, v1.DeleteVolumes, c.VolumeRetention)
	}
	if c.MaxRollingClusters < 0 {
		bad("max-rolling-clusters must not be negative (0 means no bound), got %d", c.MaxRollingClusters)
	}
	if c.RetryBase > 0 && c.RetryMax > 0 && c.RetryMax < c.RetryBase {
		bad("retry-max (%s) must not be less than retry-base (%s)", c.RetryMax, c.RetryBase)
	}
	if strings.TrimSpace(c.SpiloImage) == "" {
		bad("spilo-image must not be empty")
	}
	if strings.TrimSpace(c.PoolerImage) == "" {
		bad("connection-pooler-image must not be empty")
	}
	if lb := c.LogicalBackup; strings.TrimSpace(lb.Image) == "" {
		bad("logical-backup-image must not be empty")
	}
	if err := v1.ValidateLogicalBackupSchedule(c.LogicalBackup.Schedule); err != nil {
		bad("logical-backup-schedule %q: %v", c.LogicalBackup.Schedule, err)
	}
	if r := c.LogicalBackup.S3RetentionTime; r != "" {
		if err := v1.ValidateLogicalBackupRetention(r); err != nil {
			bad("logical-backup-s3-retention-time %q: %v", r, err)
		}
	}
	if !slices.Contains(cluster.LogicalBackupProviders, c.LogicalBackup.Provider) {
		bad("logical-backup-provider must be one of %s, got %q", strings.Join(cluster.LogicalBackupProviders, ", "), c.LogicalBackup.Provider)
	}
	if s := c.LogicalBackup.EnvSecret; s != "" {
		if msgs := validation.IsDNS1123Subdomain(s); len(msgs) > 0 {
			bad("logical-backup-env-secret %q is not a valid Secret name: %s", s, strings.Join(msgs, "; "))
		}
	}
	if b := c.Backup; b != (v1.BackupS3{}) {
		if b.Endpoint == "" || b.Bucket == "" || b.SecretName == "" {
			bad("backup-s3-endpoint, backup-s3-bucket and backup-s3-secret go together: a default repository needs all three")
		} else {
			for _, e := range v1.ValidateBackupS3(&b, field.NewPath("backup-s3")) {
				bad("%s %q: %s", strings.ReplaceAll(e.Field, ".", "-"), e.BadValue, e.Detail)
			}
		}
	}
	if c.BackupSchedule != v1.ScheduleNone {
		if _, err := v1.ParseBackupSchedule(c.BackupSchedule); err != nil {
			bad("backup-schedule %q %v (or none)", c.BackupSchedule, err)
		}
	}
	if c.BackupRetentionFull < 1 || c.BackupRetentionFull > 9999 {
		bad("backup-retention-full must be from 1 to 9999, got %d", c.BackupRetentionFull)
	}
	if c.BackupScheduleSpread < 0 || c.BackupScheduleSpread > 7*24*time.Hour {
		bad("backup-schedule-spread must be from 0 to 168h, got %s", c.BackupScheduleSpread)
	}
	if c.PasswordRotationInterval < time.Second {
		bad("password-rotation-interval must be at least 1s, got %s", c.PasswordRotationInterval)
	}
	if c.PasswordRotationUserRetention < 0 {
		bad("password-rotation-user-retention must not be negative, got %s", c.PasswordRotationUserRetention)
	}
	if c.BackupTimeout < time.Minute {
		bad("backup-timeout must be at least 1m, got %s", c.BackupTimeout)
	}
	if c.ArchiveTimeout < time.Second {
		bad("archive-timeout must be at least 1s, got %s", c.ArchiveTimeout)
	}
	if c.ArchiveCheckPeriod < time.Second {
		bad("archive-check-period must be at least 1s, got %s", c.ArchiveCheckPeriod)
	}
	if c.ArchiveStatusPeriod < c.ArchiveCheckPeriod {
		bad("archive-status-period (%s) must not be less than archive-check-period (%s)", c.ArchiveStatusPeriod, c.ArchiveCheckPeriod)
	}
	if c.KubeQPS < 0 && c.KubeQPS != KubeQPSOff {
		bad("kube-qps must be positive, 0 (decided by the API server's Priority and Fairness) or -1 (no limit), got %v", c.KubeQPS)
	}
	if c.KubeBurst < 1 {
		bad("kube-burst must be at least 1, got %d", c.KubeBurst)
	}
	if c.LogFormat != LogFormatText && c.LogFormat != LogFormatJSON {
		bad("log-format must be %q or %q, got %q", LogFormatText, LogFormatJSON, c.LogFormat)
	}
	if _, err := logrus.ParseLevel(c.LogLevel); err != nil {
		bad("log-level must be one of panic, fatal, error, warn, info, debug, trace, got %q", c.LogLevel)
	}
	return errors.Join(errs...)
}

// fsmConfig is the state machine's part of the configuration.
func (c *Config) fsmConfig() fsm.Config { return c.Config }

// clusterOptions are the builders' options. runLeader hands the one value
// to the facts and to the effects, which must build with the same ones.
func (c *Config) clusterOptions() cluster.Options {
	return cluster.Options{
		Image:                     c.SpiloImage,
		PoolerImage:               c.PoolerImage,
		EnableMasterLoadBalancer:  c.EnableMasterLoadBalancer,
		EnableReplicaLoadBalancer: c.EnableReplicaLoadBalancer,
		EnableShmVolume:           ptr.To(c.EnableShmVolume),
		LogicalBackup:             c.LogicalBackup,
		Backup:                    c.backupRepository(),
		ArchiveTimeout:            c.ArchiveTimeout,
		ArchivingImages:           c.ArchivingImages,
		BackupSchedule:            c.BackupSchedule,
		BackupRetentionFull:       c.BackupRetentionFull,
		BackupScheduleSpread:      c.BackupScheduleSpread,
	}
}

// backupRepository is the default repository, nil when none is set.
func (c *Config) backupRepository() *v1.BackupS3 {
	if c.Backup.Bucket == "" {
		return nil
	}
	b := c.Backup
	return &b
}

// loopSlowAfter is SlowAfter as the event loop takes it: 0, off, is
// negative there.
func (c *Config) loopSlowAfter() time.Duration {
	if c.SlowAfter == 0 {
		return -1
	}
	return c.SlowAfter
}
