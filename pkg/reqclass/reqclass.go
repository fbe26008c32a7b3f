package reqclass

import "context"

// Priority is how a plan's work stands against other clusters': the
// executor marks each plan's context with it, so that what the plan's steps
// send (Kubernetes API requests) can be ordered by it further down, where
// the loop no longer decides (the request gate, pkg/traffic).
type Priority int

const (
	// Unmarked is the priority of work that is no plan's: informers,
	// Events, leader election.
	Unmarked Priority = iota
	// Background is a background plan's: retries, resyncs, rollout steps.
	Background
	// Urgent is an urgent plan's: a user's action (eventloop.Plan.Urgent).
	Urgent
)

type priorityKey struct{}

// WithPriority marks ctx with priority p. The executor marks each plan's
// context with the plan's; tests of what reads the mark make their own.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

// PriorityOf returns the priority of the plan ctx belongs to, Unmarked when
// it belongs to none.
func PriorityOf(ctx context.Context) Priority {
	p, _ := ctx.Value(priorityKey{}).(Priority)
	return p
}

type writeClassKey struct{}

// WithWriteClass marks ctx's writes as class c of their kind (verb and
// resource): writes of a kind that the API server serves at a cost of
// their own. A Service without a ClusterIP allocates no address, and is
// created in a tenth of the time of one with it; the operator's write
// windows keep a window for each class, so the cheap ones do not make the
// costly ones look slow (traffic.WriteWindows).
func WithWriteClass(ctx context.Context, c string) context.Context {
	return context.WithValue(ctx, writeClassKey{}, c)
}

// WriteClassOf returns the class ctx's writes were marked with, "" for
// none.
func WriteClassOf(ctx context.Context) string {
	c, _ := ctx.Value(writeClassKey{}).(string)
	return c
}
