package fsm

import "time"

// Config holds the machine's timeouts and backoff. The zero value is not
// usable; start from DefaultConfig.
type Config struct {
	// CreateTimeout bounds Creating before the cluster is Degraded.
	CreateTimeout time.Duration
	// UpdateTimeout bounds Updating before the cluster is Degraded.
	UpdateTimeout time.Duration
	// RetryBase is the first retry delay; each retry doubles it.
	RetryBase time.Duration
	// RetryMax caps the retry delay.
	RetryMax time.Duration
	// ResyncPeriod is how often a Running cluster re-plans its ensure effects.
	ResyncPeriod time.Duration
	// LossGrace is how long a Running cluster may miss a Ready pod or its
	// primary before it is Degraded: a switchover leaves no primary for a
	// moment, and the former primary restarts PostgreSQL as a replica
	// (not Ready for seconds). 0 means Degraded at once.
	LossGrace time.Duration
	// StatusDelay is how long a status change that is progress only (the
	// ready count, the cause shown, conditions, history) may wait for its
	// write, so that the changes of a few pod events go in one write. 0
	// writes every change with the next plan.
	StatusDelay time.Duration
	// BackupTimeout is how long a base backup may run before pgloop
	// gives up on it. 0 means 6 hours.
	BackupTimeout time.Duration
	// BackupVerify has every base backup run verify the repository with
	// pgBackRest after a backup that succeeded (Plan.StartBackup.Verify).
	BackupVerify bool
	// PasswordRotation rotates, on schedule, the passwords of every user
	// of spec.users and of the prepared databases' default users, as
	// zalando's enable_password_rotation; the spec's lists rotate theirs
	// either way.
	PasswordRotation bool
	// PasswordRotationInterval is how often passwords are rotated;
	// 0 means 90 days (zalando's password_rotation_interval).
	PasswordRotationInterval time.Duration
	// PasswordRotationUserRetention is how long a role a rotation created
	// is kept, at least twice the interval; 0 means 180 days (zalando's
	// password_rotation_user_retention).
	PasswordRotationUserRetention time.Duration
}

// DefaultConfig returns the defaults documented in docs/fsm.md.
func DefaultConfig() Config {
	return Config{
		CreateTimeout: 10 * time.Minute,
		UpdateTimeout: 10 * time.Minute,
		RetryBase:     2 * time.Second,
		RetryMax:      5 * time.Minute,
		ResyncPeriod:  10 * time.Minute,
		LossGrace:     10 * time.Second,
		StatusDelay:   time.Second,
		BackupTimeout: 6 * time.Hour,
		BackupVerify:  true,

		PasswordRotationInterval:      90 * 24 * time.Hour,
		PasswordRotationUserRetention: 180 * 24 * time.Hour,
	}
}

// waitDelay is the delay of the retry after the waits-th effects in a row
// that waited: RetryBase doubled each time up to 8 times RetryBase (and
// RetryMax). An observation asks the effects again sooner (pods gone,
// Patroni's member data changed): the retry is for what no watch shows.
// A configuration Patroni is applying within its loop_wait is checked on
// a period of its own first (configwait.go).
func (c *Config) waitDelay(waits int32) time.Duration {
	return c.backoff(min(waits, 3))
}

// backoff is RetryBase * 2^attempt, capped at RetryMax.
func (c *Config) backoff(attempt int32) time.Duration {
	d := c.RetryBase
	for i := int32(0); i < attempt && d < c.RetryMax; i++ {
		d *= 2
	}
	if d > c.RetryMax {
		d = c.RetryMax
	}
	return d
}
