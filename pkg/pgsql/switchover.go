package pgsql

import "context"

// Checkpoint runs CHECKPOINT on ep. Before a switchover it leaves the old
// primary's shutdown checkpoint little to write, which shortens the time
// no primary takes writes.
func Checkpoint(ctx context.Context, ep Endpoint, opts Options) error {
	opts = opts.withDefaults()
	s, err := connect(ctx, ep, opts)
	if err != nil {
		return err
	}
	defer s.close(ctx)
	return s.exec(ctx, "CHECKPOINT")
}

// AcceptsWrites reports whether ep runs as a primary (not in recovery).
func AcceptsWrites(ctx context.Context, ep Endpoint, opts Options) (bool, error) {
	opts = opts.withDefaults()
	s, err := connect(ctx, ep, opts)
	if err != nil {
		return false, err
	}
	defer s.close(ctx)
	var recovery bool
	if _, err := s.queryRow(ctx, "SELECT pg_is_in_recovery()", nil, &recovery); err != nil {
		return false, err
	}
	return !recovery, nil
}
