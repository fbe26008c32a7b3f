package v1

// PoolerPause records that pgloop may have paused the cluster's primary
// connection pooler (PgBouncer PAUSE) for a switchover: it is written
// before the switchover starts and removed only once every pooler pod was
// told RESUME, so that a pooler is never left paused, also when the
// switchover failed or the operator restarted half-way (docs/user-guide.md,
// "Switchovers through the pooler").
type PoolerPause struct {
	// From and To are the switchover's primary and candidate pods.
	From string `json:"from"`
	To   string `json:"to"`
}
