package eventloop

import "context"

// Priority is how a plan's work stands against other clusters': the
// executor marks each plan's context with it, so that what the plan's steps
// send (Kubernetes API requests) can be ordered by it further down, where
// the loop no longer decides (the operator's request gate).
type Priority int

const (
	// Unmarked is the priority of work that is no plan's: informers,
	// Events, leader election.
	Unmarked Priority = iota
	// Background is a background plan's: retries, resyncs, rollout steps.
	Background
	// Urgent is an urgent plan's: a user's action (Plan.Urgent).
	Urgent
)

type priorityKey struct{}

// WithPriority marks ctx with priority p. The executor marks each plan's
// context with the plan's; tests of what reads the mark make their own.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

// planIndex is the index in Loop.planCtx of a plan started as urgent or
// not.
func planIndex(urgent bool) int {
	if urgent {
		return 1
	}
	return 0
}

// PriorityOf returns the priority of the plan ctx belongs to, Unmarked when
// it belongs to none.
func PriorityOf(ctx context.Context) Priority {
	p, _ := ctx.Value(priorityKey{}).(Priority)
	return p
}
