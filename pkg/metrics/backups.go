package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// The backups' series, per cluster (namespace/name), read from each
// cluster's status.backup at every scrape: what `pgloop status` shows,
// for alerts (an archive that fails, a backup too old).
var (
	descArchiveFailing = Desc{"pgloop_archive_failing", "gauge", []string{"cluster"},
		"1 while the cluster's last WAL archiving attempt failed (ContinuousArchiving False), else 0; one series per cluster with a backup repository that was checked."}
	descArchiveLast = Desc{"pgloop_archive_last_archived_timestamp_seconds", "gauge", []string{"cluster"},
		"When the cluster's primary last archived a WAL segment, as status.backup.archiving shows it (rewritten at least every --archive-status-period while archiving goes on)."}
	descArchiveWaiting = Desc{"pgloop_archive_waiting_segments", "gauge", []string{"cluster"},
		"WAL segments the cluster's primary has not archived yet: what a failing archive keeps in pg_wal."}
	descArchiveWALBytes = Desc{"pgloop_archive_wal_bytes", "gauge", []string{"cluster"},
		"Size of the cluster primary's pg_wal."}
	descBackupLastSuccess = Desc{"pgloop_backup_last_success_timestamp_seconds", "gauge", []string{"cluster"},
		"When the newest base backup in the cluster's repository ended."}
	descBackupLastFailure = Desc{"pgloop_backup_last_failure_timestamp_seconds", "gauge", []string{"cluster"},
		"When the cluster's last failed base backup was given up (status.backup.lastFailure)."}
	descBackupLastSize = Desc{"pgloop_backup_last_size_bytes", "gauge", []string{"cluster"},
		"Size of the database in the newest base backup."}
	descBackupLastDuration = Desc{"pgloop_backup_last_duration_seconds", "gauge", []string{"cluster"},
		"How long the newest base backup took, start to stop."}
	descBackups = Desc{"pgloop_backups", "gauge", []string{"cluster"},
		"Base backups the cluster's repository holds, retention applied."}
	descBackupFirstRecoverability = Desc{"pgloop_backup_first_recoverability_timestamp_seconds", "gauge", []string{"cluster"},
		"The earliest time the cluster's repository can restore to: the end of its oldest base backup."}
	descBackupRunning = Desc{"pgloop_backup_running", "gauge", []string{"cluster"},
		"1 while a base backup of the cluster runs, else 0."}
	descBackupVerifyFailed = Desc{"pgloop_backup_verification_failed", "gauge", []string{"cluster"},
		"1 when pgBackRest's verify of the cluster's repository, after its last backup, found a damaged file or a gap in the WAL, else 0 (--backup-verify)."}
)

var backupDescs = []Desc{descArchiveFailing, descArchiveLast, descArchiveWaiting, descArchiveWALBytes,
	descBackupLastSuccess, descBackupLastFailure, descBackupLastSize, descBackupLastDuration, descBackups,
	descBackupFirstRecoverability, descBackupRunning, descBackupVerifyFailed}

// backupCollector reports the backups' series from the clusters' status.
type backupCollector struct {
	list  atomic.Pointer[func() []*v1.Postgresql]
	descs map[string]*prometheus.Desc
}

func newBackupCollector() *backupCollector {
	c := &backupCollector{descs: map[string]*prometheus.Desc{}}
	for _, d := range backupDescs {
		c.descs[d.Name] = prometheus.NewDesc(d.Name, d.Help, d.Labels, nil)
	}
	return c
}

// WatchBackups has the backups' series read from the clusters list
// returns (the informers' cache) at each scrape.
func (m *Metrics) WatchBackups(list func() []*v1.Postgresql) { m.backups.list.Store(&list) }

func (c *backupCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *backupCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.list.Load()
	if f == nil {
		return
	}
	for _, pg := range (*f)() {
		b := pg.Status.Backup
		if b == nil {
			continue
		}
		key := pg.Namespace + "/" + pg.Name
		gauge := func(d Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(c.descs[d.Name], prometheus.GaugeValue, v, key)
		}
		flag := func(on bool) float64 {
			if on {
				return 1
			}
			return 0
		}
		if a := b.Archiving; a != nil {
			gauge(descArchiveFailing, flag(a.Failing))
			if a.LastArchivedTime != nil {
				gauge(descArchiveLast, float64(a.LastArchivedTime.Unix()))
			}
			gauge(descArchiveWaiting, float64(a.WaitingSegments))
			gauge(descArchiveWALBytes, float64(a.WALBytes))
		}
		if l := b.LastBackup; l != nil {
			gauge(descBackupLastSuccess, float64(l.Stop.Unix()))
			gauge(descBackupLastSize, float64(l.Size))
			gauge(descBackupLastDuration, l.Stop.Sub(l.Start.Time).Seconds())
		}
		if l := b.LastFailure; l != nil {
			gauge(descBackupLastFailure, float64(l.At.Unix()))
		}
		gauge(descBackups, float64(b.BackupCount))
		if p := b.FirstRecoverabilityPoint; p != nil {
			gauge(descBackupFirstRecoverability, float64(p.Unix()))
		}
		gauge(descBackupRunning, flag(b.Running != nil))
		if v := b.LastVerification; v != nil {
			gauge(descBackupVerifyFailed, flag(!v.Succeeded))
		}
	}
}
